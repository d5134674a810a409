//! The providers a turn may call (SPEC R8.3, R8.4), as a set that changes while the gateway
//! runs, in one order that every answer, `doctor` and the web UI show alike: the configured
//! `[[providers]]` first; with none configured, the local server `serve` detects at start;
//! then the providers connected at run time (`/v1/providers`, the web UI's "Connect a model"),
//! in the order they were connected. The first that is not auxiliary is the primary; the
//! others are its fallbacks in that order ([`roles`]).
//!
//! A turn takes a snapshot ([`Providers::snapshot`]) when its model loop starts and keeps it to
//! the end, so its fallback chain never changes under it; the next turn sees the new set. A
//! connection or removal applies at once in the process that made it; every process (replicas
//! included) also reads the stored list every [`RELOAD_EVERY`] and rebuilds its set when the
//! list changed. Keys are stored sealed (`sealed`) and masked in every answer and log line.
//! A detected or connected provider's context window is read from its server (`window`) unless
//! one was given.
mod runtime;
pub mod sealed;
mod settings;
pub mod window;

pub use runtime::{spawn_reloader, Providers, RELOAD_EVERY};
pub use settings::{config_of, detected_name, key_file, stored_config, NewProvider};
pub use window::WindowSource;

use std::sync::Arc;
use turnkey_providers::{Provider, ProviderConfig};

/// Where a provider of the set comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A `[[providers]]` table or the `OPENAI_*` variables.
    Configured,
    /// A local server `serve` found with nothing configured.
    Detected,
    /// Connected at run time and stored.
    Connected,
}

impl Source {
    /// Its name in answers: `configured`, `detected` or `connected`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::Detected => "detected",
            Self::Connected => "connected",
        }
    }
}

/// A provider's place in the chain of a turn that chose no model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Answers first.
    Primary,
    /// Answers when the ones before it fail; `n` is its place after the primary (1, 2, …).
    Fallback(usize),
    /// Writes compression summaries and answers no turn (while others that are not exist).
    Auxiliary,
}

impl Role {
    /// Its name in answers: `primary`, `fallback` or `auxiliary`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Fallback(_) => "fallback",
            Self::Auxiliary => "auxiliary",
        }
    }

    /// Its place in the chain, the primary's 1; `None` for an auxiliary one.
    pub fn order(self) -> Option<usize> {
        match self {
            Self::Primary => Some(1),
            Self::Fallback(n) => Some(n + 1),
            Self::Auxiliary => None,
        }
    }
}

/// The role of each provider, given in set order by whether it is auxiliary: the ones that are
/// not answer turns in order; auxiliary ones answer only when all are auxiliary.
pub fn roles(auxiliary: &[bool]) -> Vec<Role> {
    let only_auxiliary = auxiliary.iter().all(|&a| a);
    let mut place = 0;
    auxiliary
        .iter()
        .map(|&aux| {
            if aux && !only_auxiliary {
                return Role::Auxiliary;
            }
            place += 1;
            if place == 1 {
                Role::Primary
            } else {
                Role::Fallback(place - 1)
            }
        })
        .collect()
}

/// One provider of the set.
pub struct Entry {
    pub config: ProviderConfig,
    pub client: Arc<dyn Provider>,
    pub source: Source,
    pub window: WindowSource,
}

/// The providers in fallback order, the primary first.
#[derive(Default)]
pub struct ProviderSet {
    entries: Vec<Entry>,
    clients: Vec<Arc<dyn Provider>>,
    roles: Vec<Role>,
}

impl ProviderSet {
    fn new(entries: Vec<Entry>) -> Self {
        let clients = entries.iter().map(|e| e.client.clone()).collect();
        let auxiliary: Vec<bool> = entries.iter().map(|e| e.config.auxiliary).collect();
        Self {
            roles: roles(&auxiliary),
            entries,
            clients,
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The clients, in the same order as [`Self::entries`].
    pub fn clients(&self) -> &[Arc<dyn Provider>] {
        &self.clients
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The role of each entry, in the same order.
    pub fn roles(&self) -> &[Role] {
        &self.roles
    }

    /// The indexes a turn that chose no model tries, in order (before cooldowns).
    pub fn chain(&self) -> Vec<usize> {
        let mut chain: Vec<(usize, usize)> = (0..self.roles.len())
            .filter_map(|i| self.roles[i].order().map(|o| (o, i)))
            .collect();
        chain.sort_unstable();
        chain.into_iter().map(|(_, i)| i).collect()
    }

    /// The primary: the first provider that is not auxiliary.
    pub fn primary(&self) -> Option<&Arc<dyn Provider>> {
        self.chain().first().map(|&i| &self.clients[i])
    }

    /// Whether the provider at `index` writes compression summaries (and is left out of the
    /// chain unless only such providers exist).
    pub fn is_auxiliary(&self, index: usize) -> bool {
        self.entries.get(index).is_some_and(|e| e.config.auxiliary)
    }

    /// The first auxiliary provider.
    pub fn auxiliary(&self) -> Option<&Arc<dyn Provider>> {
        (0..self.entries.len())
            .find(|&i| self.is_auxiliary(i))
            .map(|i| &self.clients[i])
    }

    /// The provider named `name`.
    pub fn named(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.entries
            .iter()
            .position(|e| e.config.name == name)
            .map(|i| &self.clients[i])
    }

    /// The provider a chosen model (a session's or an input's, one of [`Self::served`]) picks:
    /// the first serving a model of that name, else the one whose `NAME/MODEL` it is.
    pub fn serving(&self, chosen: &str) -> Option<usize> {
        self.clients
            .iter()
            .position(|p| p.model() == chosen)
            .or_else(|| {
                self.clients
                    .iter()
                    .position(|p| model_id(p.name(), p.model(), true) == chosen)
            })
    }

    /// The ids of [`Self::served`] (`GET /v1/models`, what `PATCH /v1/sessions/{id}` lists).
    pub fn models(&self) -> Vec<String> {
        self.served().into_iter().map(|(m, _)| m).collect()
    }

    /// What a session may choose, each with the name of the provider it picks, in set order
    /// (`GET /v1/models`' `id` and `owned_by`): each model once, by its name, for the first
    /// provider serving it; a later provider serving a model already listed (the same server
    /// under two names, two servers of one model) as `NAME/MODEL`, so that every provider can
    /// be chosen.
    pub fn served(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for p in &self.clients {
            let taken = out.iter().any(|(m, _)| m == p.model());
            out.push((model_id(p.name(), p.model(), taken), p.name().to_owned()));
        }
        out
    }

    /// The id of [`Self::served`] that picks the provider at `index`.
    pub fn model_id_of(&self, index: usize) -> Option<String> {
        let p = self.clients.get(index)?;
        let taken = self.clients[..index].iter().any(|q| q.model() == p.model());
        Some(model_id(p.name(), p.model(), taken))
    }
}

/// A model's id in `GET /v1/models`: its name, or `NAME/MODEL` when an earlier provider
/// already serves a model of that name.
fn model_id(provider: &str, model: &str, taken: bool) -> String {
    if taken {
        format!("{provider}/{model}")
    } else {
        model.to_owned()
    }
}

/// A provider as `GET /v1/providers` shows it: its key masked.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderView {
    pub name: String,
    pub kind: &'static str,
    pub base_url: String,
    pub model: String,
    pub context_window: u32,
    pub window: WindowSource,
    pub vision: bool,
    /// The key's last four characters behind a mask (`…abcd`), or `null` when it has none.
    pub api_key: Option<String>,
    pub source: Source,
    pub auxiliary: bool,
    pub role: Role,
    /// The id of `GET /v1/models` that makes a session use this provider.
    pub model_id: String,
    /// Whether it answers the next message of a session that chose no model: the primary, or
    /// the first fallback after providers that are cooling down (set by the gateway, which
    /// knows their health).
    pub answers_next: bool,
}

impl ProviderView {
    fn of(set: &ProviderSet, index: usize) -> Option<Self> {
        let e = set.entries.get(index)?;
        Some(Self {
            name: e.config.name.clone(),
            kind: e.config.kind.as_str(),
            base_url: e.config.base_url.clone(),
            model: e.config.model.clone(),
            context_window: e.config.context_window,
            window: e.window,
            vision: e.config.sees_images(),
            api_key: e.config.resolved_api_key().map(|k| mask(k.expose())),
            source: e.source,
            auxiliary: e.config.auxiliary,
            role: set.roles[index],
            model_id: set.model_id_of(index)?,
            answers_next: false,
        })
    }
}

/// A key as an answer shows it: never more than its last four characters, and none of a short
/// one.
pub fn mask(key: &str) -> String {
    let n = key.chars().count();
    if n < 12 {
        return "…".to_owned();
    }
    let tail: String = key.chars().skip(n - 4).collect();
    format!("…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r8_3_roles_put_auxiliary_providers_out_of_the_chain_unless_all_are() {
        use Role::*;
        assert_eq!(
            roles(&[false, true, false, false]),
            [Primary, Auxiliary, Fallback(1), Fallback(2)]
        );
        assert_eq!(roles(&[true, false]), [Auxiliary, Primary]);
        assert_eq!(roles(&[true, true]), [Primary, Fallback(1)]);
        assert_eq!(Fallback(2).order(), Some(3));
        assert_eq!(Auxiliary.order(), None);
    }
}
