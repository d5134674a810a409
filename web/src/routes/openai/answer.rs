//! How a completion answers once its input is admitted: the whole answer when the turn ends,
//! or `chat.completion.chunk` frames as it goes; a turn without an answer as an OpenAI error.
use super::turn::{TurnEnd, TurnNews, TurnWatch};
use super::wire::{usage, Completion, OpenAiError, DONE};
use super::SESSION_HEADER;
use crate::routes::events::{keepalive_timer, sse_response, KEEPALIVE_FRAME};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use bytes::Bytes;
use serde_json::json;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::mpsc;
use turnkey_storage::{AdmissionId, SessionId};

/// Chunks buffered towards a slow streaming client; beyond that the pump waits. The turn
/// never waits for a client: it runs on and is read back from the store.
const STREAM_BUFFER: usize = 64;
/// How long a non-streamed answer may wait beyond twice `agent.turn_timeout_s` (a queue ahead
/// of it, approvals); then the client gets `504 turn_pending` and may ask again with the
/// same `Idempotency-Key`.
const WAIT_MARGIN: Duration = Duration::from_secs(60);

/// The streamed answer: an SSE response whose frames [`stream`] writes as the turn goes.
pub(super) fn streamed(
    state: &web::Data<AppState>,
    watch: TurnWatch,
    admission: AdmissionId,
    completion: Completion,
    include_usage: bool,
    sid: SessionId,
) -> Result<HttpResponse, OpenAiError> {
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    actix_web::rt::spawn(stream(
        state.clone(),
        watch,
        admission,
        completion,
        include_usage,
        tx,
    ));
    super::naming_session(sse_response(rx), sid)
}

/// The whole answer once the turn ended; `504 turn_pending` when it takes longer than twice
/// `agent.turn_timeout_s` and [`WAIT_MARGIN`].
pub(super) async fn whole(
    state: &AppState,
    watch: TurnWatch,
    admission: AdmissionId,
    completion: Completion,
    sid: SessionId,
) -> Result<HttpResponse, OpenAiError> {
    let in_session = |e: OpenAiError| e.in_session(sid);
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
                    "the turn of admission {admission} has not ended yet; ask again with the \
                     same Idempotency-Key, or read GET /v1/admissions/{admission}"
                ),
            )))
        })?
        .ok_or_else(|| in_session(stopping()))?;
    let Some(text) = end.text.clone() else {
        return Err(in_session(turn_error(&end, admission)));
    };
    let finish = end.finish_reason();
    Ok(HttpResponse::Ok()
        .insert_header((SESSION_HEADER, sid.to_string()))
        .json(completion.answer(&text, finish, usage(end.input_tokens, end.output_tokens))))
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
