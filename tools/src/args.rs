//! Turns a call's JSON arguments into a typed struct, with messages a model can act on
//! (`invalid arguments: missing field "path"`).
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Parses `args` as `T`. A JSON string holding an object is accepted too: some models send
/// their arguments encoded once more.
pub(crate) fn parse<T: DeserializeOwned>(args: Value) -> Result<T, String> {
    let args = match args {
        Value::String(text) => serde_json::from_str(&text)
            .map_err(|e| format!("invalid arguments: not a JSON object: {e}"))?,
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    if !args.is_object() {
        return Err("invalid arguments: expected a JSON object".to_owned());
    }
    serde_json::from_value(args).map_err(|e| {
        // serde quotes names with backticks; plain quotes read better in a chat transcript.
        format!("invalid arguments: {}", e.to_string().replace('`', "\""))
    })
}

/// Refuses an empty string argument by name.
pub(crate) fn non_empty<'a>(name: &str, value: &'a str) -> Result<&'a str, String> {
    if value.is_empty() {
        Err(format!("invalid arguments: \"{name}\" is empty"))
    } else {
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        #[allow(dead_code)]
        path: String,
    }

    #[test]
    fn r9_6_argument_errors_name_the_field() {
        let err = parse::<Args>(json!({})).unwrap_err();
        assert_eq!(err, r#"invalid arguments: missing field "path""#);
        let err = parse::<Args>(json!({"path": "a", "pth": 1})).unwrap_err();
        assert!(
            err.starts_with(r#"invalid arguments: unknown field "pth""#),
            "{err}"
        );
        let err = parse::<Args>(json!([1])).unwrap_err();
        assert_eq!(err, "invalid arguments: expected a JSON object");
        assert!(parse::<Args>(json!(r#"{"path": "a"}"#)).is_ok());
    }
}
