//! Holding a session's turn lease (SPEC R4): wait for it without busy-waiting, keep it
//! refreshed while turns run, and signal loss at once so the running turn stops writing. And
//! what becomes of a `started` turn whose owner no longer holds the lease (SPEC R13.1,
//! R13.9): resumed by itself when it started no side effect (up to `[agent] max_resumes`
//! crashes), else marked `unknown`.
//!
//! Resuming by itself (SPEC R13.9): a turn resumes when its transcript rows show it started no
//! side effect without a recorded result (the last row is the user's, a tool result, or a
//! tool-call row whose calls are `planned`; a run found `started` becomes `unknown` for a person).
//! The admission's `crash_resumes` caps it across replicas (`resumes_spent`); a hand-back at a
//! graceful stop (`handed_back` set) is no crash and does not count. `Store::take_over` moves the
//! owner, counts the attempt and commits `turn.resumed {attempt, reason}`, `turn.started
//! {resumed: true}` and `status` under the new fence; the turn then runs from `context::resume`.
//! Text the cut attempt streamed is superseded: the tail reads only deltas after the last
//! `turn.resumed`, and the web UI, drafts, `turnkey chat` and the OpenAI stream replace or mark it.
use crate::deps::Deps;
use crate::stages::TURNS;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use turnkey_storage::{
    now_ms, Admission, ClaimAs, Claimed, Fence, LeaseClaim, MessageRole, SessionId, StoreError,
    TurnId, UnknownCause,
};

/// Why waiting for a lease ended without one.
#[derive(Debug)]
pub enum AcquireError {
    /// Someone alive held it for the whole wait.
    TimedOut,
    /// The process is shutting down.
    Cancelled,
    Store(StoreError),
}

/// Waits up to `lease.wait_s` for the lease of `session`. Tries again when the holder's
/// release is announced (a notice from another replica, `notifier.rs`), else after a growing
/// pause (50 ms up to 1 s): a holder that dies announces nothing, its lease just expires. With
/// `turn`, the commit that takes the lease also claims the session's FIFO head as that turn
/// when nothing of the session is `started` (`Store::try_acquire_lease_and_claim`).
pub async fn acquire(
    deps: &Deps,
    session: SessionId,
    turn: Option<TurnId>,
) -> Result<(Fence, Option<Claimed>), AcquireError> {
    let deadline = Instant::now() + Duration::from_secs(deps.config.lease.wait_s);
    let mut pause = Duration::from_millis(50);
    let ttl_ms = ms(deps.config.lease.ttl_s);
    // Subscribed before the first try: a release between a failed try and the wait counts.
    let mut released = deps.lease_wakes.subscribe(session);
    loop {
        let claim = LeaseClaim {
            session,
            owner: deps.instance.owner.clone(),
            platform: "gateway",
            ttl_ms,
        };
        let instance = deps.instance.clone();
        let dead = Arc::new(move |o: &turnkey_storage::Owner| instance.is_dead(o));
        let how = turn.map(|turn| ClaimAs {
            turn,
            user_row: Arc::new(move |a: &Admission| crate::input::user_row(a, turn)),
        });
        match deps
            .store
            .try_acquire_lease_and_claim(claim, dead, how)
            .await
        {
            Ok(Some(taken)) => return Ok(taken),
            Ok(None) => {}
            // A busy database is a reason to wait, not to give up on the input.
            Err(StoreError::Db(e)) => tracing::warn!(%session, error = %e, "lease attempt failed"),
            Err(e) => return Err(AcquireError::Store(e)),
        }
        if Instant::now() >= deadline {
            return Err(AcquireError::TimedOut);
        }
        tokio::select! {
            _ = deps.shutdown.cancelled() => return Err(AcquireError::Cancelled),
            () = released.changed() => {}
            _ = tokio::time::sleep(pause.min(deadline - Instant::now())) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// Refreshes a held lease every `lease.refresh_s` until dropped. When the lease is lost (fenced
/// out, or unrefreshable past its expiry) `lost` is cancelled.
pub struct Refresher {
    pub lost: CancellationToken,
    stop: CancellationToken,
}

impl Refresher {
    pub fn spawn(deps: Arc<Deps>, fence: Fence) -> Self {
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        let (lost2, stop2) = (lost.clone(), stop.clone());
        tokio::spawn(async move {
            let every = Duration::from_secs(deps.config.lease.refresh_s);
            let ttl = Duration::from_secs(deps.config.lease.ttl_s);
            let mut valid_until = Instant::now() + ttl;
            loop {
                tokio::select! {
                    _ = stop2.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
                match deps
                    .store
                    .refresh_lease(&fence, ms(deps.config.lease.ttl_s))
                    .await
                {
                    Ok(()) => valid_until = Instant::now() + ttl,
                    Err(StoreError::Fenced(_)) => {
                        tracing::warn!(session = %fence.session_id, "turn lease lost");
                        lost2.cancel();
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(session = %fence.session_id, error = %e, "lease refresh failed");
                        // Past its expiry we can no longer prove we hold it.
                        if Instant::now() >= valid_until {
                            lost2.cancel();
                            return;
                        }
                    }
                }
            }
        });
        Self { lost, stop }
    }
}

impl Drop for Refresher {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub(crate) fn ms(secs: u64) -> i64 {
    i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX)
}

// A `started` turn whose owner is gone: resumed by itself, or left `unknown` (SPEC R13.1,
// R13.9). Asked by a drain that takes a session's lease and by the recovery sweep.

/// Whether the crashes that cut `a` so far used up `[agent] max_resumes` (SPEC R13.9): a turn
/// cut once more then is not resumed by itself again, so a turn that kills its own process
/// cannot loop burning tokens. Hand-backs at a graceful shutdown do not count.
pub fn resumes_spent(a: &Admission, max_resumes: u32) -> bool {
    u32::try_from(a.crash_resumes).unwrap_or(0) >= max_resumes
}

/// Whether a turn whose owner is gone is resumed by itself from its durable rows (SPEC R13.1,
/// R13.9). It is when it started no side effect that has no recorded result, which its rows
/// tell: the last is the user's (a model call was in flight: nothing ran; on a resume the
/// model is simply asked again), a tool result, or a tool-call row (calls recorded but never
/// started then run once; a call found `started` becomes `unknown` for a person to decide,
/// R13.1, and the turn waits for that decision). An assistant row without calls as the last
/// row of an unsettled turn fits no step of the loop: unknown. A turn with no row yet (a burst
/// cut before its joined input was written) has run nothing either: its resume writes the row.
/// A crash after `[agent] max_resumes` crash resumes makes it unknown too.
pub async fn resumable(deps: &Deps, a: &Admission) -> Result<bool, StoreError> {
    let Some(turn) = a.turn_id else {
        return Ok(false);
    };
    // A turn handed back at a graceful stop is always taken up again (it was parked where it
    // was safe, which burns nothing): only a crash counts.
    if a.handed_back.is_none() && resumes_spent(a, deps.config.agent.max_resumes) {
        return Ok(false);
    }
    let rows = deps.store.turn_messages(a.session_id, turn).await?;
    Ok(match rows.last() {
        Some(m) if m.role == MessageRole::Assistant => m.tool_calls.is_some(),
        Some(_) | None => true,
    })
}

pub async fn owner_is_gone(deps: &Deps, a: &Admission) -> Result<bool, StoreError> {
    let Some(owner) = &a.owner else {
        return Ok(true);
    };
    if deps.instance.is_dead(owner) {
        return Ok(true);
    }
    // A started admission's owner holds the session lease until it settles; if it no longer
    // does (released, expired, or taken over), it cannot still be running the turn.
    let lease = deps.store.get_lease(a.session_id).await?;
    Ok(match lease {
        Some(l) => match &l.holder {
            Some(h) => h.instance != owner.instance || l.expires_at <= now_ms(),
            None => true,
        },
        None => true,
    })
}

/// Called by a drain right after it takes a session's lease: every `started` admission there
/// belongs to an earlier holder. Those that cannot be resumed are marked unknown under our
/// fence (so it cannot race our own turns); the resumable ones are returned to be run.
pub async fn orphans(deps: &Deps, fence: &Fence) -> Vec<Admission> {
    let session = fence.session_id;
    let list = match deps.store.started_admissions(Some(session)).await {
        Ok(list) => list,
        Err(e) => {
            tracing::error!(%session, error = %e, "cannot read started admissions");
            return Vec::new();
        }
    };
    let mut resume = Vec::new();
    for a in list {
        match resumable(deps, &a).await {
            Ok(true) => resume.push(a),
            Ok(false) => {
                mark(deps, &a, Some(fence)).await;
            }
            Err(e) => tracing::error!(admission = %a.id, error = %e, "cannot read the turn"),
        }
    }
    resume
}

/// Why `a`'s outcome cannot be known, in a code and in words.
fn cause(deps: &Deps, a: &Admission) -> UnknownCause {
    let mut cause = owner_cause(deps, a);
    let max = deps.config.agent.max_resumes;
    if a.handed_back.is_none() && resumes_spent(a, max) {
        let times = match a.crash_resumes {
            1 => "once".to_owned(),
            n => format!("{n} times"),
        };
        cause.message.push_str(&if max == 0 {
            "; turns are not resumed by themselves after a crash ([agent] max_resumes = 0)"
                .to_owned()
        } else {
            format!(
                "; it had already been resumed {times} after crashes ([agent] max_resumes = \
                 {max}), so it is not resumed by itself again"
            )
        });
    }
    cause
}

fn owner_cause(deps: &Deps, a: &Admission) -> UnknownCause {
    match &a.owner {
        Some(o) if deps.instance.is_dead(o) => UnknownCause {
            reason: "owner_died".into(),
            message: format!(
                "the process that ran this turn (pid {} on {}) stopped before the turn finished",
                o.pid, o.host
            ),
        },
        Some(o) => UnknownCause {
            reason: "lease_lost".into(),
            message: format!(
                "the process that ran this turn (pid {} on {}) lost the session's lease before \
                 the turn finished",
                o.pid, o.host
            ),
        },
        None => UnknownCause {
            reason: "owner_died".into(),
            message: "the turn's owner is not recorded".into(),
        },
    }
}

pub async fn mark(deps: &Deps, a: &Admission, fence: Option<&Fence>) -> bool {
    let cause = cause(deps, a);
    match deps.store.mark_unknown(a.id, &cause, fence).await {
        Ok(events) if events.is_empty() => false,
        Ok(events) => {
            tracing::warn!(
                admission = %a.id, session = %a.session_id, reason = %cause.reason,
                message = %cause.message, "turn outcome unknown"
            );
            events.into_iter().for_each(|e| deps.hub.publish(e));
            TURNS.unknown_turns.fetch_add(1, Ordering::Relaxed);
            true
        }
        Err(e) => {
            tracing::error!(admission = %a.id, error = %e, "cannot mark admission unknown");
            false
        }
    }
}
