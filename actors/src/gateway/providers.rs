//! The providers from the doors (API.md `/v1/providers`): listed with keys masked, connected
//! after the caller's live check, removed; every change applies to the next turn without a
//! restart.
use super::Gateway;
use crate::error::GatewayError;
use crate::provider_set::{NewProvider, ProviderView};
use turnkey_providers::ProviderConfig;

impl Gateway {
    /// Every provider, in chain order, keys masked.
    pub fn providers(&self) -> Vec<ProviderView> {
        self.deps.providers.views()
    }

    /// The configuration `new` would run with, if it may be connected (valid, its name free):
    /// what the caller checks live before [`Self::connect_provider`].
    pub fn provider_to_connect(&self, new: &NewProvider) -> Result<ProviderConfig, GatewayError> {
        self.deps.providers.validate(new)
    }

    /// Stores `new` (its key sealed) and applies it: the next turn may use it.
    pub async fn connect_provider(
        &self,
        new: &NewProvider,
        by: &str,
    ) -> Result<ProviderView, GatewayError> {
        self.deps.providers.connect(new, by).await
    }

    /// Removes connected provider `name`.
    pub async fn remove_provider(&self, name: &str, by: &str) -> Result<(), GatewayError> {
        self.deps.providers.remove(name, by).await
    }

    /// A local server found with nothing configured becomes the primary (`serve`'s first run).
    pub fn add_detected_provider(&self, config: ProviderConfig) -> Result<(), GatewayError> {
        self.deps.providers.add_detected(config)
    }
}
