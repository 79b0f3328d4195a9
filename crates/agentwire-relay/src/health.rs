//! `GET /health` on the relay's port: whether the daemon behind the relay can take work, for service
//! managers, load balancers and people. The relay only serves what its owner's check says.

use std::sync::Arc;

/// What a health check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthReport {
    /// Whether the daemon takes work now (`200 OK`; else `503 Service Unavailable`).
    pub ok: bool,
    /// The JSON body, for people and tools.
    pub body: String,
}

/// The owner's health check, called for each `GET /health`. Must be quick and must not block.
#[derive(Clone)]
pub struct HealthCheck(Arc<dyn Fn() -> HealthReport + Send + Sync>);

impl HealthCheck {
    /// A check that calls `f`.
    pub fn new(f: impl Fn() -> HealthReport + Send + Sync + 'static) -> HealthCheck {
        HealthCheck(Arc::new(f))
    }

    pub(crate) fn report(&self) -> HealthReport {
        (self.0)()
    }
}

impl std::fmt::Debug for HealthCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HealthCheck")
    }
}
