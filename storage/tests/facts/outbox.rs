//! The outbox state machine (SPEC R13.5) on SQLite and PostgreSQL: `pending → sending` is a
//! compare-and-set that exactly one sender wins; `sending → sent | pending | failed | unknown`
//! only for the owner that holds it; a chat offers only its oldest open row; a row left
//! `sending` by a gone owner becomes `unknown` (or `pending` again on request); a person may
//! send an `unknown` row again; a draft row is recorded once.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use crate::common;

use serde_json::json;
use turnkey_storage::*;

fn row(chat: &str, key: &str, text: &str) -> NewOutbox {
    NewOutbox {
        platform: "telegram".into(),
        chat_key: chat.into(),
        session_id: None,
        turn_id: None,
        idempotency_key: key.into(),
        kind: "reply".into(),
        payload: json!({ "text": text }),
    }
}

async fn by_key(s: &Store, key: &str) -> Outbox {
    s.outbox_by_key(key).await.expect("read").expect("row")
}

on_both!(r13_5_a_chat_offers_its_oldest_open_row_and_chats_go_in_parallel);
async fn r13_5_a_chat_offers_its_oldest_open_row_and_chats_go_in_parallel(s: Store) {
    for (chat, key) in [
        ("telegram:1", "a1"),
        ("telegram:1", "a2"),
        ("telegram:2", "b1"),
    ] {
        assert!(s
            .enqueue_outbox(&row(chat, key, key))
            .await
            .expect("enqueue"));
        // Distinct milliseconds: created_at orders a chat's rows.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert!(
        !s.enqueue_outbox(&row("telegram:1", "a1", "again"))
            .await
            .expect("enqueue"),
        "an idempotency key is written once"
    );
    let due = s.due_outbox(&["telegram"], now_ms()).await.expect("due");
    let keys: Vec<_> = due.iter().map(|r| r.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["a1", "b1"]);
    assert!(s
        .due_outbox(&["slack"], now_ms())
        .await
        .expect("due")
        .is_empty());

    // While a1 is being sent, chat 1 offers nothing; once it is sent, a2.
    let o = common::owner();
    let a1 = s
        .claim_outbox(&due[0].id, &o)
        .await
        .expect("claim")
        .expect("won");
    assert_eq!(a1.status, OutboxStatus::Sending);
    assert_eq!(a1.attempts, 1);
    let keys: Vec<_> = s
        .due_outbox(&["telegram"], now_ms())
        .await
        .expect("due")
        .into_iter()
        .map(|r| r.idempotency_key)
        .collect();
    assert_eq!(keys, ["b1"]);
    s.outbox_sent(&a1.id, o.instance, 1, Some("77"))
        .await
        .expect("sent");
    let sent = by_key(&s, "a1").await;
    assert_eq!(sent.status, OutboxStatus::Sent);
    assert_eq!(sent.platform_message_id.as_deref(), Some("77"));
    assert!(sent.sent_at.is_some());
    let keys: Vec<_> = s
        .due_outbox(&["telegram"], now_ms())
        .await
        .expect("due")
        .into_iter()
        .map(|r| r.idempotency_key)
        .collect();
    assert_eq!(keys, ["a2", "b1"]);
}

on_both!(r13_5_one_sender_wins_a_row);
async fn r13_5_one_sender_wins_a_row(s: Store) {
    s.enqueue_outbox(&row("telegram:1", "k", "x"))
        .await
        .expect("enqueue");
    let id = by_key(&s, "k").await.id;
    let claims: Vec<_> = (0..8)
        .map(|_| {
            let (s, id) = (s.clone(), id.clone());
            tokio::spawn(async move { s.claim_outbox(&id, &common::owner()).await.expect("claim") })
        })
        .collect();
    let mut won = 0;
    for c in claims {
        won += usize::from(c.await.expect("task").is_some());
    }
    assert_eq!(won, 1);
    assert_eq!(by_key(&s, "k").await.attempts, 1);
}

on_both!(r13_5_only_the_owner_moves_a_row_it_sends);
async fn r13_5_only_the_owner_moves_a_row_it_sends(s: Store) {
    s.enqueue_outbox(&row("telegram:1", "k", "x"))
        .await
        .expect("enqueue");
    let id = by_key(&s, "k").await.id;
    let (o, other) = (common::owner(), common::owner());
    s.claim_outbox(&id, &o).await.expect("claim").expect("won");
    assert!(matches!(
        s.outbox_sent(&id, other.instance, 1, None).await,
        Err(StoreError::WrongState(_))
    ));
    // Progress of a split message, then a rate limit: back to pending, due later.
    s.outbox_progress(&id, o.instance, 1, Some("5"))
        .await
        .expect("progress");
    let later = now_ms() + 60_000;
    s.outbox_retry(&id, o.instance, later, "429 retry after 60")
        .await
        .expect("retry");
    let r = by_key(&s, "k").await;
    assert_eq!(r.status, OutboxStatus::Pending);
    assert_eq!(r.chunks_sent, 1);
    assert_eq!(r.platform_message_id.as_deref(), Some("5"));
    assert_eq!(r.last_error.as_deref(), Some("429 retry after 60"));
    assert_eq!(r.next_attempt_at, later);
    assert!(s
        .due_outbox(&["telegram"], now_ms())
        .await
        .expect("due")
        .is_empty());
    assert!(
        s.claim_outbox(&id, &o).await.expect("claim").is_none(),
        "not due yet"
    );
    assert_eq!(
        s.due_outbox(&["telegram"], later).await.expect("due").len(),
        1
    );
    // A row not `sending` is not moved by a sender.
    s.outbox_retry(&id, o.instance, now_ms(), "x")
        .await
        .expect_err("only a sending row is retried");
    let r = by_key(&s, "k").await;
    assert_eq!(r.status, OutboxStatus::Pending);
}

on_both!(r13_5_failed_and_unknown_rows_do_not_block_their_chat);
async fn r13_5_failed_and_unknown_rows_do_not_block_their_chat(s: Store) {
    for key in ["f", "u", "next"] {
        s.enqueue_outbox(&row("telegram:9", key, key))
            .await
            .expect("enqueue");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let o = common::owner();
    let f = by_key(&s, "f").await.id;
    s.claim_outbox(&f, &o).await.expect("claim").expect("won");
    s.outbox_settle(&f, o.instance, OutboxStatus::Failed, "403 blocked")
        .await
        .expect("failed");
    let u = by_key(&s, "u").await.id;
    s.claim_outbox(&u, &o).await.expect("claim").expect("won");
    s.outbox_settle(&u, o.instance, OutboxStatus::Unknown, "timeout")
        .await
        .expect("unknown");
    assert!(s
        .outbox_settle(&u, o.instance, OutboxStatus::Sent, "x")
        .await
        .is_err());
    let due = s.due_outbox(&["telegram"], now_ms()).await.expect("due");
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].idempotency_key, "next");
    let counts = s.count_outbox().await.expect("count");
    assert_eq!(counts[&OutboxStatus::Failed], 1);
    assert_eq!(counts[&OutboxStatus::Unknown], 1);
    assert_eq!(counts[&OutboxStatus::Pending], 1);
    let unknown = s
        .list_outbox(Some(OutboxStatus::Unknown), None, 10)
        .await
        .expect("list");
    assert_eq!(unknown.len(), 1);
    assert_eq!(unknown[0].last_error.as_deref(), Some("timeout"));
}

on_both!(r13_5_a_row_cut_by_a_crash_is_unknown_or_resent_on_request);
async fn r13_5_a_row_cut_by_a_crash_is_unknown_or_resent_on_request(s: Store) {
    for key in ["a", "b"] {
        s.enqueue_outbox(&row(&format!("telegram:{key}"), key, key))
            .await
            .expect("enqueue");
    }
    let dead = common::owner();
    let (a, b) = (by_key(&s, "a").await.id, by_key(&s, "b").await.id);
    for id in [&a, &b] {
        s.claim_outbox(id, &dead)
            .await
            .expect("claim")
            .expect("won");
    }
    let sending = s.sending_outbox().await.expect("sending");
    assert_eq!(sending.len(), 2);
    assert_eq!(sending[0].owner.as_ref(), Some(&dead));
    let inst = dead.instance.to_string();
    assert!(
        !s.orphan_outbox(&a, "someone-else", false, "x")
            .await
            .expect("orphan"),
        "only the recorded owner's row"
    );
    assert!(s
        .orphan_outbox(&a, &inst, false, "crashed")
        .await
        .expect("orphan"));
    assert!(s
        .orphan_outbox(&b, &inst, true, "crashed, resent")
        .await
        .expect("orphan"));
    assert!(!s
        .orphan_outbox(&a, &inst, false, "again")
        .await
        .expect("orphan"));
    assert_eq!(by_key(&s, "a").await.status, OutboxStatus::Unknown);
    assert_eq!(by_key(&s, "b").await.status, OutboxStatus::Pending);
    // A person sends the unknown one again; a pending one cannot be "resent".
    let again = s.resend_outbox(&a).await.expect("resend");
    assert_eq!(again.status, OutboxStatus::Pending);
    assert!(matches!(
        s.resend_outbox(&b).await,
        Err(StoreError::WrongState(_))
    ));
    assert!(matches!(
        s.resend_outbox("no-such-row").await,
        Err(StoreError::NotFound(_))
    ));
}

on_both!(r11_1_a_draft_is_recorded_once_and_never_sent_by_the_outbox);
async fn r11_1_a_draft_is_recorded_once_and_never_sent_by_the_outbox(s: Store) {
    let mut d = row("telegram:3", "draft:t1", "partial");
    d.kind = "draft".into();
    assert!(s.record_draft(&d, "41").await.expect("draft"));
    assert!(!s.record_draft(&d, "42").await.expect("draft again"));
    let r = by_key(&s, "draft:t1").await;
    assert_eq!(r.status, OutboxStatus::Sent);
    assert_eq!(r.platform_message_id.as_deref(), Some("41"));
    assert!(s
        .due_outbox(&["telegram"], now_ms())
        .await
        .expect("due")
        .is_empty());
    assert_eq!(s.open_outbox_in_chat("telegram:3").await.expect("open"), 0);
}

on_both!(r13_5_a_principal_lists_only_rows_of_its_sessions);
async fn r13_5_a_principal_lists_only_rows_of_its_sessions(s: Store) {
    let mine = common::session(&s).await; // owned by "operator"
    let mut r = row("telegram:5", "mine", "x");
    r.session_id = Some(mine);
    s.enqueue_outbox(&r).await.expect("enqueue");
    s.enqueue_outbox(&row("telegram:6", "orphan", "y"))
        .await
        .expect("enqueue");
    let all = s.list_outbox(None, None, 10).await.expect("all");
    assert_eq!(all.len(), 2);
    let own = s
        .list_outbox(None, Some("operator"), 10)
        .await
        .expect("own");
    assert_eq!(own.len(), 1);
    assert_eq!(own[0].idempotency_key, "mine");
    assert!(s
        .list_outbox(None, Some("stranger"), 10)
        .await
        .expect("none")
        .is_empty());
}
