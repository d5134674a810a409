//! `ApiError`: the one mapping from failures to HTTP status and the `{"error":{code,message}}`
//! body (API.md "Auth"), including the extractor errors actix-web would otherwise answer in text.
use actix_web::error::{JsonPayloadError, PathError, PayloadError, QueryPayloadError};
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use serde::Serialize;
use std::fmt;
use turnkey_actors::GatewayError;
use turnkey_storage::StoreError;
use utoipa::ToSchema;

/// What `Retry-After` says while the server stops: about the time a replacement takes to start.
const SHUTTING_DOWN_RETRY_AFTER_S: u64 = 5;

#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds for a `Retry-After` header, when waiting helps.
    pub retry_after: Option<u64>,
}

/// The body of every error answer outside the OpenAI-compatible routes.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable snake_case code (API.md "Error codes").
    #[schema(example = "not_found")]
    pub code: String,
    /// The same in words, for people.
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(what: impl fmt::Display) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    }

    pub fn invalid_json(reason: impl fmt::Display) -> Self {
        Self::bad_request(
            "invalid_json",
            format!("the body is not valid JSON: {reason}"),
        )
    }

    /// A failure of the store, logged in full and reported without its details.
    pub fn store(e: &StoreError) -> Self {
        tracing::error!(error = %e, "store error");
        match e {
            StoreError::NotFound(what) => Self::not_found(what),
            StoreError::IdempotencyConflict { request_id } => Self::new(
                StatusCode::CONFLICT,
                "idempotency_conflict",
                format!("request id {request_id} was already used with a different payload"),
            ),
            _ => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the store is unavailable; retry later",
            ),
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.status);
        if self.status == StatusCode::UNAUTHORIZED {
            res.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
        }
        if let Some(s) = self.retry_after {
            res.insert_header((header::RETRY_AFTER, s.to_string()));
        }
        res.json(ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message.clone(),
            },
        })
    }
}

impl From<GatewayError> for ApiError {
    fn from(e: GatewayError) -> Self {
        match e {
            GatewayError::NotFound(what) => Self::not_found(what),
            GatewayError::IdempotencyConflict(_) => {
                Self::new(StatusCode::CONFLICT, "idempotency_conflict", e.to_string())
            }
            GatewayError::InvalidInput { code, message } => Self::bad_request(code, message),
            GatewayError::ShuttingDown => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                "the server is shutting down; retry on another replica or later",
            )
            .with_retry_after(SHUTTING_DOWN_RETRY_AFTER_S),
            GatewayError::NoProvider => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_provider",
                "no model provider is configured: the operator connects one in the web UI's \
                 Models page or with POST /v1/providers, and the next message is answered, with \
                 no restart",
            ),
            GatewayError::NotUnknown { .. } => {
                Self::new(StatusCode::CONFLICT, "not_unknown", e.to_string())
            }
            GatewayError::Conflict { code, message } => {
                Self::new(StatusCode::CONFLICT, code, message)
            }
            GatewayError::Unprocessable { code, message } => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
            }
            GatewayError::Forbidden(message) => Self::forbidden(message),
            GatewayError::Busy(message) => Self::new(StatusCode::CONFLICT, "session_busy", message),
            GatewayError::Limited {
                code,
                message,
                retry_after_s,
            } => Self::new(StatusCode::TOO_MANY_REQUESTS, code, message)
                .with_retry_after(retry_after_s),
            GatewayError::TooLarge(message) => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
            }
            GatewayError::Io(message) => {
                tracing::error!(error = %message, "file operation failed");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "io_error", message)
            }
            GatewayError::Config { .. } => {
                let msg = e.to_string();
                tracing::error!(error = %msg, "configuration error while serving");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "config_error", msg)
            }
            GatewayError::Store(e) => Self::store(&e),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        Self::store(&e)
    }
}

fn json_error(err: JsonPayloadError, limit: usize) -> ApiError {
    match err {
        JsonPayloadError::OverflowKnownLength { .. }
        | JsonPayloadError::Overflow { .. }
        | JsonPayloadError::Payload(PayloadError::Overflow) => ApiError::payload_too_large(limit),
        JsonPayloadError::ContentType => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the body must be JSON with Content-Type: application/json",
        ),
        JsonPayloadError::Deserialize(e) => ApiError::invalid_json(e),
        JsonPayloadError::Payload(e) => {
            ApiError::bad_request("invalid_body", format!("the body could not be read: {e}"))
        }
        other => ApiError::bad_request("invalid_body", other.to_string()),
    }
}

/// JSON bodies: size limit from `server.max_body_bytes`, errors in the API's shape.
pub fn json_config(limit: usize) -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(limit)
        .error_handler(move |err, _req: &HttpRequest| json_error(err, limit).into())
}

/// How the message of a segment that is not an id ends: the path error handler answers
/// `invalid_id` for it (any other path error is `invalid_path`).
pub const NOT_AN_ID: &str = " is not a UUID";

/// Why `raw` is not an id of `what`, in the words every `invalid_id` answer uses.
pub fn not_an_id(what: &str, raw: &str) -> String {
    format!("the {what} id {:?}{NOT_AN_ID}", truncated(raw, 64))
}

/// At most `max` characters of `s`, for echoing client input in an error message.
pub fn truncated(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

/// A path that does not fit its route: 400 `invalid_id` for a segment that is not an id
/// (`routes::id::Id`, whose message ends with [`NOT_AN_ID`]), else `invalid_path`.
pub fn path_config() -> web::PathConfig {
    web::PathConfig::default().error_handler(|err: PathError, _req: &HttpRequest| {
        let PathError::Deserialize(inner) = &err else {
            return ApiError::bad_request("invalid_path", err.to_string()).into();
        };
        let message = inner.to_string();
        match message.ends_with(NOT_AN_ID) {
            true => ApiError::bad_request("invalid_id", message).into(),
            false => ApiError::bad_request("invalid_path", err.to_string()).into(),
        }
    })
}

pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|err: QueryPayloadError, _req: &HttpRequest| {
        ApiError::bad_request("invalid_query", err.to_string()).into()
    })
}
