//! Recovery (SPEC R2.4, R2.5, R12): at start-up and then periodically, `started` admissions
//! whose owner is gone become `unknown` (never re-run, never invented as done), and sessions
//! with queued input are drained.
use crate::deps::Deps;
use crate::registry::SessionRegistry;
use crate::stages::TURNS;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use turnkey_storage::{now_ms, Admission, Fence, MessageRole, StoreError, UnknownCause};

/// Start-up: judge every `started` admission, then drain every queue.
pub async fn recover_at_start(
    deps: &Arc<Deps>,
    registry: &SessionRegistry,
) -> Result<(), crate::GatewayError> {
    let judged = judge_dead_owners(deps, registry).await?;
    let queued = deps.store.sessions_with_queued().await?;
    tracing::info!(
        unknown = judged.unknown,
        resumed = judged.resumed,
        sessions_with_queue = queued.len(),
        "recovery finished"
    );
    for s in queued {
        registry.drain(s);
    }
    Ok(())
}

/// Every so often: owners on other replicas die too, and a drain that timed out waiting for a
/// lease must be retried. It runs on the actix arbiter (not `tokio::spawn`): it may start
/// session actors, which only an arbiter can, and a failed start there froze the process
/// (the registry's map stayed locked while the half-started actor removed itself).
pub fn spawn_sweeper(deps: Arc<Deps>, registry: SessionRegistry) {
    let every = Duration::from_secs(deps.config.lease.refresh_s.clamp(1, 30));
    actix::spawn(async move {
        loop {
            tokio::select! {
                _ = deps.shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            if let Err(e) = judge_dead_owners(&deps, &registry).await {
                tracing::warn!(error = %e, "recovery sweep failed");
            }
            match deps.store.sessions_with_queued().await {
                Ok(sessions) => sessions.into_iter().for_each(|s| registry.drain(s)),
                Err(e) => tracing::warn!(error = %e, "queue sweep failed"),
            }
        }
    });
}

/// What recovery did with the `started` admissions of gone owners.
#[derive(Default)]
struct Judged {
    unknown: usize,
    resumed: usize,
}

/// A `started` admission whose owner no longer holds a live lease on its session is resumed
/// when its turn stopped in a tool round (its session's drain takes over), else marked
/// unknown.
async fn judge_dead_owners(
    deps: &Deps,
    registry: &SessionRegistry,
) -> Result<Judged, crate::GatewayError> {
    let mut judged = Judged::default();
    for a in deps.store.started_admissions(None).await? {
        if !owner_is_gone(deps, &a).await? {
            continue;
        }
        if resumable(deps, &a).await? {
            registry.drain(a.session_id);
            judged.resumed += 1;
        } else {
            judged.unknown += usize::from(mark(deps, &a, None).await);
        }
    }
    Ok(judged)
}

/// How many attempts a turn gets in all: the first, and one resume by itself (SPEC R13.9). A
/// turn cut again after its resume is `unknown`, so a crash loop cannot burn tokens forever.
pub const MAX_ATTEMPTS: i32 = 2;

/// Whether a turn whose owner is gone is resumed by itself from its durable rows (SPEC R13.1,
/// R13.9), once. It is when it started no side effect that has no recorded result, which its
/// rows tell: the last is the user's (a model call was in flight: nothing ran; on a resume the
/// model is simply asked again), a tool result, or a tool-call row (calls recorded but never
/// started then run once; a call found `started` becomes `unknown` for a person to decide,
/// R13.1, and the turn waits for that decision). An assistant row without calls as the last
/// row of an unsettled turn fits no step of the loop: unknown. A turn with no row yet (a burst
/// cut before its joined input was written) has run nothing either: its resume writes the row.
pub(crate) async fn resumable(deps: &Deps, a: &Admission) -> Result<bool, StoreError> {
    let Some(turn) = a.turn_id else {
        return Ok(false);
    };
    // A turn parked in its tool round at a graceful stop is always handed back (it waits for
    // calls not started or for a person, which burns nothing): only a cut counts.
    if a.attempt >= MAX_ATTEMPTS && a.handed_back.is_none() {
        return Ok(false);
    }
    let rows = deps.store.turn_messages(a.session_id, turn).await?;
    Ok(match rows.last() {
        Some(m) if m.role == MessageRole::Assistant => m.tool_calls.is_some(),
        Some(_) | None => true,
    })
}

pub(crate) async fn owner_is_gone(deps: &Deps, a: &Admission) -> Result<bool, StoreError> {
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
pub(crate) async fn orphans(deps: &Deps, fence: &Fence) -> Vec<Admission> {
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
    if a.attempt >= MAX_ATTEMPTS {
        cause.message.push_str(
            "; it had already been resumed once after an earlier cut, so it is not resumed \
             by itself again",
        );
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

async fn mark(deps: &Deps, a: &Admission, fence: Option<&Fence>) -> bool {
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
