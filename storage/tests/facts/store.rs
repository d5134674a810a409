//! The Store's durable facts against a real SQLite file and a PostgreSQL database: idempotent
//! admission, the status machine, fenced leases and gap-free event seqs.
#![allow(clippy::expect_used, clippy::unwrap_used)]
use crate::common;

use common::*;
use serde_json::json;
use turnkey_storage::*;

on_both!(r2_3_same_request_id_admits_once_and_other_digest_conflicts);
async fn r2_3_same_request_id_admits_once_and_other_digest_conflicts(s: Store) {
    let sid = session(&s).await;
    let a = s.admit(new_adm(sid, "r1", "hi")).await.expect("admit");
    assert!(!a.duplicate);
    assert_eq!(a.admission.status, AdmissionStatus::Queued);
    let kinds: Vec<_> = a.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::AdmissionQueued, EventKind::Status]);
    let b = s.admit(new_adm(sid, "r1", "hi")).await.expect("again");
    assert!(b.duplicate);
    assert_eq!(b.admission.id, a.admission.id);
    assert!(b.events.is_empty());
    let c = s.admit(new_adm(sid, "r1", "other")).await;
    assert!(matches!(c, Err(StoreError::IdempotencyConflict { .. })));
}

on_both!(r2_5_fifo_is_ordered_by_seq);
async fn r2_5_fifo_is_ordered_by_seq(s: Store) {
    let sid = session(&s).await;
    let first = s.admit(new_adm(sid, "a", "1")).await.expect("a").admission;
    let second = s.admit(new_adm(sid, "b", "2")).await.expect("b").admission;
    assert!(second.seq > first.seq);
    assert_eq!(
        s.next_queued(sid).await.expect("q").expect("head").id,
        first.id
    );
    assert_eq!(s.queue_depth(sid).await.expect("depth"), 2);
}

on_both!(r2_4_claim_settle_and_unknown_follow_the_status_machine);
async fn r2_4_claim_settle_and_unknown_follow_the_status_machine(s: Store) {
    let sid = session(&s).await;
    let o = owner();
    let fence = lease(&s, sid, &o, 60_000).await.expect("free lease");
    let a = s.admit(new_adm(sid, "a", "1")).await.expect("a").admission;
    let turn = TurnId::new();
    let evs = s.claim(&fence, a.id, &o, turn).await.expect("claim");
    assert_eq!(evs[0].kind, EventKind::TurnStarted);
    // A second claim of the same admission is refused: it is no longer queued.
    assert!(matches!(
        s.claim(&fence, a.id, &o, TurnId::new()).await,
        Err(StoreError::WrongState(_))
    ));
    let unknown = s
        .mark_unknown(a.id, &died(), Some(&fence))
        .await
        .expect("unknown");
    assert_eq!(unknown[0].kind, EventKind::TurnUnknown);
    let got = s.get_admission(a.id).await.expect("get").expect("row");
    assert_eq!(got.status, AdmissionStatus::Unknown);
    // unknown is not settled later: the turn end is refused, the receipt stays unknown.
    let end = TurnEnd {
        reply: None,
        admission_id: a.id,
        turn_id: turn,
        messages: vec![],
        close_tail: None,
        usage: vec![],
        outcome: json!({"result": "completed"}),
        events: vec![],
    };
    assert!(matches!(
        s.commit_turn_end(&fence, &end).await,
        Err(StoreError::WrongState(_))
    ));
    let again = s.mark_unknown(a.id, &died(), Some(&fence)).await;
    assert!(again.expect("noop").is_empty());
}

on_both!(r4_1_live_lease_is_exclusive_and_expired_one_is_taken_over);
async fn r4_1_live_lease_is_exclusive_and_expired_one_is_taken_over(s: Store) {
    let sid = session(&s).await;
    let (a, b) = (owner(), owner());
    let fa = lease(&s, sid, &a, 60_000).await.expect("a gets it");
    assert!(lease(&s, sid, &b, 60_000).await.is_none(), "b must wait");
    s.refresh_lease(&fa, 1).await.expect("shorten");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let fb = lease(&s, sid, &b, 60_000)
        .await
        .expect("b takes the expired lease");
    assert!(fb.generation > fa.generation);
    assert!(matches!(
        s.refresh_lease(&fa, 60_000).await,
        Err(StoreError::Fenced(_))
    ));
}

on_both!(r4_4_dead_holder_is_reclaimed_before_ttl);
async fn r4_4_dead_holder_is_reclaimed_before_ttl(s: Store) {
    let sid = session(&s).await;
    let (a, b) = (owner(), owner());
    lease(&s, sid, &a, 600_000).await.expect("a");
    let dead_a = a.instance;
    let fb = s
        .try_acquire_lease(
            LeaseClaim {
                session: sid,
                owner: b.clone(),
                platform: "t",
                ttl_ms: 60_000,
            },
            std::sync::Arc::new(move |h: &Owner| h.instance == dead_a),
        )
        .await
        .expect("try");
    assert!(fb.is_some());
}

on_both!(r13_3_stale_generation_cannot_write);
async fn r13_3_stale_generation_cannot_write(s: Store) {
    let sid = session(&s).await;
    let (a, b) = (owner(), owner());
    let fa = lease(&s, sid, &a, 1).await.expect("a");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let fb = lease(&s, sid, &b, 60_000).await.expect("b");
    let msg = NewMessage {
        id: MessageId::new(),
        role: Some(MessageRole::Assistant),
        content: Some("late".into()),
        ..Default::default()
    };
    assert!(matches!(
        s.append_message(&fa, &msg).await,
        Err(StoreError::Fenced(_))
    ));
    let ev = NewEvent {
        session_id: sid,
        kind: EventKind::MessageDelta,
        turn_id: None,
        admission_id: None,
        data: json!({"text": "x"}),
    };
    let res = s
        .append_events(&[(Some(fa.clone()), ev.clone()), (Some(fb.clone()), ev)])
        .await
        .expect("batch");
    assert!(matches!(res[0], Err(StoreError::Fenced(_))));
    assert!(
        res[1].is_ok(),
        "the current holder's event commits in the same batch"
    );
    assert!(s.list_messages(sid).await.expect("list").is_empty());
}

on_both!(r13_3_release_keeps_the_generation_growing);
async fn r13_3_release_keeps_the_generation_growing(s: Store) {
    let sid = session(&s).await;
    let a = owner();
    let f1 = lease(&s, sid, &a, 60_000).await.expect("1");
    assert!(s.release_lease(&f1).await.expect("release"));
    let f2 = lease(&s, sid, &a, 60_000).await.expect("2");
    assert!(f2.generation > f1.generation);
    assert!(!s
        .release_lease(&f1)
        .await
        .expect("stale release is a no-op"));
}

on_both!(r11_2_event_seqs_are_contiguous_across_writers);
async fn r11_2_event_seqs_are_contiguous_across_writers(s: Store) {
    let sid = session(&s).await;
    let mut tasks = Vec::new();
    for i in 0..10 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.admit(new_adm(sid, &format!("r{i}"), &format!("t{i}")))
                .await
        }));
    }
    for t in tasks {
        t.await.expect("join").expect("admit");
    }
    // Each admission commits `admission.queued` and `status`.
    let evs = s.events_since(sid, Seq(0), 100).await.expect("events");
    let seqs: Vec<i64> = evs.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
    let tail = s.events_since(sid, Seq(17), 100).await.expect("since 17");
    assert_eq!(
        tail.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        vec![18, 19, 20]
    );
}

on_both!(r10_4_turn_end_commits_tail_usage_receipt_and_events_together);
async fn r10_4_turn_end_commits_tail_usage_receipt_and_events_together(s: Store) {
    let sid = session(&s).await;
    let o = owner();
    let fence = lease(&s, sid, &o, 60_000).await.expect("lease");
    let a = s.admit(new_adm(sid, "a", "1")).await.expect("a").admission;
    let turn = TurnId::new();
    s.claim(&fence, a.id, &o, turn).await.expect("claim");
    let end = TurnEnd {
        reply: None,
        admission_id: a.id,
        turn_id: turn,
        messages: vec![NewMessage {
            id: MessageId::new(),
            role: Some(MessageRole::Assistant),
            content: Some("done".into()),
            ..Default::default()
        }],
        close_tail: None,
        usage: vec![NewUsage {
            provider: "p".into(),
            model: "m".into(),
            input_tokens: 10,
            output_tokens: 5,
            cache_read_tokens: 2,
            cache_write_tokens: 0,
            cost_usd: 0.5,
        }],
        outcome: json!({"result": "completed", "final_response": "done"}),
        events: vec![NewEvent {
            session_id: sid,
            kind: EventKind::TurnFinished,
            turn_id: Some(turn),
            admission_id: Some(a.id),
            data: json!({"result": "completed"}),
        }],
    };
    let evs = s.commit_turn_end(&fence, &end).await.expect("end");
    assert_eq!(evs[0].kind, EventKind::TurnFinished);
    let got = s.get_admission(a.id).await.expect("get").expect("row");
    assert_eq!(got.status, AdmissionStatus::Terminal);
    assert_eq!(got.outcome.expect("outcome")["final_response"], "done");
    let sess = s.get_session(sid).await.expect("get").expect("row");
    assert_eq!(sess.usage.input_tokens, 10);
    assert_eq!(
        s.list_messages(sid).await.expect("msgs")[0]
            .content
            .as_deref(),
        Some("done")
    );
}

on_both!(r4_1_the_lease_records_the_turn_its_commit_claims_and_none_without_a_head);
async fn r4_1_the_lease_records_the_turn_its_commit_claims_and_none_without_a_head(s: Store) {
    let sid = session(&s).await;
    let o = owner();
    // Nothing queued: the lease is taken, no turn is recorded.
    let (fence, _, claimed) = take_and_claim(&s, sid, &o, 60_000).await;
    assert!(claimed.is_none());
    assert_eq!(
        s.get_lease(sid).await.expect("lease").unwrap().turn_id,
        None
    );
    assert!(s.release_lease(&fence).await.expect("release"));
    // A queued input: the commit that takes the lease claims it as the recorded turn, with
    // its user row at the transcript's next index and `turn.started` + `status` after the
    // admission's own two events.
    let a = s.admit(new_adm(sid, "a", "hello")).await.expect("a");
    let (fence, turn, claimed) = take_and_claim(&s, sid, &o, 60_000).await;
    let claimed = claimed.expect("the head is claimed");
    assert_eq!(claimed.admission.id, a.admission.id);
    let lease = s.get_lease(sid).await.expect("lease").unwrap();
    assert_eq!(lease.turn_id, Some(turn));
    assert_eq!(lease.generation, fence.generation);
    let seqs: Vec<i64> = claimed.events.iter().map(|e| e.seq.0).collect();
    let last_admit = a.events.last().unwrap().seq.0;
    assert_eq!(seqs, [last_admit + 1, last_admit + 2]);
    let kinds: Vec<_> = claimed.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::TurnStarted, EventKind::Status]);
    let msgs = s.list_messages(sid).await.expect("messages");
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].content.as_deref(), Some("hello"));
    assert_eq!(msgs[0].admission_id, Some(a.admission.id));
    let got = s.get_admission(a.admission.id).await.expect("get").unwrap();
    assert_eq!(
        (got.status, got.turn_id),
        (AdmissionStatus::Started, Some(turn))
    );
    assert_eq!(claimed.session.id, sid);
    assert_eq!(claimed.session.last_event_seq.0, seqs[1]);

    // The holder dies with its turn `started`; two more inputs queue. The next take claims
    // nothing (the started turn must be settled first) and records no turn.
    s.release_lease(&fence).await.expect("release");
    let b = s.admit(new_adm(sid, "b", "two")).await.expect("b");
    s.admit(new_adm(sid, "c", "three")).await.expect("c");
    let (fence, _, claimed) = take_and_claim(&s, sid, &o, 60_000).await;
    assert!(claimed.is_none(), "a started admission blocks the claim");
    assert_eq!(
        s.get_lease(sid).await.expect("lease").unwrap().turn_id,
        None
    );
    s.mark_unknown(a.admission.id, &died(), Some(&fence))
        .await
        .expect("unknown");
    s.release_lease(&fence).await.expect("release");
    // Then the head is the oldest queued input, and the status after its claim counts the
    // one left behind it.
    let (_, _, claimed) = take_and_claim(&s, sid, &o, 60_000).await;
    let claimed = claimed.expect("b is claimed");
    assert_eq!(claimed.admission.id, b.admission.id);
    assert_eq!(
        claimed.events[1].data,
        json!({"state": "running", "queue_depth": 1})
    );
}

on_both!(r13_3_a_turn_end_after_a_takeover_is_fenced_and_writes_nothing);
async fn r13_3_a_turn_end_after_a_takeover_is_fenced_and_writes_nothing(s: Store) {
    let sid = session(&s).await;
    let (a, b) = (owner(), owner());
    let adm = s.admit(new_adm(sid, "a", "hello")).await.expect("admit");
    let (fa, turn, claimed) = take_and_claim(&s, sid, &a, 1).await;
    assert!(claimed.is_some());
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    // b takes the expired lease; the recovery marks a's turn unknown.
    let fb = lease(&s, sid, &b, 60_000).await.expect("b takes over");
    s.mark_unknown(adm.admission.id, &died(), Some(&fb))
        .await
        .expect("unknown");
    let before = s.events_since(sid, Seq(0), 1_000).await.expect("events");
    let rows_before = s.list_messages(sid).await.expect("messages").len();
    let end = completed_end(
        adm.admission.id,
        turn,
        vec![answer_row(turn, "late")],
        vec![],
    );
    // The admission is no longer `started`, but what a's turn end reports is the lost lease.
    assert!(matches!(
        s.commit_turn_end_and_release(&fa, &end).await,
        Err(StoreError::Fenced(_))
    ));
    assert!(matches!(
        s.commit_turn_end(&fa, &end).await,
        Err(StoreError::Fenced(_))
    ));
    assert_eq!(
        s.events_since(sid, Seq(0), 1_000).await.expect("events"),
        before
    );
    assert_eq!(
        s.list_messages(sid).await.expect("messages").len(),
        rows_before
    );
    let lease = s.get_lease(sid).await.expect("lease").unwrap();
    assert_eq!(lease.holder.map(|h| h.instance), Some(b.instance));
    assert_eq!(lease.generation, fb.generation);
}

on_both!(r13_8_the_audit_log_is_pruned_before_a_time_and_no_later);
async fn r13_8_the_audit_log_is_pruned_before_a_time_and_no_later(s: Store) {
    let entry = |action: &str| NewAudit {
        principal: "operator".into(),
        action: action.into(),
        target: "t".into(),
        detail: serde_json::json!({}),
    };
    s.record_audit(&entry("old.one")).await.unwrap();
    s.record_audit(&entry("old.two")).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let cutoff = now_ms();
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    s.record_audit(&entry("new")).await.unwrap();

    assert_eq!(s.prune_audit(cutoff).await.unwrap(), 2, "the two before");
    let left: Vec<String> = s
        .audit_entries(0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(left, ["new"]);
    assert_eq!(s.prune_audit(cutoff).await.unwrap(), 0, "nothing twice");
}
