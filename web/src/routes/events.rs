//! A session's event log: `GET /v1/sessions/{id}/events?since=SEQ` as a JSON page, or as a
//! gap-free, duplicate-free SSE stream (`Accept: text/event-stream`, honours `Last-Event-ID`).
use super::parse_id;
use crate::auth::AuthPrincipal;
use crate::error::ApiError;
use crate::startup::AppState;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio::time::{interval_at, Instant, MissedTickBehavior};
use tokio_stream::wrappers::ReceiverStream;
use turnkey_storage::{Event, Seq, SessionId};

const DEFAULT_PAGE: u64 = 500;
const MAX_PAGE: u64 = 1000;
/// How long a stream may go without news before it re-reads the store: another process on
/// the same database may be producing this session's events, and its broadcasts never reach us.
const IDLE_POLL: Duration = Duration::from_secs(1);
/// Also how a vanished client is noticed: actix-web drops a pending streaming body only when a
/// write fails (actix/actix-web#1313), so a dead stream lives at most about this long.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Frames buffered towards a slow client; beyond that the pump waits (back-pressure), and the
/// hub's receiver may lag, which is repaired from the store.
const STREAM_BUFFER: usize = 64;

#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    pub since: Option<i64>,
    pub limit: Option<u64>,
}

fn wants_sse(req: &HttpRequest) -> bool {
    req.headers()
        .get_all(header::ACCEPT)
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

fn last_event_id(req: &HttpRequest) -> Result<Option<Seq>, ApiError> {
    let Some(v) = req.headers().get("Last-Event-ID") else {
        return Ok(None);
    };
    let bad = || {
        ApiError::bad_request(
            "invalid_last_event_id",
            "Last-Event-ID must be an event seq",
        )
    };
    let raw = v.to_str().map_err(|_| bad())?.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    match raw.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(Some(Seq(n))),
        _ => Err(bad()),
    }
}

pub async fn events(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    req: HttpRequest,
    path: web::Path<String>,
    query: web::Query<EventsQuery>,
) -> Result<HttpResponse, ApiError> {
    let session: SessionId = parse_id(&path, "session")?;
    // Every id of a rotated lineage replays the lineage's one event log (SPEC R6.4).
    let session = state.gateway.authorize(&who.0, session).await?.lineage();
    let since = match query.since {
        Some(n) if n < 0 => {
            return Err(ApiError::bad_request(
                "invalid_query",
                "since must be 0 or more",
            ))
        }
        Some(n) => Seq(n),
        None => Seq(0),
    };
    if wants_sse(&req) {
        let cursor = last_event_id(&req)?.unwrap_or(since);
        return Ok(stream(state, session, cursor));
    }
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 {
        return Err(ApiError::bad_request(
            "invalid_query",
            "limit must be at least 1",
        ));
    }
    let events = state
        .gateway
        .store()
        .events_since(session, since, limit.min(MAX_PAGE))
        .await?;
    let next_since = events.last().map_or(since, |e| e.seq);
    Ok(HttpResponse::Ok().json(json!({ "events": events, "next_since": next_since })))
}

fn stream(state: web::Data<AppState>, session: SessionId, cursor: Seq) -> HttpResponse {
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    // Subscribe before the first read of the store, so that nothing committed in between is
    // missed: whatever the store read already returned is skipped by seq when it comes live.
    let live = state.gateway.hub().subscribe(session);
    actix_web::rt::spawn(pump(state, session, cursor, tx, live));
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(ReceiverStream::new(rx))
}

/// The client went away; the pump stops.
struct ClientGone;

/// Writes frames in seq order and remembers the last one written.
struct Cursor {
    state: web::Data<AppState>,
    session: SessionId,
    last: Seq,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
}

/// One SSE frame: `id: SEQ`, `event: KIND`, `data: JSON` (JSON has no raw newlines).
pub fn frame(ev: &Event) -> Bytes {
    let data = serde_json::to_string(ev).unwrap_or_else(|_| "{}".into());
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {data}\n\n",
        ev.seq,
        ev.kind.as_str()
    ))
}

impl Cursor {
    async fn write(&mut self, bytes: Bytes) -> Result<(), ClientGone> {
        self.tx.send(Ok(bytes)).await.map_err(|_| ClientGone)
    }

    async fn emit(&mut self, ev: &Event) -> Result<(), ClientGone> {
        self.write(frame(ev)).await?;
        self.last = ev.seq;
        Ok(())
    }

    /// Emits everything the store has after the cursor. A store error is logged and left for
    /// the next poll: the cursor has not moved, so nothing is skipped.
    async fn catch_up(&mut self) -> Result<(), ClientGone> {
        loop {
            let page = match self
                .state
                .gateway
                .store()
                .events_since(self.session, self.last, DEFAULT_PAGE)
                .await
            {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(session = %self.session, error = %e, "event stream read failed");
                    return Ok(());
                }
            };
            let full = page.len() as u64 == DEFAULT_PAGE;
            for ev in &page {
                self.emit(ev).await?;
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// Takes one live event: the next seq is emitted as is, an old one is skipped, a jump
    /// ahead means something was missed, so the store fills the gap.
    async fn live(&mut self, ev: Event) -> Result<(), ClientGone> {
        if ev.seq.0 <= self.last.0 {
            Ok(())
        } else if ev.seq.0 == self.last.0 + 1 {
            self.emit(&ev).await
        } else {
            self.catch_up().await
        }
    }
}

async fn pump(
    state: web::Data<AppState>,
    session: SessionId,
    since: Seq,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    mut live: broadcast::Receiver<Event>,
) {
    let _open = state.metrics.open_event_stream();
    let mut shutdown = state.shutdown_signal();
    let gone = tx.clone();
    let mut cursor = Cursor {
        state: state.clone(),
        session,
        last: since,
        tx,
    };
    if *shutdown.borrow() || cursor.catch_up().await.is_err() {
        return;
    }
    let start = Instant::now();
    let mut poll = interval_at(start + IDLE_POLL, IDLE_POLL);
    poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut keepalive = interval_at(start + KEEPALIVE, KEEPALIVE);
    keepalive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_news = Instant::now();
    loop {
        let step = tokio::select! {
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    return;
                }
                Ok(())
            }
            () = gone.closed() => return,
            msg = live.recv() => {
                last_news = Instant::now();
                match msg {
                    Ok(ev) => cursor.live(ev).await,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(%session, missed, "event stream lagged; re-reading the store");
                        cursor.catch_up().await
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        live = state.gateway.hub().subscribe(session);
                        cursor.catch_up().await
                    }
                }
            }
            _ = poll.tick() => {
                if last_news.elapsed() >= IDLE_POLL {
                    last_news = Instant::now();
                    cursor.catch_up().await
                } else {
                    Ok(())
                }
            }
            _ = keepalive.tick() => cursor.write(Bytes::from_static(b": keepalive\n\n")).await,
        };
        if step.is_err() {
            return;
        }
    }
}
