//! What a provider connected at run time runs with (`POST /v1/providers`, a stored row): its
//! fields checked and put into a `[[providers]]` table's shape, its key opened from the sealed
//! column; and the names that must stay unique across the set.
use super::sealed::SealKey;
use crate::config::RuntimeConfig;
use crate::error::GatewayError;
use std::path::PathBuf;
use turnkey_providers::{ProviderConfig, ProviderKind, Secret};
use turnkey_storage::ConnectedProvider;

/// The largest context window a connected provider may claim.
const MAX_WINDOW: u32 = 10_000_000;
/// The smallest: below this no system prompt and tool list fit.
const MIN_WINDOW: u32 = 1_024;

/// A provider to connect, as `POST /v1/providers` takes it.
#[derive(Clone, Debug)]
pub struct NewProvider {
    pub name: String,
    pub kind: ProviderKind,
    pub base_url: String,
    pub api_key: Option<Secret>,
    pub model: String,
    pub context_window: Option<u32>,
    pub vision: Option<bool>,
}

fn invalid(message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidInput {
        code: "invalid_provider",
        message: message.into(),
    }
}

/// The configuration a connected provider runs with: the defaults of a `[[providers]]` table,
/// and what was given.
pub fn config_of(new: &NewProvider) -> Result<ProviderConfig, GatewayError> {
    let name = new.name.trim();
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(invalid(
            "name must be 1 to 64 letters, digits, '-', '_' or '.'",
        ));
    }
    let base_url = new.base_url.trim().trim_end_matches('/');
    let parsed = reqwest::Url::parse(base_url)
        .map_err(|e| invalid(format!("base_url is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(invalid(
            "base_url must be an http:// or https:// URL with a host",
        ));
    }
    let model = new.model.trim();
    if model.is_empty() || model.len() > 200 {
        return Err(invalid("model must be 1 to 200 characters"));
    }
    if let Some(w) = new.context_window {
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&w) {
            return Err(invalid(format!(
                "context_window must be between {MIN_WINDOW} and {MAX_WINDOW}"
            )));
        }
    }
    let mut config: ProviderConfig = serde_json::from_value(serde_json::json!({
        "name": name,
        "kind": new.kind.as_str(),
        "base_url": base_url,
        "model": model,
    }))
    .map_err(|e| invalid(e.to_string()))?;
    config.api_key = new.api_key.clone().filter(|k| !k.is_empty());
    if let Some(w) = new.context_window {
        config.context_window = w;
    }
    config.vision = new.vision;
    Ok(config)
}

/// The configuration a stored connected provider runs with, its key opened with `key`.
pub fn stored_config(
    row: &ConnectedProvider,
    key: Option<&SealKey>,
) -> Result<ProviderConfig, String> {
    let kind =
        ProviderKind::from_name(&row.kind).ok_or_else(|| format!("unknown kind {:?}", row.kind))?;
    let api_key = match (&row.api_key_sealed, key) {
        (Some(sealed), Some(key)) => Some(Secret::from(
            key.open(&row.name, sealed).map_err(|e| e.to_string())?,
        )),
        (Some(_), None) => return Err("its key is sealed and no secrets key file was found".into()),
        (None, _) => None,
    };
    config_of(&NewProvider {
        name: row.name.clone(),
        kind,
        base_url: row.base_url.clone(),
        api_key,
        model: row.model.clone(),
        context_window: row.context_window.and_then(|w| u32::try_from(w).ok()),
        vision: row.vision,
    })
    .map_err(|e| e.to_string())
}

/// Where the key that seals connected providers' keys is: `security.secrets_key_file`, else
/// `<data_dir>/secrets.key`.
pub fn key_file(config: &RuntimeConfig) -> PathBuf {
    if config.security.secrets_key_file.as_os_str().is_empty() {
        config.data_dir.join("secrets.key")
    } else {
        config.security.secrets_key_file.clone()
    }
}

/// The name a detected server gets: `found` (`llamacpp`, …), unless a connected provider
/// already has it (an operator may have connected a provider of that name while the server
/// was down), then `found-detected`, `found-detected-2`, …: a stored provider is never left out
/// for a detected one.
pub fn detected_name(found: &str, taken: impl Fn(&str) -> bool) -> String {
    if !taken(found) {
        return found.to_owned();
    }
    let mut n = 1;
    loop {
        let name = if n == 1 {
            format!("{found}-detected")
        } else {
            format!("{found}-detected-{n}")
        };
        if !taken(&name) {
            return name;
        }
        n += 1;
    }
}

pub(super) fn exists(name: &str) -> GatewayError {
    GatewayError::Conflict {
        code: "provider_exists",
        message: format!("a provider named {name} exists; choose another name or remove it first"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(name: &str, url: &str) -> NewProvider {
        NewProvider {
            name: name.into(),
            kind: ProviderKind::Openai,
            base_url: url.into(),
            api_key: None,
            model: "m".into(),
            context_window: None,
            vision: None,
        }
    }

    #[test]
    fn a_connected_providers_settings_are_checked() {
        assert!(config_of(&new("local-1.a_b", "http://127.0.0.1:11434/v1/")).is_ok());
        let c = config_of(&new("x", "http://127.0.0.1:1/v1/")).unwrap();
        assert_eq!(c.base_url, "http://127.0.0.1:1/v1", "a trailing slash goes");
        assert_eq!(
            c.context_window, 128_000,
            "the [[providers]] defaults apply"
        );
        for (name, url) in [
            ("", "http://127.0.0.1:1"),
            ("a b", "http://127.0.0.1:1"),
            ("ok", "ftp://127.0.0.1/"),
            ("ok", "not a url"),
            ("ok", "file:///etc/passwd"),
        ] {
            assert!(config_of(&new(name, url)).is_err(), "{name:?} {url:?}");
        }
        let mut small = new("ok", "http://127.0.0.1:1");
        small.context_window = Some(10);
        assert!(config_of(&small).is_err());
    }

    #[test]
    fn a_key_is_masked_to_its_last_four() {
        assert_eq!(super::super::mask("sk-abcdefghijklmnop"), "…mnop");
        assert_eq!(super::super::mask("short-key"), "…");
    }

    #[test]
    fn r8_4_a_detected_server_never_takes_a_connected_providers_name() {
        assert_eq!(detected_name("llamacpp", |_| false), "llamacpp");
        let taken = ["llamacpp", "llamacpp-detected"];
        assert_eq!(
            detected_name("llamacpp", |n| taken.contains(&n)),
            "llamacpp-detected-2"
        );
    }
}
