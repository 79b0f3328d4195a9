//! The A2A errors and their two wire shapes, in one place: a JSON-RPC error object (`code`, `message`,
//! `data` with a `google.rpc.ErrorInfo`), and for HTTP+JSON a `google.rpc.Status` (`{"error": {"code",
//! "status", "message", "details"}}`) with the HTTP status of the spec's table (section 5.4). Pure.

use crate::wire::RequestError;
use serde_json::{json, Value};

/// The domain of every `ErrorInfo` (the spec's).
pub const ERROR_DOMAIN: &str = "a2a-protocol.org";
/// The `@type` of a `google.rpc.ErrorInfo` detail.
pub const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";
/// The JSON-RPC code of a request without a token that opens the routes. The spec leaves it to the
/// binding ("JSON-RPC custom error"); the HTTP status (401) is the same number, so one body serves both
/// bindings ([`unauthenticated_body`]).
pub const UNAUTHENTICATED_CODE: i64 = 401;

/// Why an A2A request was not served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum A2aError {
    /// No task with that id is the caller's (never was, another caller's, or long gone).
    #[error("task {0:?} was not found")]
    TaskNotFound(String),
    /// The task has ended: it cannot be cancelled.
    #[error("task {task:?} cannot be cancelled: it is {state}")]
    TaskNotCancelable {
        /// The task.
        task: String,
        /// Its state's name.
        state: &'static str,
    },
    /// Push notifications are asked for.
    #[error("push notifications are not supported: poll with GetTask or stream with SendStreamingMessage / SubscribeToTask")]
    PushNotificationNotSupported,
    /// The operation, or this use of it, is not supported (what it is, said).
    #[error("{0}")]
    UnsupportedOperation(String),
    /// A message part or output mode the agent does not take.
    #[error("{0}")]
    ContentTypeNotSupported(String),
    /// The `A2A-Version` asked for is not served.
    #[error("A2A version {0:?} is not supported: this agent serves 1.0")]
    VersionNotSupported(String),
    /// The parameters are wrong (what, said).
    #[error("{0}")]
    InvalidParams(String),
    /// The JSON-RPC request is not one (what, said).
    #[error("{0}")]
    InvalidRequest(String),
    /// No such method or route.
    #[error("{0}")]
    MethodNotFound(String),
    /// The body is not JSON.
    #[error("the body is not JSON: {0}")]
    ParseError(String),
    /// Something went wrong inside agentwire.
    #[error("{0}")]
    Internal(String),
    /// The daemon cannot take tasks now (draining, or its journal cannot be written); retry after the
    /// seconds given.
    #[error("{message}")]
    Unavailable {
        /// What is wrong.
        message: String,
        /// When a retry may succeed.
        retry_after: u64,
    },
}

impl From<RequestError> for A2aError {
    fn from(e: RequestError) -> A2aError {
        match e {
            RequestError::Invalid(w) => A2aError::InvalidParams(w),
            RequestError::ContentType(w) => A2aError::ContentTypeNotSupported(w),
            RequestError::PushNotifications => A2aError::PushNotificationNotSupported,
        }
    }
}

impl A2aError {
    /// Its JSON-RPC code (the spec's section 5.4 and 9.5).
    pub fn jsonrpc_code(&self) -> i64 {
        match self {
            A2aError::TaskNotFound(_) => -32001,
            A2aError::TaskNotCancelable { .. } => -32002,
            A2aError::PushNotificationNotSupported => -32003,
            A2aError::UnsupportedOperation(_) => -32004,
            A2aError::ContentTypeNotSupported(_) => -32005,
            A2aError::VersionNotSupported(_) => -32009,
            A2aError::InvalidParams(_) => -32602,
            A2aError::InvalidRequest(_) => -32600,
            A2aError::MethodNotFound(_) => -32601,
            A2aError::ParseError(_) => -32700,
            A2aError::Internal(_) | A2aError::Unavailable { .. } => -32603,
        }
    }

    /// Its HTTP status and `google.rpc.Code` name (HTTP+JSON).
    pub fn http_status(&self) -> (u16, &'static str) {
        match self {
            A2aError::TaskNotFound(_) | A2aError::MethodNotFound(_) => (404, "NOT_FOUND"),
            A2aError::TaskNotCancelable { .. }
            | A2aError::PushNotificationNotSupported
            | A2aError::UnsupportedOperation(_)
            | A2aError::VersionNotSupported(_) => (400, "FAILED_PRECONDITION"),
            A2aError::ContentTypeNotSupported(_)
            | A2aError::InvalidParams(_)
            | A2aError::InvalidRequest(_)
            | A2aError::ParseError(_) => (400, "INVALID_ARGUMENT"),
            A2aError::Internal(_) => (500, "INTERNAL"),
            A2aError::Unavailable { .. } => (503, "UNAVAILABLE"),
        }
    }

    /// Its `ErrorInfo` reason: the A2A error's name in UPPER_SNAKE_CASE without `Error`.
    pub fn reason(&self) -> &'static str {
        match self {
            A2aError::TaskNotFound(_) => "TASK_NOT_FOUND",
            A2aError::TaskNotCancelable { .. } => "TASK_NOT_CANCELABLE",
            A2aError::PushNotificationNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            A2aError::UnsupportedOperation(_) => "UNSUPPORTED_OPERATION",
            A2aError::ContentTypeNotSupported(_) => "CONTENT_TYPE_NOT_SUPPORTED",
            A2aError::VersionNotSupported(_) => "VERSION_NOT_SUPPORTED",
            A2aError::InvalidParams(_) => "INVALID_PARAMS",
            A2aError::InvalidRequest(_) => "INVALID_REQUEST",
            A2aError::MethodNotFound(_) => "METHOD_NOT_FOUND",
            A2aError::ParseError(_) => "JSON_PARSE",
            A2aError::Internal(_) => "INTERNAL_ERROR",
            A2aError::Unavailable { .. } => "UNAVAILABLE",
        }
    }

    /// When a retry may succeed, for the `Retry-After` header.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            A2aError::Unavailable { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// The `ErrorInfo` detail: its reason, and what it is about (the task, the versions served).
    fn error_info(&self) -> Value {
        let mut info = json!({
            "@type": ERROR_INFO_TYPE,
            "reason": self.reason(),
            "domain": ERROR_DOMAIN,
        });
        let metadata = match self {
            A2aError::TaskNotFound(task) | A2aError::TaskNotCancelable { task, .. } => {
                Some(json!({ "taskId": task }))
            }
            A2aError::VersionNotSupported(_) => {
                Some(json!({ "supportedVersions": crate::wire::PROTOCOL_VERSION }))
            }
            _ => None,
        };
        if let Some(m) = metadata {
            info["metadata"] = m;
        }
        info
    }

    /// The JSON-RPC response to request `id`.
    pub fn jsonrpc_body(&self, id: &Value) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": self.jsonrpc_code(),
                "message": self.to_string(),
                "data": [self.error_info()],
            }
        })
    }

    /// The HTTP+JSON body (`google.rpc.Status`).
    pub fn rest_body(&self) -> Value {
        let (code, status) = self.http_status();
        json!({
            "error": {
                "code": code,
                "status": status,
                "message": self.to_string(),
                "details": [self.error_info()],
            }
        })
    }
}

/// The body of a 401, for both bindings at once (the seam gives the front one answer for all its routes):
/// a JSON-RPC error response (`jsonrpc`, `id` null, `error.code` [`UNAUTHENTICATED_CODE`]) whose `error`
/// is also a `google.rpc.Status` (`code` 401, `status` `UNAUTHENTICATED`, `details`).
pub fn unauthenticated_body(why: &str) -> Value {
    let info = json!({
        "@type": ERROR_INFO_TYPE,
        "reason": "UNAUTHENTICATED",
        "domain": ERROR_DOMAIN,
    });
    json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": UNAUTHENTICATED_CODE,
            "status": "UNAUTHENTICATED",
            "message": why,
            "data": [info.clone()],
            "details": [info],
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_has_the_specs_code_status_and_reason() {
        let cases = [
            (
                A2aError::TaskNotFound("t".into()),
                -32001,
                404,
                "TASK_NOT_FOUND",
            ),
            (
                A2aError::TaskNotCancelable {
                    task: "t".into(),
                    state: "TASK_STATE_COMPLETED",
                },
                -32002,
                400,
                "TASK_NOT_CANCELABLE",
            ),
            (
                A2aError::PushNotificationNotSupported,
                -32003,
                400,
                "PUSH_NOTIFICATION_NOT_SUPPORTED",
            ),
            (
                A2aError::UnsupportedOperation("x".into()),
                -32004,
                400,
                "UNSUPPORTED_OPERATION",
            ),
            (
                A2aError::VersionNotSupported("0.3".into()),
                -32009,
                400,
                "VERSION_NOT_SUPPORTED",
            ),
            (A2aError::ParseError("x".into()), -32700, 400, "JSON_PARSE"),
            (
                A2aError::InvalidRequest("x".into()),
                -32600,
                400,
                "INVALID_REQUEST",
            ),
            (
                A2aError::MethodNotFound("x".into()),
                -32601,
                404,
                "METHOD_NOT_FOUND",
            ),
            (
                A2aError::InvalidParams("x".into()),
                -32602,
                400,
                "INVALID_PARAMS",
            ),
        ];
        for (e, code, status, reason) in cases {
            let rpc = e.jsonrpc_body(&json!(7));
            assert_eq!(rpc["id"], 7);
            assert_eq!(rpc["error"]["code"], code, "{e:?}");
            assert_eq!(rpc["error"]["data"][0]["reason"], reason);
            let rest = e.rest_body();
            assert_eq!(rest["error"]["code"], status, "{e:?}");
            assert_eq!(rest["error"]["details"][0]["@type"], ERROR_INFO_TYPE);
            assert_eq!(rest["error"]["details"][0]["reason"], reason);
            assert_eq!(rest["error"]["details"][0]["domain"], ERROR_DOMAIN);
        }
        let nf = A2aError::TaskNotFound("abc".into()).rest_body();
        assert_eq!(nf["error"]["details"][0]["metadata"]["taskId"], "abc");
    }

    #[test]
    fn the_401_body_reads_as_either_binding_and_names_no_secret() {
        let b = unauthenticated_body("no bearer token");
        assert_eq!(b["jsonrpc"], "2.0");
        assert_eq!(b["error"]["code"], 401);
        assert_eq!(b["error"]["status"], "UNAUTHENTICATED");
        assert_eq!(b["error"]["details"][0]["reason"], "UNAUTHENTICATED");
        assert_eq!(b["error"]["data"][0]["reason"], "UNAUTHENTICATED");
    }
}
