//! The OpenAI-compatible door: `POST /v1/chat/completions` (streamed or not) and
//! `GET /v1/models`, so that any OpenAI client can talk to a turnkey session.
//!
//! A completion is an ordinary submission: the last user message is admitted through the same
//! path as `POST /v1/sessions/{id}/submissions` (limits, ownership, idempotency by the
//! `Idempotency-Key` header), and the answer is read from that admission's turn in the event
//! log. The rest of the request's history is not used: the session keeps its own.
//!
//! Which session: the `X-Turnkey-Session` header; else one session per caller and `user`;
//! else, with an `Idempotency-Key`, one per caller and key (so a retried call lands where the
//! first did); else a new session. Every answer names it in `X-Turnkey-Session`.
mod turn;
pub mod wire;

use super::events::{keepalive_timer, sse_response, KEEPALIVE_FRAME};
use super::submissions::{admit, idempotency_header, SubmitBody};
use super::{parse_id, read_body, reject_privileged_fields};
use crate::auth::{authenticate_request, AuthPrincipal};
use crate::state::AppState;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::mpsc;
use turn::{TurnEnd, TurnNews, TurnWatch};
use turnkey_actors::NewSessionRequest;
use turnkey_storage::{AdmissionId, Session, SessionId};
use utoipa::ToSchema;
use wire::{usage, ChatCompletion, ChatRequest, Completion, OpenAiError, OpenAiErrorBody, DONE};

/// Names the session a completion ran in, on every answer; picks it on a request.
pub const SESSION_HEADER: &str = "X-Turnkey-Session";
/// Session keys of this door: by the request's `user`, and by its `Idempotency-Key`.
const DOOR_USER: &str = "openai.user";
const DOOR_REQUEST: &str = "openai.request";
/// The `model` an answer reports when no provider's model is known.
const OWNED_BY: &str = "turnkey";
/// Chunks buffered towards a slow streaming client; beyond that the pump waits. The turn
/// never waits for a client: it runs on and is read back from the store.
const STREAM_BUFFER: usize = 64;
/// How long a non-streamed answer may wait beyond twice `agent.turn_timeout_s` (a queue ahead
/// of it, approvals); then the client gets `504 turn_pending` and may ask again with the
/// same `Idempotency-Key`.
const WAIT_MARGIN: Duration = Duration::from_secs(60);

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

/// `GET /v1/models`: the configured providers' models, in OpenAI's list shape.
#[utoipa::path(
    get,
    path = "/v1/models",
    operation_id = "list_models",
    tag = "openai",
    responses(
        (status = 200, description = "The configured providers' models", body = ModelList),
        (status = 401, description = "`unauthorized` (`authentication_error`)", body = OpenAiErrorBody),
        (status = 405, description = "`method_not_allowed` (OpenAI's shape)", body = OpenAiErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn models(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, OpenAiError> {
    authenticate_request(&req).await?;
    let data = state
        .gateway
        .served_models()
        .into_iter()
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
    post,
    path = "/v1/chat/completions",
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
pub async fn chat_completions(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, OpenAiError> {
    let who = authenticate_request(&req).await?;
    // Inline images make a body larger than other requests: room for the largest upload,
    // base64 encoded, beside the usual bound.
    let files = &state.gateway.config().files;
    let limit = state.max_body_bytes + files.max_upload_bytes / 3 * 4 + 4;
    let body = read_request(&req, payload, limit).await?;
    let (text, images) = last_user_input(&body)?;
    let key = idempotency_header(&req)?
        .map(str::trim)
        .filter(|k| !k.is_empty());
    // Checked before a session is made for the request; admission checks them all again.
    if let Some(k) = key {
        turnkey_actors::limits::request_id(k).map_err(crate::error::ApiError::from)?;
    }
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
    let session = resolve_session(&state, &who, &req, &body, key).await?;
    let sid = session.id;
    let in_session = |e: OpenAiError| e.in_session(sid);
    let model = chosen_model(&state, &session, body.model.as_deref());
    let receipt = admit(
        &state,
        &who.0,
        sid,
        key,
        SubmitBody {
            text: (!text.trim().is_empty()).then_some(text),
            attachments,
            model: model.override_for_turn.clone(),
            ..SubmitBody::default()
        },
        "openai",
    )
    .await
    .map_err(|e| in_session(e.into()))?;
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
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        actix_web::rt::spawn(stream(
            state.clone(),
            watch,
            receipt.admission_id,
            completion,
            include_usage,
            tx,
        ));
        let mut res = sse_response(rx);
        res.headers_mut().insert(
            header::HeaderName::from_static("x-turnkey-session"),
            header::HeaderValue::from_str(&sid.to_string()).map_err(|e| {
                OpenAiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal_error",
                    e.to_string(),
                )
            })?,
        );
        return Ok(res);
    }
    let limit = Duration::from_secs(
        state
            .gateway
            .config()
            .agent
            .turn_timeout_s
            .saturating_mul(2),
    ) + WAIT_MARGIN;
    let end = tokio::time::timeout(limit, wait_end(watch))
        .await
        .map_err(|_| {
            in_session(admitted(OpenAiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "turn_pending",
                format!(
                    "the turn of admission {} has not ended yet; ask again with the same \
                     Idempotency-Key, or read GET /v1/admissions/{}",
                    receipt.admission_id, receipt.admission_id
                ),
            )))
        })?
        .ok_or_else(|| in_session(stopping()))?;
    let Some(text) = end.text.clone() else {
        return Err(in_session(turn_error(&end, receipt.admission_id)));
    };
    let finish = end.finish_reason();
    Ok(HttpResponse::Ok()
        .insert_header((SESSION_HEADER, sid.to_string()))
        .json(completion.answer(&text, finish, usage(end.input_tokens, end.output_tokens))))
}

/// Reads and parses the body: JSON (a declared non-JSON content type is refused), within
/// `server.max_body_bytes`, no privileged field.
async fn read_request(
    req: &HttpRequest,
    payload: web::Payload,
    limit: usize,
) -> Result<ChatRequest, OpenAiError> {
    if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or_default().to_ascii_lowercase();
        if !ct.starts_with("application/json") {
            return Err(OpenAiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be JSON with Content-Type: application/json",
            ));
        }
    }
    let raw = read_body(payload, limit).await?;
    let body: ChatRequest = serde_json::from_slice(&raw).map_err(|e| {
        OpenAiError::invalid(
            "invalid_json",
            format!("the body is not a valid chat completion request: {e}"),
            None,
        )
    })?;
    reject_privileged_fields(&body.extra)?;
    if body.n.is_some_and(|n| n != 1) {
        return Err(OpenAiError::invalid(
            "unsupported_parameter",
            "n must be 1: a session answers each input once",
            Some("n".into()),
        ));
    }
    for (name, list) in [("tools", &body.tools), ("functions", &body.functions)] {
        if list.as_ref().is_some_and(|l| !l.is_empty()) {
            return Err(OpenAiError::invalid(
                "unsupported_parameter",
                format!(
                    "{name} are not accepted: the agent's own tools (tools.enabled) run inside \
                     the gateway"
                ),
                Some(name.into()),
            ));
        }
    }
    Ok(body)
}

/// How long an image given by an http(s) URL may take to download.
const IMAGE_FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The attachments of the input from its `image_url` parts: a `data:` URL as it is (admission
/// stores it as a file, SPEC R2.2); an http(s) URL downloaded first, the way `web_fetch`
/// fetches (public addresses only unless `tools.fetch_allow` lists the host; at most
/// `server.max_upload_bytes`), then passed on as data. Any other URL, or one that cannot be
/// fetched, is 400 `invalid_attachment`; a too large image 413 `too_large`. Nothing is admitted.
async fn image_attachments(state: &AppState, urls: &[String]) -> Result<Vec<Value>, OpenAiError> {
    use base64::Engine as _;
    let config = state.gateway.config();
    let mut out = Vec::with_capacity(urls.len());
    for (i, url) in urls.iter().enumerate() {
        let scheme = url
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let invalid = |why: String| {
            OpenAiError::invalid(
                "invalid_attachment",
                format!("image {i} of the last message: {why}"),
                Some("messages".into()),
            )
        };
        match scheme.as_str() {
            "data" => out.push(json!({ "url": url })),
            "http" | "https" => {
                let limit = config.files.max_upload_bytes;
                let fetched = turnkey_tools::download(
                    &config.tools.fetch_allow,
                    url,
                    limit,
                    IMAGE_FETCH_TIMEOUT,
                )
                .await;
                let (bytes, _declared) = match fetched {
                    Ok(got) => got,
                    Err(turnkey_tools::DownloadError::TooLarge { url, limit }) => {
                        return Err(OpenAiError::new(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "too_large",
                            format!("the image at {url} is larger than {limit} bytes (server.max_upload_bytes)"),
                        ))
                    }
                    Err(e) => return Err(invalid(format!("cannot fetch it: {e}"))),
                };
                let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
                // The type is sniffed again at admission; the one given here only has to parse.
                out.push(json!({ "url": format!("data:application/octet-stream;base64,{data}") }));
            }
            _ => {
                return Err(invalid(format!(
                    "{:?} is neither a data: URL nor an http(s) URL",
                    crate::error::truncated(url, 64)
                )))
            }
        }
    }
    Ok(out)
}

/// The text and image URLs of the last message, which must be the user's.
fn last_user_input(body: &ChatRequest) -> Result<(String, Vec<String>), OpenAiError> {
    let Some((i, last)) = body.messages.iter().enumerate().next_back() else {
        return Err(OpenAiError::invalid(
            "empty_input",
            "messages is empty; the last message must be the user's",
            Some("messages".into()),
        ));
    };
    if last.role != "user" {
        return Err(OpenAiError::invalid(
            "invalid_messages",
            format!(
                "the last message must have role \"user\"; got {:?} (only the last user message \
                 is submitted, the session keeps its own history)",
                crate::error::truncated(&last.role, 32)
            ),
            Some(format!("messages[{i}].role")),
        ));
    }
    last.text_and_images(i)
}

/// The session of a request (see the module's documentation).
async fn resolve_session(
    state: &AppState,
    who: &AuthPrincipal,
    req: &HttpRequest,
    body: &ChatRequest,
    key: Option<&str>,
) -> Result<Session, OpenAiError> {
    if let Some(v) = req.headers().get(SESSION_HEADER) {
        let raw = v.to_str().map_err(|_| {
            OpenAiError::invalid("invalid_id", "X-Turnkey-Session is not a UUID", None)
        })?;
        let id: SessionId = parse_id(raw.trim(), "session")?;
        // Any id of a rotated lineage names the lineage, keyed on its root (SPEC R6.4).
        return Ok(state
            .gateway
            .authorize_lineage(&who.0, id)
            .await
            .map_err(crate::error::ApiError::from)?);
    }
    let new = NewSessionRequest {
        title: None,
        system_message: system_text(body)?,
        model: None,
        platform: "api".into(),
        chat_key: None,
    };
    let keyed = match (body.user.as_deref().map(str::trim), key) {
        (Some(user), _) if !user.is_empty() => Some((DOOR_USER, user)),
        (_, Some(k)) => Some((DOOR_REQUEST, k)),
        _ => None,
    };
    let session = match keyed {
        Some((door, k)) => {
            let k = turnkey_actors::limits::text_field(
                if door == DOOR_USER {
                    "user"
                } else {
                    "Idempotency-Key"
                },
                k,
                turnkey_actors::limits::MAX_SESSION_KEY_CHARS,
            )
            .map_err(crate::error::ApiError::from)?;
            state
                .gateway
                .keyed_session(&who.0, door, &k, new)
                .await
                .map_err(crate::error::ApiError::from)?
                .0
        }
        None => state
            .gateway
            .create_session(&who.0, new)
            .await
            .map_err(crate::error::ApiError::from)?,
    };
    Ok(session)
}

/// The request's system (or developer) messages, joined: the system message of a session this
/// request creates. An existing session keeps its own.
fn system_text(body: &ChatRequest) -> Result<Option<String>, OpenAiError> {
    let mut parts = Vec::new();
    for (i, m) in body.messages.iter().enumerate() {
        if matches!(m.role.as_str(), "system" | "developer") {
            let t = m.text(i)?;
            if !t.trim().is_empty() {
                parts.push(t);
            }
        }
    }
    Ok((!parts.is_empty()).then(|| parts.join("\n\n")))
}

/// The model a completion runs on and names.
struct ChosenModel {
    /// A configured provider's model other than the session's: this turn's model.
    override_for_turn: Option<String>,
    /// The `model` of the answer.
    reported: String,
}

/// Any `model` is accepted. One a configured provider serves (`GET /v1/models`) runs this
/// turn; any other name (`"turnkey"`, an SDK default) leaves the session's model in use.
fn chosen_model(state: &AppState, session: &Session, asked: Option<&str>) -> ChosenModel {
    let in_use = state.gateway.model_in_use(session);
    let models = state.gateway.models();
    let configured = asked.filter(|m| models.iter().any(|known| known == m));
    match configured {
        Some(m) if Some(m) != in_use.as_deref() => ChosenModel {
            override_for_turn: Some(m.to_owned()),
            reported: m.to_owned(),
        },
        _ => ChosenModel {
            override_for_turn: None,
            reported: in_use.unwrap_or_else(|| asked.unwrap_or(OWNED_BY).to_owned()),
        },
    }
}

/// Waits for the end of the watched turn; `None` when the server stops first.
async fn wait_end(mut watch: TurnWatch) -> Option<TurnEnd> {
    loop {
        match watch.next().await? {
            TurnNews::Delta(_) => {}
            TurnNews::Ended(end) => return Some(end),
        }
    }
}

fn admitted(mut e: OpenAiError) -> OpenAiError {
    e.admitted = true;
    e
}

fn stopping() -> OpenAiError {
    let mut e = admitted(OpenAiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "shutting_down",
        "the server is stopping; ask again with the same Idempotency-Key for this turn's answer",
    ));
    e.retry_after = Some(5);
    e
}

/// A turn that ended without an answer, as an OpenAI error carrying its `failure_reason`.
fn turn_error(end: &TurnEnd, admission: AdmissionId) -> OpenAiError {
    let reason = end.failure_reason.as_deref().unwrap_or("failed");
    let status = match reason {
        "rate_limited" => StatusCode::TOO_MANY_REQUESTS,
        "context_overflow" | "compression_failed" => StatusCode::BAD_REQUEST,
        "interrupted" => StatusCode::CONFLICT,
        "shutdown" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_GATEWAY,
    };
    let message = format!(
        "the turn of admission {admission} ended {} without an answer: {}",
        end.result,
        end.failure_message.as_deref().unwrap_or(reason)
    );
    admitted(OpenAiError::new(status, reason, message))
}

/// Writes the turn as `chat.completion.chunk` frames: the role, each text delta, the final
/// chunk with `finish_reason` (and the usage chunk when asked), then `[DONE]`. A client that
/// goes away stops only this writer; the turn runs on and stays in the transcript.
async fn stream(
    state: web::Data<AppState>,
    mut watch: TurnWatch,
    admission: AdmissionId,
    completion: Completion,
    include_usage: bool,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
) {
    let _open = state.metrics.open_event_stream();
    let send = |b: Bytes| {
        let tx = tx.clone();
        async move { tx.send(Ok(b)).await.is_ok() }
    };
    if !send(completion.chunk(json!({"role": "assistant", "content": ""}), None)).await {
        return;
    }
    let mut sent = String::new();
    let mut keepalive = keepalive_timer(state.keepalive);
    loop {
        let news = tokio::select! {
            () = tx.closed() => return,
            news = watch.next() => news,
            _ = keepalive.tick() => {
                if !send(Bytes::from_static(KEEPALIVE_FRAME)).await {
                    return;
                }
                continue;
            }
        };
        keepalive.reset();
        match news {
            Some(TurnNews::Delta(text)) => {
                if !send(completion.chunk(json!({"content": text}), None)).await {
                    return;
                }
                sent.push_str(&text);
            }
            Some(TurnNews::Ended(end)) => {
                let Some(text) = end.text.as_deref() else {
                    send(turn_error(&end, admission).frame()).await;
                    return;
                };
                // The authoritative answer may hold text no delta carried (an unstreamed
                // retry, `agent.streaming = false`): send what the client has not seen.
                if let Some(rest) = text.strip_prefix(sent.as_str()).filter(|r| !r.is_empty()) {
                    if !send(completion.chunk(json!({"content": rest}), None)).await {
                        return;
                    }
                }
                let finish = end.finish_reason();
                if !send(completion.chunk(json!({}), Some(finish))).await {
                    return;
                }
                if include_usage
                    && !send(completion.usage_chunk(usage(end.input_tokens, end.output_tokens)))
                        .await
                {
                    return;
                }
                send(Bytes::from_static(DONE)).await;
                return;
            }
            None => {
                send(stopping().frame()).await;
                return;
            }
        }
    }
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
