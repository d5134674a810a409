//! Recovery (SPEC R2.4, R2.5, R12): at start-up and then periodically, `started` admissions
//! whose owner is gone become `unknown` (never re-run, never invented as done), and sessions
//! with queued input are drained.
use crate::deps::Deps;
use crate::registry::SessionRegistry;
use std::sync::Arc;
use std::time::Duration;
use turnkey_storage::{now_ms, Admission, Fence, UnknownCause};

/// Start-up: judge every `started` admission, then drain every queue.
pub async fn recover_at_start(
    deps: &Arc<Deps>,
    registry: &SessionRegistry,
) -> Result<(), crate::GatewayError> {
    let unknown = mark_dead_owners_unknown(deps).await?;
    let queued = deps.store.sessions_with_queued().await?;
    tracing::info!(
        unknown,
        sessions_with_queue = queued.len(),
        "recovery finished"
    );
    for s in queued {
        registry.drain(s);
    }
    Ok(())
}

/// Every so often: owners on other replicas die too, and a drain that timed out waiting for a
/// lease must be retried.
pub fn spawn_sweeper(deps: Arc<Deps>, registry: SessionRegistry) {
    let every = Duration::from_secs(deps.config.lease.refresh_s.clamp(1, 30));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = deps.shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            if let Err(e) = mark_dead_owners_unknown(&deps).await {
                tracing::warn!(error = %e, "recovery sweep failed");
            }
            match deps.store.sessions_with_queued().await {
                Ok(sessions) => sessions.into_iter().for_each(|s| registry.drain(s)),
                Err(e) => tracing::warn!(error = %e, "queue sweep failed"),
            }
        }
    });
}

/// Marks `started` admissions unknown when their owner no longer holds a live lease on their
/// session. Returns how many were marked.
async fn mark_dead_owners_unknown(deps: &Deps) -> Result<usize, crate::GatewayError> {
    let mut marked = 0;
    for a in deps.store.started_admissions(None).await? {
        if owner_is_gone(deps, &a).await? {
            marked += usize::from(mark(deps, &a, None).await);
        }
    }
    Ok(marked)
}

async fn owner_is_gone(deps: &Deps, a: &Admission) -> Result<bool, crate::GatewayError> {
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

/// Called by a drain right after it takes a session's lease: any `started` admission there
/// belongs to an earlier holder. Marked under our fence, so it cannot race our own turns.
pub(crate) async fn mark_orphans_unknown(deps: &Deps, fence: &Fence) {
    let session = fence.session_id;
    match deps.store.started_admissions(Some(session)).await {
        Ok(list) => {
            for a in list {
                mark(deps, &a, Some(fence)).await;
            }
        }
        Err(e) => tracing::error!(%session, error = %e, "cannot read started admissions"),
    }
}

/// Why `a`'s outcome cannot be known, in a code and in words.
fn cause(deps: &Deps, a: &Admission) -> UnknownCause {
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
            true
        }
        Err(e) => {
            tracing::error!(admission = %a.id, error = %e, "cannot mark admission unknown");
            false
        }
    }
}
