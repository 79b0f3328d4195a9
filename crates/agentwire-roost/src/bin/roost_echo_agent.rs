//! A roost agent on the Rust client: it reports, answers each reply by reporting `got: <text>`, records
//! what it handled in `received.txt` in its job dir, and on `bye` reports `done` and exits.

use agentwire_roost::client::agent::{Delivery, JobEnv, RoostAgent};
use serde_json::json;
use std::io::Write;
use std::sync::Arc;
use tokio::sync::mpsc;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let Some(env) = JobEnv::from_env() else {
        eprintln!("roost-echo-agent: not started by roost (no ROOST_JOB_ID)");
        std::process::exit(2);
    };
    let dir = env.dir.clone();
    let _ = std::fs::write(dir.join("pid"), std::process::id().to_string());
    let (tx, mut rx) = mpsc::unbounded_channel::<Delivery>();
    let log_dir = dir.clone();
    let handler = Arc::new(move |d: Delivery| {
        let (tx, log_dir) = (tx.clone(), log_dir.clone());
        Box::pin(async move {
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log_dir.join("received.txt"))
            {
                let _ = writeln!(f, "{} {}", d.seq, d.text);
            }
            let _ = tx.send(d);
        }) as futures_util::future::BoxFuture<'static, ()>
    });
    let agent = RoostAgent::start(
        env,
        "roost-echo-agent",
        "1",
        &["report", "replies"],
        handler,
    );
    agent.report(json!({ "state": "working", "status": "idle", "summary": "ready" }));
    while let Some(d) = rx.recv().await {
        if d.text == "bye" {
            agent.report(json!({ "state": "done", "status": "idle", "summary": "bye" }));
            // Let the ack of this reply go out, then leave with the latest report sent.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            agent.close().await;
            return;
        }
        agent.report(
            json!({ "state": "working", "status": "busy", "summary": format!("got: {}", d.text) }),
        );
    }
}
