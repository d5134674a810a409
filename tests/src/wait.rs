//! Waiting for facts, in one place: how long a test waits for something that must happen
//! (`BOUND`; `REAL_MODEL_BOUND` for a turn of the local 135M model), `within` and `eventually`,
//! the one poll loop, and the few fixed watches for what must *not* happen where the system
//! writes no fact after it (each says why). A test that waits for the fact that must come next
//! never sleeps a fixed time.
use std::future::Future;
use std::time::{Duration, Instant};

/// The longest a test waits for something that must happen (a turn to end, a row to appear).
/// Generous: on a loaded 2-core CI machine a debug build is slow; a pass never waits for it.
pub const BOUND: Duration = Duration::from_secs(60);
/// The same for one turn of the real local model (slow and weak by design).
pub const REAL_MODEL_BOUND: Duration = Duration::from_secs(600);
/// How often `within` looks again.
const POLL: Duration = Duration::from_millis(25);

/// How long a test watches a schedule that must not fire: two due times of the 2 s schedules
/// the tests make, and some. A timer that does not fire leaves no fact to wait for.
pub const TWO_DUE_TIMES: Duration = Duration::from_millis(4_500);
/// How long a page is given to run what a hostile answer might have smuggled in (an image's
/// error handler): the browser tells nobody that it decided not to run something.
pub const PAGE_SETTLES: Duration = Duration::from_millis(500);

/// Looks at `check` until it answers `Some`, every 25 ms for at most `bound`; `None` when the
/// bound passed first (for a caller that gathers its own evidence before failing).
pub async fn within<T, F, Fut>(bound: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + bound;
    loop {
        if let Some(found) = check().await {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Like `within`, panicking saying what was awaited when the bound passes.
pub async fn eventually<T, F, Fut>(bound: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    within(bound, check)
        .await
        .unwrap_or_else(|| panic!("no {what} within {bound:?}"))
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
        let none = within(Duration::from_millis(100), || async { None::<()> }).await;
        assert!(none.is_none(), "within answers None when the bound passes");
    }
}
