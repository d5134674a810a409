//! What an attacker would try against a shared gateway (SPEC R13.7, R13.8), black-box through
//! the real binary, each refusal beside its positive control: a model's command that reaches
//! for the network, another principal's files through `/proc/self/root` or a symlink it plants,
//! and the new endpoints (`/v1/tokens`, `/v1/audit`, `DELETE /v1/sessions/{id}`) fed oversized,
//! malformed and hostile input; webhook requests with a doubled signature header, a header
//! that smuggles a line break or a NUL, and a body framed two ways at once. Tokens after
//! revocation and expiry are in `r13_8_tokens`, replayed webhook signatures in `r1_3_webhooks`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;
use turnkey_tests::wait::BOUND;
use turnkey_tests::webhooks::{
    generic_message, generic_signature, platforms_toml, slack_message, slack_signature,
    telegram_message, unix_now, Endpoints, Rows, Webhooks, GENERIC_SECRET, SLACK_SECRET,
    TELEGRAM_SECRET,
};
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

/// Sends `request` as raw bytes on a new connection; answers everything the server wrote
/// until it closed the connection or went quiet for a second.
fn raw_http(url: &str, request: &[u8]) -> String {
    let addr = url.trim_start_matches("http://");
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    conn.write_all(request).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// A generic webhook request, signed, as raw bytes with `extra` header lines before the body.
fn signed_generic(body: &str, extra: &str) -> Vec<u8> {
    let sig = generic_signature(GENERIC_SECRET, body.as_bytes());
    format!(
        "POST /webhooks/generic HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         X-Signature: {sig}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_webhook_headers_cannot_be_doubled_or_smuggled() {
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).extra_toml(&platforms_toml(
        &Endpoints::nowhere(),
        &["4242"],
        &["U123ABC456"],
    )))
    .await;
    let rows = Rows::connect(&tk.database_url).await;
    let hooks = Webhooks::new(&tk.url);
    let refused = |what: &str, r: &turnkey_tests::Resp| {
        assert_eq!(r.status, 401, "{what}: {}", r.text);
        assert_eq!(
            r.error_code(),
            Some("invalid_signature"),
            "{what}: {}",
            r.text
        );
    };

    // A valid signature beside a forged one, either order, on each platform: refused.
    let body = generic_message("room-1", "m-1", "alice", "doubled").to_string();
    let good = generic_signature(GENERIC_SECRET, body.as_bytes());
    let forged = generic_signature("not-the-secret", body.as_bytes());
    for pair in [[&good, &forged], [&forged, &good], [&good, &good]] {
        let headers = [
            ("X-Signature", pair[0].clone()),
            ("X-Signature", pair[1].clone()),
        ];
        let (r, _) = hooks
            .raw(
                "POST",
                "/webhooks/generic",
                &headers,
                "application/json",
                body.clone().into_bytes(),
            )
            .await;
        refused("two X-Signature headers", &r);
    }
    let update = telegram_message(1, 4242, 4242, "doubled").to_string();
    let headers = [
        (
            "X-Telegram-Bot-Api-Secret-Token",
            TELEGRAM_SECRET.to_owned(),
        ),
        ("X-Telegram-Bot-Api-Secret-Token", "guess".to_owned()),
    ];
    let (r, _) = hooks
        .raw(
            "POST",
            "/webhooks/telegram",
            &headers,
            "application/json",
            update.into_bytes(),
        )
        .await;
    refused("two Telegram secret tokens", &r);
    let envelope = slack_message("Ev1", "C1", "1700000000.000100", "U123ABC456", "doubled");
    let body = envelope.to_string();
    let now = unix_now();
    let old = now - 3_600;
    let headers = [
        ("X-Slack-Request-Timestamp", now.to_string()),
        ("X-Slack-Request-Timestamp", old.to_string()),
        (
            "X-Slack-Signature",
            slack_signature(SLACK_SECRET, now, body.as_bytes()),
        ),
    ];
    let (r, _) = hooks
        .raw(
            "POST",
            "/webhooks/slack",
            &headers,
            "application/json",
            body.into_bytes(),
        )
        .await;
    refused("two Slack timestamps", &r);

    // A line break or a NUL inside a header value, and a body framed by both Content-Length
    // and Transfer-Encoding with a signed second request hidden in it: never admitted.
    let inner = generic_message("room-1", "m-smuggled", "alice", "smuggled").to_string();
    let smuggled = String::from_utf8(signed_generic(&inner, "")).unwrap();
    let outer = generic_message("room-1", "m-outer", "alice", "outer").to_string();
    let framed_twice = format!(
        "POST /webhooks/generic HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         X-Signature: {}\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n\
         0\r\n\r\n{smuggled}",
        generic_signature(GENERIC_SECRET, outer.as_bytes()),
        outer.len()
    );
    let attempts: Vec<(&str, Vec<u8>)> = vec![
        (
            "a bare CR in a header",
            signed_generic(&outer, "X-Note: a\rX-Signature: sha256=00\r\n"),
        ),
        (
            "a bare LF in a header",
            signed_generic(&outer, "X-Note: a\nX-Signature: sha256=00\r\n"),
        ),
        (
            "a NUL in a header",
            signed_generic(&outer, "X-Note: a\0b\r\n"),
        ),
        (
            "Content-Length and Transfer-Encoding",
            framed_twice.into_bytes(),
        ),
    ];
    for (what, request) in attempts {
        let answer = raw_http(&tk.url, &request);
        let status = answer.split(' ').nth(1).unwrap_or("");
        assert!(
            answer.is_empty() || status.starts_with('4'),
            "{what}: not refused: {answer}"
        );
    }
    assert_eq!(
        rows.count("session_admissions").await,
        0,
        "nothing was admitted"
    );

    // The positive controls: one valid header each, on a raw connection and through a client.
    let answer = raw_http(&tk.url, &signed_generic(&outer, "X-Note: plain\r\n"));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (r, _) = hooks
        .generic(&generic_message("room-1", "m-2", "alice", "single"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(rows.count("session_admissions").await, 2);
    assert_eq!(
        rows.count_where("session_admissions", "payload_json LIKE '%smuggled%'")
            .await,
        0
    );
}
