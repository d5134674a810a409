//! `Secret`: a token, key or signing secret from the configuration. It never prints (`Debug`
//! shows whether it is set, `Display` shows `***`) and it has no `Serialize`, so it cannot
//! leave in a log line, a panic message or a JSON body by accident; [`Secret::expose`] is the
//! one way to its value, called where the value is sent or checked.
use serde::Deserialize;
use std::fmt;

#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for where it is sent (a request header) or compared (a signature key).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A configured key: `key` when set and not empty, else the value of the variable `env`
    /// names, when that is set and not empty (`api_key` / `api_key_env`).
    pub fn resolve(key: Option<&Secret>, env: Option<&str>) -> Option<Secret> {
        if let Some(key) = key.filter(|k| !k.is_empty()) {
            return Some(key.clone());
        }
        let var = env.filter(|v| !v.is_empty())?;
        std::env::var(var)
            .ok()
            .filter(|k| !k.is_empty())
            .map(Secret::from)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.is_empty() {
            true => f.write_str("Secret(<empty>)"),
            false => f.write_str("Secret(<redacted>)"),
        }
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn a_secret_never_prints_its_value() {
        let s = Secret::new("sk-live-1234");
        for shown in [format!("{s:?}"), format!("{s}"), format!("{:?}", Some(&s))] {
            assert!(!shown.contains("sk-live"), "{shown}");
        }
        assert_eq!(format!("{:?}", Secret::default()), "Secret(<empty>)");
        assert_eq!(s.expose(), "sk-live-1234");
    }

    #[test]
    fn a_secret_reads_from_a_plain_string() {
        let s: Secret = serde_json::from_str("\"xoxb-1\"").expect("a string");
        assert_eq!(s.expose(), "xoxb-1");
        assert!(serde_json::from_str::<Secret>("1").is_err());
    }
}
