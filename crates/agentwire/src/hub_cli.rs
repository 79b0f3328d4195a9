//! `agentwire hub`: the address of the hub page of the daemon serving the data dir, with its token (the
//! browser keeps it as a cookie and drops it from the address), opened in a browser when one is at hand.

use crate::turns_cli::{find, HttpTarget};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// `agentwire hub`.
#[derive(Debug, Args)]
pub(crate) struct HubArgs {
    #[command(flatten)]
    target: HttpTarget,
    /// Print the address only; do not open a browser.
    #[arg(long)]
    no_open: bool,
}

/// The program that opens a page: `$BROWSER`, else `xdg-open` (or `open` on macOS) when a display is
/// there to show it; none on a server without one.
fn opener() -> Option<String> {
    if let Ok(b) = std::env::var("BROWSER") {
        if !b.trim().is_empty() {
            return Some(b);
        }
    }
    if cfg!(target_os = "macos") {
        return Some("open".into());
    }
    let display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    display.then(|| "xdg-open".into())
}

/// Prints the page's address (after checking the daemon answers to its token) and opens it.
pub(crate) async fn hub(a: HubArgs, data_dir: PathBuf) -> Result<ExitCode, String> {
    let d = find(&a.target, &data_dir)?;
    d.get("/api/v1/agents").await?;
    let url = format!("{}/?token={}", d.base, d.token);
    println!("{url}");
    if a.no_open {
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(program) = opener() {
        let opened = std::process::Command::new(&program)
            .arg(&url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Err(e) = opened {
            eprintln!("could not open a browser with {program}: {e}; open the address above");
        }
    }
    Ok(ExitCode::SUCCESS)
}
