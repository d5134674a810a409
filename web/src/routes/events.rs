//! A session's event log: `GET /v1/sessions/{id}/events?since=SEQ` as a JSON page, or as a
//! gap-free, duplicate-free SSE stream (`Accept: text/event-stream`, honours `Last-Event-ID`).
use super::id::Id;
use crate::auth::{still_live, AuthPrincipal, Grant};
use crate::error::{ApiError, ErrorBody};
use crate::follow::{EventFollower, PAGE};
use crate::openapi::mirrors::EventSchema;
use crate::state::AppState;
use actix_web::get;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{interval_at, Instant, Interval, MissedTickBehavior};
use tokio_stream::wrappers::ReceiverStream;
use turnkey_actors::SharedEvent;
use turnkey_storage::{Event, Seq, SessionId};
use utoipa::{IntoParams, ToSchema};

const DEFAULT_PAGE: u64 = PAGE;
const MAX_PAGE: u64 = 1000;
/// Frames buffered towards a slow client; beyond that the pump waits (back-pressure), and the
/// hub's receiver may lag, which is repaired from the store.
const STREAM_BUFFER: usize = 64;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// The events after this seq (default 0). On a stream, `Last-Event-ID` wins.
    #[param(minimum = 0)]
    pub since: Option<i64>,
    /// JSON pages only: default 500, at most 1000 (more is read as 1000).
    #[param(minimum = 1)]
    pub limit: Option<u64>,
}

/// One JSON page of a session's events.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventsPage {
    /// In seq order, without gaps.
    #[schema(value_type = Vec<EventSchema>)]
    pub events: Vec<Event>,
    /// The `since` to ask for next: the last event's seq, else the `since` asked for.
    #[schema(value_type = i64)]
    pub next_since: Seq,
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

/// The session's event log after `since`: a JSON page, or with `Accept: text/event-stream` a
/// live SSE stream (`id: SEQ`, `event: KIND`, `data: EVENT`; `: keepalive` comments while
/// idle) that has no gaps and no repeats, also across reconnects with `Last-Event-ID`.
#[utoipa::path(
    operation_id = "list_events",
    tag = "events",
    params(
        ("id" = uuid::Uuid, Path, description = "The session's id (any id of a rotated lineage)"),
        EventsQuery,
        ("Last-Event-ID" = Option<i64>, Header, description = "SSE only: resume after this seq (wins over `since`)"),
        ("Accept" = Option<String>, Header, description = "`text/event-stream` for the live stream"),
    ),
    responses(
        (status = 200, description = "A page of events (JSON), or the SSE stream of every event after the cursor, then the new ones live; frames carry the event as `data`", content(
            (EventsPage = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 400, description = "`invalid_id`, `invalid_query`, `invalid_last_event_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session, or someone else's", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/sessions/{id}/events")]
pub async fn events(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    req: HttpRequest,
    path: web::Path<Id<SessionId>>,
    query: web::Query<EventsQuery>,
) -> Result<HttpResponse, ApiError> {
    let session = path.into_inner().into_inner();
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
        return Ok(stream(state, session, cursor, who.1));
    }
    let (events, next_since) = page(&state, session, since, query.limit).await?;
    Ok(HttpResponse::Ok().json(EventsPage { events, next_since }))
}

/// One JSON page of a session's events after `since` (the caller has authorized the session):
/// the events and the `next_since` to ask for next. `limit` defaults to 500, at most 1000.
pub async fn page(
    state: &AppState,
    session: SessionId,
    since: Seq,
    limit: Option<u64>,
) -> Result<(Vec<Event>, Seq), ApiError> {
    let limit = limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 {
        return Err(ApiError::bad_request(
            "invalid_query",
            "limit must be at least 1",
        ));
    }
    let page = state
        .gateway
        .store()
        .events_since(session, since, limit.min(MAX_PAGE))
        .await?;
    let next_since = page.last().map_or(since, |e| e.seq);
    Ok((page, next_since))
}

fn stream(
    state: web::Data<AppState>,
    session: SessionId,
    cursor: Seq,
    grant: Grant,
) -> HttpResponse {
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let follower = EventFollower::start(state.clone(), session, cursor);
    actix_web::rt::spawn(pump(state, follower, tx, grant));
    sse_response(rx)
}

/// A `text/event-stream` answer streaming what `rx` receives, unbuffered by proxies.
pub fn sse_response(rx: mpsc::Receiver<Result<Bytes, Infallible>>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(ReceiverStream::new(rx))
}

/// One SSE frame: `id: SEQ`, `event: KIND`, `data: JSON` (JSON has no raw newlines). The JSON
/// is the event's shared one: written once for every stream that sends the event.
pub fn frame(ev: &SharedEvent) -> Bytes {
    let (kind, json) = (ev.kind.as_str(), ev.json());
    Bytes::from(format!("id: {}\nevent: {kind}\ndata: {json}\n\n", ev.seq))
}

/// The comment an idle stream gets every `server.sse_keepalive_s`.
pub const KEEPALIVE_FRAME: &[u8] = b": keepalive\n\n";

/// A keep-alive timer whose first tick is one interval from now.
pub fn keepalive_timer(every: Duration) -> Interval {
    let mut t = interval_at(Instant::now() + every, every);
    t.set_missed_tick_behavior(MissedTickBehavior::Delay);
    t
}

/// Writes the follower's events as frames until the client goes, the server stops or the
/// token is revoked (told at once in this process; asked of the store at each keep-alive, for
/// another replica's revocation and for expiry); an idle stream gets a keep-alive comment,
/// which is also how a vanished client is noticed (actix-web drops a pending streaming body
/// only when a write fails, actix/actix-web#1313).
async fn pump(
    state: web::Data<AppState>,
    mut follower: EventFollower,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    grant: Grant,
) {
    use tokio::sync::broadcast::error::RecvError;
    let _open = state.metrics.open_event_stream();
    let mut keepalive = keepalive_timer(state.keepalive);
    let mut recheck = keepalive_timer(state.keepalive);
    let mut revoked = state.tokens.subscribe();
    loop {
        tokio::select! {
            () = tx.closed() => return,
            id = revoked.recv(), if grant.token_id.is_some() => match id {
                Ok(id) if grant.token_id.as_deref() == Some(id.as_str()) => return,
                Err(RecvError::Lagged(_)) if !still_live(&state, &grant).await => return,
                _ => {}
            },
            batch = follower.next() => {
                let Some(batch) = batch else { return };
                for ev in &batch {
                    if tx.send(Ok(frame(ev))).await.is_err() {
                        return;
                    }
                }
                keepalive.reset();
            }
            // Not reset by events: a busy stream is checked as often as an idle one.
            _ = recheck.tick(), if grant.token_id.is_some() => {
                if !still_live(&state, &grant).await {
                    return;
                }
            }
            _ = keepalive.tick() => {
                if tx.send(Ok(Bytes::from_static(KEEPALIVE_FRAME))).await.is_err() {
                    return;
                }
            }
        }
    }
}
