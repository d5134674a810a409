//! A circuit breaker per configured provider (SPEC R8.4): after `FAILURE_THRESHOLD` consecutive
//! failed attempts a provider is put on cooldown, so later turns start with the next healthy
//! one instead of paying its retries again. The cooldown starts at `BASE_COOLDOWN` and doubles
//! each time the provider fails again right after one, up to `MAX_COOLDOWN`; a success closes
//! the breaker and resets it. Shared by every turn of the process through `Deps`, keyed by the
//! provider's name, so a breaker outlives a change of the provider set (a provider connected
//! or removed at run time).
//!
//! The breaker only orders the fallback chain; it never refuses to try: when every provider is
//! on cooldown, a turn tries them all anyway, the primary first.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Consecutive failed attempts (HTTP calls, retries included) that open a breaker.
pub const FAILURE_THRESHOLD: u32 = 3;
/// First cooldown of an opened breaker.
pub const BASE_COOLDOWN: Duration = Duration::from_secs(60);
/// Longest cooldown: each failure right after a cooldown doubles it up to this.
pub const MAX_COOLDOWN: Duration = Duration::from_secs(600);

#[derive(Clone, Debug, Default)]
struct Breaker {
    /// Failed attempts since the last success.
    consecutive_failures: u32,
    /// Until when the provider is skipped; `None` when the breaker is closed.
    open_until: Option<Instant>,
    /// The cooldown the next opening uses (0 = `BASE_COOLDOWN`).
    next_cooldown: Duration,
}

/// Health of the providers, by name.
#[derive(Debug, Default)]
pub struct ProviderHealth {
    breakers: Mutex<HashMap<String, Breaker>>,
}

impl ProviderHealth {
    fn with<R>(&self, name: &str, f: impl FnOnce(&mut Breaker) -> R) -> R {
        let mut all = self.breakers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = all.get_mut(name) {
            return f(b);
        }
        f(all.entry(name.to_owned()).or_default())
    }

    /// Whether provider `name` is on cooldown at `now`.
    pub fn is_open(&self, name: &str, now: Instant) -> bool {
        self.with(name, |b| b.open_until.is_some_and(|until| now < until))
    }

    /// A call to provider `name` succeeded: close its breaker.
    pub fn record_success(&self, name: &str) {
        self.with(name, |b| *b = Breaker::default());
    }

    /// `attempts` attempts in a row failed on provider `name`. Returns the cooldown when this
    /// opened (or re-opened) its breaker.
    pub fn record_failure(&self, name: &str, attempts: u32, now: Instant) -> Option<Duration> {
        self.with(name, |b| {
            // A failure right after a cooldown ran out (the half-open trial) re-opens at once.
            let trial_failed = b.open_until.is_some_and(|until| now >= until);
            b.consecutive_failures = b.consecutive_failures.saturating_add(attempts.max(1));
            if !trial_failed && b.consecutive_failures < FAILURE_THRESHOLD {
                return None;
            }
            if b.open_until.is_some_and(|until| now < until) {
                // Already open (a turn that tried it anyway): keep the running cooldown.
                return None;
            }
            let cooldown = if b.next_cooldown.is_zero() {
                BASE_COOLDOWN
            } else {
                b.next_cooldown
            };
            b.open_until = Some(now + cooldown);
            b.next_cooldown = (cooldown * 2).min(MAX_COOLDOWN);
            Some(cooldown)
        })
    }

    /// The order in which a turn tries `candidates` (indexes in the chain's order, `name` naming
    /// each): the healthy ones in order; when every one is on cooldown, all of them in order
    /// (never refuse).
    pub fn order<'a>(
        &self,
        candidates: &[usize],
        name: impl Fn(usize) -> &'a str,
        now: Instant,
    ) -> Vec<usize> {
        let healthy: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&i| !self.is_open(name(i), now))
            .collect();
        if healthy.is_empty() {
            candidates.to_vec()
        } else {
            healthy
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(i: usize) -> &'static str {
        ["0", "1", "2"][i]
    }

    #[test]
    fn opens_after_the_threshold_and_closes_on_success() {
        let h = ProviderHealth::default();
        let t0 = Instant::now();
        assert_eq!(h.record_failure("0", 1, t0), None);
        assert_eq!(h.record_failure("0", 1, t0), None);
        assert!(!h.is_open("0", t0));
        assert_eq!(h.record_failure("0", 1, t0), Some(BASE_COOLDOWN));
        assert!(h.is_open("0", t0));
        assert!(!h.is_open("0", t0 + BASE_COOLDOWN));
        h.record_success("0");
        assert!(!h.is_open("0", t0));
        assert_eq!(h.record_failure("0", 2, t0), None, "counting starts over");
    }

    #[test]
    fn a_failed_trial_reopens_with_a_doubled_cooldown_up_to_the_cap() {
        let h = ProviderHealth::default();
        let mut now = Instant::now();
        let mut expected = BASE_COOLDOWN;
        assert_eq!(h.record_failure("1", 3, now), Some(expected));
        for _ in 0..6 {
            now += expected;
            let next = (expected * 2).min(MAX_COOLDOWN);
            assert_eq!(h.record_failure("1", 1, now), Some(next));
            expected = next;
        }
        assert_eq!(expected, MAX_COOLDOWN);
        assert!(!h.is_open("0", now), "other providers are untouched");
    }

    #[test]
    fn order_skips_open_breakers_but_never_returns_nothing() {
        let h = ProviderHealth::default();
        let now = Instant::now();
        h.record_failure("0", 3, now);
        assert_eq!(h.order(&[0, 1, 2], name, now), vec![1, 2]);
        h.record_failure("1", 3, now);
        h.record_failure("2", 3, now);
        assert_eq!(h.order(&[0, 1, 2], name, now), vec![0, 1, 2]);
        assert_eq!(h.order(&[0, 1, 2], name, now + MAX_COOLDOWN), vec![0, 1, 2]);
    }
}
