//! Delivery: `DeliveryActor` commits turn events with group commit (every event waiting while
//! a commit runs goes into the next transaction), then `EventHub` fans them out to live
//! subscribers. An event is shown to anyone only after it is committed.
//!
//! A `SharedEvent` is an `Arc` of the committed event and its JSON, written on first use, so every
//! subscriber shares one copy and every SSE frame and WebSocket notification one serialization.
//! Readers always read from the store by seq; the hub only wakes them, so a lagging subscriber,
//! another process on the same database and a reconnect take the same gap-free path. Text deltas
//! are coalesced per turn (`agent.delta_flush_ms`); the last one of a final answer commits with the
//! turn's end instead of through this actor.
use crate::stages::{timed, Stage, TURNS};
use actix::prelude::*;
use dashmap::DashMap;
use std::sync::{Arc, OnceLock};
use tokio::sync::{broadcast, oneshot};
use turnkey_storage::{Event, Fence, NewEvent, SessionId, Store, StoreError};

/// Slots of a session's live channel. tokio's broadcast allocates them up front and keeps the
/// last this many events in them, per session with a subscriber, so the ring is paid by every
/// followed session (1,024 before; the 1,000-session bench's RSS fell from 344 to 220 MiB with
/// this and the same day's other changes). A follower that falls further behind re-reads the
/// store (`RecvError::Lagged`), so a small ring costs only the rare re-read.
const SESSION_SLOTS: usize = 128;

/// A committed event as subscribers get it: one allocation that every subscriber shares (a
/// broadcast channel clones its value for each receiver, and an `Event` carries a JSON tree and
/// several strings), and its JSON written at most once however many streams send it.
#[derive(Clone, Debug)]
pub struct SharedEvent(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    event: Event,
    json: OnceLock<Box<str>>,
}

impl SharedEvent {
    pub fn new(event: Event) -> Self {
        Self(Arc::new(Shared {
            event,
            json: OnceLock::new(),
        }))
    }

    /// The event as JSON (as `serde_json` writes an `Event`), serialized on the first call.
    pub fn json(&self) -> &str {
        self.0.json.get_or_init(|| {
            serde_json::to_string(&self.0.event)
                .unwrap_or_else(|_| "{}".into())
                .into_boxed_str()
        })
    }
}

impl std::ops::Deref for SharedEvent {
    type Target = Event;
    fn deref(&self) -> &Event {
        &self.0.event
    }
}

/// Live subscribers per session. A subscriber that lags is told so by the channel and must
/// re-read from the store, which stays the source of truth.
#[derive(Clone)]
pub struct EventHub {
    channels: Arc<DashMap<SessionId, broadcast::Sender<SharedEvent>>>,
    /// Every session's events, for followers of all turns (streamed platform drafts).
    all: broadcast::Sender<SharedEvent>,
}

impl Default for EventHub {
    fn default() -> Self {
        Self {
            channels: Arc::default(),
            all: broadcast::channel(4096).0,
        }
    }
}

impl EventHub {
    /// Every committed event of every session, live (nothing from before the call).
    pub fn subscribe_all(&self) -> broadcast::Receiver<SharedEvent> {
        self.all.subscribe()
    }

    pub fn subscribe(&self, session: SessionId) -> broadcast::Receiver<SharedEvent> {
        self.channels
            .entry(session)
            .or_insert_with(|| broadcast::channel(SESSION_SLOTS).0)
            .subscribe()
    }

    /// Fans out one committed event.
    pub fn publish(&self, event: Event) {
        let event = SharedEvent::new(event);
        if self.all.receiver_count() > 0 {
            // A receiver dropped meanwhile is no one to tell.
            let _ = self.all.send(event.clone());
        }
        let session = event.session_id;
        let nobody_listens = match self.channels.get(&session) {
            Some(tx) => tx.send(event).is_err(),
            None => false,
        };
        if nobody_listens {
            self.channels
                .remove_if(&session, |_, tx| tx.receiver_count() == 0);
        }
    }
}

/// Commit one event of a running turn (fenced) and fan it out; answers with the committed event.
#[derive(Message)]
#[rtype(result = "Result<Event, StoreError>")]
pub struct Publish {
    pub fence: Option<Fence>,
    pub event: NewEvent,
}

type Waiter = oneshot::Sender<Result<Event, StoreError>>;

pub struct DeliveryActor {
    store: Store,
    hub: EventHub,
    pending: Vec<(Option<Fence>, NewEvent, Waiter)>,
    flushing: bool,
}

impl DeliveryActor {
    pub fn new(store: Store, hub: EventHub) -> Self {
        Self {
            store,
            hub,
            pending: Vec::new(),
            flushing: false,
        }
    }

    fn flush(&mut self, ctx: &mut Context<Self>) {
        if self.flushing || self.pending.is_empty() {
            return;
        }
        self.flushing = true;
        let batch = std::mem::take(&mut self.pending);
        let (items, waiters): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|(f, e, w)| ((f, e), w)).unzip();
        let store = self.store.clone();
        TURNS.delivery_batch.observe(items.len() as f64);
        let fut = async move {
            let res = timed(Stage::Delivery, store.append_events(&items)).await;
            (res, waiters)
        };
        ctx.spawn(fut.into_actor(self).map(|(res, waiters), act, ctx| {
            match res {
                Ok(results) => {
                    for (r, w) in results.into_iter().zip(waiters) {
                        if let Ok(ev) = &r {
                            act.hub.publish(ev.clone());
                        }
                        // A turn that stopped waiting no longer needs the answer.
                        let _ = w.send(r);
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    for w in waiters {
                        let _ = w.send(Err(StoreError::Unavailable(format!(
                            "event commit failed: {msg}"
                        ))));
                    }
                }
            }
            act.flushing = false;
            act.flush(ctx);
        }));
    }
}

impl Actor for DeliveryActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Turns of many sessions publish here at once. A full mailbox makes `send` wait (back-
        // pressure); it never drops an event.
        ctx.set_mailbox_capacity(4096);
    }
}

impl Handler<Publish> for DeliveryActor {
    type Result = ResponseFuture<Result<Event, StoreError>>;

    fn handle(&mut self, msg: Publish, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.pending.push((msg.fence, msg.event, tx));
        self.flush(ctx);
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| Err(StoreError::Unavailable("delivery actor stopped".into())))
        })
    }
}
