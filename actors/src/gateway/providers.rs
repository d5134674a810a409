//! The providers from the doors (API.md `/v1/providers`): listed with keys masked, connected
//! after the caller's live check, removed; every change applies to the next turn without a
//! restart.
use super::Gateway;
use crate::error::GatewayError;
use crate::provider_set::{NewProvider, ProviderView};
use turnkey_providers::ProviderConfig;

impl Gateway {
    /// Every provider, in chain order, keys masked; the one that answers the next message of
    /// a session that chose no model marked (the primary, unless it is cooling down after
    /// failures: then the first fallback that is not, as a turn would).
    pub fn providers(&self) -> Vec<ProviderView> {
        let set = self.deps.providers.snapshot();
        let chain = set.chain();
        let name = |i: usize| set.entries()[i].config.name.as_str();
        let next = self
            .deps
            .provider_health
            .order(&chain, name, std::time::Instant::now())
            .first()
            .copied();
        let mut views = self.deps.providers.views();
        if let Some(v) = next.and_then(|i| views.get_mut(i)) {
            v.answers_next = true;
        }
        views
    }

    /// The configuration `new` would run with, if it may be connected (valid, its name free):
    /// what the caller checks live before [`Self::connect_provider`].
    pub fn provider_to_connect(&self, new: &NewProvider) -> Result<ProviderConfig, GatewayError> {
        self.deps.providers.validate(new)
    }

    /// Stores `new` (its key sealed) and applies it: the next turn may use it. The answer says
    /// its role and whether it answers the next message, as [`Self::providers`] does.
    pub async fn connect_provider(
        &self,
        new: &NewProvider,
        by: &str,
    ) -> Result<ProviderView, GatewayError> {
        let view = self.deps.providers.connect(new, by).await?;
        Ok(self
            .providers()
            .into_iter()
            .find(|v| v.name == view.name)
            .unwrap_or(view))
    }

    /// Removes connected provider `name`.
    pub async fn remove_provider(&self, name: &str, by: &str) -> Result<(), GatewayError> {
        self.deps.providers.remove(name, by).await
    }

    /// A local server found with nothing configured becomes the primary, ahead of the
    /// connected providers (`serve`'s start), with the context window its server says.
    pub async fn add_detected_provider(&self, config: ProviderConfig) -> Result<(), GatewayError> {
        self.deps.providers.add_detected(config).await
    }
}
