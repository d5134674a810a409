//! How a response answers: the Response object as its events make it now, once its turn
//! ended, or as server-sent events (from the start, or after `starting_after`), following the
//! turn until the response ends. Every answer replays the same durable events (`replay`).
use super::replay::Replay;
use super::{base, store};
use crate::follow::EventFollower;
use crate::routes::events::{keepalive_timer, sse_response, KEEPALIVE_FRAME};
use crate::routes::openai::wire::OpenAiError;
use crate::routes::openai::{naming_session, SESSION_HEADER};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use bytes::Bytes;
use serde_json::Value;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::mpsc;
use turnkey_storage::{Admission, Seq, SessionId};

/// Frames buffered towards a slow client; beyond that the writer waits (the turn does not).
const STREAM_BUFFER: usize = 64;
/// How long a response that is neither streamed nor in the background may take beyond twice
/// `agent.turn_timeout_s` (a queue ahead of it, approvals) before it is answered as it is then
/// (`in_progress`; the client reads it again by id).
const WAIT_MARGIN: Duration = Duration::from_secs(60);
/// How long a cancel waits for the response to settle before answering as it is.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// The seq just before the admission's first event: where its replay starts.
async fn start_of(state: &AppState, admission: &Admission) -> Result<Seq, OpenAiError> {
    let first = state
        .gateway
        .store()
        .first_event_of_admission(admission.session_id, admission.id)
        .await
        .map_err(store)?;
    Ok(first.map_or(Seq(0), |s| Seq(s.0.saturating_sub(1))))
}

/// A follower of the response's session from the admission's first event, and the replay.
async fn follow(
    state: &web::Data<AppState>,
    admission: &Admission,
) -> Result<(EventFollower, Replay), OpenAiError> {
    let since = start_of(state, admission).await?;
    Ok((
        EventFollower::start(state.clone(), admission.session_id, since),
        Replay::new(base(admission), admission.id),
    ))
}

/// The next stream events; `None` once the response ended or the server stops.
async fn advance(
    state: &AppState,
    follower: &mut EventFollower,
    replay: &mut Replay,
) -> Option<Result<Vec<Value>, OpenAiError>> {
    if replay.ended() {
        return None;
    }
    let batch = follower.next().await?;
    let mut out = Vec::new();
    for ev in &batch {
        match replay.take(ev, state.gateway.store()).await {
            Ok(events) => out.extend(events),
            Err(e) => return Some(Err(store(e))),
        }
        if replay.ended() {
            break;
        }
    }
    Some(Ok(out))
}

/// Replays what is stored: every event committed so far.
pub(super) async fn stored(
    state: &web::Data<AppState>,
    admission: &Admission,
) -> Result<Replay, OpenAiError> {
    let mut replay = Replay::new(base(admission), admission.id);
    let store_ = state.gateway.store();
    let mut since = start_of(state, admission).await?;
    loop {
        let page = store_
            .events_since(admission.session_id, since, crate::follow::PAGE)
            .await
            .map_err(store)?;
        let Some(last) = page.last() else { break };
        since = last.seq;
        for ev in &page {
            replay.take(ev, store_).await.map_err(store)?;
            if replay.ended() {
                return Ok(replay);
            }
        }
    }
    Ok(replay)
}

fn object(replay: &Replay, sid: SessionId) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((SESSION_HEADER, sid.to_string()))
        .json(&replay.object)
}

/// The response as its stored events make it now.
pub(super) async fn now(
    state: &web::Data<AppState>,
    admission: &Admission,
    sid: SessionId,
) -> Result<HttpResponse, OpenAiError> {
    Ok(object(&stored(state, admission).await?, sid))
}

/// Follows the response to its end, at most `limit`; then answers it as it is.
async fn until_end(
    state: &web::Data<AppState>,
    admission: &Admission,
    limit: Duration,
) -> Result<Replay, OpenAiError> {
    let (mut follower, mut replay) = follow(state, admission).await?;
    let run = async {
        while let Some(step) = advance(state, &mut follower, &mut replay).await {
            step?;
        }
        Ok::<(), OpenAiError>(())
    };
    if let Ok(done) = tokio::time::timeout(limit, run).await {
        done?;
    }
    Ok(replay)
}

/// The response once its turn ended (or as it is after twice `agent.turn_timeout_s` and a
/// margin: `in_progress`, to be read again by id).
pub(super) async fn when_ended(
    state: &web::Data<AppState>,
    admission: &Admission,
    sid: SessionId,
) -> Result<HttpResponse, OpenAiError> {
    let limit = Duration::from_secs(
        state
            .gateway
            .config()
            .agent
            .turn_timeout_s
            .saturating_mul(2),
    ) + WAIT_MARGIN;
    let replay = until_end(state, admission, limit).await?;
    if !replay.ended() && state.shutting_down() {
        return Err(stopping());
    }
    Ok(object(&replay, sid))
}

/// The response after a cancel: settled, or as it is after [`CANCEL_WAIT`].
pub(super) async fn settled(
    state: &web::Data<AppState>,
    admission: &Admission,
) -> Result<HttpResponse, OpenAiError> {
    let replay = until_end(state, admission, CANCEL_WAIT).await?;
    Ok(object(&replay, admission.session_id))
}

fn stopping() -> OpenAiError {
    let mut e = OpenAiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "shutting_down",
        "the server is stopping; the response goes on: read it by id",
    );
    e.admitted = true;
    e.retry_after = Some(5);
    e
}

/// The response's events as server-sent events after `starting_after`, then as they come,
/// until it ends.
pub(super) fn streamed(
    state: &web::Data<AppState>,
    admission: &Admission,
    starting_after: Option<u64>,
    sid: SessionId,
) -> Result<HttpResponse, OpenAiError> {
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    actix_web::rt::spawn(write(state.clone(), admission.clone(), starting_after, tx));
    naming_session(sse_response(rx), sid)
}

/// One event as an SSE frame: `event: <type>` and its JSON.
fn frame(ev: &Value) -> Bytes {
    let kind = ev["type"].as_str().unwrap_or("message");
    Bytes::from(format!("event: {kind}\ndata: {ev}\n\n"))
}

async fn write(
    state: web::Data<AppState>,
    admission: Admission,
    starting_after: Option<u64>,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
) {
    let _open = state.metrics.open_event_stream();
    let send = |b: Bytes| {
        let tx = tx.clone();
        async move { tx.send(Ok(b)).await.is_ok() }
    };
    let (mut follower, mut replay) = match follow(&state, &admission).await {
        Ok(f) => f,
        Err(e) => {
            send(e.frame()).await;
            return;
        }
    };
    let mut keepalive = keepalive_timer(state.keepalive);
    loop {
        let step = tokio::select! {
            () = tx.closed() => return,
            step = advance(&state, &mut follower, &mut replay) => step,
            _ = keepalive.tick() => {
                if !send(Bytes::from_static(KEEPALIVE_FRAME)).await {
                    return;
                }
                continue;
            }
        };
        keepalive.reset();
        match step {
            Some(Ok(events)) => {
                for ev in &events {
                    let seq = ev["sequence_number"].as_u64().unwrap_or(0);
                    if starting_after.is_some_and(|after| seq <= after) {
                        continue;
                    }
                    if !send(frame(ev)).await {
                        return;
                    }
                }
            }
            Some(Err(e)) => {
                send(e.frame()).await;
                return;
            }
            None if replay.ended() => return,
            None => {
                send(stopping().frame()).await;
                return;
            }
        }
    }
}
