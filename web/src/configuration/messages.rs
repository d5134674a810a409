//! How a configuration error reads: the `config` crate's errors become one [`InvalidConfig`]
//! per key, with dotted paths (`providers[0].base_url`), the valid values of an enum listed,
//! and a negative number called negative rather than "a string".
use super::InvalidConfig;
use config::ConfigError;
use serde::de::DeserializeOwned;
use turnkey_actors::config::{ApprovalMode, BusyPolicy, CompressionMode};
use turnkey_providers::ProviderKind;

/// Keys whose validation requires at least 1; every other whole number may be 0.
const AT_LEAST_ONE: &[&str] = &[
    "server.max_body_bytes",
    "server.max_upload_bytes",
    "lease.ttl_s",
    "lease.refresh_s",
    "agent.max_iterations",
    "agent.iteration_budget",
    "tools.max_workers",
];

impl From<ConfigError> for InvalidConfig {
    fn from(e: ConfigError) -> Self {
        match e {
            ConfigError::Type {
                origin,
                unexpected,
                expected,
                key,
            } => {
                let key = dotted(key.as_deref().unwrap_or("config"));
                let got = unexpected.to_string();
                let reason = match negative_number(&got).filter(|_| expected.contains("integer")) {
                    Some(n) => format!(
                        "{n} is negative; expected a whole number >= {}",
                        minimum(&key)
                    ),
                    None => format!("invalid type: {got}, expected {expected}"),
                };
                Self::new(key, format!("{reason}{}", from(origin)))
            }
            ConfigError::At { error, origin, key } => {
                let mut found = explain(key.as_deref(), &error.to_string());
                found.reason.push_str(&from(origin));
                found
            }
            ConfigError::Message(m) => explain(None, &m),
            ConfigError::NotFound(key) => Self::new(dotted(&key), "missing"),
            ConfigError::FileParse { uri, cause } => Self::new(
                uri.unwrap_or_else(|| "config file".into()),
                cause.to_string(),
            ),
            other => Self::new("config", other.to_string()),
        }
    }
}

fn from(origin: Option<String>) -> String {
    origin.map(|o| format!(" (from {o})")).unwrap_or_default()
}

/// Reads serde's own wording (unknown variant, unknown field, missing field) back into a key
/// and a reason; anything else keeps its message.
fn explain(key: Option<&str>, message: &str) -> InvalidConfig {
    let key = key.map(dotted);
    let here = |field: &str| match &key {
        Some(k) => format!("{k}.{field}"),
        None => field.to_owned(),
    };
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let (got, expected) = split_quoted(rest);
        return InvalidConfig::new(
            key.unwrap_or_else(|| "config".into()),
            format!("must be one of {}; got {got:?}", quoted_names(expected)),
        );
    }
    // The `config` crate's own wording names the enum type but not its values.
    if let Some((enum_name, got)) = message
        .strip_prefix("enum ")
        .and_then(|rest| rest.split_once(" does not have variant constructor "))
    {
        if let Some(valid) = enum_values(enum_name) {
            return InvalidConfig::new(
                key.unwrap_or_else(|| "config".into()),
                format!("must be one of {valid}; got {got:?}"),
            );
        }
    }
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let (field, expected) = split_quoted(rest);
        return InvalidConfig::new(
            here(&field),
            format!(
                "unknown key {field:?}; the keys here are {}",
                quoted_names(expected)
            ),
        );
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        let (field, _) = split_quoted(rest);
        return InvalidConfig::new(here(&field), "missing; this key is required");
    }
    InvalidConfig::new(key.unwrap_or_else(|| "config".into()), message)
}

/// "`name`, rest" → ("name", "rest").
fn split_quoted(s: &str) -> (String, &str) {
    let inner = s.strip_prefix('`').unwrap_or(s);
    match inner.split_once('`') {
        Some((name, rest)) => (name.to_owned(), rest),
        None => (inner.to_owned(), ""),
    }
}

/// The values of a config enum, as its own `Deserialize` spells them: serde's error for a
/// value that no variant has lists them all, so they are never written down twice.
fn enum_values(enum_name: &str) -> Option<String> {
    fn probe<T: DeserializeOwned>() -> Option<String> {
        let refused =
            serde_json::from_value::<T>(serde_json::Value::String(String::new())).err()?;
        Some(quoted_names(&refused.to_string()))
    }
    match enum_name {
        "BusyPolicy" => probe::<BusyPolicy>(),
        "ApprovalMode" => probe::<ApprovalMode>(),
        "CompressionMode" => probe::<CompressionMode>(),
        "ProviderKind" => probe::<ProviderKind>(),
        "MissedPolicy" => probe::<turnkey_storage::MissedPolicy>(),
        _ => None,
    }
}

/// serde lists choices as "expected one of `a`, `b`" or "expected `a` or `b`".
fn quoted_names(message: &str) -> String {
    let expected = message
        .split_once("expected")
        .map_or(message, |(_, rest)| rest);
    let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    if names.is_empty() {
        "(none)".into()
    } else {
        names.join(", ")
    }
}

/// The `config` crate joins a list index without a dot (`providers[0]base_url`).
pub(super) fn dotted(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    let mut chars = key.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == ']' && chars.peek().is_some_and(|n| *n != '[' && *n != '.') {
            out.push('.');
        }
    }
    out
}

/// The number a value shows, when it is negative: the environment hands every value over as
/// a string ("string \"-3\""), a file as a number ("64-bit integer `-3`").
fn negative_number(got: &str) -> Option<String> {
    let raw = match got.strip_prefix("string ") {
        Some(quoted) => quoted.trim_matches('"').trim().to_owned(),
        None => got.split('`').nth(1)?.to_owned(),
    };
    let n: f64 = raw.parse().ok()?;
    (n < 0.0).then_some(raw)
}

fn minimum(key: &str) -> u8 {
    u8::from(AT_LEAST_ONE.contains(&key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_indexes_are_followed_by_a_dot() {
        assert_eq!(dotted("providers[0]base_url"), "providers[0].base_url");
        assert_eq!(dotted("a[0][1]b"), "a[0][1].b");
        assert_eq!(dotted("providers[0].kind"), "providers[0].kind");
        assert_eq!(dotted("providers[2]"), "providers[2]");
    }

    #[test]
    fn serde_choices_are_listed_plainly() {
        assert_eq!(quoted_names(", expected one of `a`, `b`, `c`"), "a, b, c");
        assert_eq!(quoted_names(", expected `a` or `b`"), "a, b");
        let e = explain(
            Some("agent.busy_policy"),
            "unknown variant `x`, expected one of `queue`, `interrupt`, `steer`",
        );
        assert_eq!(
            e.reason,
            "must be one of queue, interrupt, steer; got \"x\""
        );
    }

    #[test]
    fn every_config_enum_lists_its_values() {
        for (name, values) in [
            ("BusyPolicy", "queue, interrupt, steer"),
            ("ApprovalMode", "off, dangerous, always"),
            ("CompressionMode", "in_place, rotate"),
            ("ProviderKind", "openai, anthropic"),
            ("MissedPolicy", "run_once, skip"),
        ] {
            assert_eq!(enum_values(name).as_deref(), Some(values), "{name}");
        }
    }

    #[test]
    fn negative_numbers_are_found_in_either_spelling() {
        assert_eq!(negative_number("string \"-3\""), Some("-3".into()));
        assert_eq!(negative_number("64-bit integer `-7`"), Some("-7".into()));
        assert_eq!(negative_number("string \"soon\""), None);
        assert_eq!(negative_number("64-bit integer `7`"), None);
    }
}
