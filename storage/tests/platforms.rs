//! Chat platforms in the store (SPEC R1.3, R13.5): a chat's session and the update that went
//! to it, race-free and idempotent on SQLite and PostgreSQL; platform messages written in the
//! transaction of the fact that causes them, and only for sessions that belong to a chat.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#[macro_use]
mod common;

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
