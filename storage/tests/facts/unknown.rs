//! Closing what a turn leaves open, on both backends: an `unknown` turn's tail is closed in the
//! same transaction that marks it (with the text already streamed kept as a partial answer),
//! the dead owner is fenced out, a failed turn's tail is closed with its receipt, and every
//! queue or state change is announced by a `status` event. A cut turn taken over by the next
//! owner counts its resumes after crashes apart from its hand-backs at shutdown (R13.9).
#![allow(clippy::expect_used, clippy::unwrap_used)]
use crate::common;

use common::*;
use serde_json::json;
use turnkey_storage::*;

/// A session with a claimed admission whose turn wrote `rows` and streamed `deltas`.
struct Running {
    sid: SessionId,
    fence: Fence,
    admission: Admission,
    turn: TurnId,
}

async fn running(s: &Store, rows: Vec<NewMessage>, deltas: &[&str]) -> Running {
    let sid = session(s).await;
    let o = owner();
    let fence = lease(s, sid, &o, 60_000).await.expect("lease");
    let admission = s.admit(new_adm(sid, "a", "hi")).await.expect("a").admission;
    let turn = TurnId::new();
    s.claim(&fence, admission.id, &o, turn)
        .await
        .expect("claim");
    for mut m in rows {
        m.turn_id = Some(turn);
        s.append_message(&fence, &m).await.expect("row");
    }
    let batch: Vec<_> = deltas
        .iter()
        .map(|d| {
            let ev = NewEvent {
                session_id: sid,
                kind: EventKind::MessageDelta,
                turn_id: Some(turn),
                admission_id: Some(admission.id),
                data: json!({ "text": d }),
            };
            (Some(fence.clone()), ev)
        })
        .collect();
    for r in s.append_events(&batch).await.expect("deltas") {
        r.expect("delta committed");
    }
    Running {
        sid,
        fence,
        admission,
        turn,
    }
}

fn msg(role: MessageRole, content: &str) -> NewMessage {
    NewMessage {
        id: MessageId::new(),
        role: Some(role),
        content: Some(content.into()),
        ..Default::default()
    }
}

fn roles(msgs: &[Message]) -> Vec<MessageRole> {
    msgs.iter().map(|m| m.role).collect()
}

on_both!(r2_4_unknown_closes_the_tail_keeps_the_partial_and_fences_the_owner_out);
async fn r2_4_unknown_closes_the_tail_keeps_the_partial_and_fences_the_owner_out(s: Store) {
    let r = running(&s, vec![msg(MessageRole::User, "hi")], &["Hel", "lo"]).await;
    // The recovery sweep holds no lease: it fences the dead owner out itself.
    let events = s
        .mark_unknown(r.admission.id, &died(), None)
        .await
        .expect("mark");
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::TurnUnknown, EventKind::Status]);
    assert_eq!(events[0].data["reason"], "owner_died");
    assert!(events[0].data["failure_message"].is_string());
    assert_eq!(events[1].data, json!({"state": "idle", "queue_depth": 0}));

    let msgs = s.list_messages(r.sid).await.expect("list");
    assert_eq!(roles(&msgs), [MessageRole::User, MessageRole::Assistant]);
    let closing = &msgs[1];
    assert_eq!(
        closing.content.as_deref(),
        Some("Hello"),
        "what the user saw"
    );
    let api = closing.api_content.as_deref().unwrap_or_default();
    assert!(api.starts_with("Hello\n\n[cut off:"), "{api}");
    assert!(api.contains("unknown"), "{api}");
    let display = closing.display.clone().expect("display");
    assert_eq!(display["boundary"], true);
    assert_eq!(display["closed_as"], "unknown");
    assert_eq!(display["partial"], true);
    assert_eq!(closing.turn_id, Some(r.turn));

    let got = s.get_admission(r.admission.id).await.expect("get").unwrap();
    assert_eq!(got.status, AdmissionStatus::Unknown);
    assert_eq!(got.outcome.unwrap()["partial_answer"], true);
    let lease = s.get_lease(r.sid).await.expect("lease").unwrap();
    assert!(lease.holder.is_none());
    assert!(lease.generation > r.fence.generation);
    assert!(matches!(
        s.append_message(&r.fence, &msg(MessageRole::Assistant, "late"))
            .await,
        Err(StoreError::Fenced(_))
    ));
}

on_both!(r10_3_unknown_tool_round_gets_a_result_per_open_call_then_a_boundary);
async fn r10_3_unknown_tool_round_gets_a_result_per_open_call_then_a_boundary(s: Store) {
    let calls = json!([{"id": "a", "name": "t", "arguments": "{}"},
                       {"id": "b", "name": "t", "arguments": "{}"}]);
    let mut call_row = msg(MessageRole::Assistant, "");
    call_row.tool_calls = Some(calls);
    let mut result_a = msg(MessageRole::Tool, "{\"ok\":1}");
    result_a.tool_call_id = Some("a".into());
    let r = running(
        &s,
        vec![msg(MessageRole::User, "go"), call_row, result_a],
        &[],
    )
    .await;
    // A drain that took the lease marks it under its own fence.
    let events = s
        .mark_unknown(r.admission.id, &died(), Some(&r.fence))
        .await
        .expect("mark");
    assert_eq!(events.len(), 2);
    let msgs = s.list_messages(r.sid).await.expect("list");
    assert_eq!(
        roles(&msgs),
        [
            MessageRole::User,
            MessageRole::Assistant,
            MessageRole::Tool,
            MessageRole::Tool,
            MessageRole::Assistant
        ]
    );
    assert_eq!(msgs[3].tool_call_id.as_deref(), Some("b"));
    assert!(msgs[3]
        .content
        .as_deref()
        .unwrap()
        .contains("outcome unknown"));
    let api = msgs[4].api_content.as_deref().unwrap();
    assert!(api.starts_with("[no answer:"), "{api}");
    // Under its own fence the lease stays with the caller.
    let lease = s.get_lease(r.sid).await.expect("lease").unwrap();
    assert_eq!(lease.generation, r.fence.generation);
}

on_both!(r10_5_failed_turn_end_closes_its_tail_in_the_same_commit);
async fn r10_5_failed_turn_end_closes_its_tail_in_the_same_commit(s: Store) {
    let r = running(&s, vec![msg(MessageRole::User, "hi")], &[]).await;
    let end = TurnEnd {
        reply: None,
        admission_id: r.admission.id,
        turn_id: r.turn,
        messages: vec![],
        close_tail: Some(TailClosure {
            closed_as: ClosedAs::Failed,
            reason: "provider_server_error".into(),
            message: "provider server error 500: boom".into(),
            partial: None,
        }),
        usage: vec![],
        outcome: json!({"result": "failed"}),
        events: vec![],
    };
    let events = s.commit_turn_end(&r.fence, &end).await.expect("end");
    assert_eq!(events.last().unwrap().kind, EventKind::Status);
    let msgs = s.list_messages(r.sid).await.expect("list");
    assert_eq!(roles(&msgs), [MessageRole::User, MessageRole::Assistant]);
    assert_eq!(
        msgs[1].content.as_deref(),
        Some("[no answer: the turn failed (provider server error 500: boom)]")
    );
}

on_both!(r11_2_status_follows_every_queue_and_state_change);
async fn r11_2_status_follows_every_queue_and_state_change(s: Store) {
    let sid = session(&s).await;
    let o = owner();
    let fence = lease(&s, sid, &o, 60_000).await.expect("lease");
    let status = |evs: &[Event]| {
        evs.iter()
            .find(|e| e.kind == EventKind::Status)
            .map(|e| e.data.clone())
            .expect("a status event")
    };
    let a = s.admit(new_adm(sid, "a", "1")).await.expect("a");
    assert_eq!(
        status(&a.events),
        json!({"state": "idle", "queue_depth": 1})
    );
    let b = s.admit(new_adm(sid, "b", "2")).await.expect("b");
    assert_eq!(
        status(&b.events),
        json!({"state": "idle", "queue_depth": 2})
    );
    let claimed = s
        .claim(&fence, a.admission.id, &o, TurnId::new())
        .await
        .expect("claim");
    assert_eq!(
        status(&claimed),
        json!({"state": "running", "queue_depth": 1})
    );
}

on_both!(r2_4_a_retry_is_linked_to_the_unknown_admission);
async fn r2_4_a_retry_is_linked_to_the_unknown_admission(s: Store) {
    let r = running(&s, vec![msg(MessageRole::User, "hi")], &[]).await;
    s.mark_unknown(r.admission.id, &died(), None)
        .await
        .expect("mark");
    assert!(s
        .retry_of(r.admission.id)
        .await
        .expect("none yet")
        .is_none());
    let mut again = new_adm(r.sid, "retry-of:x", "hi");
    again.retry_of = Some(r.admission.id);
    let retried = s.admit(again).await.expect("admit").admission;
    assert_eq!(retried.retry_of, Some(r.admission.id));
    let found = s.retry_of(r.admission.id).await.expect("found").unwrap();
    assert_eq!(found.id, retried.id);
}

on_both!(r13_9_a_crash_resume_counts_against_max_resumes_and_a_shutdown_hand_back_does_not);
async fn r13_9_a_crash_resume_counts_against_max_resumes_and_a_shutdown_hand_back_does_not(
    s: Store,
) {
    let sid = session(&s).await;
    let a = s.admit(new_adm(sid, "r1", "hi")).await.unwrap().admission;
    // The first owner claims the turn, then dies: its lease runs out.
    let (_, _, claimed) = take_and_claim(&s, sid, &owner(), 1).await;
    assert!(claimed.is_some(), "claimed");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;

    let second = owner();
    let fence = lease(&s, sid, &second, 60_000)
        .await
        .expect("expired lease taken");
    let (now, events) = s.take_over(&fence, a.id, &second).await.unwrap();
    assert_eq!((now.attempt, now.crash_resumes), (2, 1), "a crash counts");
    let resumed = events
        .iter()
        .find(|e| e.kind == EventKind::TurnResumed)
        .expect("turn.resumed");
    assert_eq!(resumed.data["reason"], "crash");
    assert_eq!(resumed.data["attempt"], 2);

    // A graceful stop hands it back; the next owner's take-over is no crash.
    s.hand_back(&fence, a.id, ResumeReason::Shutdown)
        .await
        .unwrap();
    let third = owner();
    let fence = lease(&s, sid, &third, 60_000)
        .await
        .expect("released lease taken");
    let (now, events) = s.take_over(&fence, a.id, &third).await.unwrap();
    assert_eq!(
        (now.attempt, now.crash_resumes),
        (3, 1),
        "a hand-back does not count"
    );
    let resumed = events
        .iter()
        .find(|e| e.kind == EventKind::TurnResumed)
        .expect("turn.resumed");
    assert_eq!(resumed.data["reason"], "shutdown");
    let stored = s.get_admission(a.id).await.unwrap().expect("stored");
    assert_eq!(
        (stored.attempt, stored.crash_resumes, stored.handed_back),
        (3, 1, None)
    );
}
