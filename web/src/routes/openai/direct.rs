//! `direct/<model>`: a chat completion answered by that model itself, with no session, no
//! agent prompt and no tools, for a client's own side tasks (Open WebUI's titles, tags and
//! follow-up suggestions, each a `### Task:` message). The request's messages go to the model
//! as they are (text only); one attempt, no fallback; the answer's tokens count in the
//! caller's tokens of the day (`[limits] tokens_per_day`). Listed by `GET /v1/models` after
//! the session models.
use super::wire::{usage, ChatRequest, Completion, OpenAiError, DONE};
use crate::auth::AuthPrincipal;
use crate::routes::events::sse_response;
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use bytes::Bytes;
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::mpsc;
use turnkey_providers::{ChatMessage, ChatResponse, FinishReason, Provider, ProviderError};
use turnkey_storage::Principal;

/// The prefix of a direct model's id.
pub const PREFIX: &str = "direct/";

/// Answers `body` from the model `model` (the id without [`PREFIX`]).
pub(super) async fn answer(
    state: &web::Data<AppState>,
    who: &AuthPrincipal,
    body: &ChatRequest,
    model: &str,
) -> Result<HttpResponse, OpenAiError> {
    let provider = state
        .gateway
        .direct_provider(&who.0, model)
        .await
        .map_err(|e| OpenAiError::from(crate::error::ApiError::from(e)))?;
    let stream = body.stream.unwrap_or(false);
    let req = turnkey_providers::ChatRequest {
        model: provider.model().to_owned(),
        messages: messages(body)?,
        tools: Vec::new(),
        stream,
        max_tokens: output_limit(body),
        temperature: None,
        prefill: false,
    };
    let completion = Completion {
        id: format!("chatcmpl-direct-{}", uuid::Uuid::new_v4().simple()),
        created: chrono::Utc::now().timestamp(),
        model: format!("{PREFIX}{model}"),
    };
    if stream {
        let include_usage = body
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
        let (tx, rx) = mpsc::channel(64);
        actix_web::rt::spawn(streamed(
            state.clone(),
            who.0.clone(),
            provider,
            req,
            completion,
            include_usage,
            tx,
        ));
        return Ok(sse_response(rx));
    }
    let resp = provider.chat(&req, &|_| {}).await.map_err(provider_error)?;
    meter(state, &who.0, &resp).await;
    let u = &resp.usage;
    Ok(HttpResponse::Ok().json(completion.answer(
        resp.content.as_deref().unwrap_or_default(),
        finish(&resp),
        usage(u.input_tokens, u.output_tokens),
    )))
}

/// The output limit the request asks for: `max_completion_tokens` (Open WebUI's task requests
/// send it) or `max_tokens`.
fn output_limit(body: &ChatRequest) -> Option<u32> {
    ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| body.extra.get(*k).and_then(|v| v.as_u64()))
        .and_then(|n| u32::try_from(n).ok())
}

/// The request's messages as the model gets them: system and developer as system, user and
/// assistant as themselves, text only.
fn messages(body: &ChatRequest) -> Result<Vec<ChatMessage>, OpenAiError> {
    let mut out = Vec::with_capacity(body.messages.len());
    for (i, m) in body.messages.iter().enumerate() {
        let text = m.text(i)?;
        out.push(match m.role.as_str() {
            "system" | "developer" => ChatMessage::system(text),
            "user" => ChatMessage::user(text),
            "assistant" => ChatMessage::assistant(text),
            other => {
                return Err(OpenAiError::invalid(
                    "invalid_messages",
                    format!(
                        "messages[{i}]: a direct model takes system, user and assistant messages, not {:?}",
                        crate::error::truncated(other, 32)
                    ),
                    Some(format!("messages[{i}].role")),
                ))
            }
        });
    }
    if out.is_empty() {
        return Err(OpenAiError::invalid(
            "empty_input",
            "messages is empty",
            Some("messages".into()),
        ));
    }
    Ok(out)
}

fn finish(resp: &ChatResponse) -> &'static str {
    if resp.finish_reason == FinishReason::Length {
        "length"
    } else {
        "stop"
    }
}

fn provider_error(e: ProviderError) -> OpenAiError {
    OpenAiError::new(
        StatusCode::BAD_GATEWAY,
        e.code(),
        format!("the model did not answer: {e}"),
    )
}

/// Counts the call's tokens; a failure is logged (the answer was given).
async fn meter(state: &AppState, who: &Principal, resp: &ChatResponse) {
    let tokens = resp.usage.input_tokens + resp.usage.output_tokens;
    if let Err(e) = state.gateway.meter_direct(who, tokens).await {
        tracing::warn!(principal = %who.id, tokens, error = %e, "a direct call's tokens were not counted");
    }
}

async fn streamed(
    state: web::Data<AppState>,
    who: Principal,
    provider: Arc<dyn Provider>,
    req: turnkey_providers::ChatRequest,
    completion: Completion,
    include_usage: bool,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
) {
    let send = |b: Bytes| {
        let tx = tx.clone();
        async move { tx.send(Ok(b)).await.is_ok() }
    };
    if !send(completion.chunk(json!({"role": "assistant", "content": ""}), None)).await {
        return;
    }
    let (dtx, mut drx) = mpsc::unbounded_channel::<String>();
    let sink = move |t: &str| {
        // The receiver lives until this task ends; a send can only fail after that.
        if dtx.send(t.to_owned()).is_err() {
            tracing::debug!("a direct stream's delta came after its reader ended");
        }
    };
    let call = provider.chat(&req, &sink);
    tokio::pin!(call);
    let result = loop {
        tokio::select! {
            () = tx.closed() => return,
            Some(delta) = drx.recv() => {
                if !send(completion.chunk(json!({"content": delta}), None)).await {
                    return;
                }
            }
            result = &mut call => break result,
        }
    };
    while let Ok(delta) = drx.try_recv() {
        if !send(completion.chunk(json!({"content": delta}), None)).await {
            return;
        }
    }
    let resp = match result {
        Ok(resp) => resp,
        Err(e) => {
            send(provider_error(e).frame()).await;
            return;
        }
    };
    meter(&state, &who, &resp).await;
    if !send(completion.chunk(json!({}), Some(finish(&resp)))).await {
        return;
    }
    let u = &resp.usage;
    if include_usage && !send(completion.usage_chunk(usage(u.input_tokens, u.output_tokens))).await
    {
        return;
    }
    send(Bytes::from_static(DONE)).await;
}
