//! What a store call can fail with: `StoreError` and the `Result` every store call returns.
//! Below every other module, so that ids, notices and the store all refuse alike.
use sea_orm::DbErr;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] DbErr),
    /// The write belonged to a lease generation that no longer holds the session.
    #[error("fenced out: the turn lease for session {0} is held by another generation")]
    Fenced(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("request id {request_id} was already used with a different payload")]
    IdempotencyConflict { request_id: String },
    #[error("admission {0} is not in the state this change needs")]
    WrongState(String),
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;
