//! The OS sandbox through the real binary (SPEC R13.7): a model's `terminal` call that writes
//! outside the workspace is refused by the kernel while its write inside lands, and
//! `/readyz` and `/metrics` say what confines commands; with `tools.sandbox = "off"` the same
//! call writes outside (the positive control). On a kernel without Landlock the confined test
//! says so in one line and passes, unless `TURNKEY_REQUIRE_SANDBOX=1`.
use serde_json::{json, Value};
use std::path::Path;
use turnkey_tests::wait::BOUND;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

/// The model writes in the workspace, then outside it, then reads the system.
fn escape(outside: &Path) -> Reply {
    let command = format!(
        "echo inside > in.txt; echo outside > {}/escaped; head -c 1 /etc/passwd >/dev/null && echo read-ok",
        outside.display()
    );
    Reply::ToolCalls(vec![(
        "c1".into(),
        "terminal".into(),
        json!({ "command": command }),
    )])
}

/// Runs the escape in a gateway with `sandbox_toml` in `[tools]`; answers the tool result the
/// model got and the gateway.
async fn run(sandbox_toml: &str, outside: &Path) -> (Value, Turnkey, ScriptedProvider) {
    let provider = ScriptedProvider::start();
    provider.push(escape(outside));
    provider.push(Reply::text("done"));
    let opts = TurnkeyOptions::new(&provider)
        .extra_toml(&format!("[tools]\napproval = \"off\"\n{sandbox_toml}\n"));
    let tk = Turnkey::start(opts).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "try to escape").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    let second = provider.requests()[1].body.clone();
    let result = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .unwrap();
    (result, tk, provider)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_7_a_models_command_cannot_write_outside_the_workspace() {
    let outside = tempfile::tempdir().unwrap();
    let (result, tk, _provider) = run("", outside.path()).await;
    let ready = tk.api().with_token(None).readyz().await;
    assert_eq!(ready.status, 200, "{}", ready.text);
    let sandbox = &ready.body["sandbox"];
    assert_eq!(sandbox["mode"], "auto", "{}", ready.text);
    if sandbox["enforced"] != true {
        assert_ne!(
            std::env::var("TURNKEY_REQUIRE_SANDBOX").as_deref(),
            Ok("1"),
            "TURNKEY_REQUIRE_SANDBOX=1 but the sandbox is not in force: {}",
            ready.text
        );
        eprintln!(
            "skipped: this kernel cannot confine commands ({})",
            sandbox["reason"]
        );
        return;
    }
    assert!(
        sandbox["landlock_abi"].as_u64().unwrap() >= 1,
        "{}",
        ready.text
    );
    assert_eq!(sandbox["network_denied"], true, "{}", ready.text);
    assert!(sandbox["summary"]
        .as_str()
        .unwrap()
        .starts_with("landlock ABI"));

    let stderr = result["stderr"].as_str().unwrap();
    assert!(stderr.contains("Permission denied"), "{result}");
    assert_eq!(result["stdout"], "read-ok\n", "{result}");
    assert!(!outside.path().join("escaped").exists());
    let inside = tk.dir.path().join("workspace/in.txt");
    assert_eq!(std::fs::read_to_string(inside).unwrap(), "inside\n");

    let metrics = tk.api().get("/metrics").await.text;
    assert!(
        metrics.contains("\nturnkey_sandbox_enforced 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nturnkey_sandbox_network_denied 1\n"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("\nturnkey_sandbox_landlock_abi 0\n"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_7_with_the_sandbox_off_the_same_command_writes_outside() {
    let outside = tempfile::tempdir().unwrap();
    let (result, tk, _provider) = run("sandbox = \"off\"", outside.path()).await;
    assert_eq!(result["exit_code"], 0, "{result}");
    assert!(outside.path().join("escaped").exists(), "{result}");
    let ready = tk.api().with_token(None).readyz().await;
    assert_eq!(ready.body["sandbox"]["mode"], "off", "{}", ready.text);
    assert_eq!(ready.body["sandbox"]["enforced"], false, "{}", ready.text);
    let metrics = tk.api().get("/metrics").await.text;
    assert!(
        metrics.contains("\nturnkey_sandbox_enforced 0\n"),
        "{metrics}"
    );
}
