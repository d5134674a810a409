//! Connecting a model at run time (issue 26; API.md `/v1/providers`), against the real binary
//! on SQLite and PostgreSQL. A server started with no provider refuses input; the operator
//! connects the scripted provider: a dead URL or a model the server does not list is 422
//! `provider_check_failed` and nothing is stored; a good one is 201 and answers the next turn
//! without a restart. Its key is masked in every answer, masked in what is admitted, stored
//! sealed (not in the database in clear, the sealing key in the data directory, 0600), and it
//! survives a restart. Removing it is 204, then 404, and input is refused again; both changes
//! are audited. On PostgreSQL, a provider connected on one replica serves the other (which
//! shares the key file) without a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sea_orm::{ConnectionTrait, Statement};
use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::wait::{eventually, BOUND};
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

const KEY: &str = "sk-connected-0123456789abcdef";

fn body(base_url: &str, model: &str) -> Value {
    json!({
        "name": "local",
        "kind": "openai",
        "base_url": base_url,
        "api_key": KEY,
        "model": model,
        "context_window": 32000,
    })
}

async fn delete(api: &Api, path: &str) -> u16 {
    api.try_send(reqwest::Method::DELETE, path, None, &[])
        .await
        .unwrap()
        .status
}

async fn listed(api: &Api) -> Vec<Value> {
    let r = api.get("/v1/providers").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains(KEY), "a key is never shown: {}", r.text);
    r.body["providers"].as_array().cloned().unwrap()
}

/// The sealed keys as the database holds them.
async fn stored_keys(database_url: &str) -> Vec<String> {
    let db = turnkey_tests::pg::open(database_url).await;
    let backend = db.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT api_key_sealed FROM connected_providers",
        ))
        .await
        .unwrap();
    let keys = rows
        .iter()
        .map(|r| {
            r.try_get::<Option<String>>("", "api_key_sealed")
                .unwrap()
                .unwrap_or_default()
        })
        .collect();
    db.close().await.unwrap();
    keys
}

async fn answers(api: &Api, model: &ScriptedProvider, text: &str) {
    let s = api.create_session_id().await;
    model.push(Reply::text(&format!("answer to {text}")));
    let a = api.submit_accepted(&s, text).await;
    let done = api.wait_terminal(&a, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert_eq!(
        done["outcome"]["final_response"],
        format!("answer to {text}")
    );
    let last = model.requests().pop().unwrap();
    assert_eq!(
        last.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(last.body["model"], "scripted-model");
}

async fn connects(database: Option<&str>) {
    let model = ScriptedProvider::start();
    let opts = TurnkeyOptions::new(&model).first_run(&[]);
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let mut tk = Turnkey::start(opts).await;
    let op = tk.api();
    assert!(listed(&op).await.is_empty());
    let s = op.create_session_id().await;
    let refused = op.submit(&s, "hello", None).await;
    assert_eq!(
        refused.error_code(),
        Some("no_provider"),
        "{}",
        refused.text
    );

    // Refused before anything is stored: bad fields, a dead server, a model it does not serve.
    for (bad, code) in [
        (
            json!({"name": "x", "kind": "gemini", "base_url": model.base_url, "model": "m"}),
            "invalid_provider",
        ),
        (
            json!({"name": "x", "kind": "openai", "base_url": "file:///etc/passwd", "model": "m"}),
            "invalid_provider",
        ),
        (
            json!({"name": "a b", "kind": "openai", "base_url": model.base_url, "model": "m"}),
            "invalid_provider",
        ),
        (
            json!({"kind": "openai", "base_url": model.base_url, "model": "m"}),
            "invalid_provider",
        ),
        (
            json!({"name": "x", "kind": "openai", "base_url": model.base_url, "model": "m", "principal_id": "root"}),
            "forbidden_field",
        ),
    ] {
        let r = op.post("/v1/providers", &bad).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        assert_eq!(r.error_code(), Some(code), "{}", r.text);
    }
    let dead = op
        .post(
            "/v1/providers",
            &body("http://127.0.0.1:1/v1", "scripted-model"),
        )
        .await;
    assert_eq!(dead.status, 422, "{}", dead.text);
    assert_eq!(dead.error_code(), Some("provider_check_failed"));
    assert!(dead.text.contains("no answer"), "{}", dead.text);
    let wrong = op
        .post("/v1/providers", &body(&model.base_url, "no-such-model"))
        .await;
    assert_eq!(wrong.status, 422, "{}", wrong.text);
    assert!(
        wrong.text.contains("scripted-model"),
        "names what it serves: {}",
        wrong.text
    );
    assert!(!wrong.text.contains(KEY), "{}", wrong.text);
    assert!(
        listed(&op).await.is_empty(),
        "nothing is stored after a failed check"
    );
    assert!(stored_keys(&tk.database_url).await.is_empty());

    // Only the operator.
    let t = op.post("/v1/tokens", &json!({"name": "bob"})).await;
    let bob_token = t.str_field("token");
    let bob = op.with_token(Some(&bob_token));
    let r = bob
        .post("/v1/providers", &body(&model.base_url, "scripted-model"))
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(bob.get("/v1/providers").await.status, 403);

    // Connected: answers at once, without a restart.
    let r = op
        .post("/v1/providers", &body(&model.base_url, "scripted-model"))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(!r.text.contains(KEY), "{}", r.text);
    assert_eq!(r.body["api_key"], "…cdef");
    assert_eq!(r.body["source"], "connected");
    assert_eq!(r.body["context_window"], 32000);
    let again = op
        .post("/v1/providers", &body(&model.base_url, "scripted-model"))
        .await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert_eq!(again.error_code(), Some("provider_exists"));
    let list = listed(&op).await;
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["name"], "local");
    assert_eq!(list[0]["model"], "scripted-model");
    let models = op.get("/v1/models").await;
    assert_eq!(
        models.body["data"][0]["id"], "scripted-model",
        "{}",
        models.text
    );
    answers(&op, &model, "first").await;

    // The key is a secret like a configured one: masked in what is admitted.
    model.push(Reply::text("noted"));
    let a = op.submit_accepted(&s, &format!("my key is {KEY} ok")).await;
    op.wait_terminal(&a, BOUND).await;
    let asked = model.requests().pop().unwrap().body.to_string();
    assert!(
        !asked.contains(KEY),
        "the model never sees the key: {asked}"
    );
    let rows = serde_json::to_string(&op.messages(&s).await).unwrap();
    assert!(!rows.contains(KEY) && rows.contains("[redacted]"), "{rows}");

    // At rest: sealed in the database, the sealing key beside it, readable by its owner only.
    let sealed = stored_keys(&tk.database_url).await;
    assert_eq!(sealed.len(), 1);
    assert!(
        sealed[0].starts_with("v1:") && !sealed[0].contains(KEY),
        "{sealed:?}"
    );
    let key_file = tk.dir.path().join("data").join("secrets.key");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    if database.is_none() {
        for file in ["turnkey.db", "turnkey.db-wal"] {
            let bytes = std::fs::read(tk.dir.path().join(file)).unwrap_or_default();
            assert!(
                !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
                "{file} holds the key in clear"
            );
        }
    }

    // `doctor` checks it like a configured one, its key opened from the key file.
    let out = std::process::Command::new(turnkey_tests::harness::turnkey_binary().unwrap())
        .args(["doctor", "--config"])
        .arg(&tk.config_path)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("provider[0] local (primary, connected, model scripted-model): ok"),
        "{report}"
    );
    assert!(!report.contains(KEY), "{report}");

    // It survives a restart.
    tk.restart().await;
    let op = tk.api();
    let bob = op.with_token(Some(&bob_token));
    assert_eq!(listed(&op).await.len(), 1);
    let said = tk.stderr();
    assert!(said.contains("provider: local (openai) at"), "{said}");
    assert!(said.contains("(connected in the web UI"), "{said}");
    answers(&op, &model, "after a restart").await;

    // Removed: input is refused again; a configured name or a second delete is not found.
    assert_eq!(delete(&bob, "/v1/providers/local").await, 403);
    assert_eq!(delete(&op, "/v1/providers/local").await, 204);
    assert_eq!(delete(&op, "/v1/providers/local").await, 404);
    assert!(listed(&op).await.is_empty());
    let refused = op.submit(&s, "hello again", None).await;
    assert_eq!(
        refused.error_code(),
        Some("no_provider"),
        "{}",
        refused.text
    );

    let audit = op.get("/v1/audit").await;
    let actions: Vec<&str> = audit.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["target"] == "local")
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["provider.connected", "provider.removed"],
        "{}",
        audit.text
    );
    assert!(!audit.text.contains(KEY), "{}", audit.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_a_provider_connected_at_run_time_answers_without_a_restart_sqlite() {
    connects(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_a_provider_connected_at_run_time_answers_without_a_restart_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    connects(Some(db.url())).await;
}

/// A configured provider keeps precedence: a connected one follows it in the chain and is
/// what the turn falls back to; the configured one cannot be removed here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_a_connected_provider_follows_the_configured_ones() {
    let primary = ScriptedProvider::start();
    let second = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&primary)).await;
    let op = tk.api();
    let r = op
        .post("/v1/providers", &body(&second.base_url, "scripted-model"))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let list = listed(&op).await;
    let names: Vec<&str> = list.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["scripted", "local"]);
    assert_eq!(list[0]["source"], "configured");
    let r = op
        .try_send(reqwest::Method::DELETE, "/v1/providers/scripted", None, &[])
        .await
        .unwrap();
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(r.error_code(), Some("provider_configured"));
    let clash = op
        .post("/v1/providers", &json!({"name": "scripted", "kind": "openai", "base_url": second.base_url, "model": "scripted-model"}))
        .await;
    assert_eq!(
        clash.error_code(),
        Some("provider_exists"),
        "{}",
        clash.text
    );

    // The primary answers; when it fails for good, the connected one does.
    let s = op.create_session_id().await;
    primary.push(Reply::text("from the primary"));
    let a = op.submit_accepted(&s, "one").await;
    let done = op.wait_terminal(&a, BOUND).await;
    assert_eq!(done["outcome"]["final_response"], "from the primary");
    primary.push(Reply::error(400, "invalid_request_error"));
    second.push(Reply::text("from the connected one"));
    let a = op.submit_accepted(&s, "two").await;
    let done = op.wait_terminal(&a, BOUND).await;
    assert_eq!(
        done["outcome"]["final_response"], "from the connected one",
        "{done}"
    );
}

/// Replicas: connected on A, it serves a turn on B without a restart (one shared key file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_a_provider_connected_on_one_replica_serves_the_other() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    let model = ScriptedProvider::start();
    let shared = tempfile::tempdir().unwrap();
    let key_file = shared.path().join("secrets.key");
    let opts = TurnkeyOptions::new(&model)
        .first_run(&[])
        .database(db.url())
        .extra_toml(&format!(
            "[security]\nsecrets_key_file = \"{}\"\n",
            key_file.display()
        ));
    let a = Turnkey::start(opts.clone()).await;
    let b = Turnkey::start(opts).await;
    let r = a
        .api()
        .post("/v1/providers", &body(&model.base_url, "scripted-model"))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let on_b = b.api();
    eventually(Duration::from_secs(10), "the provider on replica B", || {
        let on_b = on_b.clone();
        async move { (!listed(&on_b).await.is_empty()).then_some(()) }
    })
    .await;
    answers(&on_b, &model, "on replica b").await;
    assert_eq!(delete(&on_b, "/v1/providers/local").await, 204);
    let on_a = a.api();
    eventually(Duration::from_secs(10), "the removal on replica A", || {
        let on_a = on_a.clone();
        async move { listed(&on_a).await.is_empty().then_some(()) }
    })
    .await;
}
