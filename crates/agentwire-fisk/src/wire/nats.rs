//! The NATS side of the wire: subjects, the headers a reply set uses, and the service-error codes.
//!
//! Subjects are built from an identity and a `request` tag, both `^[a-zA-Z0-9_-]+$` on the wire (so
//! neither can carry a `.` or a wildcard into a subject).

/// Every fisk-ai subject sits under this prefix.
pub const SUBJECT_PREFIX: &str = "choria.fisk-ai";

/// Where a worker takes requests: `choria.fisk-ai.task.<identity>`.
pub fn task_subject(identity: &str) -> String {
    format!("{SUBJECT_PREFIX}.task.{identity}")
}

/// Where a caller cancels turn `request`: `choria.fisk-ai.cancel.<identity>.<request>`. Only the worker
/// running that turn subscribes.
pub fn cancel_subject(identity: &str, request: &str) -> String {
    format!("{SUBJECT_PREFIX}.cancel.{identity}.{request}")
}

/// Where a caller answers the questions of turn `request`: `choria.fisk-ai.elicit.<identity>.<request>`.
pub fn elicit_subject(identity: &str, request: &str) -> String {
    format!("{SUBJECT_PREFIX}.elicit.{identity}.{request}")
}

/// Where an agent answers discovery: `choria.fisk-ai.discovery.<identity>` (as the fisk-ai worker does).
pub fn discovery_subject(identity: &str) -> String {
    format!("{SUBJECT_PREFIX}.discovery.{identity}")
}

/// Where a caller enqueues a prompt as a job: `choria.fisk-ai.jobs.<identity>`, the one subject of the
/// identity's jobs stream ([`jobs_stream`]).
pub fn jobs_subject(identity: &str) -> String {
    format!("{SUBJECT_PREFIX}.jobs.{identity}")
}

/// The JetStream work-queue stream holding an identity's queued jobs: `FISK_AI_JOBS_<identity>` (an
/// identity's characters are all allowed in a stream name). Its durable consumer, shared by every
/// instance of the identity, is named after the identity.
pub fn jobs_stream(identity: &str) -> String {
    format!("FISK_AI_JOBS_{identity}")
}

/// The NATS header of a queued job naming the subject its reply set goes to (a job published to a
/// stream has no reply inbox of its own).
pub const HEADER_REPLY_TO: &str = "Fisk-AI-Reply-To";

/// The longest reply subject a job may name: NATS subjects in practice stay far below it, and the worker
/// publishes a whole reply set there.
pub const MAX_REPLY_SUBJECT_BYTES: usize = 256;

/// Whether `subject` is one a reply set can be published to: at most [`MAX_REPLY_SUBJECT_BYTES`], dot-
/// separated non-empty tokens of printable ASCII without whitespace, and no wildcard token; and not a
/// server's API (`$JS.API`, `$KV`, `$SRV`: anything under `$`) nor a fisk-ai subject, which a job could
/// otherwise have the worker publish to with the worker's own permissions.
pub fn valid_reply_subject(subject: &str) -> bool {
    !subject.is_empty()
        && subject.len() <= MAX_REPLY_SUBJECT_BYTES
        && !subject.starts_with('$')
        && !subject.starts_with(&format!("{SUBJECT_PREFIX}."))
        && subject.split('.').all(|t| {
            !t.is_empty() && t != "*" && t != ">" && t.bytes().all(|b| b.is_ascii_graphic())
        })
}

/// The NATS header on the last message of a reply set.
pub const HEADER_STREAM_FINAL: &str = "Fisk-AI-Stream-Final";
/// The NATS header carrying a refusal's text (a [`WireError`](super::WireError)'s `Display`).
pub const HEADER_SERVICE_ERROR: &str = "Nats-Service-Error";
/// The NATS header carrying a refusal's code.
pub const HEADER_SERVICE_ERROR_CODE: &str = "Nats-Service-Error-Code";

/// Service-error code for a message that fails validation.
pub const STATUS_INVALID: u16 = 400;
/// Service-error code for an elicit message to no waiting question (unknown, answered, or its window closed).
pub const STATUS_NO_QUESTION: u16 = 404;
/// Service-error code for an internal failure.
pub const STATUS_INTERNAL: u16 = 500;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_follow_the_spec() {
        assert_eq!(
            task_subject("nats-worker"),
            "choria.fisk-ai.task.nats-worker"
        );
        assert_eq!(
            cancel_subject("nats-worker", "docs1"),
            "choria.fisk-ai.cancel.nats-worker.docs1"
        );
        assert_eq!(
            elicit_subject("nats-worker", "docs1"),
            "choria.fisk-ai.elicit.nats-worker.docs1"
        );
        assert_eq!(
            discovery_subject("nats-worker"),
            "choria.fisk-ai.discovery.nats-worker"
        );
        assert_eq!(
            jobs_subject("nats-worker"),
            "choria.fisk-ai.jobs.nats-worker"
        );
        assert_eq!(jobs_stream("nats-worker"), "FISK_AI_JOBS_nats-worker");
    }

    #[test]
    fn a_reply_subject_is_a_plain_subject_within_the_bound() {
        assert!(valid_reply_subject("_INBOX.abc123"));
        assert!(valid_reply_subject("replies.peer1.job-7"));
        for bad in [
            "",
            "a..b",
            ".a",
            "a.",
            "a.*",
            "a.>",
            "a b",
            "a\tb",
            "caf\u{e9}",
            "$JS.API.STREAM.DELETE.AGENTWIRE",
            "$KV.AGENTWIRE_TURNS.x",
            "choria.fisk-ai.task.w",
        ] {
            assert!(!valid_reply_subject(bad), "{bad:?}");
        }
        let long = format!("a.{}", "b".repeat(MAX_REPLY_SUBJECT_BYTES));
        assert!(!valid_reply_subject(&long));
    }
}
