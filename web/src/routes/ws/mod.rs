//! `GET /v1/ws`: JSON-RPC 2.0 over a WebSocket (API.md "WebSocket JSON-RPC").
//!
//! The first message must be `auth {token}`; anything else first, a wrong token, or no auth
//! within [`AUTH_TIMEOUT`] is answered with an error and the socket is closed. Then the
//! methods of `methods.rs` run one at a time in arrival order.
//!
//! A subscription is an [`EventFollower`] task per session: events come gap-free in seq order
//! (the stored ones after `since`, then live), each as an `event` notification. The tasks hand
//! events to this connection through one bounded queue; a client too slow to drain it is not
//! waited for (nothing in the gateway waits on a client anyway: followers read the store), the
//! socket is closed with a reason naming the seq to resume after. Pings go out every
//! `server.sse_keepalive_s`; a client silent for [`MISSED_PINGS`] intervals is dropped.
mod methods;
mod rpc;

use crate::auth::authenticate;
use crate::error::{ApiError, ErrorBody};
use crate::follow::EventFollower;
use crate::state::AppState;
use actix_web::get;
use actix_web::{web, HttpRequest, HttpResponse};
use actix_ws::{AggregatedMessage, CloseCode, CloseReason};
use rpc::{RpcError, APPLICATION_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use turnkey_actors::SharedEvent;
use turnkey_storage::{Principal, Seq, SessionId};

/// How long a new connection may take to authenticate.
const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// Events queued towards the socket, over all of a connection's subscriptions.
const EVENT_QUEUE: usize = 256;
/// Subscriptions one connection may hold.
const MAX_SUBSCRIPTIONS: usize = 64;
/// A subscription whose queue stays full this long has a client that does not keep up.
const SLOW_CLIENT: Duration = Duration::from_secs(5);
/// One write to the socket may wait this long for the client to take data.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Keep-alive intervals without any frame from the client before it is dropped.
const MISSED_PINGS: u32 = 3;

/// Upgrades to a WebSocket that speaks JSON-RPC 2.0 in text frames (API.md "WebSocket
/// JSON-RPC"). No bearer header: the first message must be `auth {token}`.
#[utoipa::path(
    operation_id = "websocket",
    tag = "websocket",
    params(
        ("Upgrade" = String, Header, description = "`websocket`"),
        ("Connection" = String, Header, description = "`Upgrade`"),
        ("Sec-WebSocket-Key" = String, Header, description = "The client's handshake key"),
        ("Sec-WebSocket-Version" = String, Header, description = "`13`"),
    ),
    responses(
        (status = 101, description = "Switching Protocols: the WebSocket is open; JSON-RPC 2.0 text frames follow"),
        (status = 400, description = "`websocket_required`: not a WebSocket upgrade", body = ErrorBody),
    ),
)]
#[get("/v1/ws")]
pub async fn connect(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (res, session, stream) = actix_ws::handle(&req, body).map_err(|e| {
        ApiError::bad_request(
            "websocket_required",
            format!("GET /v1/ws needs a WebSocket upgrade: {e}"),
        )
    })?;
    let limit = state.max_body_bytes;
    let stream = stream
        .max_frame_size(limit)
        .aggregate_continuations()
        .max_continuation_size(limit);
    actix_web::rt::spawn(Connection::new(state.into_inner(), session).serve(stream));
    Ok(res)
}

/// The methods that write: refused (`read_only`) to a read-only token.
const WRITE_METHODS: &[&str] = &[
    "session.create",
    "prompt.submit",
    "approval.respond",
    "turn.interrupt",
];

/// Why the connection closes.
struct Close(CloseCode, String);

struct Connection {
    state: std::sync::Arc<AppState>,
    ws: actix_ws::Session,
    who: Option<Principal>,
    /// What the authenticating token grants (read-only, expiry).
    grant: crate::auth::Grant,
    /// API tokens revoked in this process: the connection of a revoked one closes.
    revoked: tokio::sync::broadcast::Receiver<String>,
    subscriptions: HashMap<SessionId, JoinHandle<()>>,
    /// The last seq written per subscribed session (where a client resumes).
    delivered: HashMap<SessionId, Seq>,
    feed_tx: mpsc::Sender<SharedEvent>,
    feed_rx: mpsc::Receiver<SharedEvent>,
    /// A subscription whose queue stayed full: the connection closes. Apart from the event
    /// queue, so that the close does not wait behind the events the client is not taking.
    overflow_tx: mpsc::Sender<SessionId>,
    overflow_rx: mpsc::Receiver<SessionId>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        for (_, task) in self.subscriptions.drain() {
            task.abort();
        }
    }
}

impl Connection {
    fn new(state: std::sync::Arc<AppState>, ws: actix_ws::Session) -> Self {
        let (feed_tx, feed_rx) = mpsc::channel(EVENT_QUEUE);
        // Each subscription reports at most one overflow, and there are at most this many.
        let (overflow_tx, overflow_rx) = mpsc::channel(MAX_SUBSCRIPTIONS);
        let revoked = state.tokens.subscribe();
        Self {
            state,
            ws,
            who: None,
            grant: crate::auth::Grant::default(),
            revoked,
            subscriptions: HashMap::new(),
            delivered: HashMap::new(),
            feed_tx,
            feed_rx,
            overflow_tx,
            overflow_rx,
        }
    }

    async fn serve(mut self, mut stream: actix_ws::AggregatedMessageStream) {
        let _open = self.state.metrics.open_event_stream();
        let mut shutdown: watch::Receiver<bool> = self.state.shutdown_signal();
        let every = self.state.keepalive;
        let mut ping = crate::routes::events::keepalive_timer(every);
        let auth_deadline = tokio::time::sleep(AUTH_TIMEOUT);
        tokio::pin!(auth_deadline);
        let mut last_seen = Instant::now();
        let close = loop {
            let step = tokio::select! {
                msg = stream.recv() => {
                    last_seen = Instant::now();
                    match msg {
                        None => break None,
                        Some(Err(e)) => break Some(Close(CloseCode::Protocol, format!("protocol error: {e}"))),
                        Some(Ok(m)) => self.on_message(m).await,
                    }
                }
                Some(ev) = self.feed_rx.recv() => self.on_event(ev).await,
                Some(session) = self.overflow_rx.recv() => {
                    let last = self.delivered.get(&session).copied().unwrap_or(Seq(0));
                    Err(Some(Close(
                        CloseCode::Again,
                        format!("too slow: resume session {session} since={last}"),
                    )))
                }
                _ = ping.tick() => {
                    if last_seen.elapsed() > every * MISSED_PINGS {
                        Err(Some(Close(CloseCode::Away, "no answer to pings".into())))
                    } else if self.who.is_some() && !crate::auth::still_live(&self.state, &self.grant).await {
                        // Revoked on another replica, or expired.
                        Err(Some(Close(CloseCode::Policy, "the token was revoked or has expired".into())))
                    } else {
                        self.write_ping().await
                    }
                }
                revoked = self.revoked.recv() => match revoked {
                    Ok(id) if self.grant.token_id.as_deref() == Some(id.as_str()) => {
                        Err(Some(Close(CloseCode::Policy, "the token was revoked".into())))
                    }
                    Ok(_) => Ok(()),
                    // Missed some: ask the store.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        if self.who.is_some() && !crate::auth::still_live(&self.state, &self.grant).await {
                            Err(Some(Close(CloseCode::Policy, "the token was revoked".into())))
                        } else {
                            Ok(())
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => Ok(()),
                },
                () = &mut auth_deadline, if self.who.is_none() => {
                    Err(Some(Close(CloseCode::Policy, "authenticate first: auth {token}".into())))
                }
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        Err(Some(Close(CloseCode::Restart, "the server is stopping".into())))
                    } else {
                        Ok(())
                    }
                }
            };
            if let Err(close) = step {
                break close;
            }
        };
        for (_, task) in self.subscriptions.drain() {
            task.abort();
        }
        if let Some(Close(code, description)) = close {
            tracing::debug!(?code, %description, "closing websocket");
            let reason = CloseReason {
                code,
                description: Some(description),
            };
            // The client may be gone or stuck already; closing is best effort within a bound.
            if tokio::time::timeout(WRITE_TIMEOUT, self.ws.clone().close(Some(reason)))
                .await
                .is_err()
            {
                tracing::debug!("websocket close frame not taken in time");
            }
        }
    }

    /// `Err` ends the connection, with a close frame when `Some`.
    async fn on_message(&mut self, msg: AggregatedMessage) -> Result<(), Option<Close>> {
        match msg {
            AggregatedMessage::Text(text) => self.on_text(&text).await,
            AggregatedMessage::Binary(_) => {
                let e = RpcError::new(
                    INVALID_REQUEST,
                    "binary frames are not accepted; send JSON-RPC as text",
                    "invalid_request",
                );
                self.write(rpc::error(Value::Null, &e)).await
            }
            AggregatedMessage::Ping(bytes) => {
                match tokio::time::timeout(WRITE_TIMEOUT, self.ws.pong(&bytes)).await {
                    Ok(Ok(())) => Ok(()),
                    _ => Err(None),
                }
            }
            AggregatedMessage::Pong(_) => Ok(()),
            AggregatedMessage::Close(reason) => {
                tracing::debug!(?reason, "websocket closed by the client");
                Err(Some(Close(CloseCode::Normal, "bye".into())))
            }
        }
    }

    async fn on_text(&mut self, text: &str) -> Result<(), Option<Close>> {
        let req = match rpc::parse(text) {
            Ok(r) => r,
            Err((id, e)) => {
                self.write(rpc::error(id, &e)).await?;
                return if self.who.is_none() {
                    Err(Some(Close(CloseCode::Policy, "authenticate first".into())))
                } else {
                    Ok(())
                };
            }
        };
        let answer_id = req.id.clone().unwrap_or(Value::Null);
        let Some(who) = self.who.clone() else {
            return self.authenticate(req, answer_id).await;
        };
        let outcome = self.dispatch(&who, req.method.as_str(), req.params).await;
        if req.id.is_none() {
            return Ok(()); // a notification gets no answer, not even an error
        }
        match outcome {
            Ok(result) => self.write(rpc::result(answer_id, result)).await,
            Err(e) => self.write(rpc::error(answer_id, &e)).await,
        }
    }

    /// The first message: `auth {token}`. Anything else, or a wrong token, closes.
    async fn authenticate(&mut self, req: rpc::Request, id: Value) -> Result<(), Option<Close>> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct AuthParams {
            token: String,
        }
        if req.method != "auth" {
            let e = RpcError::from(ApiError::unauthorized(
                "authenticate first: the first message must be auth {token}",
            ));
            self.write(rpc::error(id, &e)).await?;
            return Err(Some(Close(CloseCode::Policy, "authenticate first".into())));
        }
        let principal = match rpc::params::<AuthParams>("auth", req.params) {
            Ok(p) => authenticate(&self.state, p.token.trim())
                .await
                .map_err(RpcError::from),
            Err(e) => Err(e),
        };
        match principal {
            Ok((p, grant)) => {
                let result = json!({
                    "principal_id": p.id,
                    "operator": crate::auth::is_operator(&p),
                    "read_only": grant.read_only,
                });
                self.who = Some(p);
                self.grant = grant;
                self.write(rpc::result(id, result)).await
            }
            Err(e) => {
                self.write(rpc::error(id, &e)).await?;
                Err(Some(Close(
                    CloseCode::Policy,
                    "authentication failed".into(),
                )))
            }
        }
    }

    async fn dispatch(
        &mut self,
        who: &Principal,
        method: &str,
        params: serde_json::Map<String, Value>,
    ) -> Result<Value, RpcError> {
        let state = self.state.clone();
        if self.grant.read_only && WRITE_METHODS.contains(&method) {
            return Err(RpcError::from(crate::auth::read_only_refusal()));
        }
        match method {
            "auth" => Err(RpcError::new(
                INVALID_REQUEST,
                "this connection is already authenticated",
                "already_authenticated",
            )),
            "session.create" => methods::session_create(&state, who, params).await,
            "prompt.submit" => methods::prompt_submit(&state, who, params).await,
            "session.subscribe" => {
                let (session, since) = methods::subscription_start(&state, who, params).await?;
                self.subscribe(session, since)?;
                Ok(json!({ "session_id": session, "since": since }))
            }
            "session.unsubscribe" => {
                let session = methods::unsubscribe_target(params)?;
                let was = self.subscriptions.remove(&session);
                let unsubscribed = was.is_some();
                if let Some(task) = was {
                    task.abort();
                }
                self.delivered.remove(&session);
                Ok(json!({ "unsubscribed": unsubscribed }))
            }
            "session.events.since" => methods::events_since(&state, who, params).await,
            "session.resume" => methods::session_resume(&state, who, params).await,
            "approval.respond" => methods::approval_respond(&state, who, params).await,
            "turn.interrupt" => methods::turn_interrupt(&state, who, params).await,
            other => Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!(
                    "no method {:?}; the methods are session.create, prompt.submit, \
                     session.subscribe, session.unsubscribe, session.events.since, \
                     session.resume, approval.respond, turn.interrupt",
                    crate::error::truncated(other, 64)
                ),
                "method_not_found",
            )),
        }
    }

    /// Starts (or restarts, from the new `since`) the subscription to `session`.
    fn subscribe(&mut self, session: SessionId, since: Seq) -> Result<(), RpcError> {
        if let Some(old) = self.subscriptions.remove(&session) {
            old.abort();
        } else if self.subscriptions.len() >= MAX_SUBSCRIPTIONS {
            return Err(RpcError::new(
                APPLICATION_ERROR,
                format!("at most {MAX_SUBSCRIPTIONS} subscriptions per connection"),
                "too_many_subscriptions",
            ));
        }
        let follower = EventFollower::start(web::Data::from(self.state.clone()), session, since);
        let task = actix_web::rt::spawn(follow(
            follower,
            self.feed_tx.clone(),
            self.overflow_tx.clone(),
        ));
        self.subscriptions.insert(session, task);
        self.delivered.insert(session, since);
        Ok(())
    }

    async fn on_event(&mut self, ev: SharedEvent) -> Result<(), Option<Close>> {
        let session = ev.session_id;
        // An event of a subscription replaced or ended meanwhile is not sent: the new one
        // starts from its own `since`.
        let Some(last) = self.delivered.get(&session).copied() else {
            return Ok(());
        };
        if ev.seq.0 <= last.0 {
            return Ok(());
        }
        self.write(rpc::notification_json("event", ev.json()))
            .await?;
        self.delivered.insert(session, ev.seq);
        Ok(())
    }

    async fn write(&mut self, text: String) -> Result<(), Option<Close>> {
        match tokio::time::timeout(WRITE_TIMEOUT, self.ws.text(text)).await {
            Ok(Ok(())) => Ok(()),
            // Closed: the client is gone. Timed out: it takes no data; it is dropped.
            _ => Err(None),
        }
    }

    async fn write_ping(&mut self) -> Result<(), Option<Close>> {
        match tokio::time::timeout(WRITE_TIMEOUT, self.ws.ping(b"turnkey")).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(None),
        }
    }
}

/// One subscription: hands the follower's events to the connection's queue. A replay burst
/// may fill the queue for a moment; a queue that stays full for [`SLOW_CLIENT`] means the
/// client does not keep up: the subscription ends and reports it on `overflow`, and the
/// connection closes naming the seq to resume after. Nothing else waits for the client.
async fn follow(
    mut follower: EventFollower,
    feed: mpsc::Sender<SharedEvent>,
    overflow: mpsc::Sender<SessionId>,
) {
    use mpsc::error::SendTimeoutError;
    while let Some(batch) = follower.next().await {
        for ev in batch {
            match feed.send_timeout(ev, SLOW_CLIENT).await {
                Ok(()) => {}
                Err(SendTimeoutError::Timeout(_)) => {
                    let session = follower.session();
                    tracing::info!(%session, "websocket subscriber too slow; closing it");
                    if overflow.try_send(session).is_err() {
                        tracing::debug!(%session, "websocket already closing");
                    }
                    return;
                }
                Err(SendTimeoutError::Closed(_)) => return,
            }
        }
    }
}
