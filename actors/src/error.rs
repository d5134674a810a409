//! The errors the gateway reports to its doors. The web crate maps each to one HTTP status and
//! a stable code.
use turnkey_storage::{AdmissionId, AdmissionStatus, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Missing, or not this principal's to see (the two are not told apart).
    #[error("{0} not found")]
    NotFound(String),
    #[error("request id {0} was already used with a different payload")]
    IdempotencyConflict(String),
    #[error("{message}")]
    InvalidInput { code: &'static str, message: String },
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("no model provider is configured")]
    NoProvider,
    #[error("admission {id} is {}, not unknown", .status.as_str())]
    NotUnknown {
        id: AdmissionId,
        status: AdmissionStatus,
    },
    /// A setting the gateway could not use at start-up, with its key (`providers`,
    /// `tools.workspace`, `tools.mcp[0]`).
    #[error("configuration error: {key}: {reason}")]
    Config { key: String, reason: String },
    /// The request conflicts with the state it found (409): an approval already decided or
    /// expired, a tool run not waiting for a decision.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// Well-formed but refused for what it says (422): a memory write that does not fit or
    /// that the scan refuses.
    #[error("{message}")]
    Unprocessable { code: &'static str, message: String },
    /// Only the operator may do this (403).
    #[error("{0}")]
    Forbidden(String),
    /// The session is running a turn; the request must wait until it is idle.
    #[error("{0}")]
    Busy(String),
    /// A per-principal limit (`[limits]`, SPEC R13.8) refused the input before anything was
    /// admitted (429): `rate_limited` or `quota_exceeded`, and when trying again can help.
    #[error("{message}")]
    Limited {
        code: &'static str,
        message: String,
        retry_after_s: u64,
    },
    /// A file over `max_upload_bytes` (413 `too_large`); nothing was stored.
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    Io(String),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for GatewayError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => Self::NotFound(what),
            StoreError::IdempotencyConflict { request_id } => Self::IdempotencyConflict(request_id),
            other => Self::Store(other),
        }
    }
}

impl GatewayError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "not_found",
            Self::IdempotencyConflict(_) => "idempotency_conflict",
            Self::InvalidInput { code, .. } => code,
            Self::ShuttingDown => "shutting_down",
            Self::NoProvider => "no_provider",
            Self::NotUnknown { .. } => "not_unknown",
            Self::Config { .. } => "config_error",
            Self::Conflict { code, .. } => code,
            Self::Unprocessable { code, .. } => code,
            Self::Forbidden(_) => "forbidden",
            Self::Busy(_) => "session_busy",
            Self::Limited { code, .. } => code,
            Self::TooLarge(_) => "too_large",
            Self::Io(_) => "io_error",
            Self::Store(_) => "store_unavailable",
        }
    }
}
