//! SQLite group commit (see `storage/src/store/writer.rs`). Alone in its test binary: it reads
//! the process-wide store counters before and after its own burst of writers.
#![allow(clippy::expect_used, clippy::unwrap_used)]
#[macro_use]
#[allow(unused_macros)]
mod common;

use common::*;
use std::sync::atomic::Ordering;
use turnkey_storage::metrics::STORE;
use turnkey_storage::*;

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

/// Callers that stop waiting (their futures dropped at any point: queued, inside their
/// savepoint, or waiting for the group's commit) strand nothing: every event that committed
/// has a gap-free seq, and afterwards both this store and a second one on the same file (another
/// process, as far as SQLite is concerned) write at once: no group is left open holding the
/// write lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_writers_strand_no_group() {
    let dir = std::env::temp_dir().join(format!("tk-cancel-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let url = format!("sqlite://{}/t.db?mode=rwc", dir.display());
    let s = Store::connect(&url).await.expect("connect");
    s.migrate().await.expect("migrate");
    let mut sids = Vec::new();
    for _ in 0..16 {
        sids.push(session(&s).await);
    }
    let mut tasks = Vec::new();
    for (n, &sid) in sids.iter().enumerate() {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let turn = TurnId::new();
            for i in 0..20 {
                let batch = [(None, delta(sid, turn, i))];
                // Every other writer gives up after a few hundred microseconds.
                let give_up =
                    std::time::Duration::from_micros(100 + 37 * ((n * 20 + i) % 11) as u64);
                if (n + i) % 2 == 0 {
                    let _ = tokio::time::timeout(give_up, s.append_events(&batch)).await;
                } else {
                    let r = s.append_events(&batch).await.expect("append");
                    assert!(r[0].is_ok());
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    for &sid in &sids {
        let evs = s.events_since(sid, Seq(0), 1000).await.expect("events");
        let seqs: Vec<i64> = evs.iter().map(|e| e.seq.0).collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as i64).collect::<Vec<_>>(),
            "session {sid}"
        );
        assert!(
            seqs.len() >= 10,
            "the writers that waited all committed: {}",
            seqs.len()
        );
    }
    let other = Store::connect(&url).await.expect("second store");
    let quick = std::time::Duration::from_secs(5);
    let mine = [(None, delta(sids[0], TurnId::new(), 0))];
    let r = tokio::time::timeout(quick, s.append_events(&mine)).await;
    assert!(r.expect("this store writes at once").expect("append")[0].is_ok());
    let theirs = [(None, delta(sids[1], TurnId::new(), 0))];
    let r = tokio::time::timeout(quick, other.append_events(&theirs)).await;
    assert!(r.expect("the other store writes at once").expect("append")[0].is_ok());
}
