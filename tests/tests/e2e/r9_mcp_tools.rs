//! MCP tools end to end (SPEC R9, API.md `[[tools.mcp]]`): the real binary starts
//! `mcp-server-time` (from `TURNKEY_MCP_BIN_DIR`), offers its tool as `time__get_current_time`,
//! runs the model's call through the tool round and hands the answer back; a server that does
//! not start stops `serve` with exit 2 naming `tools.mcp[0]`. Without the server the tests
//! print "skipping: …", unless `TURNKEY_REQUIRE_MCP=1` (CI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::path::PathBuf;
use turnkey_tests::harness::turnkey_binary;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;

fn time_server() -> Option<PathBuf> {
    let required = turnkey_tests::require::flag("TURNKEY_REQUIRE_MCP");
    let found = std::env::var_os("TURNKEY_MCP_BIN_DIR")
        .map(|dir| PathBuf::from(dir).join("mcp-server-time"))
        .filter(|p| p.is_file());
    if found.is_none() {
        assert!(
            !required,
            "TURNKEY_REQUIRE_MCP=1 but mcp-server-time is not in TURNKEY_MCP_BIN_DIR"
        );
        println!("skipping: mcp-server-time not found (set TURNKEY_MCP_BIN_DIR to the venv's bin)");
    }
    found
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_mcp_time_tool_is_offered_called_and_answered() {
    let Some(server) = time_server() else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.push(Reply::tool_call(
        "t1",
        "time__get_current_time",
        json!({"timezone": "UTC"}),
    ));
    provider.push(Reply::text("done"));
    // Offered with its schema in every request (`always_on`), not only through the index.
    let toml = format!(
        "[tools]\napproval = \"off\"\nalways_on = [\"read_file\", \"time__get_current_time\"]\n\n\
         [[tools.mcp]]\nname = \"time\"\ncommand = \"{}\"\n",
        server.display()
    );
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).extra_toml(&toml)).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "what time is it in UTC?").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(
        adm["outcome"]["result"],
        "completed",
        "{adm}\n{}",
        tk.log_tail(40)
    );

    let events = api.all_events(&s, 0).await;
    let completed: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool.completed")
        .collect();
    assert_eq!(completed.len(), 1, "{events:?}");
    assert_eq!(completed[0]["data"]["status"], "ok", "{}", completed[0]);

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let offered = tool_names(&requests[0].body);
    assert!(
        offered.iter().any(|n| n == "time__get_current_time"),
        "{offered:?}"
    );
    assert!(
        offered.iter().any(|n| n == "read_file"),
        "built-ins beside it"
    );
    let schema = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "time__get_current_time")
        .map(|t| t["function"]["parameters"].clone())
        .unwrap();
    assert!(schema["properties"]["timezone"].is_object(), "{schema}");

    let result = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "t1")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    let answer: Value = serde_json::from_str(&result)
        .unwrap_or_else(|e| panic!("the time answer is JSON ({e}): {result}"));
    assert_eq!(answer["timezone"], "UTC", "{answer}");
    assert!(
        answer["datetime"]
            .as_str()
            .is_some_and(|d| d.ends_with("+00:00")),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_mcp_server_that_does_not_start_stops_serve_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("turnkey.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ndata_dir = \"{}\"\n\n[[tools.mcp]]\nname = \"gone\"\ncommand = \"{}\"\n",
            dir.path().join("data").display(),
            dir.path().join("no-such-mcp-server").display()
        ),
    )
    .unwrap();
    let binary = turnkey_binary().unwrap();
    let run = tokio::process::Command::new(binary)
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .arg("--bind")
        .arg("127.0.0.1:0")
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_MODEL")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(BOUND, run).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("tools.mcp[0]"), "{stderr}");
    assert!(stderr.contains("no-such-mcp-server"), "{stderr}");
}
