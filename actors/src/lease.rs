//! Holding a session's turn lease (SPEC R4): wait for it without busy-waiting, keep it
//! refreshed while turns run, and signal loss at once so the running turn stops writing.
use crate::deps::Deps;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use turnkey_storage::{
    Admission, ClaimAs, Claimed, Fence, LeaseClaim, SessionId, StoreError, TurnId,
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
            owner: &deps.instance.owner,
            platform: "gateway",
            ttl_ms,
        };
        let dead = |o: &turnkey_storage::Owner| deps.instance.is_dead(o);
        let user_row = turn.map(|t| move |a: &Admission| crate::turn::context::user_row(a, t));
        let how = turn
            .zip(user_row.as_ref())
            .map(|(turn, f)| ClaimAs { turn, user_row: f });
        match deps
            .store
            .try_acquire_lease_and_claim(claim, &dead, how)
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
