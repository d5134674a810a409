//! The store's writer under concurrency (SPEC R11.2, R13.3): many writers at once commit every
//! write exactly once with gap-free seqs, a writer that fails or is fenced out undoes only its
//! own part, and a turn's end gives the lease up in its own commit only when nothing waits
//! behind the turn. `group_commit.rs` shows SQLite's writers sharing commits.
#![allow(clippy::expect_used, clippy::unwrap_used)]
use crate::common;

use common::*;
use serde_json::json;
use turnkey_storage::*;

on_both!(concurrent_writers_commit_everything_once_with_gap_free_seqs);
async fn concurrent_writers_commit_everything_once_with_gap_free_seqs(s: Store) {
    const SESSIONS: usize = 24;
    const WRITES: usize = 15;
    let mut sids = Vec::new();
    for _ in 0..SESSIONS {
        sids.push(session(&s).await);
    }
    let mut tasks = Vec::new();
    for &sid in &sids {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let turn = TurnId::new();
            for i in 0..WRITES {
                // Alternate a one-event batch, a two-event batch and an admission.
                match i % 3 {
                    0 => {
                        let r = s.append_events(&[(None, delta(sid, turn, i))]).await;
                        assert!(r.expect("append")[0].is_ok());
                    }
                    1 => {
                        let batch = [(None, delta(sid, turn, i)), (None, delta(sid, turn, i))];
                        let r = s.append_events(&batch).await.expect("append");
                        assert!(r.iter().all(|e| e.is_ok()));
                    }
                    _ => {
                        s.admit(new_adm(sid, &format!("r{i}"), &format!("t{i}")))
                            .await
                            .expect("admit");
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer task");
    }
    // Per session: 5 one-event batches, 5 two-event batches, 5 admissions of two events each.
    let expected = 5 + 10 + 10;
    for sid in sids {
        let evs = s.events_since(sid, Seq(0), 1000).await.expect("events");
        let seqs: Vec<i64> = evs.iter().map(|e| e.seq.0).collect();
        assert_eq!(seqs, (1..=expected).collect::<Vec<_>>(), "session {sid}");
        assert_eq!(s.queue_depth(sid).await.expect("depth"), 5);
    }
}

on_both!(racing_admissions_to_one_session_count_the_queue_in_commit_order);
/// Many admissions to one session at once, each request sent twice: every input is admitted
/// once, and the queue counts in their events are those of the commit order, not of a
/// snapshot another admission overtook (on PostgreSQL an admission is one statement that
/// reads at its start; see `store::admissions::one_statement`).
async fn racing_admissions_to_one_session_count_the_queue_in_commit_order(s: Store) {
    const INPUTS: usize = 40;
    let sid = session(&s).await;
    let mut tasks = Vec::new();
    for i in 0..INPUTS * 2 {
        let s = s.clone();
        let n = i % INPUTS;
        tasks.push(tokio::spawn(async move {
            s.admit(new_adm(sid, &format!("r{n}"), &format!("t{n}")))
                .await
                .expect("admit")
        }));
    }
    let mut fresh = Vec::new();
    for t in tasks {
        let admitted = t.await.expect("task");
        if !admitted.duplicate {
            fresh.push(admitted.admission.id);
        }
    }
    assert_eq!(fresh.len(), INPUTS, "each request admitted once");
    let queued = s.queued_admissions(sid).await.expect("queued");
    let seqs: Vec<i64> = queued.iter().map(|a| a.seq).collect();
    assert_eq!(seqs, (1..=INPUTS as i64).collect::<Vec<_>>());
    let evs = s.events_since(sid, Seq(0), 1000).await.expect("events");
    let ev_seqs: Vec<i64> = evs.iter().map(|e| e.seq.0).collect();
    assert_eq!(ev_seqs, (1..=2 * INPUTS as i64).collect::<Vec<_>>());
    let places: Vec<i64> = evs
        .iter()
        .filter(|e| e.kind == EventKind::AdmissionQueued)
        .map(|e| e.data["seq_in_queue"].as_i64().expect("seq_in_queue"))
        .collect();
    let depths: Vec<i64> = evs
        .iter()
        .filter(|e| e.kind == EventKind::Status)
        .map(|e| e.data["queue_depth"].as_i64().expect("queue_depth"))
        .collect();
    let in_order: Vec<i64> = (1..=INPUTS as i64).collect();
    assert_eq!(places, in_order, "places in the queue, in commit order");
    assert_eq!(depths, in_order, "queue depths, in commit order");
    // The admission.queued event names the admission committed with it, in seq order.
    let named: Vec<String> = evs
        .iter()
        .filter(|e| e.kind == EventKind::AdmissionQueued)
        .map(|e| e.admission_id.expect("admission id").to_string())
        .collect();
    let by_seq: Vec<String> = queued.iter().map(|a| a.id.to_string()).collect();
    assert_eq!(named, by_seq);
}

on_both!(a_failing_writer_among_many_undoes_only_its_own_part);
async fn a_failing_writer_among_many_undoes_only_its_own_part(s: Store) {
    let sid = session(&s).await;
    let o = owner();
    let fence = lease(&s, sid, &o, 60_000).await.expect("lease");
    let a = s.admit(new_adm(sid, "a", "1")).await.expect("a").admission;
    s.claim(&fence, a.id, &o, TurnId::new())
        .await
        .expect("claim");
    let before = s
        .events_since(sid, Seq(0), 1000)
        .await
        .expect("events")
        .len();
    let stale = Fence {
        generation: LeaseGeneration(fence.generation.0 + 7),
        ..fence.clone()
    };
    let turn = TurnId::new();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let (s, fence, stale) = (s.clone(), fence.clone(), stale.clone());
        tasks.push(tokio::spawn(async move {
            match i % 4 {
                // Claiming an admission that is no longer queued writes nothing.
                0 => {
                    let r = s.claim(&fence, a.id, &owner(), TurnId::new()).await;
                    assert!(matches!(r, Err(StoreError::WrongState(_))), "{r:?}");
                    0
                }
                // A stale fence is refused in its own slot; the rest of the batch commits.
                1 => {
                    let batch = [
                        (Some(stale.clone()), delta(sid, turn, i)),
                        (Some(fence.clone()), delta(sid, turn, i)),
                    ];
                    let r = s.append_events(&batch).await.expect("append");
                    assert!(matches!(r[0], Err(StoreError::Fenced(_))), "{:?}", r[0]);
                    assert!(r[1].is_ok());
                    1
                }
                // A second admission with a used request id and another payload conflicts.
                2 => {
                    let r = s.admit(new_adm(sid, "a", &format!("other {i}"))).await;
                    assert!(matches!(r, Err(StoreError::IdempotencyConflict { .. })));
                    0
                }
                _ => {
                    let batch = [(Some(fence.clone()), delta(sid, turn, i))];
                    let r = s.append_events(&batch).await.expect("append");
                    assert!(r[0].is_ok());
                    1
                }
            }
        }));
    }
    let mut committed = 0;
    for t in tasks {
        committed += t.await.expect("task");
    }
    let evs = s.events_since(sid, Seq(0), 1000).await.expect("events");
    assert_eq!(evs.len(), before + committed);
    let seqs: Vec<i64> = evs.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    let got = s.get_admission(a.id).await.expect("get").expect("row");
    assert_eq!(got.status, AdmissionStatus::Started);
}

fn end_of(sid: SessionId, a: AdmissionId, turn: TurnId) -> TurnEnd {
    TurnEnd {
        reply: None,
        admission_id: a,
        turn_id: turn,
        messages: Vec::new(),
        close_tail: None,
        usage: Vec::new(),
        outcome: json!({"result": "completed", "final_response": "ok"}),
        events: vec![NewEvent {
            session_id: sid,
            kind: EventKind::TurnFinished,
            turn_id: Some(turn),
            admission_id: Some(a),
            data: json!({"result": "completed"}),
        }],
    }
}

on_both!(racing_drains_and_admissions_claim_each_input_once_with_counts_in_commit_order);
/// Drains of four owners race for one session's lease while inputs arrive: every input is
/// claimed once and ended, one turn at a time, and every `status` event's queue depth is the
/// one its place in the log implies (on PostgreSQL a free lease is taken and the head claimed
/// in one statement that reads at its start; see `store::leases::one_statement`).
async fn racing_drains_and_admissions_claim_each_input_once_with_counts_in_commit_order(s: Store) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    const INPUTS: usize = 30;
    let sid = session(&s).await;
    let ended = Arc::new(AtomicUsize::new(0));
    let mut drains = Vec::new();
    for _ in 0..4 {
        let (s, ended) = (s.clone(), ended.clone());
        drains.push(tokio::spawn(async move {
            let o = owner();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while ended.load(Ordering::SeqCst) < INPUTS {
                assert!(std::time::Instant::now() < deadline, "drains stalled");
                let turn = TurnId::new();
                let how = ClaimAs {
                    turn,
                    user_row: Arc::new(move |a: &Admission| NewMessage {
                        id: MessageId::new(),
                        role: Some(MessageRole::User),
                        content: Some(a.payload["text"].as_str().unwrap_or_default().into()),
                        turn_id: Some(turn),
                        admission_id: Some(a.id),
                        ..Default::default()
                    }),
                };
                let claim = LeaseClaim {
                    session: sid,
                    owner: o.clone(),
                    platform: "t",
                    ttl_ms: 60_000,
                };
                let dead = Arc::new(|_: &Owner| false);
                match s
                    .try_acquire_lease_and_claim(claim, dead, Some(how))
                    .await
                    .expect("take")
                {
                    Some((fence, Some(claimed))) => {
                        let end = end_of(sid, claimed.admission.id, turn);
                        let (_, released) = s
                            .commit_turn_end_and_release(&fence, &end)
                            .await
                            .expect("end");
                        ended.fetch_add(1, Ordering::SeqCst);
                        if !released {
                            s.release_lease(&fence).await.expect("release");
                        }
                    }
                    Some((fence, None)) => {
                        s.release_lease(&fence).await.expect("release");
                    }
                    None => tokio::task::yield_now().await,
                }
            }
        }));
    }
    let mut admits = Vec::new();
    for i in 0..INPUTS {
        let s = s.clone();
        admits.push(tokio::spawn(async move {
            s.admit(new_adm(sid, &format!("r{i}"), &format!("t{i}")))
                .await
                .expect("admit")
        }));
    }
    for a in admits {
        a.await.expect("admit task");
    }
    for d in drains {
        d.await.expect("drain");
    }
    let evs = s.events_since(sid, Seq(0), 10_000).await.expect("events");
    let seqs: Vec<i64> = evs.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    let (mut queued, mut running, mut started) = (0i64, false, 0);
    for e in &evs {
        match e.kind {
            EventKind::AdmissionQueued => queued += 1,
            EventKind::TurnStarted => {
                assert!(!running, "a turn started while one ran: seq {}", e.seq.0);
                queued -= 1;
                running = true;
                started += 1;
            }
            EventKind::TurnFinished => running = false,
            EventKind::Status => {
                let want = json!({
                    "state": if running { "running" } else { "idle" },
                    "queue_depth": queued,
                });
                assert_eq!(e.data, want, "status at seq {}", e.seq.0);
            }
            _ => {}
        }
    }
    assert_eq!(started, INPUTS);
    assert_eq!(s.queue_depth(sid).await.expect("depth"), 0);
    assert!(s
        .started_admissions(Some(sid))
        .await
        .expect("started")
        .is_empty());
}

on_both!(turn_end_releases_the_lease_only_when_nothing_waits);
async fn turn_end_releases_the_lease_only_when_nothing_waits(s: Store) {
    let sid = session(&s).await;
    let o = owner();
    let fence = lease(&s, sid, &o, 60_000).await.expect("lease");
    let a = s.admit(new_adm(sid, "a", "1")).await.expect("a").admission;
    let b = s.admit(new_adm(sid, "b", "2")).await.expect("b").admission;
    let t1 = TurnId::new();
    s.claim(&fence, a.id, &o, t1).await.expect("claim a");
    // `b` waits: the lease stays with the drain.
    let (evs, released) = s
        .commit_turn_end_and_release(&fence, &end_of(sid, a.id, t1))
        .await
        .expect("end a");
    assert!(!released);
    assert_eq!(evs.last().expect("status").data["queue_depth"], 1);
    let held = s.get_lease(sid).await.expect("lease").expect("row");
    assert_eq!(held.holder.expect("held").instance, o.instance);
    let t2 = TurnId::new();
    s.claim(&fence, b.id, &o, t2).await.expect("claim b");
    let (evs, released) = s
        .commit_turn_end_and_release(&fence, &end_of(sid, b.id, t2))
        .await
        .expect("end b");
    assert!(released);
    let status = evs.last().expect("status");
    assert_eq!(status.kind, EventKind::Status);
    assert_eq!(status.data, json!({"state": "idle", "queue_depth": 0}));
    let free = s.get_lease(sid).await.expect("lease").expect("row");
    assert!(free.holder.is_none());
    assert_eq!(free.generation, fence.generation);
    // The old fence writes nothing more, and the next holder gets a new generation.
    assert!(matches!(
        s.append_events(&[(Some(fence.clone()), delta(sid, t2, 0))])
            .await
            .expect("append")[0],
        Err(StoreError::Fenced(_))
    ));
    let next = lease(&s, sid, &owner(), 60_000).await.expect("free again");
    assert_eq!(next.generation.0, fence.generation.0 + 1);
}
