//! Interrupting a session's turn wherever it runs (SPEC R13.6). The replica that gets the
//! request signals the turn itself when it runs it; when the session's lease says another live
//! replica runs it, it writes an `interrupt_requests` row (committed with a notice to that
//! replica) and waits briefly for the answer. The running replica acts in [`act_on`]: it
//! signals its turn and settles the row `done`, or `missed` when the turn has already ended.
use crate::deps::Deps;
use crate::error::GatewayError;
use crate::session::registry::SessionRegistry;
use crate::session::{Interrupt, Status};
use crate::turn::StopReason;
use std::time::Duration;
use tokio::time::Instant;
use turnkey_storage::{
    now_ms, AdmissionStatus, InterruptStatus, Lease, SessionId, StoreError, TurnId,
};

/// How long the asker waits for the running replica's answer before it answers 202 anyway
/// (the request stays pending and is acted on when that replica sees it).
pub const ACK_WAIT: Duration = Duration::from_secs(2);
/// A turn whose claim committed may not be registered as running for a moment yet.
const START_GRACE: Duration = Duration::from_secs(1);
const START_LOOK_EVERY: Duration = Duration::from_millis(25);

/// What an interrupt request did.
#[derive(Clone, Debug, PartialEq)]
pub struct Interruption {
    /// A running turn was signalled: by this process, or by the replica running it, which
    /// said so within [`ACK_WAIT`].
    pub interrupted: bool,
    /// Set when the turn runs on another replica and the request was passed to it.
    pub forwarded: Option<Forwarded>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Forwarded {
    /// The `interrupt_requests` row.
    pub request_id: String,
    pub turn_id: TurnId,
    /// `pending` (no answer yet), `done` or `missed`.
    pub status: InterruptStatus,
}

/// Interrupts the running turn of `session` (already authorized, the lineage root), here or on
/// the replica that holds its lease.
pub async fn interrupt(
    deps: &Deps,
    registry: &SessionRegistry,
    session: SessionId,
    reason: String,
) -> Result<Interruption, GatewayError> {
    let here = Interruption {
        interrupted: true,
        forwarded: None,
    };
    let nothing = Interruption {
        interrupted: false,
        forwarded: None,
    };
    if let Some(addr) = registry.get(session) {
        let signalled = addr
            .send(Interrupt {
                reason: StopReason::Interrupted(reason.clone()),
            })
            .await
            .map_err(|_| GatewayError::ShuttingDown)?;
        if signalled {
            return Ok(here);
        }
    }
    Ok(forward(deps, session, reason, None)
        .await?
        .unwrap_or(nothing))
}

/// Passes the interrupt to the live replica that runs a turn of `session`, if one does, and
/// waits up to [`ACK_WAIT`] for its answer. With `admitted_before`, only a turn of an
/// admission queued before that seq is interrupted (the busy policy `interrupt` must not stop
/// the turn of the very input that asked for it).
pub async fn forward(
    deps: &Deps,
    session: SessionId,
    reason: String,
    admitted_before: Option<i64>,
) -> Result<Option<Interruption>, GatewayError> {
    let Some((holder, turn)) = running_elsewhere(deps, deps.store.get_lease(session).await?) else {
        return Ok(None);
    };
    // The lease names the holder's last turn until it is released: it must still run.
    let running = deps
        .store
        .admission_of_turn(turn)
        .await?
        .filter(|a| a.status == AdmissionStatus::Started)
        .filter(|a| admitted_before.is_none_or(|before| a.seq < before));
    if running.is_none() {
        return Ok(None);
    }
    // Subscribed before the request commits: an answer that comes at once still wakes us.
    let mut answered = deps.interrupt_acks.subscribe(session);
    let request = deps
        .store
        .request_interrupt(session, turn, holder, &reason)
        .await?;
    tracing::info!(%session, %turn, %holder, request = %request.id, "interrupt passed to the replica running the turn");
    let deadline = Instant::now() + ACK_WAIT;
    let status = loop {
        let status = deps
            .store
            .get_interrupt_request(&request.id)
            .await?
            .map_or(InterruptStatus::Pending, |r| r.status);
        let left = deadline.saturating_duration_since(Instant::now());
        if status != InterruptStatus::Pending || left.is_zero() {
            break status;
        }
        answered.wait(left).await;
    };
    Ok(Some(Interruption {
        interrupted: status == InterruptStatus::Done,
        forwarded: Some(Forwarded {
            request_id: request.id,
            turn_id: turn,
            status,
        }),
    }))
}

/// The live replica other than this one that runs a turn under `lease`, and the turn.
fn running_elsewhere(
    deps: &Deps,
    lease: Option<Lease>,
) -> Option<(turnkey_storage::InstanceId, TurnId)> {
    let lease = lease?;
    let holder = lease.holder?;
    let turn = lease.turn_id?;
    let live = lease.expires_at > now_ms() && !deps.instance.is_dead(&holder);
    (live && holder.instance != deps.instance.id()).then_some((holder.instance, turn))
}

/// Acts on the pending interrupt requests for `turn` of `session`: signals the turn if this
/// process runs it and settles the requests `done`. When they were addressed to this process
/// and the turn does not run here (it ended, or never began here), they are settled `missed`.
pub async fn act_on(deps: &Deps, registry: &SessionRegistry, session: SessionId, turn: TurnId) {
    if let Err(e) = try_act_on(deps, registry, session, turn).await {
        tracing::warn!(%session, %turn, error = %e, "cannot act on interrupt requests; the next sweep retries");
    }
}

async fn try_act_on(
    deps: &Deps,
    registry: &SessionRegistry,
    session: SessionId,
    turn: TurnId,
) -> Result<(), StoreError> {
    let pending = deps.store.pending_interrupts_of_turn(turn).await?;
    let Some(first) = pending.first() else {
        return Ok(());
    };
    let reason = first.reason.clone();
    let mine = pending.iter().any(|r| r.target == deps.instance.id());
    let deadline = Instant::now() + START_GRACE;
    loop {
        if signal_if_running(registry, session, turn, &reason).await {
            let n = deps
                .store
                .settle_interrupts(session, turn, InterruptStatus::Done)
                .await?;
            tracing::info!(%session, %turn, requests = n, "turn interrupted at another replica's request");
            return Ok(());
        }
        if !mine {
            // Addressed to another replica, which answers it.
            return Ok(());
        }
        let started = deps
            .store
            .admission_of_turn(turn)
            .await?
            .is_some_and(|a| a.status == AdmissionStatus::Started);
        if !started || Instant::now() >= deadline {
            deps.store
                .settle_interrupts(session, turn, InterruptStatus::Missed)
                .await?;
            return Ok(());
        }
        tokio::time::sleep(START_LOOK_EVERY).await;
    }
}

/// Whether this process runs `turn` of `session` and signalled it to stop.
async fn signal_if_running(
    registry: &SessionRegistry,
    session: SessionId,
    turn: TurnId,
    reason: &str,
) -> bool {
    let Some(addr) = registry.get(session) else {
        return false;
    };
    match addr.send(Status).await {
        Ok(s) if s.turn_id == Some(turn) => addr
            .send(Interrupt {
                reason: StopReason::Interrupted(reason.to_owned()),
            })
            .await
            .unwrap_or(false),
        _ => false,
    }
}

/// Acts on every pending request addressed to this process: the safety net for notices that
/// were missed (a reconnect of the notice listener, or SQLite, which has no notices).
pub async fn sweep(deps: &Deps, registry: &SessionRegistry) {
    let pending = match deps.store.pending_interrupts_for(deps.instance.id()).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read pending interrupt requests");
            return;
        }
    };
    let mut turns: Vec<(SessionId, TurnId)> =
        pending.iter().map(|r| (r.session_id, r.turn_id)).collect();
    turns.dedup();
    for (session, turn) in turns {
        act_on(deps, registry, session, turn).await;
    }
}
