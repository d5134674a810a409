//! The order of the providers, as a new user met it (issue 38, item 12), against the real
//! binary: a local server is detected at start (nothing configured) and the operator connects
//! a second server by hand, typing its address without `/v1`. The address is completed with
//! `/v1` (the server answers only there); one whose answer is not a model list is refused. The
//! detected server stays the primary and the connected one its first fallback, also after a
//! restart, and `GET /v1/providers`, the stderr line and `doctor` say the same order. Both
//! serve a model of the same name, and each can be picked (`NAME/MODEL` for the second). Which
//! provider answers the next message is said truthfully: the primary, until it cools down
//! after failures, then the fallback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use turnkey_tests::wait::{eventually, BOUND};
use turnkey_tests::{Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

async fn listed(api: &Api) -> Vec<Value> {
    let r = api.get("/v1/providers").await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["providers"].as_array().cloned().unwrap()
}

/// `[name, source, role, order, answers_next, model_id]` of each provider, in list order.
async fn order(api: &Api) -> Value {
    let rows: Vec<Value> = listed(api)
        .await
        .iter()
        .map(|p| {
            json!([
                p["name"],
                p["source"],
                p["role"],
                p["order"],
                p["answers_next"],
                p["model_id"]
            ])
        })
        .collect();
    Value::from(rows)
}

fn doctor(tk: &Turnkey) -> String {
    let out = std::process::Command::new(turnkey_tests::harness::turnkey_binary().unwrap())
        .args(["doctor", "--config"])
        .arg(&tk.config_path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn answer_of(api: &Api, session: &str, text: &str) -> Value {
    let a = api.submit_accepted(session, text).await;
    let done = api.wait_terminal(&a, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    done["outcome"]["final_response"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_a_detected_server_and_a_connected_one_keep_one_order_everywhere() {
    let detected = ScriptedProvider::start();
    let by_hand = ScriptedProvider::start();
    by_hand.only_under_v1();
    let mut tk =
        Turnkey::start(TurnkeyOptions::new(&detected).first_run(&[&detected.base_url])).await;
    let op = tk.api();

    // Typed without /v1: completed, since the server answers a model list only there.
    let root = by_hand.base_url.trim_end_matches("/v1").to_owned();
    let r = op
        .post(
            "/v1/providers",
            &json!({"name": "mine", "kind": "openai", "base_url": root, "model": "scripted-model"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["base_url"], by_hand.base_url, "{}", r.text);
    assert_eq!(r.body["role"], "fallback", "{}", r.text);
    assert_eq!(r.body["order"], 2, "{}", r.text);
    assert_eq!(
        r.body["answers_next"], false,
        "a fallback does not answer next: {}",
        r.text
    );
    assert_eq!(r.body["model_id"], "mine/scripted-model", "{}", r.text);

    // A server whose /models is not a model list is refused, with the reason.
    let web_page = ScriptedProvider::start();
    web_page.answer_path("/v1/models", json!({"hello": "a web page"}));
    let r = op
        .post(
            "/v1/providers",
            &json!({"name": "page", "kind": "openai", "base_url": web_page.base_url, "model": "scripted-model"}),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert!(r.text.contains("not a model list"), "{}", r.text);

    let expected = json!([
        ["local", "detected", "primary", 1, true, "scripted-model"],
        [
            "mine",
            "connected",
            "fallback",
            2,
            false,
            "mine/scripted-model"
        ],
    ]);
    assert_eq!(order(&op).await, expected);

    // Both can be picked: the model by its name is the primary's, `mine/…` the other's.
    let models = op.get("/v1/models").await;
    let ids: Vec<(&str, &str)> = models.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap(), m["owned_by"].as_str().unwrap()))
        .collect();
    assert_eq!(
        ids,
        [
            ("scripted-model", "local"),
            ("mine/scripted-model", "mine"),
            ("direct/scripted-model", "local"),
            ("direct/mine/scripted-model", "mine")
        ]
    );
    let s = op.create_session_id().await;
    detected.push(Reply::text("from the detected server"));
    assert_eq!(answer_of(&op, &s, "one").await, "from the detected server");
    let r = op
        .patch_session(&s, &json!({"model": "mine/scripted-model"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["model"], "mine/scripted-model");
    by_hand.push(Reply::text("from the one connected by hand"));
    assert_eq!(
        answer_of(&op, &s, "two").await,
        "from the one connected by hand"
    );
    let asked = by_hand.requests().pop().unwrap();
    assert_eq!(asked.body["model"], "scripted-model", "its own model name");
    assert_eq!(
        detected.request_count(),
        1,
        "the detected one was not asked"
    );

    // After a restart: the detected server is found again and stays first.
    tk.restart().await;
    let op = tk.api();
    assert_eq!(order(&op).await, expected);
    let said = tk.stderr();
    let line = said
        .lines()
        .rev()
        .find(|l| l.starts_with("provider: "))
        .unwrap_or_default();
    assert!(
        line.starts_with(&format!(
            "provider: local (openai) at {}, model scripted-model (detected",
            detected.base_url
        )) && line.contains("then 1 fallback(s)"),
        "{said}"
    );

    // doctor says the same order.
    let report = doctor(&tk);
    assert!(
        report.contains("provider[0] local (primary, detected, model scripted-model): ok"),
        "{report}"
    );
    assert!(
        report.contains("provider[1] mine (fallback 1, connected, model scripted-model): ok"),
        "{report}"
    );

    // The primary fails for good three attempts in a row and cools down: the fallback answers
    // this turn, and the list says it answers the next message.
    for _ in 0..3 {
        detected.push(Reply::error(500, "server_error"));
    }
    by_hand.push(Reply::text("the fallback answered"));
    let s2 = op.create_session_id().await;
    assert_eq!(answer_of(&op, &s2, "three").await, "the fallback answered");
    eventually(BOUND, "the fallback answers next", || {
        let op = op.clone();
        async move {
            let now = order(&op).await;
            (now[1][4] == true && now[0][4] == false).then_some(())
        }
    })
    .await;
}
