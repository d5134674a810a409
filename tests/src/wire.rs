//! Checks on what the model was sent, read from the scripted provider's recorded bodies.
use serde_json::Value;

/// `(role, content)` of each message of a recorded Chat Completions body.
pub fn wire_messages(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let content = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (m["role"].as_str().unwrap_or("?").to_string(), content)
        })
        .collect()
}

/// The invariant every request after a crash keeps (SPEC R10.5): no two user messages in a
/// row, and the killed input is never an unanswered question (an assistant message follows).
pub fn assert_closed_wire(body: &Value, killed_text: &str) {
    let msgs = wire_messages(body);
    for pair in msgs.windows(2) {
        assert!(
            !(pair[0].0 == "user" && pair[1].0 == "user"),
            "two user messages in a row: {msgs:?}"
        );
    }
    for (i, (role, content)) in msgs.iter().enumerate() {
        if role == "user" && content.contains(killed_text) {
            assert_eq!(
                msgs.get(i + 1).map(|m| m.0.as_str()),
                Some("assistant"),
                "the killed input is answered by a closing row: {msgs:?}"
            );
        }
    }
}

/// A well-formed Chat Completions message list: no two user (or two assistant) messages in a
/// row, every assistant tool call followed by all its results, and no result without its call.
pub fn assert_well_formed(msgs: &[Value]) {
    for pair in msgs.windows(2) {
        let (a, b) = (&pair[0]["role"], &pair[1]["role"]);
        assert!(
            !(a == b && (a == "user" || a == "assistant")),
            "two {a} messages in a row: {pair:?}"
        );
    }
    let mut i = 0;
    while i < msgs.len() {
        assert_ne!(
            msgs[i]["role"], "tool",
            "a tool result without its call at {i}: {}",
            msgs[i]
        );
        let calls = msgs[i]["tool_calls"].as_array().cloned();
        i += 1;
        if let Some(calls) = calls {
            let ids: std::collections::HashSet<String> = calls
                .iter()
                .filter_map(|c| c["id"].as_str().map(str::to_owned))
                .collect();
            let mut seen = std::collections::HashSet::new();
            while i < msgs.len() && msgs[i]["role"] == "tool" {
                seen.insert(
                    msgs[i]["tool_call_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                );
                i += 1;
            }
            assert_eq!(ids, seen, "a call without all its results");
        }
    }
}
