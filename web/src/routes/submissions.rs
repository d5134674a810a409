//! Input into a session: submissions (idempotent by `request_id` / `Idempotency-Key`, SPEC R2.3)
//! and interrupts of the running turn.
use super::id::Id;
use super::{read_optional_json, reject_privileged_fields};
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::openapi::mirrors::ReceiptSchema;
use crate::state::AppState;
use actix_web::post;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use turnkey_actors::{Receipt, Submission};
use turnkey_storage::{Principal, SessionId};
use utoipa::ToSchema;

pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

#[derive(Debug, Default, Deserialize, ToSchema)]
#[schema(as = Submission)]
pub struct SubmitBody {
    /// The input; required unless `attachments` is not empty. At most 200 000 characters.
    pub text: Option<String>,
    /// Names the input for idempotency: 1–255 bytes of visible ASCII. Equal to the
    /// `Idempotency-Key` header when both are given.
    #[schema(min_length = 1, max_length = 255)]
    pub request_id: Option<String>,
    /// At most 16 JSON objects of at most 64 KiB each.
    #[serde(default)]
    #[schema(value_type = Vec<Object>, max_items = 16)]
    pub attachments: Vec<Value>,
    /// A JSON object (at most 16 KiB) kept with the input for a UI, not sent to the model.
    #[schema(value_type = Option<Object>)]
    pub display: Option<Value>,
    /// Overrides the session's model for this input's turn.
    pub model: Option<String>,
    /// Other fields: refused when they name a right (`400 forbidden_field`), else ignored.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

/// The request id from the body and the `Idempotency-Key` header, which must agree.
pub fn request_id(header: Option<&str>, body: Option<&str>) -> Result<Option<String>, ApiError> {
    let header = header.map(str::trim).filter(|s| !s.is_empty());
    let body = body.map(str::trim).filter(|s| !s.is_empty());
    match (header, body) {
        (Some(h), Some(b)) if h != b => Err(ApiError::bad_request(
            "idempotency_key_mismatch",
            "the Idempotency-Key header and request_id differ",
        )),
        (h, b) => Ok(h.or(b).map(String::from)),
    }
}

/// Submits an input to the session. It is durable once answered; its turn runs later, in
/// order with the session's other inputs.
#[utoipa::path(
    operation_id = "submit",
    tag = "submissions",
    params(
        ("id" = uuid::Uuid, Path, description = "The session's id"),
        ("Idempotency-Key" = Option<String>, Header, description = "The input's `request_id`"),
    ),
    request_body = SubmitBody,
    responses(
        (status = 202, description = "Admitted: the receipt of a new input", body = ReceiptSchema),
        (status = 200, description = "The same key with the same input again: the original receipt, `duplicate: true`", body = ReceiptSchema),
        (status = 400, description = "`invalid_id`, `invalid_request_id`, `idempotency_key_mismatch`, `empty_input`, `input_too_large`, `field_too_long`, `too_many_attachments`, `invalid_attachment`, `invalid_display`, `invalid_field`, `forbidden_field`, `invalid_json`, `invalid_body`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session, or someone else's", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict`: the request id was already used with another input", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 503, description = "`no_provider`, `shutting_down` (with `Retry-After`), `store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/sessions/{id}/submissions")]
pub async fn submit(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    req: HttpRequest,
    path: web::Path<Id<SessionId>>,
    body: web::Json<SubmitBody>,
) -> Result<HttpResponse, ApiError> {
    let session = path.into_inner().into_inner();
    let header = idempotency_header(&req)?;
    let receipt = admit(&state, &who.0, session, header, body.into_inner(), "api").await?;
    let mut res = if receipt.duplicate {
        HttpResponse::Ok()
    } else {
        HttpResponse::Accepted()
    };
    Ok(res.json(receipt))
}

/// The `Idempotency-Key` header, if the request has one.
pub fn idempotency_header(req: &HttpRequest) -> Result<Option<&str>, ApiError> {
    match req.headers().get(IDEMPOTENCY_KEY) {
        Some(v) => v.to_str().map(Some).map_err(|_| {
            ApiError::bad_request(
                "invalid_request_id",
                "Idempotency-Key must be visible ASCII",
            )
        }),
        None => Ok(None),
    }
}

/// Admits one input through the gateway: the one path every door's submissions take (HTTP,
/// WebSocket `prompt.submit`, the OpenAI-compatible endpoint), so limits, ownership and
/// idempotency are the same everywhere. `surface` names the door.
pub async fn admit(
    state: &AppState,
    who: &Principal,
    session: SessionId,
    idempotency_key: Option<&str>,
    body: SubmitBody,
    surface: &str,
) -> Result<Receipt, ApiError> {
    reject_privileged_fields(&body.extra)?;
    let request_id = request_id(idempotency_key, body.request_id.as_deref())?;
    // Emptiness and size are judged once, by admission's normalization (`empty_input`).
    let text = body.text.unwrap_or_default();
    Ok(state
        .gateway
        .submit(
            who,
            session,
            Submission {
                text,
                request_id,
                attachments: body.attachments,
                display: body.display,
                model: body.model.filter(|m| !m.trim().is_empty()),
                surface: surface.into(),
                ..Submission::default()
            },
        )
        .await?)
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[schema(as = Interrupt)]
pub struct InterruptBody {
    /// At most 500 characters.
    #[schema(max_length = 500)]
    pub reason: Option<String>,
}

/// The answer of `POST /v1/sessions/{id}/interrupt`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Interrupted {
    /// Whether a running turn was signalled: by this process, or by the replica that runs it
    /// (then `forwarded` is set).
    pub interrupted: bool,
    /// Present when the turn runs on another replica and the interrupt was passed to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forwarded: Option<ForwardedInterrupt>,
}

/// An interrupt passed to the replica that runs the turn (SPEC R13.6).
#[derive(Debug, Serialize, ToSchema)]
pub struct ForwardedInterrupt {
    /// The stored request the other replica acts on.
    pub request_id: String,
    /// The turn it is for.
    pub turn_id: String,
    /// `done` (that replica signalled the turn), `missed` (the turn had already ended) or
    /// `pending` (no answer within 2 s; it is acted on when that replica sees it).
    pub status: String,
}

impl From<turnkey_actors::remote_interrupt::Interruption> for Interrupted {
    fn from(i: turnkey_actors::remote_interrupt::Interruption) -> Self {
        Self {
            interrupted: i.interrupted,
            forwarded: i.forwarded.map(|f| ForwardedInterrupt {
                request_id: f.request_id,
                turn_id: f.turn_id.to_string(),
                status: f.status.as_str().to_owned(),
            }),
        }
    }
}

/// Interrupts the session's running turn, which settles as `interrupted`. The body may be
/// absent.
#[utoipa::path(
    operation_id = "interrupt",
    tag = "submissions",
    params(("id" = uuid::Uuid, Path, description = "The session's id")),
    request_body(content = Option<InterruptBody>, description = "Optional"),
    responses(
        (status = 202, description = "Whether a running turn was signalled", body = Interrupted),
        (status = 400, description = "`invalid_id`, `field_too_long`, `invalid_json`, `invalid_body`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session, or someone else's", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/sessions/{id}/interrupt")]
pub async fn interrupt(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<SessionId>>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let session = path.into_inner().into_inner();
    let body: InterruptBody = read_optional_json(payload, state.max_body_bytes).await?;
    let reason = body.reason.filter(|r| !r.trim().is_empty());
    let interruption = state.gateway.interrupt(&who.0, session, reason).await?;
    Ok(HttpResponse::Accepted().json(Interrupted::from(interruption)))
}

#[cfg(test)]
mod tests {
    use super::request_id;

    #[test]
    fn r2_3_header_and_body_request_ids_must_agree() {
        assert_eq!(
            request_id(Some("a"), Some("a")).ok().flatten(),
            Some("a".into())
        );
        assert_eq!(request_id(Some("a"), None).ok().flatten(), Some("a".into()));
        assert_eq!(request_id(None, Some("b")).ok().flatten(), Some("b".into()));
        assert_eq!(request_id(None, None).ok().flatten(), None);
        let err = request_id(Some("a"), Some("b")).err().map(|e| e.code);
        assert_eq!(err, Some("idempotency_key_mismatch"));
    }
}
