//! `GET /v1/ws` JSON-RPC 2.0 (SPEC R11.1) against the real binary with a Rust WebSocket
//! client: auth first (anything else first, or a wrong token, closes), every method, event
//! notifications during a turn, `session.resume` with a pending approval and the running turn,
//! and a reconnect that resumes by seq with no gap and no duplicate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::ws::WsClient;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;

async fn start(provider: &ScriptedProvider, tools: &str) -> Turnkey {
    Turnkey::start(TurnkeyOptions::new(provider).extra_toml(&format!("[tools]\n{tools}\n"))).await
}

fn seqs(events: &[Value]) -> Vec<i64> {
    events.iter().map(|e| e["seq"].as_i64().unwrap()).collect()
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["kind"].as_str().unwrap()).collect()
}

fn error_of(answer: &Value) -> (i64, String) {
    let e = &answer["error"];
    (
        e["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("no error: {answer}")),
        e["data"]["code"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_1_ws_auth_comes_first_and_a_wrong_token_closes() {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "approval = \"off\"").await;

    let mut c = WsClient::connect(&tk.url).await;
    let r = c.call("session.create", json!({})).await;
    assert_eq!(error_of(&r), (-32000, "unauthorized".into()), "{r}");
    let closed = c
        .wait_closed(BOUND)
        .await
        .expect("closed after a call before auth");
    assert_eq!(closed.code, Some(1008), "{closed:?}");

    let mut c = WsClient::connect(&tk.url).await;
    let r = c.call("auth", json!({"token": "tk_wrong"})).await;
    assert_eq!(error_of(&r), (-32000, "unauthorized".into()), "{r}");
    assert!(c.wait_closed(BOUND).await.is_some(), "a wrong token closes");

    let mut c = WsClient::connect(&tk.url).await;
    c.send_text("{not json").await;
    let r = c.answer_to(Value::Null).await;
    assert_eq!(error_of(&r).0, -32700, "{r}");
    assert!(
        c.wait_closed(BOUND).await.is_some(),
        "garbage before auth closes"
    );

    let mut c = WsClient::connect(&tk.url).await;
    let ok = c.ok("auth", json!({"token": tk.token})).await;
    assert_eq!(ok["operator"], true, "{ok}");
    // Standard errors once authenticated; the connection stays open.
    c.send_text("{not json").await;
    assert_eq!(error_of(&c.answer_to(Value::Null).await).0, -32700);
    c.send_text(r#"[{"jsonrpc":"2.0","id":9,"method":"session.create"}]"#)
        .await;
    assert_eq!(error_of(&c.answer_to(Value::Null).await).0, -32600);
    let r = c.call("no.such.method", json!({})).await;
    assert_eq!(error_of(&r).0, -32601, "{r}");
    let r = c.call("prompt.submit", json!({"text": "no session"})).await;
    assert_eq!(error_of(&r).0, -32602, "{r}");
    let r = c
        .call("session.resume", json!({"session_id": "not-a-uuid"}))
        .await;
    assert_eq!(error_of(&r), (-32602, "invalid_id".into()), "{r}");
    let r = c
        .call(
            "session.resume",
            json!({"session_id": "7f1b3c9e-0000-4000-8000-000000000000"}),
        )
        .await;
    assert_eq!(error_of(&r), (-32000, "not_found".into()), "{r}");
    let s = c.ok("session.create", json!({"title": "ws"})).await;
    assert_eq!(s["title"], "ws");
    c.close().await;
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_1_ws_every_method_and_events_during_a_turn() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::chunks(
        &["Hello ", "over ", "the socket"],
        Duration::from_millis(150),
    ));
    let tk = start(&provider, "approval = \"off\"").await;
    let mut c = WsClient::connect_as(&tk.url, &tk.token).await;
    let session = c.ok("session.create", json!({"title": "socket"})).await;
    let s = session["id"].as_str().unwrap().to_owned();
    let sub = c
        .ok("session.subscribe", json!({"session_id": s, "since": 0}))
        .await;
    assert_eq!(sub["since"], 0);

    let receipt = c
        .ok(
            "prompt.submit",
            json!({"session_id": s, "text": "hi", "request_id": "ws-1"}),
        )
        .await;
    assert_eq!(receipt["status"], "queued", "{receipt}");
    assert_eq!(receipt["duplicate"], false);
    let again = c
        .ok(
            "prompt.submit",
            json!({"session_id": s, "text": "hi", "request_id": "ws-1"}),
        )
        .await;
    assert_eq!(again["duplicate"], true, "same request id, same receipt");
    assert_eq!(again["admission_id"], receipt["admission_id"]);

    let events = c
        .events_until(BOUND, |e| {
            e["kind"] == "status" && e["data"]["state"] == "idle" && e["seq"].as_i64() > Some(3)
        })
        .await;
    let ks = kinds(&events);
    for k in [
        "admission.queued",
        "turn.started",
        "message.delta",
        "message.complete",
        "turn.finished",
    ] {
        assert!(ks.contains(&k), "{k} missing from {ks:?}");
    }
    let ss = seqs(&events);
    assert_eq!(
        ss,
        (1..=ss.len() as i64).collect::<Vec<_>>(),
        "gap-free from 1"
    );
    let complete = events
        .iter()
        .find(|e| e["kind"] == "message.complete")
        .unwrap();
    assert_eq!(complete["data"]["text"], "Hello over the socket");

    let page = c
        .ok("session.events.since", json!({"session_id": s, "since": 0}))
        .await;
    let stored = page["events"].as_array().unwrap();
    assert_eq!(
        seqs(stored)[..ss.len()],
        ss[..],
        "the page replays the same events"
    );
    assert_eq!(page["next_since"], stored.last().unwrap()["seq"]);

    let resumed = c.ok("session.resume", json!({"session_id": s})).await;
    assert_eq!(resumed["session"]["id"], json!(s));
    assert_eq!(resumed["running_turn"], Value::Null, "{resumed}");
    assert_eq!(resumed["pending_approvals"], json!([]));
    assert_eq!(resumed["last_event_seq"], page["next_since"]);

    let r = c.ok("turn.interrupt", json!({"session_id": s})).await;
    assert_eq!(r, json!({"interrupted": false}), "nothing runs");
    let r = c.ok("session.unsubscribe", json!({"session_id": s})).await;
    assert_eq!(r, json!({"unsubscribed": true}));
    let r = c
        .call(
            "approval.respond",
            json!({"session_id": s, "approval_id": "7f1b3c9e-0000-4000-8000-000000000000",
                   "decision": "approve"}),
        )
        .await;
    assert_eq!(error_of(&r), (-32000, "not_found".into()), "{r}");
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_1_ws_resume_shows_the_pending_approval_and_the_running_turn() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::tool_call(
        "call_ls",
        "terminal",
        json!({"command": "echo approved-run"}),
    ));
    provider.push(Reply::text("listed"));
    let tk = start(&provider, "approval = \"always\"").await;
    let mut c = WsClient::connect_as(&tk.url, &tk.token).await;
    let s = c.ok("session.create", json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    c.ok("session.subscribe", json!({"session_id": s})).await;
    let receipt = c
        .ok("prompt.submit", json!({"session_id": s, "text": "run it"}))
        .await;
    let events = c
        .events_until(BOUND, |e| e["kind"] == "approval.requested")
        .await;
    let requested = events.last().unwrap();
    assert_eq!(requested["kind"], "approval.requested", "{events:?}");
    let approval_id = requested["data"]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // A second client picks the session up: the question and the running turn.
    let mut other = WsClient::connect_as(&tk.url, &tk.token).await;
    let resumed = other.ok("session.resume", json!({"session_id": s})).await;
    let pending = resumed["pending_approvals"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{resumed}");
    assert_eq!(pending[0]["approval_id"], json!(approval_id));
    assert_eq!(pending[0]["name"], "terminal");
    let running = &resumed["running_turn"];
    assert_eq!(
        running["admission_id"], receipt["admission_id"],
        "{resumed}"
    );
    assert!(running["turn_id"].is_string(), "{resumed}");
    assert_eq!(resumed["session"]["state"], "running");
    assert!(resumed["last_event_seq"].as_i64().unwrap() >= requested["seq"].as_i64().unwrap());

    let decided = other
        .ok(
            "approval.respond",
            json!({"session_id": s, "approval_id": approval_id, "decision": "approve"}),
        )
        .await;
    assert_eq!(decided["approval_id"], json!(approval_id));
    let r = other
        .call(
            "approval.respond",
            json!({"session_id": s, "approval_id": approval_id, "decision": "deny"}),
        )
        .await;
    assert_eq!(error_of(&r), (-32000, "approval_closed".into()), "{r}");

    let rest = c
        .events_until(BOUND, |e| e["kind"] == "turn.finished")
        .await;
    let ks = kinds(&rest);
    assert!(ks.contains(&"approval.resolved"), "{ks:?}");
    assert!(ks.contains(&"tool.completed"), "{ks:?}");
    assert_eq!(rest.last().unwrap()["data"]["result"], "completed");
    let all: Vec<Value> = events.iter().chain(rest.iter()).cloned().collect();
    let ss = seqs(&all);
    assert!(ss.windows(2).all(|w| w[1] == w[0] + 1), "gap-free: {ss:?}");
    c.close().await;
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_1_ws_reconnect_resumes_by_seq_without_gap_or_duplicate() {
    let provider = ScriptedProvider::start();
    let words: Vec<String> = (0..16).map(|i| format!("part{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    provider.push(Reply::chunks(&words, Duration::from_millis(200)));
    let tk = start(&provider, "approval = \"off\"").await;
    let api = tk.api();
    let s = api.create_session_id().await;

    let mut first = WsClient::connect_as(&tk.url, &tk.token).await;
    first
        .ok("session.subscribe", json!({"session_id": s, "since": 0}))
        .await;
    first
        .ok(
            "prompt.submit",
            json!({"session_id": s, "text": "long answer"}),
        )
        .await;
    let before = first
        .events_until(BOUND, |e| e["kind"] == "message.delta")
        .await;
    let last_seen = *seqs(&before).last().unwrap();
    drop(first); // the connection drops mid-turn, without a close handshake

    let mut second = WsClient::connect_as(&tk.url, &tk.token).await;
    second
        .ok(
            "session.subscribe",
            json!({"session_id": s, "since": last_seen}),
        )
        .await;
    let after = second
        .events_until(BOUND, |e| e["kind"] == "turn.finished")
        .await;
    let mut got = seqs(&before);
    got.extend(seqs(&after));
    assert_eq!(
        got,
        (1..=got.len() as i64).collect::<Vec<_>>(),
        "no gap and no duplicate across the reconnect"
    );
    let text: String = before
        .iter()
        .chain(after.iter())
        .filter(|e| e["kind"] == "message.delta")
        .map(|e| e["data"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, words.concat(), "every delta exactly once");
    let stored = api.all_events(&s, 0).await;
    let stored_upto: Vec<i64> = seqs(&stored)
        .into_iter()
        .filter(|q| *q <= *got.last().unwrap())
        .collect();
    assert_eq!(
        stored_upto, got,
        "what the sockets delivered is the stored log"
    );
    second.close().await;
}

/// Writes `n` large `message.delta` events of `session` straight into the SQLite store, as a
/// long-running session would have: enough bytes that a client that stops reading cannot
/// take them into socket buffers.
async fn seed_events(database_url: &str, session: &str, n: i64, bytes: usize) {
    use sea_orm::{ConnectionTrait, Statement, TransactionTrait};
    let db = turnkey_tests::pg::open(database_url).await;
    let tx = db.begin().await.expect("begin");
    let payload = json!({ "text": "x".repeat(bytes) }).to_string();
    for seq in 1..=n {
        tx.execute_raw(Statement::from_sql_and_values(
            db.get_database_backend(),
            "INSERT INTO session_events (session_id, seq, turn_id, admission_id, kind, payload, created_at) \
             VALUES (?, ?, NULL, NULL, 'message.delta', ?, 0)",
            [session.into(), seq.into(), payload.clone().into()],
        ))
        .await
        .expect("insert event");
    }
    tx.commit().await.expect("commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_1_ws_a_client_that_does_not_keep_up_is_closed_with_the_seq_to_resume_from() {
    const EVENTS: i64 = 3000;
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "approval = \"off\"").await;
    let s = tk.api().create_session_id().await;
    seed_events(&tk.database_url, &s, EVENTS, 8 * 1024).await;

    let mut slow = WsClient::connect_with_recv_buffer(&tk.url, 64 * 1024).await;
    slow.ok("auth", json!({"token": tk.token})).await;
    slow.ok("session.subscribe", json!({"session_id": s, "since": 0}))
        .await;
    // Not reading for longer than the server waits on a full queue (5 s), less than it waits
    // on one write (10 s).
    tokio::time::sleep(Duration::from_secs(7)).await;
    let got = slow.events_until(BOUND, |_| false).await;
    let closed = slow
        .closed
        .clone()
        .expect("the server closed the slow client");
    assert_eq!(closed.code, Some(1013), "{closed:?}");
    let delivered = seqs(&got);
    assert!(
        !delivered.is_empty() && (delivered.len() as i64) < EVENTS,
        "{}",
        delivered.len()
    );
    assert_eq!(delivered, (1..=delivered.len() as i64).collect::<Vec<_>>());
    let last = *delivered.last().unwrap();
    assert_eq!(
        closed.reason,
        format!("too slow: resume session {s} since={last}"),
        "the reason names the last seq delivered"
    );

    // Resuming from there delivers the rest, once each.
    let mut again = WsClient::connect_as(&tk.url, &tk.token).await;
    again
        .ok("session.subscribe", json!({"session_id": s, "since": last}))
        .await;
    let rest = again.events_until(BOUND, |e| e["seq"] == EVENTS).await;
    assert_eq!(seqs(&rest), (last + 1..=EVENTS).collect::<Vec<_>>());
    again.close().await;
}
