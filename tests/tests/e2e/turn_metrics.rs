//! `/metrics` says where a turn's time went (issue: throughput, observability): after turns
//! against the real binary, every stage histogram of a turn has counted them (a drain's first
//! claim is part of its lease commit, the next ones are claims of their own), the turn and
//! queue-wait histograms and the store's statement and write-transaction counters moved, and a
//! provider failure is counted by its error class.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;
use turnkey_tests::{bench, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;

fn value(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    m.get(key)
        .copied()
        .unwrap_or_else(|| panic!("/metrics has no {key}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stages_turns_store_work_and_provider_errors_are_measured() {
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).provider_toml("max_retries = 0")).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let before = bench::scrape(&tk.url).await;

    // Two inputs at once: the drain claims the first with its lease, the second on its own.
    // Each answer streams within one delta window (150 ms): its one delta is held back and
    // commits with the turn's end, so the delivery actor commits nothing for them.
    for _ in 0..2 {
        provider.push(Reply::chunks(&["an ", "answer"], Duration::from_millis(20)));
    }
    let first = api.submit_accepted(&s, "question 0").await;
    let second = api.submit_accepted(&s, "question 1").await;
    for a in [&first, &second] {
        let adm = api.wait_terminal(a, BOUND).await;
        assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    }
    let held = bench::scrape(&tk.url).await;
    let delivery = "turnkey_turn_stage_seconds_count{stage=\"delivery\"}";
    let delivered = |m: &BTreeMap<String, f64>| m.get(delivery).copied().unwrap_or(0.0);
    assert_eq!(
        delivered(&held),
        delivered(&before),
        "a stream that ends within its first window commits its delta with the turn's end"
    );
    let events = api.all_events(&s, 0).await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    let delta = kinds.iter().position(|k| *k == "message.delta");
    let complete = kinds.iter().position(|k| *k == "message.complete");
    assert!(delta.is_some() && delta < complete, "{kinds:?}");
    assert_eq!(events[delta.unwrap()]["data"]["text"], "an answer");
    // This one streams longer than a window: the first window's delta is committed on its own.
    provider.push(Reply::chunks(
        &["a ", "longer ", "answer"],
        Duration::from_millis(200),
    ));
    let third = api.submit_accepted(&s, "question 2").await;
    let adm = api.wait_terminal(&third, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    provider.push(Reply::error(500, "boom"));
    let a = api.submit_accepted(&s, "this one fails").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "failed", "{adm}");

    let after = bench::scrape(&tk.url).await;
    let moved = |key: &str| value(&after, key) - before.get(key).copied().unwrap_or(0.0);
    for (stage, at_least) in [
        ("admit", 4.0),
        ("lease", 1.0),
        ("claim", 1.0),
        ("context", 4.0),
        ("provider", 4.0),
        ("finalize", 4.0),
    ] {
        let key = format!("turnkey_turn_stage_seconds_count{{stage=\"{stage}\"}}");
        assert!(moved(&key) >= at_least, "{key} moved by {}", moved(&key));
        let inf = format!("turnkey_turn_stage_seconds_bucket{{stage=\"{stage}\",le=\"+Inf\"}}");
        assert_eq!(value(&after, &inf), value(&after, &key), "{inf}");
    }
    // Streamed deltas are committed by the delivery actor's group commits.
    assert!(moved("turnkey_turn_stage_seconds_count{stage=\"delivery\"}") >= 1.0);
    assert!(moved("turnkey_delivery_batch_events_count") >= 1.0);
    assert!(moved("turnkey_turn_seconds_count") >= 4.0);
    assert!(moved("turnkey_turn_queue_wait_seconds_count") >= 4.0);
    assert!(moved("turnkey_store_statements_total") >= 4.0 * 10.0);
    assert!(moved("turnkey_store_write_transactions_total") >= 4.0 * 3.0);
    // SQLite: every write transaction ended in some group's commit.
    assert!(moved("turnkey_store_commit_group_transactions_count") >= 1.0);
    assert_eq!(
        value(
            &after,
            "turnkey_provider_errors_total{class=\"provider_server_error\"}"
        ),
        1.0
    );
    // SQLite's heap: its page caches and prepared statements are in use after these turns, and
    // the high-water mark is never below what it holds now.
    let sqlite = value(&after, "turnkey_sqlite_memory_bytes");
    assert!(sqlite > 64.0 * 1024.0, "SQLite holds {sqlite} bytes");
    assert!(value(&after, "turnkey_sqlite_memory_highwater_bytes") >= sqlite);
    assert_eq!(value(&after, "turnkey_unknown_turns_total"), 0.0);
    assert_eq!(value(&after, "turnkey_lease_takeovers_total"), 0.0);
}
