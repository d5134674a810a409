//! Cost in the usage ledger (SPEC R10.4): `[pricing]` in the configuration prices a model the
//! built-in table does not know; the turn's outcome, its `turn.finished` event and the
//! session's totals carry that cost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_4_configured_prices_cost_the_turn() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("priced answer"));
    provider.push(Reply::text("second answer"));
    // USD per million tokens: one dollar a prompt token, two a completion token.
    let toml = "[pricing]\n\"scripted-model\" = { input = 1000000.0, output = 2000000.0 }\n";
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).extra_toml(toml)).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let mut total = 0.0;
    for text in ["what does it cost?", "and now?"] {
        let a = api.submit_accepted(&s, text).await;
        let adm = api.wait_terminal(&a, BOUND).await;
        let out = &adm["outcome"];
        assert_eq!(out["result"], "completed", "{adm}");
        let input = out["usage"]["input_tokens"].as_f64().unwrap();
        let output = out["usage"]["output_tokens"].as_f64().unwrap();
        assert!(input > 0.0 && output > 0.0, "{out}");
        let cost = out["cost"].as_f64().unwrap();
        assert!(
            (cost - (input + 2.0 * output)).abs() < 1e-6,
            "cost {cost} for {out}"
        );
        total += cost;
        let events = api.all_events(&s, 0).await;
        let finished = events
            .iter()
            .rev()
            .find(|e| e["kind"] == "turn.finished")
            .unwrap();
        assert!(
            (finished["data"]["cost"].as_f64().unwrap() - cost).abs() < 1e-6,
            "{finished}"
        );
    }
    let session = api.session(&s).await;
    let body: serde_json::Value = serde_json::from_str(&session.text).unwrap();
    let usage = &body["usage"];
    assert!(
        (usage["cost_usd"]
            .as_f64()
            .or(usage["cost"].as_f64())
            .unwrap()
            - total)
            .abs()
            < 1e-6,
        "session totals: {body}"
    );
}
