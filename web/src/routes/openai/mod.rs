//! The OpenAI-compatible door: `POST /v1/chat/completions` (streamed or not) and
//! `GET /v1/models`, so that any OpenAI client can talk to a turnkey session.
//!
//! A completion is an ordinary submission: the last user message is admitted through the same
//! path as `POST /v1/sessions/{id}/submissions` (limits, ownership, idempotency by the
//! `Idempotency-Key` header), and the answer is read from that admission's turn in the event
//! log. A named session keeps its own history; the request's earlier messages are not used.
//!
//! Which session: the `X-Turnkey-Session` header; else one session per caller and `user`;
//! else (a stateless client) the caller's session whose transcript is the request's earlier
//! messages (`conversation`); else, with an `Idempotency-Key`, one per caller and key (so a
//! retried call lands where the first did); else a new session, which starts with the earlier
//! messages as its history. Every answer names it in `X-Turnkey-Session`.
mod answer;
pub(crate) mod conversation;
mod direct;
pub(crate) mod request;
pub(crate) mod session;
pub(crate) mod turn;
pub mod wire;

use super::submissions::{admit, SubmitBody};
use crate::auth::authenticate_request;
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{get, post};
use actix_web::{web, HttpRequest, HttpResponse};
use request::{image_attachments, last_user_input, read_request};
use serde::Serialize;
use session::{chosen_model, resolve_session};
use turn::TurnWatch;
use utoipa::ToSchema;
use wire::{ChatCompletion, ChatRequest, Completion, OpenAiError, OpenAiErrorBody};

/// Names the session a completion ran in, on every answer; picks it on a request.
pub const SESSION_HEADER: &str = "X-Turnkey-Session";

/// `res` naming session `sid` in [`SESSION_HEADER`] (a streamed answer, made before it).
pub(crate) fn naming_session(
    mut res: HttpResponse,
    sid: turnkey_storage::SessionId,
) -> Result<HttpResponse, OpenAiError> {
    let value = actix_web::http::header::HeaderValue::from_str(&sid.to_string()).map_err(|e| {
        OpenAiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            e.to_string(),
        )
    })?;
    res.headers_mut().insert(
        actix_web::http::header::HeaderName::from_static("x-turnkey-session"),
        value,
    );
    Ok(res)
}

/// `GET /v1/models`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ModelList {
    #[schema(example = "list")]
    pub object: &'static str,
    pub data: Vec<ModelEntry>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelEntry {
    /// The model's name, as a configured provider names it.
    pub id: String,
    #[schema(example = "model")]
    pub object: &'static str,
    /// Always 0.
    pub created: i64,
    /// The name of the provider serving it (the first in the fallback chain that does).
    #[schema(example = "local")]
    pub owned_by: String,
}

/// `GET /v1/models`: the configured providers' models, in OpenAI's list shape, then each as
/// `direct/<model>` (answered with no session, no agent prompt and no tools).
#[utoipa::path(
    operation_id = "list_models",
    tag = "openai",
    responses(
        (status = 200, description = "The configured providers' models", body = ModelList),
        (status = 401, description = "`unauthorized` (`authentication_error`)", body = OpenAiErrorBody),
        (status = 405, description = "`method_not_allowed` (OpenAI's shape)", body = OpenAiErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/models")]
pub async fn models(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, OpenAiError> {
    authenticate_request(&req).await?;
    let served = state.gateway.served_models();
    // The session models, then each again as `direct/<id>` (no session, no tools).
    let direct = served
        .iter()
        .map(|(id, provider)| (format!("{}{id}", direct::PREFIX), provider.clone()));
    let data = served
        .clone()
        .into_iter()
        .chain(direct)
        .map(|(id, provider)| ModelEntry {
            id,
            object: "model",
            created: 0,
            owned_by: provider,
        })
        .collect();
    Ok(HttpResponse::Ok().json(ModelList {
        object: "list",
        data,
    }))
}

/// `POST /v1/chat/completions`: submits the last user message to a turnkey session and
/// answers with its turn, as OpenAI's Chat Completions API does. Errors are in OpenAI's shape
/// with turnkey's code as `code`; once the input was admitted they carry
/// `x-should-retry: false`, and a stream that already began ends with one `data: {"error"}`
/// frame instead.
#[utoipa::path(
    operation_id = "create_chat_completion",
    tag = "openai",
    params(
        ("X-Turnkey-Session" = Option<uuid::Uuid>, Header, description = "The caller's session to submit to; without it, one session per `user`, else per `Idempotency-Key`, else a new one"),
        ("Idempotency-Key" = Option<String>, Header, description = "The input's `request_id`: the same key again answers from the same admission"),
    ),
    request_body = ChatRequest,
    responses(
        (status = 200, description = "`stream` false: the completion. `stream` true: `text/event-stream` of `data: {chat.completion.chunk}` frames, then `data: [DONE]`", content(
            (ChatCompletion = "application/json"),
            (String = "text/event-stream"),
        ), headers(("X-Turnkey-Session" = String, description = "The session the completion ran in"))),
        (status = 400, description = "`invalid_messages`, `unsupported_content`, `unsupported_parameter`, `empty_input`, `invalid_attachment` (an `image_url` neither `data:` nor http(s), or one that cannot be fetched), the submission's 400s, `invalid_json`; a turn that failed with `context_overflow` or `compression_failed`", body = OpenAiErrorBody),
        (status = 401, description = "`unauthorized`", body = OpenAiErrorBody),
        (status = 404, description = "`not_found`: the `X-Turnkey-Session` is not the caller's", body = OpenAiErrorBody),
        (status = 405, description = "`method_not_allowed`", body = OpenAiErrorBody),
        (status = 409, description = "`idempotency_conflict`; a turn that ended `interrupted`", body = OpenAiErrorBody),
        (status = 413, description = "`payload_too_large`; `too_large`: an image over `server.max_upload_bytes`", body = OpenAiErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = OpenAiErrorBody),
        (status = 429, description = "A turn that failed with `rate_limited`", body = OpenAiErrorBody),
        (status = 502, description = "A turn that ended without an answer: its `failure_reason` (provider errors, `owner_died`, …)", body = OpenAiErrorBody),
        (status = 503, description = "`no_provider`, `shutting_down`, `store_unavailable`; a turn ended by `shutdown`", body = OpenAiErrorBody),
        (status = 504, description = "`turn_pending`: the turn goes on; ask again with the same `Idempotency-Key`", body = OpenAiErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/chat/completions")]
pub async fn chat_completions(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, OpenAiError> {
    let who = authenticate_request(&req).await?;
    let body = read_request(&state, &req, payload).await?;
    if let Some(model) = body
        .model
        .as_deref()
        .and_then(|m| m.strip_prefix(direct::PREFIX))
    {
        return direct::answer(&state, &who, &body, model).await;
    }
    let stateless = session::is_stateless(&req, &body);
    let (earlier, lead) = if stateless {
        session::earlier(&body)?
    } else {
        (Vec::new(), Vec::new())
    };
    let (text, images) = last_user_input(&body)?;
    let text = if lead.is_empty() {
        text
    } else {
        format!("{}\n\n{text}", lead.join("\n\n"))
    };
    let key = request::idempotency_key(&req)?;
    if images.is_empty()
        && turnkey_actors::limits::sanitize_text(&text)
            .trim()
            .is_empty()
    {
        return Err(OpenAiError::invalid(
            "empty_input",
            "the last user message has no text",
            Some("messages".into()),
        ));
    }
    let attachments = image_attachments(&state, &images).await?;
    let session = resolve_session(&state, &who, &req, &body, key, &earlier).await?;
    let sid = session.id;
    let in_session = |e: OpenAiError| e.in_session(sid);
    let model = chosen_model(&state, &session, body.model.as_deref());
    let receipt = admit(
        &state,
        &who.0,
        sid,
        key,
        SubmitBody {
            text: (!text.trim().is_empty()).then(|| text.clone()),
            attachments,
            model: model.override_for_turn.clone(),
            ..SubmitBody::default()
        },
        "openai",
    )
    .await
    .map_err(|e| in_session(e.into()))?;
    if stateless {
        let chat = conversation::chat_hint(&req);
        conversation::note(&state, &who.0, sid, &earlier, &text, chat.as_deref()).await;
    }
    let completion = Completion {
        id: format!("chatcmpl-{}", receipt.admission_id),
        created: chrono::Utc::now().timestamp(),
        model: model.reported,
    };
    let watch = TurnWatch::start(state.clone(), sid, receipt.admission_id)
        .await
        .map_err(|e| in_session(e.into()))?;
    if body.stream.unwrap_or(false) {
        let include_usage = body.stream_options.is_some_and(|o| o.include_usage);
        return answer::streamed(
            &state,
            watch,
            receipt.admission_id,
            completion,
            include_usage,
            sid,
        );
    }
    answer::whole(&state, watch, receipt.admission_id, completion, sid).await
}

/// 405 in OpenAI's error shape.
pub async fn method_not_allowed(req: HttpRequest) -> HttpResponse {
    use actix_web::ResponseError;
    OpenAiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}", req.method(), req.path()),
    )
    .error_response()
}
