//! Chat platforms in the store (SPEC R1.3, R13.5): a chat's session and the update that went
//! to it, race-free and idempotent on SQLite and PostgreSQL; platform messages written in the
//! transaction of the fact that causes them, and only for sessions that belong to a chat.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use crate::common;

use common::*;
use serde_json::json;
use turnkey_storage::*;

fn chat_session(chat_key: &str) -> NewSession {
    NewSession {
        id: SessionId::new(),
        owner: chat_key.into(),
        platform: "telegram".into(),
        chat_key: Some(chat_key.into()),
        title: None,
        model: None,
        system_message: None,
        system_prompt: "sys".into(),
        workspace_snapshot: None,
        seed: Vec::new(),
    }
}

on_both!(r13_5_concurrent_deliveries_of_one_update_reach_one_session);
async fn r13_5_concurrent_deliveries_of_one_update_reach_one_session(s: Store) {
    const CALLS: usize = 10;
    let calls: Vec<_> = (0..CALLS)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                s.inbound_session(
                    "telegram",
                    "1001",
                    "telegram:42",
                    chat_session("telegram:42"),
                )
                .await
                .expect("inbound")
            })
        })
        .collect();
    let mut got = Vec::new();
    for c in calls {
        got.push(c.await.expect("task"));
    }
    let sid = got[0].session_id;
    assert!(got.iter().all(|i| i.session_id == sid), "{got:?}");
    assert_eq!(got.iter().filter(|i| i.first).count(), 1, "{got:?}");
    // No orphan session rows from the losers.
    let owned = s
        .list_sessions(Some("telegram:42"), 100, None)
        .await
        .unwrap();
    assert_eq!(owned.len(), 1, "{owned:?}");
    assert_eq!(
        s.chat_session("telegram:42").await.unwrap().unwrap().id,
        sid
    );

    // A second update of the same chat reaches the same session; a first message of another
    // chat makes that chat's own session.
    let next = s
        .inbound_session(
            "telegram",
            "1002",
            "telegram:42",
            chat_session("telegram:42"),
        )
        .await
        .unwrap();
    assert_eq!((next.session_id, next.first), (sid, true));
    let other = s
        .inbound_session(
            "telegram",
            "1003",
            "telegram:43",
            chat_session("telegram:43"),
        )
        .await
        .unwrap();
    assert_ne!(other.session_id, sid);
}

on_both!(r1_4_new_moves_the_chat_once_and_old_updates_keep_their_session);
async fn r1_4_new_moves_the_chat_once_and_old_updates_keep_their_session(s: Store) {
    let first = s
        .inbound_session("slack", "Ev1", "slack:T:C", chat_session("slack:T:C"))
        .await
        .unwrap();
    let renewed = s
        .renew_chat_session("slack", "Ev2", "slack:T:C", chat_session("slack:T:C"))
        .await
        .unwrap();
    assert_ne!(renewed.session_id, first.session_id);
    assert_eq!(
        renewed.result,
        Some(json!({"new_session": renewed.session_id}))
    );
    // A redelivered /new answers the same session and makes no other.
    let again = s
        .renew_chat_session("slack", "Ev2", "slack:T:C", chat_session("slack:T:C"))
        .await
        .unwrap();
    assert_eq!((again.session_id, again.first), (renewed.session_id, false));
    assert_eq!(
        s.list_sessions(Some("slack:T:C"), 100, None)
            .await
            .unwrap()
            .len(),
        2
    );
    // The chat talks to the new session; a redelivery of the update before /new still goes
    // to the old one (same session, same request id: the same admission).
    assert_eq!(
        s.chat_session("slack:T:C").await.unwrap().unwrap().id,
        renewed.session_id
    );
    let redelivered = s
        .inbound_session("slack", "Ev1", "slack:T:C", chat_session("slack:T:C"))
        .await
        .unwrap();
    assert_eq!(
        (redelivered.session_id, redelivered.first),
        (first.session_id, false)
    );
}

on_both!(r13_5_a_turn_end_writes_its_reply_only_for_a_chat_session);
async fn r13_5_a_turn_end_writes_its_reply_only_for_a_chat_session(s: Store) {
    let chat = s
        .inbound_session("telegram", "7", "telegram:99", chat_session("telegram:99"))
        .await
        .unwrap()
        .session_id;
    let api = session(&s).await;
    for (sid, req) in [(chat, "telegram:7"), (api, "r-api")] {
        let o = owner();
        let fence = lease(&s, sid, &o, 60_000).await.expect("lease");
        let a = s.admit(new_adm(sid, req, "hi")).await.unwrap().admission;
        let turn = TurnId::new();
        s.claim(&fence, a.id, &o, turn).await.unwrap();
        let end = TurnEnd {
            admission_id: a.id,
            turn_id: turn,
            messages: vec![],
            close_tail: None,
            usage: vec![],
            outcome: json!({"result": "completed"}),
            events: vec![],
            reply: Some(format!("answer for {req}")),
        };
        s.commit_turn_end(&fence, &end).await.unwrap();
    }
    let rows = s.list_outbox(None, None, 100).await.unwrap();
    assert_eq!(
        rows.len(),
        1,
        "only the chat session's turn writes a reply: {rows:?}"
    );
    let r = &rows[0];
    assert_eq!(
        (r.platform.as_str(), r.chat_key.as_str(), r.kind.as_str()),
        ("telegram", "telegram:99", "reply")
    );
    assert_eq!(r.status, OutboxStatus::Pending);
    assert_eq!(r.payload["text"], "answer for telegram:7");
    assert_eq!(r.session_id.as_deref(), Some(chat.to_string().as_str()));
    assert!(r.idempotency_key.starts_with("reply:"));
    let counts = s.count_outbox().await.unwrap();
    assert_eq!(counts[&OutboxStatus::Pending], 1);
    assert_eq!(counts[&OutboxStatus::Unknown], 0);
}

on_both!(r13_5_a_fenced_out_turn_end_writes_no_reply);
async fn r13_5_a_fenced_out_turn_end_writes_no_reply(s: Store) {
    let chat = s
        .inbound_session("telegram", "8", "telegram:5", chat_session("telegram:5"))
        .await
        .unwrap()
        .session_id;
    let o = owner();
    let fence = lease(&s, chat, &o, 60_000).await.expect("lease");
    let a = s
        .admit(new_adm(chat, "telegram:8", "hi"))
        .await
        .unwrap()
        .admission;
    let turn = TurnId::new();
    s.claim(&fence, a.id, &o, turn).await.unwrap();
    // The owner is presumed dead: the turn becomes unknown, and the chat is told so once.
    s.mark_unknown(a.id, &died(), None).await.unwrap();
    let end = TurnEnd {
        admission_id: a.id,
        turn_id: turn,
        messages: vec![],
        close_tail: None,
        usage: vec![],
        outcome: json!({"result": "completed"}),
        events: vec![],
        reply: Some("late answer".into()),
    };
    assert!(s.commit_turn_end(&fence, &end).await.is_err());
    let rows = s.list_outbox(None, None, 100).await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].kind, "notice");
    assert_eq!(rows[0].idempotency_key, format!("unknown:{}", a.id));
    assert!(rows[0].payload["text"].as_str().unwrap().contains("/retry"));
}

on_both!(r13_5_an_idempotency_key_is_written_once);
async fn r13_5_an_idempotency_key_is_written_once(s: Store) {
    let row = NewOutbox {
        platform: "webhook".into(),
        chat_key: "webhook:c1".into(),
        session_id: None,
        turn_id: None,
        idempotency_key: "cmd:webhook:m1".into(),
        kind: "notice".into(),
        payload: json!({"text": "first"}),
    };
    assert!(s.enqueue_outbox(&row).await.unwrap());
    let again = NewOutbox {
        payload: json!({"text": "second"}),
        ..row
    };
    assert!(!s.enqueue_outbox(&again).await.unwrap());
    let rows = s
        .list_outbox(Some(OutboxStatus::Pending), None, 10)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].payload["text"], "first");
}

on_both!(r1_4_a_command_completes_once_and_its_answer_is_written_with_it);
async fn r1_4_a_command_completes_once_and_its_answer_is_written_with_it(s: Store) {
    let inbound = s
        .inbound_session("slack", "C1:1.0", "slack:C1", chat_session("slack:C1"))
        .await
        .unwrap();
    assert!(inbound.first);
    assert_eq!(inbound.result, None, "a new update has no result yet");
    let answer = |text: &str| NewOutbox {
        platform: "slack".into(),
        chat_key: "slack:C1".into(),
        session_id: Some(inbound.session_id),
        turn_id: None,
        idempotency_key: "cmd:slack:C1:1.0".into(),
        kind: "notice".into(),
        payload: json!({"text": text}),
    };
    s.complete_command(
        "slack",
        "C1:1.0",
        &json!({"command": "status"}),
        &answer("idle"),
    )
    .await
    .unwrap();
    // A racing twin finishing later changes neither the result nor the answer.
    s.complete_command(
        "slack",
        "C1:1.0",
        &json!({"command": "other"}),
        &answer("late"),
    )
    .await
    .unwrap();
    let seen = s
        .inbound("slack", "C1:1.0")
        .await
        .unwrap()
        .expect("recorded");
    assert_eq!(seen.result, Some(json!({"command": "status"})));
    assert_eq!(seen.session_id, inbound.session_id);
    let rows = s.list_outbox(None, None, 10).await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].payload["text"], "idle");
    assert_eq!(rows[0].kind, "notice");

    // An update never recorded is not completed by accident, and nothing is written for it.
    assert!(s.inbound("slack", "C1:2.0").await.unwrap().is_none());
}

on_both!(r1_4_retry_finds_the_newest_unknown_admission);
async fn r1_4_retry_finds_the_newest_unknown_admission(s: Store) {
    let sid = session(&s).await;
    assert!(s.last_unknown_admission(sid).await.unwrap().is_none());
    let mut unknown = Vec::new();
    for req in ["r1", "r2", "r3"] {
        let o = owner();
        let fence = lease(&s, sid, &o, 60_000).await.expect("lease");
        let a = s.admit(new_adm(sid, req, "hi")).await.unwrap().admission;
        let turn = TurnId::new();
        s.claim(&fence, a.id, &o, turn).await.unwrap();
        if req == "r3" {
            // The newest one ends normally: it is not what `/retry` runs again.
            let end = TurnEnd {
                admission_id: a.id,
                turn_id: turn,
                messages: vec![],
                close_tail: None,
                usage: vec![],
                outcome: json!({"result": "completed"}),
                events: vec![],
                reply: None,
            };
            s.commit_turn_end(&fence, &end).await.unwrap();
        } else {
            s.mark_unknown(a.id, &died(), None).await.unwrap();
            unknown.push(a.id);
        }
    }
    let found = s.last_unknown_admission(sid).await.unwrap().expect("one");
    assert_eq!(found.id, unknown[1], "the newest unknown, by seq");
    assert_eq!(found.status, AdmissionStatus::Unknown);
    // Another session's unknown admissions are not this one's.
    let other = session(&s).await;
    assert!(s.last_unknown_admission(other).await.unwrap().is_none());
}

on_both!(r13_5_an_update_of_a_bound_chat_needs_no_new_session_and_of_an_unbound_one_writes_nothing);
async fn r13_5_an_update_of_a_bound_chat_needs_no_new_session_and_of_an_unbound_one_writes_nothing(
    s: Store,
) {
    let key = "telegram:42";
    assert!(
        s.inbound_if_bound("telegram", "1", key)
            .await
            .unwrap()
            .is_none(),
        "no session yet: the caller prepares one"
    );
    let first = s
        .inbound_session("telegram", "1", key, chat_session(key))
        .await
        .unwrap();
    assert!(first.first, "the unbound look recorded nothing");
    let next = s
        .inbound_if_bound("telegram", "2", key)
        .await
        .unwrap()
        .expect("bound");
    assert_eq!((next.session_id, next.first), (first.session_id, true));
    let again = s
        .inbound_if_bound("telegram", "2", key)
        .await
        .unwrap()
        .expect("seen");
    assert_eq!((again.session_id, again.first), (first.session_id, false));
}
