//! Tests of the tool offer: always-on schemas and one index; a call through the index resolves
//! to the real tool and goes back on the wire as the model made it.
use super::*;

fn schema(name: &str, description: &str) -> ToolSchema {
    ToolSchema {
        name: name.into(),
        description: description.into(),
        parameters: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
    }
}

fn offer() -> ToolOffer {
    ToolOffer::new(
        vec![
            schema("read_file", "Read a file."),
            schema("schedule", "Schedule a message. More detail here."),
            schema("memory", "Remember facts across sessions. Details."),
        ],
        &["read_file".to_owned()],
    )
}

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: "c1".into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

#[test]
fn r5_2_always_on_tools_come_whole_and_the_rest_behind_one_index() {
    let o = offer();
    let names: Vec<&str> = o.schemas().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["read_file", INDEX_TOOL]);
    let index = &o.schemas()[1];
    assert!(
        index
            .description
            .ends_with("schedule: Schedule a message; memory: Remember facts across sessions"),
        "{}",
        index.description
    );
    assert_eq!(
        index.parameters["properties"]["name"]["enum"],
        json!(["schedule", "memory"])
    );
    // A sub-agent that is not given memory does not see it listed.
    let child = o.schemas_without(&["memory"]);
    assert_eq!(
        child[1].parameters["properties"]["name"]["enum"],
        json!(["schedule"])
    );
    // Nothing listed, no index; nor for one tool alone.
    let all = ToolOffer::new(
        vec![schema("read_file", "Read.")],
        &["read_file".to_owned()],
    );
    assert_eq!(all.schemas().len(), 1);
    let one = ToolOffer::new(
        vec![schema("memory", "Remember.")],
        &["read_file".to_owned()],
    );
    assert_eq!(one.schemas()[0].name, "memory");
    assert!(one.deferred().is_empty());
    assert_eq!(
        all.resolve(call(INDEX_TOOL, r#"{"name":"read_file","arguments":{}}"#))
            .name,
        INDEX_TOOL
    );
}

#[test]
fn r5_2_a_call_through_the_index_is_the_named_tools_call() {
    let o = offer();
    let run = o.resolve(call(
        INDEX_TOOL,
        r#"{"name": "schedule", "arguments": {"x": "in 5"}}"#,
    ));
    assert_eq!((run.id.as_str(), run.name.as_str()), ("c1", "schedule"));
    assert_eq!(run.arguments, r#"{"x":"in 5"}"#);
    // Arguments as a string holding an object, as some models send them.
    let run = o.resolve(call(
        INDEX_TOOL,
        r#"{"name": "memory", "arguments": "{\"x\": \"y\"}"}"#,
    ));
    assert_eq!(
        (run.name.as_str(), run.arguments.as_str()),
        ("memory", r#"{"x": "y"}"#)
    );
    // Asking for a tool's parameters, an unknown name, or arguments that are no object: the
    // index answers it.
    for args in [
        r#"{"name": "schedule"}"#,
        r#"{"name": "nope", "arguments": {}}"#,
        r#"{"name": "schedule", "arguments": [1]}"#,
        "not json",
    ] {
        assert_eq!(o.resolve(call(INDEX_TOOL, args)).name, INDEX_TOOL, "{args}");
    }
    // A direct call is left alone.
    assert_eq!(o.resolve(call("read_file", "{}")).name, "read_file");
}

#[test]
fn r5_2_on_the_wire_a_listed_tools_call_names_the_index() {
    let o = offer();
    let made = call(
        INDEX_TOOL,
        r#"{"name":"schedule","arguments":{"x":"in 5"}}"#,
    );
    let stored = o.resolve(made.clone());
    let wired = o.wrap(&stored).expect("listed");
    assert_eq!(wired.id, "c1");
    assert_eq!(wired.name, INDEX_TOOL);
    assert_eq!(
        serde_json::from_str::<Value>(&wired.arguments).unwrap(),
        serde_json::from_str::<Value>(&made.arguments).unwrap()
    );
    assert!(o.wrap(&call("read_file", "{}")).is_none(), "offered itself");
}

#[tokio::test]
async fn r5_2_the_index_describes_a_listed_tool() {
    let o = offer();
    let tool = IndexTool::new(&o);
    let ctx = ToolContext {
        workspace: std::env::temp_dir(),
        hidden: None,
        checkpoints: std::env::temp_dir(),
        cancel: Default::default(),
        progress: std::sync::Arc::new(|_| {}),
        caller: Default::default(),
    };
    let out = tool.call(json!({"name": "schedule"}), &ctx).await;
    assert!(!out.is_error, "{}", out.content);
    let v: Value = serde_json::from_str(&out.content).unwrap();
    assert_eq!(v["description"], "Schedule a message. More detail here.");
    assert_eq!(v["parameters"]["properties"]["x"]["type"], "string");
    let out = tool.call(json!({"name": "nope"}), &ctx).await;
    assert!(
        out.is_error && out.content.contains("schedule, memory"),
        "{}",
        out.content
    );
}

#[test]
fn r5_2_a_long_first_sentence_is_cut_at_a_word() {
    let long = "word ".repeat(40);
    let s = summary(&long);
    assert!(
        s.ends_with('…') && s.chars().count() <= SUMMARY_CHARS + 1,
        "{s}"
    );
    assert_eq!(summary("One. Two."), "One");
    assert_eq!(summary("Load a skill: its file. More."), "Load a skill");
    assert_eq!(summary("GET a URL (64 KiB); more"), "GET a URL");
    assert_eq!(summary("No stop"), "No stop");
}
