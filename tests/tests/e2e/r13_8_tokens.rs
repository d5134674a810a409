//! Tokens and the audit log (SPEC R13.8; API.md "Tenancy and security") against the real
//! binary, on SQLite and PostgreSQL: the operator lists tokens (never their secrets), makes one
//! read-only (403 `read_only` on anything that writes, over HTTP and the WebSocket, while reads
//! work) or expiring (401 once it expired), and revokes one: 401 at once, its open SSE stream
//! and WebSocket end, and revoking again is 404. `last_used_at` is noted. Creating and
//! revoking tokens and deciding an approval are in `GET /v1/audit`, which only the operator
//! reads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use turnkey_tests::wait::{eventually, BOUND};
use turnkey_tests::ws::WsClient;
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

async fn start(provider: &ScriptedProvider, database: Option<&str>) -> Turnkey {
    let opts = TurnkeyOptions::new(provider).extra_toml("[tools]\napproval = \"always\"\n");
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    Turnkey::start(opts).await
}

/// Creates a token; answers `(token_id, secret)`.
async fn token(api: &Api, body: Value) -> (String, String) {
    let r = api.post("/v1/tokens", &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    (r.str_field("token_id"), r.str_field("token"))
}

async fn delete(api: &Api, path: &str) -> u16 {
    api.try_send(reqwest::Method::DELETE, path, None, &[])
        .await
        .unwrap()
        .status
}

fn listed<'a>(list: &'a Value, id: &str) -> &'a Value {
    list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {list}"))
}

async fn tokens_and_audit(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_tool_result("run it", Reply::text("done"));
    provider.on_user_text(
        "run it",
        Reply::tool_call("c1", "terminal", json!({"command": "echo ran"})),
    );
    let tk = start(&provider, database).await;
    let op = tk.api();

    // Bad bodies first: nothing is made.
    for bad in [
        json!({"name": "x", "expires_in_s": 0}),
        json!({"name": "x", "expires_in_s": "soon"}),
        json!({"name": "x", "expires_in_s": -5}),
    ] {
        let r = op.post("/v1/tokens", &bad).await;
        assert_eq!(
            (r.status, r.error_code()),
            (400, Some("invalid_expiry")),
            "{bad}: {}",
            r.text
        );
    }

    let (plain_id, plain) = token(&op, json!({"name": "alice"})).await;
    let (ro_id, ro) = token(&op, json!({"name": "auditor", "read_only": true})).await;
    let r = op
        .post("/v1/tokens", &json!({"name": "brief", "expires_in_s": 2}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["expires_in_s"], 2);
    assert!(r.body["expires_at"].is_string(), "{}", r.text);
    let brief = r.str_field("token");

    // The list: every live token, never a secret.
    let list = op.get("/v1/tokens").await;
    assert_eq!(list.status, 200, "{}", list.text);
    assert!(
        !list.text.contains(&plain) && !list.text.contains(&ro),
        "no secret is listed"
    );
    let ro_row = listed(&list.body, &ro_id);
    assert_eq!(ro_row["read_only"], true);
    assert_eq!(ro_row["name"], "auditor");
    assert_eq!(ro_row["expires_at"], Value::Null);
    assert_eq!(listed(&list.body, &plain_id)["read_only"], false);

    // Only the operator manages tokens and reads the audit log.
    let alice = op.with_token(Some(&plain));
    assert_eq!(alice.get("/v1/tokens").await.status, 403);
    assert_eq!(alice.get("/v1/audit").await.status, 403);
    assert_eq!(delete(&alice, &format!("/v1/tokens/{ro_id}")).await, 403);

    // A read-only token reads, and every write is 403 read_only with nothing written.
    let auditor = op.with_token(Some(&ro));
    assert_eq!(auditor.get("/v1/sessions").await.status, 200);
    let r = auditor.post("/v1/sessions", &json!({})).await;
    assert_eq!(
        (r.status, r.error_code()),
        (403, Some("read_only")),
        "{}",
        r.text
    );
    let session = alice.create_session_id().await;
    let r = auditor
        .post(
            &format!("/v1/sessions/{session}/submissions"),
            &json!({"text": "hi"}),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    let r = auditor
        .post(
            "/v1/chat/completions",
            &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    let mut ws = WsClient::connect_as(&tk.url, &ro).await;
    let r = ws.call("session.create", json!({})).await;
    assert_eq!(r["error"]["data"]["code"], "read_only", "{r}");
    ws.close().await;
    assert_eq!(provider.request_count(), 0, "nothing was admitted");

    // The expiring token works, then is refused.
    assert_eq!(
        op.with_token(Some(&brief)).get("/v1/sessions").await.status,
        200
    );
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let r = op.with_token(Some(&brief)).get("/v1/sessions").await;
    assert_eq!(r.status, 401, "{}", r.text);
    assert_eq!(
        listed(
            &op.get("/v1/tokens").await.body,
            &r_id_of(&op, "brief").await
        )["expired"],
        true
    );

    // Alice's approval decision is audited.
    let adm = alice.submit_accepted(&session, "run it").await;
    let asked = eventually(BOUND, "the approval", || async {
        let v = alice.session(&session).await;
        v.body["pending_approvals"][0]["approval_id"]
            .as_str()
            .map(str::to_owned)
    })
    .await;
    let r = alice
        .post(
            &format!("/v1/sessions/{session}/approvals/{asked}"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    alice.wait_terminal(&adm, BOUND).await;

    // last_used_at is noted.
    eventually(BOUND, "alice's last use", || async {
        let list = op.get("/v1/tokens").await;
        listed(&list.body, &plain_id)["last_used_at"]
            .as_str()
            .map(|_| ())
    })
    .await;

    // Revocation: 401 at once, and alice's open SSE stream and WebSocket end.
    let stream = alice
        .open_events_sse(&session, None, Duration::from_secs(30))
        .await;
    let mut alice_ws = WsClient::connect_as(&tk.url, &plain).await;
    alice_ws
        .ok(
            "session.subscribe",
            json!({"session_id": session, "since": 0}),
        )
        .await;
    let revoked_at = Instant::now();
    assert_eq!(delete(&op, &format!("/v1/tokens/{plain_id}")).await, 204);
    assert_eq!(alice.get("/v1/sessions").await.status, 401);
    let closed = alice_ws.wait_closed(Duration::from_secs(10)).await;
    assert!(closed.is_some(), "the WebSocket of a revoked token closes");
    stream.read_until(|_| false).await;
    assert!(
        revoked_at.elapsed() < Duration::from_secs(10),
        "the SSE stream ended {:?} after the revocation",
        revoked_at.elapsed()
    );
    assert_eq!(
        delete(&op, &format!("/v1/tokens/{plain_id}")).await,
        404,
        "revoked once"
    );
    assert_eq!(delete(&op, "/v1/tokens/no-such-token").await, 404);
    let list = op.get("/v1/tokens").await;
    assert!(list.body["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["id"] != plain_id.as_str()));

    // The audit log: who did what to whom, no secrets, no prompts.
    let audit = op.get("/v1/audit?limit=100").await;
    assert_eq!(audit.status, 200, "{}", audit.text);
    let entries = audit.body["entries"].as_array().unwrap();
    let did = |action: &str, target: &str| {
        entries
            .iter()
            .find(|e| e["action"] == action && e["target"] == target)
            .unwrap_or_else(|| panic!("no {action} of {target} in {entries:?}"))
            .clone()
    };
    assert_eq!(did("token.created", &plain_id)["principal"], "operator");
    assert_eq!(did("token.created", &ro_id)["detail"]["read_only"], true);
    assert_eq!(did("token.revoked", &plain_id)["principal"], "operator");
    let decided = did("approval.decided", &asked);
    assert_ne!(decided["principal"], "operator", "alice decided it");
    assert_eq!(decided["detail"]["decision"], "approve");
    assert!(
        !audit.text.contains("echo ran") && !audit.text.contains("run it"),
        "no arguments or prompts"
    );
    assert!(!audit.text.contains(&plain), "no secrets");
    let later = op.get("/v1/audit?since=2999-01-01T00:00:00Z").await;
    assert_eq!(later.body["entries"], json!([]));
    let r = op.get("/v1/audit?since=yesterday").await;
    assert_eq!((r.status, r.error_code()), (400, Some("invalid_query")));
    let r = op.get("/v1/audit?limit=0").await;
    assert_eq!(r.status, 400);
}

/// The id of the token named `name`.
async fn r_id_of(op: &Api, name: &str) -> String {
    let list = op.get("/v1/tokens").await;
    list.body["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .and_then(|t| t["id"].as_str())
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_tokens_expire_are_read_only_revoke_at_once_and_are_audited_sqlite() {
    tokens_and_audit(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_tokens_expire_are_read_only_revoke_at_once_and_are_audited_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    tokens_and_audit(Some(db.url())).await;
}

/// Writes an audit entry `days_old` days old straight into the store, as the service would
/// have recorded it then.
async fn old_audit_entry(database_url: &str, action: &str, days_old: i64) {
    use sea_orm::{ConnectionTrait, Database, Statement};
    let db = Database::connect(database_url).await.unwrap();
    let at = chrono::Utc::now().timestamp_millis() - days_old * 24 * 3600 * 1000;
    let insert = Statement::from_sql_and_values(
        db.get_database_backend(),
        match db.get_database_backend() {
            sea_orm::DbBackend::Postgres => {
                "INSERT INTO audit_log (id, at, principal, action, target, detail) \
                 VALUES ($1, $2, 'operator', $3, 'tk_old', '{}')"
            }
            _ => {
                "INSERT INTO audit_log (id, at, principal, action, target, detail) \
                 VALUES (?, ?, 'operator', ?, 'tk_old', '{}')"
            }
        },
        [
            uuid::Uuid::now_v7().to_string().into(),
            at.into(),
            action.into(),
        ],
    );
    db.execute_raw(insert).await.unwrap();
    db.close().await.unwrap();
}

/// The audit log keeps `security.audit_retention_days`: at start (and hourly) entries older
/// than that are deleted, younger ones and today's stay.
async fn old_audit_entries_are_pruned(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let extra = "[security]\naudit_retention_days = 30\n";
    let opts = TurnkeyOptions::new(&provider).extra_toml(extra);
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let mut tk = Turnkey::start(opts).await;
    token(&tk.api(), json!({"name": "today"})).await;
    let status = tk.terminate(Duration::from_secs(30)).await.expect("exits");
    assert!(status.success(), "{status:?}");
    old_audit_entry(&tk.database_url, "token.created.past_retention", 31).await;
    old_audit_entry(&tk.database_url, "token.created.within_retention", 29).await;

    tk.restart().await;
    let op = tk.api();
    let actions = |r: &turnkey_tests::Resp| -> Vec<String> {
        r.body["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["action"].as_str().unwrap().to_owned())
            .collect()
    };
    let kept = eventually(BOUND, "the entry past retention pruned", || async {
        let r = op.get("/v1/audit?limit=100").await;
        assert_eq!(r.status, 200, "{}", r.text);
        let a = actions(&r);
        (!a.iter().any(|x| x == "token.created.past_retention")).then_some(a)
    })
    .await;
    assert_eq!(
        kept,
        ["token.created.within_retention", "token.created"],
        "only the entry older than 30 days goes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_audit_entries_past_their_retention_are_pruned_sqlite() {
    old_audit_entries_are_pruned(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_audit_entries_past_their_retention_are_pruned_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    old_audit_entries_are_pruned(Some(db.url())).await;
}
