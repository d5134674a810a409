//! The fallback chain of one turn (SPEC R8.3, R8.4): the configured `[[providers]]` in order,
//! the primary first, minus auxiliary ones (they write compression summaries) unless only
//! auxiliary providers are configured. Providers whose breaker is open are skipped (see
//! `provider_health`), unless all are. When a call fails for good on one provider, the loop
//! moves to the next and restarts that iteration from preflight with rebuilt messages; it never
//! re-sends the built request to another client.
use crate::deps::Models;
use std::sync::Arc;
use std::time::Instant;
use turnkey_providers::{Provider, ProviderError, RetryPolicy};

pub struct Chain<'a> {
    models: Models<'a>,
    order: Vec<usize>,
    pos: usize,
}

impl<'a> Chain<'a> {
    /// The chain for a turn starting now. The provider `chosen` picks (the session's model or
    /// the input's, a model's name or `NAME/MODEL`, SPEC R8.4) leads it when there is one, even
    /// an auxiliary one; the others follow in the set's order.
    pub fn new(models: Models<'a>, chosen: Option<&str>) -> Self {
        let mut candidates = models.set.chain();
        if let Some(lead) = chosen.and_then(|m| models.set.serving(m)) {
            candidates.retain(|&i| i != lead);
            candidates.insert(0, lead);
        }
        let name = |i: usize| models.providers[i].name();
        let order = models.health.order(&candidates, name, Instant::now());
        if order.first() != candidates.first() {
            tracing::info!(
                skipped = ?candidates.iter().filter(|i| !order.contains(i)).collect::<Vec<_>>(),
                "providers on cooldown are skipped for this turn"
            );
        }
        Self {
            models,
            order,
            pos: 0,
        }
    }

    /// The provider the loop calls now; `None` when none is configured.
    pub fn current(&self) -> Option<Arc<dyn Provider>> {
        self.order
            .get(self.pos)
            .and_then(|&i| self.models.providers.get(i))
            .cloned()
    }

    /// A call to the current provider succeeded.
    pub fn succeeded(&self) {
        if let Some(p) = self.current() {
            self.models.health.record_success(p.name());
        }
    }

    /// A call to the current provider failed with `error` after its retries. Records it in the
    /// breaker and returns the next provider to try, if the error allows a fallback and one is
    /// left. Overflow is not a provider failure (it goes back to preflight) and is not passed
    /// here.
    pub fn failed(&mut self, error: &ProviderError) -> Option<Arc<dyn Provider>> {
        let &index = self.order.get(self.pos)?;
        let providers = self.models.providers;
        let name = providers
            .get(index)
            .map(|p| p.name().to_owned())
            .unwrap_or_default();
        let policy = providers
            .get(index)
            .map(|p| p.retry_policy())
            .unwrap_or_default();
        let attempts = failed_attempts(error, &policy);
        if let Some(cooldown) = self
            .models
            .health
            .record_failure(&name, attempts, Instant::now())
        {
            tracing::warn!(provider = %name, ?cooldown, error = %error, "provider put on cooldown after consecutive failures");
        }
        if !allows_fallback(error) {
            return None;
        }
        self.pos += 1;
        let next = self.current()?;
        tracing::warn!(
            from = %name,
            to = %next.name(),
            error = %error,
            "provider call failed; falling back to the next provider from preflight"
        );
        Some(next)
    }
}

/// How many failed attempts a failed call stands for in the breaker: a retryable error failed
/// every attempt the policy allows; an auth failure will not heal by itself and opens the
/// breaker at once; any other terminal error is one attempt.
fn failed_attempts(error: &ProviderError, policy: &RetryPolicy) -> u32 {
    match error {
        ProviderError::Auth { .. } => crate::provider_health::FAILURE_THRESHOLD,
        e if e.is_retryable() => policy.max_attempts.max(1),
        _ => 1,
    }
}

/// Every failed call may fall back (terminal errors, auth failures, retries exhausted) except an
/// overflow, which goes back to preflight to compress.
fn allows_fallback(error: &ProviderError) -> bool {
    !matches!(error, ProviderError::Overflow { .. })
}
