//! A command as the agent (`kind = "cmd"`): each turn runs the command once with the prompt on its stdin.
//! Its stdout streams as the answer's text and each stderr line as a status; exit status 0 ends the turn
//! with the stdout as its result, any other status with a failure that says stderr's last line. A timeout
//! bounds the run, and a cancel (or the engine dropping the turn) kills the command's whole process group,
//! so a shell pipeline or a script's children stop with it. The command's environment is not the daemon's
//! (which holds its secrets: a model API key, a NATS password): it is the allowlist of
//! [`agentwire_core::child_env`], the agent's `env` and `pass_env`, and the turn's `AGENTWIRE_*` ids.

use agentwire_core::child_env::ChildEnv;
use agentwire_core::{Failure, Outcome, StatusState, TurnEvent, TurnFailure, TurnResult, Usage};
use agentwire_engine::{cancelled, Agent, AgentCard, TurnContext, TurnInput};
use futures_util::future::BoxFuture;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// The model name a command agent's card offers: a command has no models, and a prompt naming none gets
/// this one.
pub const CMD_MODEL: &str = "cmd";
/// How long a command may run when its agent sets no `request_timeout_secs`: five minutes, as long as a
/// model turn may take.
pub const DEFAULT_CMD_TIMEOUT: Duration = Duration::from_secs(300);
/// The most stdout kept as a turn's answer: 1 MiB, far past any answer a person reads, and small enough
/// for every front's response. A command that prints more is stopped there and its turn ends with what it
/// printed, as a model's turn ends at its length limit (`stop_reason` `length`).
pub const MAX_CMD_OUTPUT_BYTES: usize = 1024 * 1024;
/// The most of one stderr line kept: a status is clipped to [`MAX_CMD_STATUS_CHARS`] anyway, and a command
/// that writes megabytes without a newline must not grow memory.
pub const MAX_CMD_STDERR_LINE_BYTES: usize = 4096;
/// The most characters of a stderr line said as a status or in a failure.
pub const MAX_CMD_STATUS_CHARS: usize = 200;
/// The largest prompt a command takes on its stdin.
const MAX_PROMPT_BYTES: usize = 1024 * 1024;
/// Bytes read from stdout or stderr at a time.
const READ_CHUNK: usize = 8192;

/// Runs each turn as one run of a command.
pub struct CmdAgent {
    name: String,
    command: Vec<String>,
    timeout: Duration,
    env: ChildEnv,
}

impl CmdAgent {
    /// The agent `name` running `command` (program and arguments; not empty, checked by the config) for at
    /// most `timeout` a turn.
    pub fn new(name: impl Into<String>, command: Vec<String>, timeout: Duration) -> Self {
        CmdAgent {
            name: name.into(),
            command,
            timeout,
            env: ChildEnv::default(),
        }
    }

    /// The agent with `env` in its command's environment beside the allowlist (the agent's `env` and
    /// `pass_env`).
    pub fn with_env(mut self, env: ChildEnv) -> Self {
        self.env = env;
        self
    }
}

impl Agent for CmdAgent {
    fn card(&self) -> AgentCard {
        AgentCard {
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: format!(
                "runs {} for each turn",
                self.command.first().map(String::as_str).unwrap_or("")
            ),
            models: vec![CMD_MODEL.into()],
            default_model: CMD_MODEL.into(),
            tools: vec![],
            max_prompt_bytes: MAX_PROMPT_BYTES,
            max_context_tokens: 0,
        }
    }

    fn run(&self, input: TurnInput, ctx: TurnContext) -> BoxFuture<'static, Outcome> {
        let (command, timeout) = (self.command.clone(), self.timeout);
        let env = self.env.vars(std::env::vars_os());
        Box::pin(async move { run(command, env, timeout, input, ctx).await })
    }
}

fn fail(code: TurnFailure, message: impl Into<String>) -> Outcome {
    Outcome::Failure(Failure::new(code, message))
}

/// Kills the command's process group when dropped, unless the command was seen to exit: a cancelled turn's
/// future is dropped by the engine, and the command must not outlive it. Disarmed once the leader is reaped,
/// as its process id (the group's id) may then be reused.
pub(crate) struct GroupKill(pub(crate) Option<u32>);

impl GroupKill {
    pub(crate) fn kill(&mut self) {
        if let Some(pid) = self.0.take() {
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
            }
        }
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Text decoded from a byte stream whose chunks may split a UTF-8 character: what is complete is given out,
/// the rest waits for the next chunk; bytes that are not UTF-8 become U+FFFD.
#[derive(Default)]
struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                        None => {
                            // An incomplete character at the end: kept for the next chunk.
                            self.pending.drain(..valid);
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// What is left at the end of the stream: an incomplete character is not one.
    fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }
}

/// Stderr split into lines, each kept to [`MAX_CMD_STDERR_LINE_BYTES`].
#[derive(Default)]
struct Lines {
    current: Vec<u8>,
}

impl Lines {
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut done = Vec::new();
        for part in bytes.split_inclusive(|b| *b == b'\n') {
            let (body, ends) = match part.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (part, false),
            };
            let room = MAX_CMD_STDERR_LINE_BYTES.saturating_sub(self.current.len());
            self.current
                .extend_from_slice(&body[..body.len().min(room)]);
            if ends {
                done.push(self.take());
            }
        }
        done
    }

    fn take(&mut self) -> String {
        let line = String::from_utf8_lossy(&self.current)
            .trim_end()
            .to_string();
        self.current.clear();
        line
    }
}

/// At most [`MAX_CMD_STATUS_CHARS`] characters of `line`.
fn clip(line: &str) -> String {
    match line.char_indices().nth(MAX_CMD_STATUS_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

/// Reads a chunk, or nothing for ever once the stream has ended (so a `select!` waits on the others).
async fn read_some(stream: &mut Option<impl AsyncRead + Unpin>, buf: &mut [u8]) -> usize {
    match stream {
        Some(s) => match s.read(buf).await {
            Ok(0) | Err(_) => {
                *stream = None;
                0
            }
            Ok(n) => n,
        },
        None => std::future::pending().await,
    }
}

/// How a run of the command ended.
enum End {
    Exited(ExitStatus),
    /// It printed [`MAX_CMD_OUTPUT_BYTES`]; it was stopped there.
    Full,
    TimedOut,
    Cancelled,
}

async fn run(
    command: Vec<String>,
    env: std::collections::BTreeMap<std::ffi::OsString, std::ffi::OsString>,
    timeout: Duration,
    input: TurnInput,
    ctx: TurnContext,
) -> Outcome {
    let Some((program, args)) = command.split_first() else {
        return fail(TurnFailure::Internal, "the command agent has no command");
    };
    let mut child: Child = match Command::new(program)
        .args(args)
        .env_clear()
        .envs(env)
        .env("AGENTWIRE_CONVERSATION_ID", input.conversation_id.as_str())
        .env("AGENTWIRE_REQUEST_ID", input.request_id.as_str())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return fail(
                TurnFailure::AgentFailed,
                format!("cannot start {program}: {e}"),
            )
        }
    };
    let mut group = GroupKill(child.id());
    if let Some(mut stdin) = child.stdin.take() {
        let prompt = input.message.clone();
        // A command that does not read its stdin closes it; that is no failure.
        tokio::spawn(async move {
            let _ = stdin.write_all(prompt.as_bytes()).await;
        });
    }
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    let (mut out_buf, mut err_buf) = (vec![0u8; READ_CHUNK], vec![0u8; READ_CHUNK]);
    let (mut text, mut decoder, mut lines) =
        (String::new(), Utf8Stream::default(), Lines::default());
    let mut last_err_line = None::<String>;
    let mut cancel = ctx.cancel.clone();
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let end = loop {
        if stdout.is_none() && stderr.is_none() {
            tokio::select! {
                status = child.wait() => match status {
                    Ok(status) => break End::Exited(status),
                    Err(e) => return fail(TurnFailure::AgentFailed, format!("waiting for {program}: {e}")),
                },
                _ = &mut deadline => break End::TimedOut,
                _ = cancelled(&mut cancel) => break End::Cancelled,
            }
        }
        tokio::select! {
            n = read_some(&mut stdout, &mut out_buf) => {
                let mut fresh = decoder.push(&out_buf[..n]);
                if n == 0 {
                    fresh.push_str(&decoder.finish());
                }
                let room = MAX_CMD_OUTPUT_BYTES - text.len();
                let full = fresh.len() > room;
                if full {
                    fresh.truncate(fresh.floor_char_boundary(room));
                }
                if !fresh.is_empty() {
                    text.push_str(&fresh);
                    let _ = ctx.events.send(TurnEvent::Text { text: fresh }).await;
                }
                if full {
                    break End::Full;
                }
            }
            n = read_some(&mut stderr, &mut err_buf) => {
                let mut said = lines.push(&err_buf[..n]);
                if n == 0 {
                    said.push(lines.take());
                }
                for line in said.into_iter().filter(|l| !l.trim().is_empty()) {
                    let line = clip(&line);
                    let _ = ctx
                        .events
                        .send(TurnEvent::Status {
                            state: StatusState::Thinking,
                            progress: None,
                            info: Some(line.clone()),
                            usage: None,
                        })
                        .await;
                    last_err_line = Some(line);
                }
            }
            _ = &mut deadline => break End::TimedOut,
            _ = cancelled(&mut cancel) => break End::Cancelled,
        }
    };
    match end {
        End::Exited(status) => {
            // Reaped: the group's id may be reused from here on.
            group.0 = None;
            if status.success() {
                if text.trim().is_empty() {
                    return fail(
                        TurnFailure::EmptyResponse,
                        format!("{program} printed nothing"),
                    );
                }
                return Outcome::Result(TurnResult {
                    text,
                    usage: Usage::default(),
                    stop_reason: "stop".into(),
                });
            }
            let how = match status.code() {
                Some(code) => format!("{program} exited with status {code}"),
                None => {
                    use std::os::unix::process::ExitStatusExt;
                    format!(
                        "{program} was killed by signal {}",
                        status.signal().unwrap_or(0)
                    )
                }
            };
            fail(
                TurnFailure::AgentFailed,
                match last_err_line {
                    Some(line) => format!("{how}: {line}"),
                    None => how,
                },
            )
        }
        End::Full => {
            group.kill();
            Outcome::Result(TurnResult {
                text,
                usage: Usage::default(),
                stop_reason: "length".into(),
            })
        }
        End::TimedOut => {
            group.kill();
            fail(
                TurnFailure::AgentFailed,
                format!("{program} did not finish within {} s", timeout.as_secs()),
            )
        }
        End::Cancelled => {
            group.kill();
            fail(
                TurnFailure::Cancelled,
                format!("{program} was stopped: the turn was cancelled"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_core::{ConversationId, RequestId};
    use agentwire_engine::Asker;
    use tokio::sync::{mpsc, watch};

    /// Runs one turn of `command` with `prompt`; returns its outcome and the text it streamed.
    async fn turn(command: &[&str], prompt: &str) -> (Outcome, String) {
        let agent = CmdAgent::new(
            "t",
            command.iter().map(|s| s.to_string()).collect(),
            Duration::from_secs(20),
        );
        let (events, mut rx) = mpsc::channel(16);
        let (_cancel, cancel) = watch::channel(false);
        let input = TurnInput::new(
            RequestId::new("r1").unwrap(),
            ConversationId::new("c1").unwrap(),
            prompt,
            CMD_MODEL,
        );
        let drain = tokio::spawn(async move {
            let mut text = String::new();
            while let Some(e) = rx.recv().await {
                if let TurnEvent::Text { text: t } = e {
                    text.push_str(&t);
                }
            }
            text
        });
        let outcome = agent
            .run(
                input,
                TurnContext {
                    events,
                    cancel,
                    asker: Asker::unavailable(),
                    token_budget: None,
                    trace: Default::default(),
                },
            )
            .await;
        (outcome, drain.await.unwrap())
    }

    #[tokio::test]
    async fn output_past_the_cap_ends_the_turn_at_the_cap() {
        let (outcome, streamed) = turn(&["sh", "-c", "yes ünïcödé | head -c 3000000"], "").await;
        let Outcome::Result(r) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(r.stop_reason, "length");
        assert!(r.text.len() <= MAX_CMD_OUTPUT_BYTES);
        assert!(r.text.len() > MAX_CMD_OUTPUT_BYTES - 16);
        assert_eq!(streamed, r.text, "what was streamed is the answer");
    }

    #[tokio::test]
    async fn the_prompt_is_on_stdin_and_the_ids_in_the_environment() {
        let (outcome, _) = turn(
            &[
                "sh",
                "-c",
                "cat; echo \" $AGENTWIRE_CONVERSATION_ID $AGENTWIRE_REQUEST_ID\"",
            ],
            "hi",
        )
        .await;
        let Outcome::Result(r) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(r.text, "hi c1 r1\n");
        let (outcome, _) = turn(&["/nonexistent/agent"], "hi").await;
        let Outcome::Failure(f) = outcome else {
            panic!("{outcome:?}")
        };
        assert!(
            f.message.contains("cannot start /nonexistent/agent"),
            "{}",
            f.message
        );
    }

    #[test]
    fn split_characters_are_joined_and_bad_bytes_replaced() {
        let mut d = Utf8Stream::default();
        let snow = "☃".as_bytes();
        assert_eq!(d.push(&[b'a', snow[0]]), "a");
        assert_eq!(d.push(&snow[1..]), "☃");
        assert_eq!(d.push(&[0xff, b'b']), "\u{fffd}b");
        assert_eq!(d.push(&snow[..2]), "");
        assert_eq!(d.finish(), "\u{fffd}");
    }

    #[test]
    fn stderr_lines_are_split_and_bounded() {
        let mut l = Lines::default();
        assert_eq!(l.push(b"one\ntw"), vec!["one"]);
        assert_eq!(l.push(b"o\r\nthree"), vec!["two"]);
        assert_eq!(l.take(), "three");
        let long = vec![b'x'; MAX_CMD_STDERR_LINE_BYTES * 3];
        assert!(l.push(&long).is_empty());
        let done = l.push(b"\n");
        assert_eq!(done[0].len(), MAX_CMD_STDERR_LINE_BYTES);
        assert_eq!(clip(&done[0]).chars().count(), MAX_CMD_STATUS_CHARS + 1);
    }
}
