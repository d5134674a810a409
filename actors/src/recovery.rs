//! Recovery (SPEC R2.4, R2.5, R12, R13.9): at start-up and then periodically, `started`
//! admissions whose owner is gone are judged (`lease::resumable`): a turn that started no side
//! effect is resumed by its session's drain, the others become `unknown` (never re-run, never
//! invented as done); and sessions with queued input are drained.
use crate::deps::Deps;
use crate::lease::{mark, owner_is_gone, resumable};
use crate::session::registry::SessionRegistry;
use std::sync::Arc;
use std::time::Duration;

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
        reviews_interrupted = judged.reviews,
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
    /// Reviews whose owner died, closed as interrupted.
    reviews: usize,
}

/// A `started` admission whose owner no longer holds a live lease on its session is resumed
/// when it started no side effect and its crashes are within `[agent] max_resumes` (its
/// session's drain takes over), else marked unknown.
async fn judge_dead_owners(
    deps: &Deps,
    registry: &SessionRegistry,
) -> Result<Judged, crate::GatewayError> {
    let mut judged = Judged {
        reviews: crate::review::close_orphans(deps).await?,
        ..Judged::default()
    };
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
