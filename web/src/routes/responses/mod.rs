//! OpenAI's Responses API on durable sessions: `POST /v1/responses`, `GET /v1/responses/{id}`
//! (`?stream=true&starting_after=N` replays the stream), `POST …/cancel`, `DELETE`, and
//! `GET …/input_items`. Errors in OpenAI's shape, as on `/v1/chat/completions`.
//!
//! A response is an admission: its id is `resp_` and the admission's id, the request rides in
//! the admission's payload (`door`), and its output is made from the turn's durable events
//! (`replay`). So it is idempotent under `Idempotency-Key`, runs through the session's FIFO,
//! lease and turn loop, resumes after a crash like any turn, and reads the same from every
//! replica and after any restart. `store: false` is accepted and changes nothing.
//!
//! Which session: `previous_response_id`'s (someone else's is 404), else `conversation` (a
//! session id), else the `X-Turnkey-Session` header, else the caller's session whose
//! transcript is the input's earlier messages (a stateless client, `openai::conversation`),
//! else a new session whose history is those messages (keyed by `Idempotency-Key`, so a
//! retried request lands in the same one).
mod answer;
mod input;
mod replay;
pub mod wire;

use super::openai::conversation;
use super::openai::request::{idempotency_key, image_attachments, read_json};
use super::openai::session::{chosen_model, named_session};
use super::openai::wire::OpenAiError;
use super::openai::SESSION_HEADER;
use super::{parse_id, reject_privileged_fields};
use crate::auth::{authenticate_request, AuthPrincipal};
use crate::state::AppState;
use actix_web::{delete, get, post, web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::{json, Value};
use turnkey_actors::{GatewayError, NewSessionRequest, Submission};
use turnkey_storage::{Admission, ApprovalDecision, Session, SessionId};
use utoipa::IntoParams;
use wire::{CreateResponse, Deleted, InputItems, ResponseObject};

/// Session keys of this door: by the request's `Idempotency-Key`.
const DOOR_REQUEST: &str = "responses.request";
/// `metadata`: at most this many pairs, keys and values within these lengths (OpenAI's).
const MAX_METADATA_PAIRS: usize = 16;
const MAX_METADATA_KEY_CHARS: usize = 64;
const MAX_METADATA_VALUE_CHARS: usize = 512;

/// Creates a response: admits the last user message of `input` and answers with the Response
/// object when its turn ends, at once (`background`), or as server-sent events (`stream`).
#[utoipa::path(
    operation_id = "create_response",
    tag = "openai",
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "The input's `request_id`: the same key again answers from the same response"),
        ("X-Turnkey-Session" = Option<uuid::Uuid>, Header, description = "The caller's session to continue, when neither `previous_response_id` nor `conversation` names one"),
    ),
    request_body = CreateResponse,
    responses(
        (status = 200, description = "The Response object; with `stream`, `text/event-stream` of the response's events, each with its `sequence_number`", content(
            (ResponseObject = "application/json"),
            (String = "text/event-stream"),
        ), headers(("X-Turnkey-Session" = String, description = "The session of the response"))),
        (status = 400, description = "`empty_input`, `invalid_input`, `unsupported_content`, `unsupported_parameter`, `invalid_attachment`, `invalid_metadata`, the submission's 400s, `invalid_json`", body = OpenAiErrorBody),
        (status = 401, description = "`unauthorized`", body = OpenAiErrorBody),
        (status = 404, description = "`not_found`: `previous_response_id`, `conversation` or `X-Turnkey-Session` is not the caller's", body = OpenAiErrorBody),
        (status = 409, description = "`idempotency_conflict`", body = OpenAiErrorBody),
        (status = 413, description = "`payload_too_large`", body = OpenAiErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = OpenAiErrorBody),
        (status = 503, description = "`no_provider`, `shutting_down`, `store_unavailable`", body = OpenAiErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/responses")]
pub async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, OpenAiError> {
    let who = authenticate_request(&req).await?;
    let body = read_request(&state, &req, payload).await?;
    let input = input::read(body.input.as_ref())?;
    let metadata = metadata(body.metadata.as_ref())?;
    let key = idempotency_key(&req)?;
    if !input.approvals.is_empty() {
        let (asked, seen) = decide_approvals(&state, &who, &body, &input).await?;
        if input.text.is_empty() {
            // Only answers: the response that asked goes on, read from where it waited.
            return continued(&state, &asked, seen, &body).await;
        }
    }
    let session = which_session(&state, &who, &req, &body, &input, key).await?;
    let submitted = input.text.clone();
    let sid = session.id;
    let mut attachments = image_attachments(&state, &input.image_urls).await?;
    attachments.extend(input.file_ids.iter().map(|id| json!({ "file_id": id })));
    let model = chosen_model(&state, &session, body.model.as_deref());
    let background = body.background.unwrap_or(false);
    // System messages for a session the request names join this response's instructions (a
    // new session, or one found by its conversation, has them as its system message).
    let mut instructions: Vec<String> = body.instructions.iter().cloned().collect();
    if !named_none(&body, &req) {
        instructions.extend(input.system.iter().cloned());
    }
    let door = json!({
        "kind": "response",
        "input": input.items,
        "metadata": metadata,
        "previous_response_id": body.previous_response_id,
        "background": background,
        "store": body.store.unwrap_or(true),
        "model": model.reported,
    });
    let receipt = state
        .gateway
        .submit(
            &who.0,
            sid,
            Submission {
                text: submitted.clone(),
                request_id: key.map(str::to_owned),
                attachments,
                display: Some(json!({"stream": true, "tool_progress": "all"})),
                model: model.override_for_turn,
                surface: "openai".into(),
                instructions: (!instructions.is_empty()).then(|| instructions.join("\n\n")),
                max_output_tokens: body.max_output_tokens,
                door: Some(door),
                ..Submission::default()
            },
        )
        .await
        .map_err(|e| OpenAiError::from(crate::error::ApiError::from(e)).in_session(sid))?;
    if named_none(&body, &req) {
        let chat = conversation::chat_hint(&req);
        conversation::note(
            &state,
            &who.0,
            sid,
            &input.history,
            &submitted,
            chat.as_deref(),
        )
        .await;
    }
    let admission = state
        .gateway
        .store()
        .get_admission(receipt.admission_id)
        .await
        .map_err(|e| OpenAiError::from(crate::error::ApiError::from(e)))?
        .ok_or_else(|| wire::not_found(&wire::response_id(receipt.admission_id)))?;
    if body.stream.unwrap_or(false) {
        return answer::streamed(&state, &admission, None, sid);
    }
    if background {
        return answer::now(&state, &admission, sid).await;
    }
    answer::when_ended(&state, &admission, sid).await
}

/// Decides the approvals the input answers (`mcp_approval_response`), which belong to the
/// response `previous_response_id` names; answers that response and, for a stream, the last
/// `sequence_number` it had made before the decision. One decided already (this request sent
/// again) is left as it is.
async fn decide_approvals(
    state: &web::Data<AppState>,
    who: &AuthPrincipal,
    body: &CreateResponse,
    input: &input::Input,
) -> Result<(Admission, Option<u64>), OpenAiError> {
    let Some(prev) = &body.previous_response_id else {
        return Err(OpenAiError::invalid(
            "invalid_input",
            "an mcp_approval_response goes with the previous_response_id of the response that asked",
            Some("previous_response_id".into()),
        ));
    };
    let asked = load(state, who, prev).await?;
    // Only a stream goes on from it: where the client's last event was, before the decision.
    let seen = if body.stream.unwrap_or(false) {
        answer::stored(state, &asked).await?.last_sequence()
    } else {
        None
    };
    for (id, approve) in &input.approvals {
        let approval = parse_id(id, "approval_request_id")?;
        let decision = if *approve {
            ApprovalDecision::Approve
        } else {
            ApprovalDecision::Deny
        };
        match state
            .gateway
            .decide_approval(&who.0, asked.session_id, approval, decision)
            .await
        {
            Ok(_) => {}
            Err(GatewayError::Conflict {
                code: "approval_closed",
                ..
            }) => {}
            Err(GatewayError::NotFound(_)) => return Err(wire::not_found(id)),
            Err(e) => return Err(api(e)),
        }
    }
    Ok((asked, seen))
}

/// The response that asked for approval, after the answer: streamed on from the last event
/// the client had, in the background as it is now, or when its turn ends.
async fn continued(
    state: &web::Data<AppState>,
    asked: &Admission,
    seen: Option<u64>,
    body: &CreateResponse,
) -> Result<HttpResponse, OpenAiError> {
    let sid = asked.session_id;
    if body.stream.unwrap_or(false) {
        return answer::streamed(state, asked, seen, sid);
    }
    if body.background.unwrap_or(false) {
        return answer::now(state, asked, sid).await;
    }
    answer::when_ended(state, asked, sid).await
}

/// `?stream` and `starting_after` of `GET /v1/responses/{id}`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Retrieve {
    /// Replay the response's events as server-sent events, then follow it to its end.
    pub stream: Option<bool>,
    /// With `stream`: only the events after this `sequence_number`.
    pub starting_after: Option<u64>,
}

/// The response as it is now; with `stream=true`, its events (after `starting_after`) and then
/// the rest as they come.
#[utoipa::path(
    operation_id = "get_response",
    tag = "openai",
    params(("id" = String, Path, description = "`resp_` and the admission's id"), Retrieve),
    responses(
        (status = 200, description = "The Response object, or with `stream=true` `text/event-stream`", content(
            (ResponseObject = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 401, description = "`unauthorized`", body = OpenAiErrorBody),
        (status = 404, description = "`not_found`: no such response, deleted, or someone else's", body = OpenAiErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/responses/{id}")]
pub async fn get(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
    query: web::Query<Retrieve>,
) -> Result<HttpResponse, OpenAiError> {
    let who = authenticate_request(&req).await?;
    let admission = load(&state, &who, &id).await?;
    if query.stream.unwrap_or(false) {
        return answer::streamed(
            &state,
            &admission,
            query.starting_after,
            admission.session_id,
        );
    }
    answer::now(&state, &admission, admission.session_id).await
}

/// Cancels the response: a queued one is settled `cancelled`, a running one interrupted; one
/// that ended stays as it ended.
#[utoipa::path(
    operation_id = "cancel_response",
    tag = "openai",
    params(("id" = String, Path, description = "`resp_` and the admission's id")),
    responses(
        (status = 200, description = "The Response object after the cancel", body = ResponseObject),
        (status = 401, description = "`unauthorized`", body = OpenAiErrorBody),
        (status = 404, description = "`not_found`", body = OpenAiErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/responses/{id}/cancel")]
pub async fn cancel(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, OpenAiError> {
    let who = authenticate_request(&req).await?;
    let admission = load(&state, &who, &id).await?;
    state
        .gateway
        .cancel_input(&who.0, admission.session_id, admission.id)
        .await
        .map_err(api)?;
    answer::settled(&state, &admission).await
}

/// Deletes the response: its id answers 404 from then on; the session keeps its messages.
#[utoipa::path(
    operation_id = "delete_response",
    tag = "openai",
    params(("id" = String, Path, description = "`resp_` and the admission's id")),
    responses(
        (status = 200, description = "Deleted", body = Deleted),
        (status = 401, description = "`unauthorized`", body = OpenAiErrorBody),
        (status = 404, description = "`not_found`", body = OpenAiErrorBody),
    ),
    security(("bearer" = [])),
)]
#[delete("/v1/responses/{id}")]
pub async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, OpenAiError> {
    let who = authenticate_request(&req).await?;
    let admission = load(&state, &who, &id).await?;
    state
        .gateway
        .store()
        .delete_response(admission.id, admission.session_id)
        .await
        .map_err(store)?;
    Ok(HttpResponse::Ok().json(Deleted {
        id: wire::response_id(admission.id),
        object: "response",
        deleted: true,
    }))
}

/// The input items of the response, as it was given.
#[utoipa::path(
    operation_id = "list_response_input_items",
    tag = "openai",
    params(("id" = String, Path, description = "`resp_` and the admission's id")),
    responses(
        (status = 200, description = "The input items", body = InputItems),
        (status = 401, description = "`unauthorized`", body = OpenAiErrorBody),
        (status = 404, description = "`not_found`", body = OpenAiErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/responses/{id}/input_items")]
pub async fn input_items(
    state: web::Data<AppState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, OpenAiError> {
    let who = authenticate_request(&req).await?;
    let admission = load(&state, &who, &id).await?;
    let data: Vec<Value> = admission.payload["door"]["input"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let id_of = |v: Option<&Value>| v.and_then(|i| i["id"].as_str()).map(str::to_owned);
    Ok(HttpResponse::Ok().json(InputItems {
        object: "list",
        first_id: id_of(data.first()),
        last_id: id_of(data.last()),
        data,
        has_more: false,
    }))
}

use super::openai::wire::OpenAiErrorBody;

fn api(e: GatewayError) -> OpenAiError {
    OpenAiError::from(crate::error::ApiError::from(e))
}

fn store(e: turnkey_storage::StoreError) -> OpenAiError {
    OpenAiError::from(crate::error::ApiError::from(e))
}

/// The response `id` if the caller may see it: a response (not another input), not deleted,
/// of one of the caller's sessions. Anything else is the same 404.
async fn load(state: &AppState, who: &AuthPrincipal, id: &str) -> Result<Admission, OpenAiError> {
    let admission_id = wire::parse_response_id(id)?;
    let store_ = state.gateway.store();
    let admission = store_
        .get_admission(admission_id)
        .await
        .map_err(store)?
        .filter(|a| a.payload["door"]["kind"] == "response")
        .ok_or_else(|| wire::not_found(id))?;
    state
        .gateway
        .authorize(&who.0, admission.session_id)
        .await
        .map_err(|e| match e {
            GatewayError::NotFound(_) => wire::not_found(id),
            other => api(other),
        })?;
    if store_.response_deleted(admission_id).await.map_err(store)? {
        return Err(wire::not_found(id));
    }
    Ok(admission)
}

/// The request names no session: a stateless client's, found by its conversation.
fn named_none(body: &CreateResponse, req: &HttpRequest) -> bool {
    body.previous_response_id.is_none()
        && body.conversation.is_none()
        && !req.headers().contains_key(SESSION_HEADER)
}

/// The session a new response goes to (see the module documentation).
async fn which_session(
    state: &AppState,
    who: &AuthPrincipal,
    req: &HttpRequest,
    body: &CreateResponse,
    input: &input::Input,
    key: Option<&str>,
) -> Result<Session, OpenAiError> {
    let named: Option<SessionId> = if let Some(prev) = &body.previous_response_id {
        Some(load(state, who, prev).await?.session_id)
    } else if let Some(c) = &body.conversation {
        let raw = c.as_str().or_else(|| c["id"].as_str()).unwrap_or_default();
        Some(parse_id(raw.trim(), "conversation")?)
    } else {
        named_session(req)?
    };
    if let Some(id) = named {
        // Any id of a rotated lineage names the lineage (SPEC R6.4).
        return state
            .gateway
            .authorize_lineage(&who.0, id)
            .await
            .map_err(api);
    }
    let chat = conversation::chat_hint(req);
    if let Some(s) = conversation::find(state, &who.0, &input.history, chat.as_deref()).await? {
        return Ok(s);
    }
    let new = NewSessionRequest {
        system_message: (!input.system.is_empty()).then(|| input.system.join("\n\n")),
        platform: "api".into(),
        history: input.history.clone(),
        ..NewSessionRequest::default()
    };
    match key {
        Some(k) => Ok(state
            .gateway
            .keyed_session(&who.0, DOOR_REQUEST, k, new)
            .await
            .map_err(api)?
            .0),
        None => state.gateway.create_session(&who.0, new).await.map_err(api),
    }
}

/// Reads and parses the body ([`read_json`]): no privileged field, no client tools yet.
async fn read_request(
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<CreateResponse, OpenAiError> {
    let body: CreateResponse = read_json(state, req, payload, "response request").await?;
    reject_privileged_fields(&body.extra)?;
    if body.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(OpenAiError::invalid(
            "unsupported_parameter",
            "client tools are not offered yet: the agent's own tools (tools.enabled) run inside \
             the gateway and show as mcp_call items",
            Some("tools".into()),
        ));
    }
    Ok(body)
}

/// `metadata`: at most 16 string pairs (keys up to 64 characters, values up to 512).
fn metadata(m: Option<&Value>) -> Result<Value, OpenAiError> {
    let bad = |why: String| OpenAiError::invalid("invalid_metadata", why, Some("metadata".into()));
    let Some(m) = m.filter(|m| !m.is_null()) else {
        return Ok(json!({}));
    };
    let Some(map) = m.as_object() else {
        return Err(bad("metadata must be an object of strings".into()));
    };
    if map.len() > MAX_METADATA_PAIRS {
        return Err(bad(format!(
            "metadata has more than {MAX_METADATA_PAIRS} pairs"
        )));
    }
    for (k, v) in map {
        let Some(v) = v.as_str() else {
            return Err(bad(format!("metadata.{k} must be a string")));
        };
        if k.chars().count() > MAX_METADATA_KEY_CHARS
            || v.chars().count() > MAX_METADATA_VALUE_CHARS
        {
            return Err(bad(format!(
                "metadata keys are at most {MAX_METADATA_KEY_CHARS} characters and values {MAX_METADATA_VALUE_CHARS}"
            )));
        }
    }
    Ok(m.clone())
}

/// The Response object of `admission` before any of its events: what its request asked.
fn base(admission: &Admission) -> ResponseObject {
    let p = &admission.payload;
    let door = &p["door"];
    ResponseObject {
        id: wire::response_id(admission.id),
        object: "response",
        created_at: admission.created_at / 1000,
        status: "queued",
        model: door["model"].as_str().unwrap_or("turnkey").to_owned(),
        output: Vec::new(),
        previous_response_id: door["previous_response_id"].as_str().map(str::to_owned),
        conversation: json!({"id": admission.session_id}),
        usage: None,
        error: None,
        incomplete_details: None,
        instructions: p["instructions"].as_str().map(str::to_owned),
        max_output_tokens: p["max_output_tokens"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok()),
        metadata: door["metadata"].clone(),
        background: door["background"].as_bool().unwrap_or(false),
        store: door["store"].as_bool().unwrap_or(true),
        parallel_tool_calls: true,
        tool_choice: json!("auto"),
        tools: Vec::new(),
        text: json!({"format": {"type": "text"}}),
        truncation: "disabled",
        temperature: None,
        top_p: None,
    }
}
