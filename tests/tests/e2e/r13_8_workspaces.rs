//! A workspace per principal (SPEC R13.8; `tools.isolation = "principal"`, the default) against
//! the real binary, on SQLite and PostgreSQL: alice's agent writes a file in her own workspace
//! (`principals/<her folder>` under the root); bob's agent cannot read it, neither with
//! `read_file` nor with a command (the sandbox hides the root but for his own folder); the
//! operator's sessions work in the root and see everyone's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use turnkey_tests::wait::BOUND;
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

async fn token(op: &Api, name: &str) -> Api {
    let r = op.post("/v1/tokens", &json!({ "name": name })).await;
    assert_eq!(r.status, 201, "{}", r.text);
    op.with_token(Some(&r.str_field("token")))
}

async fn run(api: &Api, text: &str) {
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, text).await;
    let done = api.wait_terminal(&a, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
}

async fn isolated(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let call = |ask: &str, id: &str, tool: &str, args: serde_json::Value| {
        provider.on_tool_result(ask, Reply::text("done"));
        provider.on_user_text(ask, Reply::tool_call(id, tool, args));
    };
    call(
        "alice writes",
        "a1",
        "write_file",
        json!({"path": "plans.txt", "content": "alice's secret plans"}),
    );
    call("bob reads", "b1", "read_file", json!({"path": "plans.txt"}));
    call(
        "bob peeks",
        "b2",
        "terminal",
        json!({"command": "cat ../*/plans.txt; ls .. ; cat ../../plans.txt"}),
    );
    call(
        "operator looks",
        "o1",
        "terminal",
        json!({"command": "cat principals/*/plans.txt"}),
    );
    let opts = TurnkeyOptions::new(&provider).extra_toml("[tools]\napproval = \"off\"\n");
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let tk = Turnkey::start(opts).await;
    let op = tk.api();
    let alice = token(&op, "alice").await;
    let bob = token(&op, "bob").await;

    run(&alice, "alice writes").await;
    let root = tk.dir.path().join("workspace");
    assert!(!root.join("plans.txt").exists(), "not in the root");
    let homes: Vec<_> = std::fs::read_dir(root.join("principals"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(homes.len(), 1, "{homes:?}");
    assert_eq!(
        std::fs::read_to_string(homes[0].join("plans.txt")).unwrap(),
        "alice's secret plans"
    );

    run(&bob, "bob reads").await;
    let read = provider.tool_result(provider.request_count() - 1, "b1");
    assert!(read.contains("error"), "bob's read_file: {read}");
    assert!(!read.contains("secret plans"), "{read}");

    run(&bob, "bob peeks").await;
    let peek = provider.tool_result(provider.request_count() - 1, "b2");
    assert!(!peek.contains("secret plans"), "{peek}");
    assert!(peek.contains("Permission denied"), "{peek}");

    // The operator works in the root and sees every principal's files (the positive control).
    run(&op, "operator looks").await;
    let looked = provider.tool_result(provider.request_count() - 1, "o1");
    assert!(looked.contains("alice's secret plans"), "{looked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_each_principal_has_a_workspace_of_its_own_sqlite() {
    isolated(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_each_principal_has_a_workspace_of_its_own_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    isolated(Some(db.url())).await;
}
