//! Input into a session: submissions (idempotent by `request_id` / `Idempotency-Key`, SPEC R2.3)
//! and interrupts of the running turn.
use super::{parse_id, read_optional_json, reject_privileged_fields};
use crate::auth::AuthPrincipal;
use crate::error::ApiError;
use crate::startup::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use turnkey_actors::{Receipt, Submission};
use turnkey_storage::{Principal, SessionId};

pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

#[derive(Debug, Default, Deserialize)]
pub struct SubmitBody {
    pub text: Option<String>,
    pub request_id: Option<String>,
    #[serde(default)]
    pub attachments: Vec<Value>,
    pub display: Option<Value>,
    pub model: Option<String>,
    #[serde(flatten)]
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

pub async fn submit(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    req: HttpRequest,
    path: web::Path<String>,
    body: web::Json<SubmitBody>,
) -> Result<HttpResponse, ApiError> {
    let session: SessionId = parse_id(&path, "session")?;
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
            },
        )
        .await?)
}

#[derive(Debug, Default, Deserialize)]
pub struct InterruptBody {
    pub reason: Option<String>,
}

pub async fn interrupt(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let session: SessionId = parse_id(&path, "session")?;
    let body: InterruptBody = read_optional_json(payload, state.max_body_bytes).await?;
    let reason = body.reason.filter(|r| !r.trim().is_empty());
    let interrupted = state.gateway.interrupt(&who.0, session, reason).await?;
    Ok(HttpResponse::Accepted().json(json!({ "interrupted": interrupted })))
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
