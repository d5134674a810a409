//! Direct model calls: the OpenAI endpoint's `direct/<model>` ids answer a client's own side
//! tasks (a title, tags, follow-up suggestions) from a model with no session, no agent prompt
//! and no tools. Held to the principal's `[limits]` and counted in its tokens of the day.
use super::Gateway;
use crate::error::GatewayError;
use std::sync::Arc;
use turnkey_providers::Provider;
use turnkey_storage::Principal;

impl Gateway {
    /// The provider serving `model` (a model of `GET /v1/models`: its name, or `NAME/MODEL`),
    /// once `principal`'s limits allow a call.
    pub async fn direct_provider(
        &self,
        principal: &Principal,
        model: &str,
    ) -> Result<Arc<dyn Provider>, GatewayError> {
        crate::admission::check_direct_limits(&self.deps, principal).await?;
        let set = self.deps.providers.snapshot();
        set.serving(model)
            .and_then(|i| set.clients().get(i).cloned())
            .ok_or_else(|| GatewayError::InvalidInput {
                code: "invalid_model",
                message: format!(
                    "no provider serves {:?}; the models are those of GET /v1/models",
                    crate::limits::sanitize_text(model)
                ),
            })
    }

    /// Counts `tokens` of a direct call in `principal`'s tokens of the day.
    pub async fn meter_direct(
        &self,
        principal: &Principal,
        tokens: u64,
    ) -> Result<(), GatewayError> {
        let tokens = i64::try_from(tokens).unwrap_or(i64::MAX);
        Ok(self
            .deps
            .store
            .add_direct_usage(&principal.id, tokens)
            .await?)
    }
}
