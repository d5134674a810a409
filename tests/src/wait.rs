//! Waiting for facts, in one place: how long a test waits for something that must happen
//! (`BOUND`; `REAL_MODEL_BOUND` for a turn of the local 135M model), and `eventually`, the one
//! poll loop. A test that waits for the fact that must come next never sleeps a fixed time.
use std::future::Future;
use std::time::{Duration, Instant};

/// The longest a test waits for something that must happen (a turn to end, a row to appear).
/// Generous: on a loaded 2-core CI machine a debug build is slow; a pass never waits for it.
pub const BOUND: Duration = Duration::from_secs(60);
/// The same for one turn of the real local model (slow and weak by design).
pub const REAL_MODEL_BOUND: Duration = Duration::from_secs(600);
/// How often `eventually` looks again.
const POLL: Duration = Duration::from_millis(25);

/// Looks at `check` until it answers `Some`, every 25 ms for at most `bound`; panics saying
/// what was awaited otherwise.
pub async fn eventually<T, F, Fut>(bound: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + bound;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "no {what} within {bound:?}");
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn eventually_answers_what_comes_and_gives_up_on_what_does_not() {
        let mut n = 0;
        let found = eventually(Duration::from_secs(5), "a third look", || {
            n += 1;
            let now = n;
            async move { (now >= 3).then_some(now) }
        })
        .await;
        assert_eq!(found, 3);
        let gave_up = tokio::spawn(async {
            eventually(Duration::from_millis(100), "nothing", || async {
                None::<()>
            })
            .await
        })
        .await;
        assert!(gave_up.is_err(), "it panics when the bound passes");
    }
}
