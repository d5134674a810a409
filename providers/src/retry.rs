//! Retry timing for provider calls: exponential backoff with jitter that honours a
//! provider's `Retry-After`. The loop itself lives in the actors crate, which must watch
//! for interrupts while it waits.
use crate::error::ProviderError;
use rand::Rng;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
        }
    }
}

impl RetryPolicy {
    /// How long to wait after failed attempt number `attempt` (1-based) before the next.
    ///
    /// A rate limit's `retry_after` is used as given (the provider knows best), capped by
    /// `max_delay`. Otherwise the delay is `base_delay * 2^(attempt-1)`, capped, with "equal
    /// jitter": a random point in its upper half, so that many sessions hit by the same outage
    /// do not retry in lockstep yet each still backs off.
    pub fn delay_for(&self, attempt: u32, err: &ProviderError) -> Duration {
        if let ProviderError::RateLimited {
            retry_after: Some(after),
            ..
        } = err
        {
            return (*after).min(self.max_delay);
        }
        let exp = attempt.saturating_sub(1).min(30);
        let ceiling = self
            .base_delay
            .saturating_mul(1u32 << exp)
            .min(self.max_delay);
        let half = ceiling / 2;
        let spread = u64::try_from((ceiling - half).as_millis()).unwrap_or(u64::MAX);
        half + Duration::from_millis(rand::thread_rng().gen_range(0..=spread))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> ProviderError {
        ProviderError::Server {
            status: 503,
            message: "down".into(),
        }
    }

    #[test]
    fn backoff_grows_exponentially_within_jitter_bounds() {
        let p = RetryPolicy::default();
        for _ in 0..50 {
            let d1 = p.delay_for(1, &server());
            assert!(d1 >= Duration::from_millis(250) && d1 <= Duration::from_millis(500));
            let d3 = p.delay_for(3, &server());
            assert!(d3 >= Duration::from_millis(1000) && d3 <= Duration::from_millis(2000));
        }
    }

    #[test]
    fn backoff_is_capped_by_max_delay() {
        let p = RetryPolicy::default();
        for attempt in [10, 40, u32::MAX] {
            let d = p.delay_for(attempt, &server());
            assert!(d <= p.max_delay && d >= p.max_delay / 2, "{attempt}: {d:?}");
        }
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let p = RetryPolicy::default();
        let rl = |secs| ProviderError::RateLimited {
            retry_after: Some(Duration::from_secs(secs)),
            message: String::new(),
        };
        assert_eq!(p.delay_for(1, &rl(7)), Duration::from_secs(7));
        assert_eq!(p.delay_for(1, &rl(3600)), p.max_delay);
        let no_hint = ProviderError::RateLimited {
            retry_after: None,
            message: String::new(),
        };
        assert!(p.delay_for(1, &no_hint) <= p.base_delay);
    }
}
