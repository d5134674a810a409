//! What an attacker would try against a shared gateway (SPEC R13.7, R13.8), black-box through
//! the real binary, each refusal beside its positive control: a model's command that reaches
//! for the network, another principal's files through `/proc/self/root` or a symlink it plants,
//! and the new endpoints (`/v1/tokens`, `/v1/audit`, `DELETE /v1/sessions/{id}`) fed oversized,
//! malformed and hostile input. Tokens after revocation and expiry are in `r13_8_tokens`,
//! replayed webhook signatures in `r1_3_webhooks`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use std::net::TcpListener;
use turnkey_tests::wait::BOUND;
use turnkey_tests::{Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

async fn start(provider: &ScriptedProvider, tools: &str) -> Turnkey {
    Turnkey::start(
        TurnkeyOptions::new(provider).extra_toml(&format!("[tools]\napproval = \"off\"\n{tools}")),
    )
    .await
}

/// Runs `command` through a model's `terminal` call in a new session of `api`; answers the
/// tool result the model got.
async fn command(provider: &ScriptedProvider, api: &Api, ask: &str, command: &str) -> String {
    provider.on_tool_result(ask, Reply::text("done"));
    provider.on_user_text(
        ask,
        Reply::tool_call("t1", "terminal", json!({ "command": command })),
    );
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, ask).await;
    api.wait_terminal(&a, BOUND).await;
    provider.tool_result(provider.request_count() - 1, "t1")
}

fn connect_to(port: u16) -> String {
    format!(
        "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {port}), 3); print('CONNECTED')\""
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_7_a_models_command_cannot_reach_the_network_unless_allowed() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "").await;
    let out = command(&provider, &tk.api(), "dial out", &connect_to(port)).await;
    assert!(!out.contains("CONNECTED"), "{out}");
    assert!(
        out.contains("Permission denied") || out.contains("PermissionError"),
        "{out}"
    );
    drop(tk);
    // The positive control: allowed, the same command connects.
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "sandbox_network = true\n").await;
    let out = command(&provider, &tk.api(), "dial out", &connect_to(port)).await;
    assert!(out.contains("CONNECTED"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_a_principal_cannot_reach_anothers_files_by_any_path() {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "").await;
    let op = tk.api();
    let token = |name: &'static str| {
        let op = op.clone();
        async move {
            let r = op.post("/v1/tokens", &json!({ "name": name })).await;
            op.with_token(Some(&r.str_field("token")))
        }
    };
    let (alice, mallory) = (token("alice").await, token("mallory").await);
    let out = command(
        &provider,
        &alice,
        "alice saves",
        "echo TOP-SECRET > diary.txt && pwd",
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let alice_home = v["stdout"].as_str().unwrap().trim().to_owned();
    assert!(alice_home.contains("/principals/"), "{out}");
    let diary = format!("{alice_home}/diary.txt");
    for (i, attempt) in [
        format!("cat {diary}"),
        format!("cat /proc/self/root{diary}"),
        format!("ln -s {diary} mine && cat mine"),
        format!("cp {diary} ./stolen.txt"),
        format!("ln {diary} hard"),
        "cat ../*/diary.txt".to_owned(),
    ]
    .iter()
    .enumerate()
    {
        let out = command(&provider, &mallory, &format!("mallory tries {i}"), attempt).await;
        assert!(!out.contains("TOP-SECRET"), "{attempt}: {out}");
    }
    // The positive control: alice reads it, and so does the operator (the root).
    let out = command(&provider, &alice, "alice reads", "cat diary.txt").await;
    assert!(out.contains("TOP-SECRET"), "{out}");
    let out = command(&provider, &op, "operator reads", &format!("cat {diary}")).await;
    assert!(out.contains("TOP-SECRET"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_the_new_endpoints_refuse_hostile_input_with_a_code() {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "").await;
    let op = tk.api();
    // Oversized bodies: 413 before anything is made.
    for path in ["/v1/tokens"] {
        assert_eq!(
            op.post_oversized(path, 2 * 1024 * 1024).await.unwrap(),
            413,
            "{path}"
        );
    }
    // Malformed and hostile token bodies.
    for (body, code) in [
        ("{\"name\": ", "invalid_json"),
        ("[1, 2]", "invalid_json"),
        ("{\"name\": \"\"}", "invalid_name"),
        ("{\"name\": \"x\", \"read_only\": \"yes\"}", "invalid_json"),
        (
            "{\"name\": \"x\", \"expires_in_s\": 1e30}",
            "invalid_expiry",
        ),
        (
            "{\"name\": \"x\", \"role\": \"operator\"}",
            "forbidden_field",
        ),
        (
            "{\"name\": \"x\", \"principal_id\": \"operator\"}",
            "forbidden_field",
        ),
    ] {
        let r = op
            .send_raw("/v1/tokens", "application/json", body.as_bytes().to_vec())
            .await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(r.error_code(), Some(code), "{body}: {}", r.text);
    }
    // A lone surrogate is not text: refused.
    let r = op
        .send_raw(
            "/v1/tokens",
            "application/json",
            br#"{"name": "a\ud800b\u0000c"}"#.to_vec(),
        )
        .await;
    assert_eq!(
        (r.status, r.error_code()),
        (400, Some("invalid_json")),
        "{}",
        r.text
    );
    // A NUL alone is taken out of the name, never stored.
    let r = op
        .send_raw(
            "/v1/tokens",
            "application/json",
            br#"{"name": "a\u0000b"}"#.to_vec(),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["name"], "ab", "{}", r.text);
    let list = op.get("/v1/tokens").await;
    assert_eq!(list.status, 200, "the list still reads: {}", list.text);
    // Hostile ids.
    for id in [
        "../../etc/passwd",
        "%2e%2e%2f",
        "x".repeat(300).as_str(),
        "'; DROP TABLE api_tokens; --",
    ] {
        let path = format!("/v1/tokens/{}", urlencode(id));
        let r = op
            .try_send(reqwest::Method::DELETE, &path, None, &[])
            .await
            .unwrap();
        assert_eq!(r.status, 404, "{id}: {}", r.text);
    }
    assert_eq!(
        op.get("/v1/tokens").await.status,
        200,
        "the table is still there"
    );
    for q in [
        "limit=abc",
        "limit=-1",
        "limit=100000",
        "since=%00",
        "since=not-a-time",
    ] {
        let r = op.get(&format!("/v1/audit?{q}")).await;
        assert_eq!(r.status, 400, "{q}: {}", r.text);
    }
    for id in ["not-a-uuid", "..%2F..%2Fetc"] {
        let r = op
            .try_send(
                reqwest::Method::DELETE,
                &format!("/v1/sessions/{id}"),
                None,
                &[],
            )
            .await
            .unwrap();
        assert_eq!(
            (r.status, r.error_code()),
            (400, Some("invalid_id")),
            "{id}: {}",
            r.text
        );
    }
    // No token at all, and a made-up one: 401 on every new endpoint.
    let nobody = op.with_token(None);
    let forged = op.with_token(Some(
        "tk_0000000000000000000000000000000000000000000000000000000000000000",
    ));
    for who in [&nobody, &forged] {
        assert_eq!(who.get("/v1/tokens").await.status, 401);
        assert_eq!(who.get("/v1/audit").await.status, 401);
        let r = who
            .try_send(
                reqwest::Method::DELETE,
                "/v1/sessions/7f1b3c9e-0000-4000-8000-000000000000",
                None,
                &[],
            )
            .await
            .unwrap();
        assert_eq!(r.status, 401);
    }
    // The positive control: a well-formed request of the operator still works.
    let r = op
        .post("/v1/tokens", &json!({"name": "fine", "expires_in_s": 60}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
}

/// Percent-encodes what is not an unreserved URL character.
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
