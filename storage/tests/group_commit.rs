//! SQLite group commit (see `storage/src/store/writer.rs`). Alone in its test binary: it reads
//! the process-wide store counters before and after its own burst of writers.
#![allow(clippy::expect_used, clippy::unwrap_used)]
#[macro_use]
#[allow(unused_macros)]
mod common;

use common::*;
use serde_json::json;
use std::sync::atomic::Ordering;
use turnkey_storage::metrics::STORE;
use turnkey_storage::*;

fn delta(sid: SessionId, turn: TurnId, i: usize) -> NewEvent {
    NewEvent {
        session_id: sid,
        kind: EventKind::MessageDelta,
        turn_id: Some(turn),
        admission_id: None,
        data: json!({ "text": format!("d{i}") }),
    }
}

/// Writers that arrive while a commit runs share the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_writers_that_queue_share_one_commit() {
    let s = sqlite().await;
    let mut sids = Vec::new();
    for _ in 0..32 {
        sids.push(session(&s).await);
    }
    let commits_before = STORE.commit_group.count();
    let tx_before = STORE.write_transactions.load(Ordering::Relaxed);
    let mut tasks = Vec::new();
    for &sid in &sids {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let turn = TurnId::new();
            for i in 0..10 {
                let r = s.append_events(&[(None, delta(sid, turn, i))]).await;
                assert!(r.expect("append")[0].is_ok());
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let commits = STORE.commit_group.count() - commits_before;
    let txs = STORE.write_transactions.load(Ordering::Relaxed) - tx_before;
    assert!(txs >= 320, "{txs} write transactions");
    assert!(
        commits < txs,
        "{txs} write transactions took {commits} commits: none were shared"
    );
    println!("{txs} write transactions, {commits} commits");
    for sid in sids {
        let evs = s.events_since(sid, Seq(0), 1000).await.expect("events");
        assert_eq!(evs.len(), 10);
    }
}
