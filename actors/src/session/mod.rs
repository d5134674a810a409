//! `SessionActor`: one per live session. It drains the session's admissions in seq order under
//! the durable lease, running each turn as a spawned future so that its mailbox stays open for
//! `Interrupt` and `Status` while the turn runs. When a drain ends with nothing queued, the
//! actor runs the post-delivery review if one is due (`crate::review`); the next `Drain`
//! cancels it first (SPEC R4.5).
pub mod registry;

use crate::deps::Deps;
use crate::lease::{self, AcquireError, Refresher};
use crate::stages::{seconds_since, timed, Stage, TURNS};
use crate::turn::run::Start;
use crate::turn::transcript::TranscriptCache;
use crate::turn::{self, StopReason, TurnControl};
use actix::prelude::*;
use registry::SessionRegistry;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use turnkey_storage::{Admission, Event, Fence, SessionId, StoreError, TurnId};

/// An actor with nothing queued and nothing running stops after this long.
const IDLE_STOP: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct SessionState {
    pub running: bool,
    pub queue_depth: u64,
}

/// What this process knows about a session locally.
#[derive(Clone, Copy, Debug)]
pub struct LocalStatus {
    pub running: bool,
    /// A drain is under way: waiting for the lease, running turns, or releasing the lease.
    pub draining: bool,
    pub turn_id: Option<TurnId>,
}

/// Drain the session's queue. `admitted`: sent right after an admission committed, so there
/// is work: the drain skips its first look at the queue and goes to the lease, whose commit
/// claims the head (or finds it taken, and lets the lease go).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drain {
    pub admitted: bool,
}

/// Stops the running turn, if any; answers whether one was running.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct Interrupt {
    pub reason: StopReason,
}

#[derive(Message)]
#[rtype(result = "LocalStatus")]
pub struct Status;

/// Another replica admitted input for the session: a review running here stops (SPEC R4.5),
/// whichever replica will run the turn.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelReview;

#[derive(Message)]
#[rtype(result = "()")]
struct TurnBegan {
    turn_id: TurnId,
    control: TurnControl,
}

#[derive(Message)]
#[rtype(result = "()")]
struct TurnEnded;

pub struct SessionActor {
    id: SessionId,
    deps: Arc<Deps>,
    registry: SessionRegistry,
    draining: bool,
    drain_again: bool,
    running: Option<(TurnId, TurnControl)>,
    idle_timer: Option<SpawnHandle>,
    /// The transcript as the last turn left it; the next turn reads only what came after.
    transcript: TranscriptCache,
    /// The running review's number and what cancels it.
    review: Option<(u64, CancellationToken)>,
    reviews_started: u64,
}

/// What a drain works for: the session's actor, and the transcript it keeps between turns.
struct Owner {
    addr: Addr<SessionActor>,
    transcript: TranscriptCache,
}

impl SessionActor {
    pub fn new(id: SessionId, deps: Arc<Deps>, registry: SessionRegistry) -> Self {
        Self {
            id,
            deps,
            registry,
            draining: false,
            drain_again: false,
            running: None,
            idle_timer: None,
            transcript: TranscriptCache::default(),
            review: None,
            reviews_started: 0,
        }
    }

    /// A new input pre-empts the review: its model call is dropped, it writes nothing.
    fn cancel_review(&mut self) {
        if let Some((_, token)) = self.review.take() {
            token.cancel();
        }
    }

    /// Runs a review of the session if one is due, without holding the session.
    fn start_review(&mut self, ctx: &mut Context<Self>) {
        self.cancel_review();
        self.reviews_started += 1;
        let number = self.reviews_started;
        let token = CancellationToken::new();
        self.review = Some((number, token.clone()));
        let fut = crate::review::run(self.deps.clone(), self.id, token);
        ctx.spawn(fut.into_actor(self).map(move |_, act, ctx| {
            if act.review.as_ref().is_some_and(|(n, _)| *n == number) {
                act.review = None;
                if !act.draining {
                    act.arm_idle_stop(ctx);
                }
            }
        }));
    }

    /// Stops the actor after [`IDLE_STOP`] with nothing running.
    fn arm_idle_stop(&mut self, ctx: &mut Context<Self>) {
        if let Some(t) = self.idle_timer.take() {
            ctx.cancel_future(t);
        }
        self.idle_timer = Some(ctx.run_later(IDLE_STOP, |act, ctx| {
            if !act.draining && act.review.is_none() {
                ctx.stop();
            }
        }));
    }

    fn start_drain(&mut self, ctx: &mut Context<Self>, admitted: bool) {
        if let Some(t) = self.idle_timer.take() {
            ctx.cancel_future(t);
        }
        self.draining = true;
        let owner = Owner {
            addr: ctx.address(),
            transcript: self.transcript.clone(),
        };
        let fut = drain(self.deps.clone(), self.id, owner, admitted);
        ctx.spawn(fut.into_actor(self).map(|_, act, ctx| {
            act.draining = false;
            act.running = None;
            if std::mem::take(&mut act.drain_again) {
                act.start_drain(ctx, false);
            } else {
                act.start_review(ctx);
                act.arm_idle_stop(ctx);
            }
        }));
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Self::Context) {
        self.registry.remove_if_stopped(self.id);
    }
}

impl Handler<Drain> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: Drain, ctx: &mut Context<Self>) {
        self.cancel_review();
        if self.draining {
            // The running drain may already have looked at the queue; look again after it.
            self.drain_again = true;
        } else {
            self.start_drain(ctx, msg.admitted);
        }
    }
}

impl Handler<Interrupt> for SessionActor {
    type Result = bool;
    fn handle(&mut self, msg: Interrupt, _: &mut Context<Self>) -> bool {
        match &self.running {
            Some((_, control)) => {
                control.interrupt(msg.reason);
                true
            }
            None => false,
        }
    }
}

impl Handler<CancelReview> for SessionActor {
    type Result = ();
    fn handle(&mut self, _: CancelReview, _: &mut Context<Self>) {
        self.cancel_review();
    }
}

impl Handler<Status> for SessionActor {
    type Result = MessageResult<Status>;
    fn handle(&mut self, _: Status, _: &mut Context<Self>) -> Self::Result {
        MessageResult(LocalStatus {
            running: self.running.is_some(),
            draining: self.draining,
            turn_id: self.running.as_ref().map(|(t, _)| *t),
        })
    }
}

impl Handler<TurnBegan> for SessionActor {
    type Result = ();
    fn handle(&mut self, msg: TurnBegan, _: &mut Context<Self>) {
        self.running = Some((msg.turn_id, msg.control));
    }
}

impl Handler<TurnEnded> for SessionActor {
    type Result = ();
    fn handle(&mut self, _: TurnEnded, _: &mut Context<Self>) {
        self.running = None;
    }
}

/// Drains `session`: while anything is queued (or a dead owner's turn waits to be resumed),
/// take the lease, settle what earlier holders left `started`, run queued admissions in seq
/// order (lease first, then claim, so that two processes cannot reorder one session's FIFO),
/// then release. Input that cannot run now stays queued; nothing here discards it.
async fn drain(deps: Arc<Deps>, session: SessionId, owner: Owner, admitted: bool) {
    // Just admitted: the lease's commit looks at the queue itself.
    let mut look = !admitted;
    loop {
        if look {
            match has_work(&deps, session).await {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    tracing::error!(%session, error = %e, "cannot read the queue; the sweeper retries");
                    return;
                }
            }
        }
        look = true;
        if deps.shutdown.is_cancelled() {
            return;
        }
        // Without coalescing, the commit that takes the lease claims the FIFO head too.
        let turn = (deps.config.agent.coalesce_ms == 0).then(TurnId::new);
        // The first turn of this drain waits for the lease: its span opens now, so that the
        // wait (and the claim that commits with the lease) shows as its `lease` phase.
        let first = turn_span(session);
        let acquire = lease::acquire(&deps, session, turn)
            .instrument(tracing::info_span!(parent: &first, "lease"));
        let (fence, claimed) = match timed(Stage::Lease, acquire).await {
            Ok(taken) => taken,
            Err(AcquireError::TimedOut) => {
                first.record("otel.status_code", "ERROR");
                tracing::warn!(%session, "lease wait timed out; input stays queued");
                return;
            }
            Err(AcquireError::Cancelled) => return,
            Err(AcquireError::Store(e)) => {
                first.record("otel.status_code", "ERROR");
                tracing::error!(%session, error = %e, "lease acquisition failed");
                return;
            }
        };
        let mut first = Some(first);
        let refresher = Refresher::spawn(deps.clone(), fence.clone());
        // Under the lease-first order, a `started` admission we find now belonged to a
        // previous holder: resume it if it stopped in its tool round, else it is unknown.
        let mut released = false;
        match (claimed, turn) {
            // Nothing was started: no orphans to settle.
            (Some(head), Some(turn)) => {
                let span = first.take().unwrap_or_else(|| turn_span(session));
                let how = Claim::Claimed(turn, head.events, Box::new(head.session));
                let next = run_one(&deps, &owner, &fence, &refresher, &head.admission, how, &[]);
                released = next.instrument(span).await == Next::Released;
            }
            _ => {
                for orphan in crate::lease::orphans(&deps, &fence).await {
                    if released {
                        break;
                    }
                    let span = first.take().unwrap_or_else(|| turn_span(session));
                    let how = Claim::Resume;
                    let next = run_one(&deps, &owner, &fence, &refresher, &orphan, how, &[]);
                    released = next.instrument(span).await == Next::Released;
                }
            }
        }
        loop {
            if released || deps.shutdown.is_cancelled() || refresher.lost.is_cancelled() {
                break;
            }
            let admission = match deps.store.next_queued(session).await {
                Ok(Some(a)) => a,
                Ok(None) => break,
                Err(e) => {
                    tracing::error!(%session, error = %e, "cannot read the queue");
                    break;
                }
            };
            let burst = burst(&deps, &admission).await;
            let span = first.take().unwrap_or_else(|| turn_span(session));
            let how = Claim::Fresh(TurnId::new());
            let next = run_one(&deps, &owner, &fence, &refresher, &admission, how, &burst);
            match next.instrument(span).await {
                Next::Go => {}
                Next::Stop => break,
                Next::Released => released = true,
            }
        }
        drop(refresher);
        if released {
            // The turn's end commit saw nothing queued and released in the same transaction.
            // Whatever was admitted after it sends its own `Drain` after its commit, which
            // finds this drain still running (`drain_again`) or finds none: either way it is
            // drained, so there is nothing to look at again here.
            return;
        }
        if let Err(e) = deps.store.release_lease(&fence).await {
            // It expires by TTL; nothing is lost, another drain only waits longer.
            tracing::warn!(%session, error = %e, "lease release failed");
        }
    }
}

/// How `run_one` comes by its turn.
enum Claim {
    /// Claim the queued admission as this turn.
    Fresh(TurnId),
    /// Already claimed as this turn, with the lease; these events announce it, and this is
    /// the session row as that commit left it.
    Claimed(
        TurnId,
        Vec<turnkey_storage::Event>,
        Box<turnkey_storage::Session>,
    ),
    /// Take over a resumable orphan: its turn id is on the admission.
    Resume,
}

/// What the drain does after a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Take the next queued admission.
    Go,
    /// Stop draining now (the claim failed); release the lease.
    Stop,
    /// The turn's end commit released the lease: nothing was queued then. The drain ends;
    /// an admission committed since sends its own `Drain`.
    Released,
}

/// The root span of one turn (exported as an OpenTelemetry trace when `[telemetry]` is on):
/// its phases (`lease`, `admission`, `context`, `preflight`, `request`, `tool_round`,
/// `finalize` with `delivery`) are its children. `run_one` fills in the turn's ids.
fn turn_span(session: SessionId) -> tracing::Span {
    tracing::info_span!(
        parent: None,
        "turn",
        session_id = %session,
        admission_id = tracing::field::Empty,
        turn_id = tracing::field::Empty,
        resumed = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Something to do: a queued admission, or a `started` one a dead owner left resumable.
async fn has_work(deps: &Deps, session: SessionId) -> Result<bool, StoreError> {
    if deps.store.next_queued(session).await?.is_some() {
        return Ok(true);
    }
    for a in deps.store.started_admissions(Some(session)).await? {
        if crate::lease::owner_is_gone(deps, &a).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// With `agent.coalesce_ms` set, the queued admissions after `head` that form one burst with
/// it (each admitted within that many ms of the one before), once the burst has settled: the
/// drain waits until the newest is that old, at most `MAX_COALESCE_WAITS` windows in all.
async fn burst(deps: &Deps, head: &Admission) -> Vec<Admission> {
    let window = i64::try_from(deps.config.agent.coalesce_ms).unwrap_or(i64::MAX);
    if window == 0 {
        return Vec::new();
    }
    let mut waits = 0;
    loop {
        let queued = match deps.store.queued_admissions(head.session_id).await {
            Ok(q) => q,
            Err(e) => {
                tracing::warn!(session = %head.session_id, error = %e, "cannot read the queue to coalesce");
                return Vec::new();
            }
        };
        let mut chain: Vec<Admission> = Vec::new();
        let mut last = head.created_at;
        for a in queued.into_iter().filter(|a| a.seq > head.seq) {
            if a.created_at - last > window {
                break;
            }
            last = a.created_at;
            chain.push(a);
        }
        let quiet = turnkey_storage::now_ms() - last;
        if quiet >= window || waits >= MAX_COALESCE_WAITS || deps.shutdown.is_cancelled() {
            return chain;
        }
        waits += 1;
        tokio::time::sleep(Duration::from_millis(
            u64::try_from(window - quiet).unwrap_or(0),
        ))
        .await;
    }
}

/// How many windows the drain waits at most for a burst to settle.
const MAX_COALESCE_WAITS: u32 = 10;

/// Settles the coalesced admissions as carried by `turn` of `head` and answers the admission
/// the turn runs: `head` with the texts of those it carries joined, newline separated. The
/// store commits both at once, so a crash leaves either nothing settled (they stay queued) or
/// `head`'s stored input holding every text: nothing is dropped.
async fn coalesce(
    deps: &Deps,
    fence: &Fence,
    head: &Admission,
    turn_id: TurnId,
    burst: &[Admission],
) -> Admission {
    let mut joined = head.clone();
    match deps.store.coalesce(fence, head, turn_id, burst).await {
        Ok((payload, events)) => {
            crate::kill_point!("coalesce.after_commit");
            events.into_iter().for_each(|e| deps.hub.publish(e));
            joined.payload = payload;
        }
        // Nothing settled: they stay queued and run as their own turns.
        Err(e) => tracing::warn!(admission = %head.id, error = %e, "inputs not coalesced"),
    }
    joined
}

/// `queued → started` as `turn_id`. The input is final unless a burst joins it: then the user
/// row waits for the joined text (`coalesce`), else it commits with the claim.
async fn claim(
    deps: &Deps,
    fence: &Fence,
    admission: &Admission,
    turn_id: TurnId,
    is_final: bool,
) -> Result<Vec<Event>, StoreError> {
    let owner = &deps.instance.owner;
    if is_final {
        let user = crate::input::user_row(admission, turn_id);
        deps.store
            .claim_with_user(fence, admission.id, owner, turn_id, &user)
            .await
    } else {
        deps.store.claim(fence, admission.id, owner, turn_id).await
    }
}

/// Runs one admission under the held lease: a queued one is claimed (or was, with the
/// lease), a resumable orphan is taken over. `burst` are queued admissions the claimed turn
/// carries too (`agent.coalesce_ms`). Answers what the drain does next.
async fn run_one(
    deps: &Arc<Deps>,
    owner: &Owner,
    fence: &Fence,
    refresher: &Refresher,
    admission: &Admission,
    how: Claim,
    burst: &[Admission],
) -> Next {
    let session = admission.session_id;
    let span = tracing::Span::current();
    span.record("admission_id", tracing::field::display(admission.id));
    let mut resumed = None;
    let (turn_id, start, claimed) = match how {
        Claim::Fresh(turn_id) => {
            TURNS
                .queue_wait
                .observe(seconds_since(admission.created_at));
            let claimed = claim(deps, fence, admission, turn_id, burst.is_empty())
                .instrument(tracing::info_span!("admission"));
            (
                turn_id,
                Start::Fresh(None),
                timed(Stage::Claim, claimed).await,
            )
        }
        Claim::Claimed(turn_id, events, session) => {
            TURNS
                .queue_wait
                .observe(seconds_since(admission.created_at));
            (turn_id, Start::Fresh(Some(session)), Ok(events))
        }
        Claim::Resume => {
            let Some(turn_id) = admission.turn_id else {
                return Next::Go;
            };
            let taken = deps
                .store
                .take_over(fence, admission.id, &deps.instance.owner)
                .instrument(tracing::info_span!("admission"))
                .await
                .map(|(now, events)| {
                    // The attempt counted up: the turn's end records it.
                    resumed = Some(now);
                    events
                });
            (turn_id, Start::Resume, taken)
        }
    };
    let control = TurnControl::new(refresher.lost.clone());
    match claimed {
        Ok(events) => events.into_iter().for_each(|e| deps.hub.publish(e)),
        Err(StoreError::WrongState(_)) => return Next::Go,
        Err(e) => {
            span.record("otel.status_code", "ERROR");
            tracing::error!(%session, error = %e, "claim failed");
            return Next::Stop;
        }
    }
    span.record("turn_id", tracing::field::display(turn_id));
    span.record("resumed", start.is_resume());
    owner.addr.do_send(TurnBegan {
        turn_id,
        control: control.clone(),
    });
    if start.is_resume() {
        crate::kill_point!("turn.after_resume");
    } else {
        crate::kill_point!("turn.after_claim");
    }
    let admission = if let Some(now) = resumed {
        now
    } else if burst.is_empty() {
        admission.clone()
    } else {
        coalesce(deps, fence, admission, turn_id, burst)
            .instrument(tracing::info_span!("admission", coalesced = burst.len()))
            .await
    };
    let transcript = &owner.transcript;
    let released = turn::run::run_turn(
        deps, transcript, &control, fence, &admission, turn_id, start,
    )
    .await;
    TURNS.turn.observe(seconds_since(admission.created_at));
    owner.addr.do_send(TurnEnded);
    if released {
        Next::Released
    } else {
        Next::Go
    }
}
