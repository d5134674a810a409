//! Compression's durable facts, on both backends (SPEC R6.4, R6.5): one compressor per session
//! through the lock row and its TTL; the swap marks rows and writes the summary and its event
//! in one fenced transaction, refuses a stale epoch or a fenced-out holder, and deletes nothing.
#![allow(clippy::expect_used, clippy::unwrap_used)]
use crate::common;

use common::*;
use serde_json::json;
use turnkey_storage::*;

async fn r6_4_one_compressor_holds_the_lock_until_it_releases_or_expires(s: Store) {
    let sid = session(&s).await;
    assert!(s.take_compression_lock(sid, "a", 60_000).await.unwrap());
    assert!(!s.take_compression_lock(sid, "b", 60_000).await.unwrap());
    assert!(
        s.take_compression_lock(sid, "a", 60_000).await.unwrap(),
        "its holder may renew"
    );
    s.release_compression_lock(sid, "b").await.unwrap();
    assert!(
        !s.take_compression_lock(sid, "b", 60_000).await.unwrap(),
        "only the holder releases"
    );
    s.release_compression_lock(sid, "a").await.unwrap();
    assert!(s.take_compression_lock(sid, "b", -1).await.unwrap());
    // b's lock expired at once: a takes it over.
    assert!(s.take_compression_lock(sid, "a", 60_000).await.unwrap());
}
on_both!(r6_4_one_compressor_holds_the_lock_until_it_releases_or_expires);

async fn r6_4_a_lock_held_by_a_turn_that_died_is_taken_over(s: Store) {
    let sid = session(&s).await;
    let o = owner();
    let fence = lease(&s, sid, &o, 60_000).await.unwrap();
    let a = s.admit(new_adm(sid, "a", "go")).await.unwrap().admission;
    let turn = TurnId::new();
    s.claim(&fence, a.id, &o, turn).await.unwrap();
    let holder = turn.to_string();
    let next = TurnId::new().to_string();
    assert!(s.take_compression_lock(sid, &holder, 60_000).await.unwrap());
    assert!(
        !s.take_compression_lock(sid, &next, 60_000).await.unwrap(),
        "a running turn keeps its lock"
    );
    // Its process died: the turn is `unknown`, and its lock is free before the TTL.
    s.mark_unknown(a.id, &died(), None).await.unwrap();
    assert!(s.take_compression_lock(sid, &next, 60_000).await.unwrap());
}
on_both!(r6_4_a_lock_held_by_a_turn_that_died_is_taken_over);

async fn r6_4_the_swap_marks_rows_writes_the_summary_and_its_event_at_once(s: Store) {
    let sid = session(&s).await;
    let o = owner();
    let fence = lease(&s, sid, &o, 60_000).await.unwrap();
    let mut replaced = Vec::new();
    for i in 0..6 {
        let role = if i % 2 == 0 {
            MessageRole::User
        } else {
            MessageRole::Assistant
        };
        let m = s
            .append_message(
                &fence,
                &NewMessage {
                    id: MessageId::new(),
                    role: Some(role),
                    content: Some(format!("m{i}")),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        replaced.push(Replaced {
            id: m.id,
            idx: m.idx,
            summary: false,
        });
    }
    let compaction = |base_epoch: i32, compressed: Vec<Replaced>| Compaction {
        session_id: sid,
        turn_id: TurnId::new(),
        admission_id: AdmissionId::new(),
        base_epoch,
        compressed,
        summary: NewMessage {
            id: MessageId::new(),
            role: Some(MessageRole::System),
            content: Some("summary".into()),
            summary_after_idx: Some(1),
            ..Default::default()
        },
        event_data: json!({"before_tokens": 100, "after_tokens": 40}),
    };
    let done = s
        .commit_compression(&fence, &compaction(0, replaced[1..4].to_vec()))
        .await
        .unwrap();
    assert_eq!(done.epoch, 1);
    assert_eq!(done.summary.summary_epoch, Some(1));
    assert_eq!(done.summary.summary_after_idx, Some(1));
    assert_eq!(done.event.kind, EventKind::CompressionCompleted);
    assert_eq!(done.event.data["epoch"], 1);
    assert_eq!(done.event.data["after_tokens"], 40);
    let rows = s.list_messages(sid).await.unwrap();
    assert_eq!(rows.len(), 7, "nothing is deleted; the summary is added");
    let marked: Vec<Option<i32>> = rows.iter().map(|m| m.compressed_epoch).collect();
    assert_eq!(marked, [None, Some(1), Some(1), Some(1), None, None, None]);
    let session = s.get_session(sid).await.unwrap().unwrap();
    assert_eq!(session.compression_epoch, 1);
    assert!(session.compressed_at.is_some());

    // A plan made against the old epoch is refused, and changes nothing.
    let stale = s
        .commit_compression(&fence, &compaction(0, vec![replaced[4]]))
        .await;
    assert!(matches!(stale, Err(StoreError::WrongState(_))), "{stale:?}");
    // Rows already compressed cannot be compressed again.
    let again = s
        .commit_compression(&fence, &compaction(1, vec![replaced[2], replaced[4]]))
        .await;
    assert!(matches!(again, Err(StoreError::WrongState(_))), "{again:?}");
    // A plan whose rows are not one run of live rows is refused: row 4 lies between.
    let gap = s
        .commit_compression(&fence, &compaction(1, vec![replaced[0], replaced[5]]))
        .await;
    assert!(matches!(gap, Err(StoreError::WrongState(_))), "{gap:?}");
    let after = s.list_messages(sid).await.unwrap();
    assert_eq!(after.len(), 7);
    assert_eq!(
        after[4].compressed_epoch, None,
        "the refused swap left no trace"
    );
    assert_eq!(
        s.get_session(sid).await.unwrap().unwrap().compression_epoch,
        1
    );

    // A later compression replaces the earlier summary (by id) and live rows (by range).
    let earlier = Replaced {
        id: done.summary.id,
        idx: done.summary.idx,
        summary: true,
    };
    let second = s
        .commit_compression(&fence, &compaction(1, vec![earlier, replaced[4]]))
        .await
        .unwrap();
    assert_eq!(second.epoch, 2);
    let after = s.list_messages(sid).await.unwrap();
    let marked: Vec<Option<i32>> = after.iter().map(|m| m.compressed_epoch).collect();
    assert_eq!(
        marked,
        [
            None,
            Some(1),
            Some(1),
            Some(1),
            Some(2),
            None,
            Some(2),
            None
        ]
    );

    // A holder that lost its lease cannot swap.
    s.release_lease(&fence).await.unwrap();
    let fenced = s
        .commit_compression(&fence, &compaction(2, vec![replaced[5]]))
        .await;
    assert!(matches!(fenced, Err(StoreError::Fenced(_))), "{fenced:?}");
}
on_both!(r6_4_the_swap_marks_rows_writes_the_summary_and_its_event_at_once);

async fn r6_1_the_last_prompt_size_is_the_last_call_recorded(s: Store) {
    let sid = session(&s).await;
    assert_eq!(s.last_prompt_usage(sid).await.unwrap(), None);
    let o = owner();
    let fence = lease(&s, sid, &o, 60_000).await.unwrap();
    let a = s.admit(new_adm(sid, "a", "go")).await.unwrap().admission;
    let turn = TurnId::new();
    s.claim(&fence, a.id, &o, turn).await.unwrap();
    let call = |input_tokens: i64| NewUsage {
        provider: "p".into(),
        model: "m".into(),
        input_tokens,
        output_tokens: 1,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost_usd: 0.0,
    };
    // Two calls with a compression between them: the second, smaller prompt is the last.
    let end = TurnEnd {
        reply: None,
        admission_id: a.id,
        turn_id: turn,
        messages: vec![],
        close_tail: None,
        usage: vec![call(12_000), call(4_000)],
        outcome: json!({"result": "completed"}),
        events: vec![],
    };
    s.commit_turn_end(&fence, &end).await.unwrap();
    let (tokens, at) = s.last_prompt_usage(sid).await.unwrap().unwrap();
    assert_eq!(tokens, 4_000);
    assert!(at > 0);
}
on_both!(r6_1_the_last_prompt_size_is_the_last_call_recorded);

async fn r6_4_a_rotation_moves_the_live_transcript_into_a_child(s: Store) {
    let sid = session(&s).await;
    let o = owner();
    let fence = lease(&s, sid, &o, 60_000).await.unwrap();
    let mut rows = Vec::new();
    for i in 0..6 {
        let role = if i % 2 == 0 {
            MessageRole::User
        } else {
            MessageRole::Assistant
        };
        rows.push(
            s.append_message(
                &fence,
                &NewMessage {
                    id: MessageId::new(),
                    role: Some(role),
                    content: Some(format!("m{i}")),
                    ..Default::default()
                },
            )
            .await
            .unwrap(),
        );
    }
    let rotation = |base_epoch: i32, head: Vec<MessageId>, tail: Vec<MessageId>| Rotation {
        session_id: sid,
        turn_id: TurnId::new(),
        admission_id: AdmissionId::new(),
        base_epoch,
        child_id: SessionId::new(),
        head,
        tail,
        summary: NewMessage {
            id: MessageId::new(),
            role: Some(MessageRole::System),
            content: Some("summary".into()),
            ..Default::default()
        },
        event_data: json!({"before_tokens": 100, "after_tokens": 40}),
    };
    // Keep m0, summarize m1..m3, keep m4 and m5.
    let done = s
        .commit_rotation(
            &fence,
            &rotation(0, vec![rows[0].id], vec![rows[4].id, rows[5].id]),
        )
        .await
        .unwrap();
    assert_eq!(done.epoch, 1);
    let child = done.child.id;
    assert_eq!(done.child.parent_session_id, Some(sid));
    assert_eq!(done.child.root_id, Some(sid));
    let texts: Vec<&str> = done
        .rows
        .iter()
        .filter_map(|m| m.content.as_deref())
        .collect();
    assert_eq!(texts, ["m0", "summary", "m4", "m5"]);
    assert_eq!(done.rows[1].summary_epoch, Some(1));
    assert_eq!(done.rows[1].summary_after_idx, Some(1));
    let kinds: Vec<EventKind> = done.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [EventKind::SessionRotated, EventKind::CompressionCompleted]
    );
    assert_eq!(done.events[1].data["child_session_id"], child.to_string());
    assert!(
        done.events.iter().all(|e| e.session_id == sid),
        "root's log"
    );
    let root = s.get_session(sid).await.unwrap().unwrap();
    assert_eq!(
        (root.transcript_id, root.compression_epoch),
        (Some(child), 1)
    );

    // The root's own rows are untouched; a new row for the lineage lands in the child.
    assert_eq!(s.list_messages(sid).await.unwrap().len(), 6);
    let next = s
        .append_message(
            &fence,
            &NewMessage {
                id: MessageId::new(),
                role: Some(MessageRole::User),
                content: Some("m6".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((next.session_id, next.idx), (child, 5));
    let live: Vec<String> = s
        .transcript(sid)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| m.content)
        .collect();
    assert_eq!(live, ["m0", "summary", "m4", "m5", "m6"]);
    // The lineage's history lists each message once: copies are not repeated.
    let history: Vec<String> = s
        .lineage_messages(sid)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| m.content)
        .collect();
    assert_eq!(
        history,
        ["m0", "m1", "m2", "m3", "m4", "m5", "summary", "m6"]
    );
    // The list shows the lineage once, by its root.
    let listed: Vec<SessionId> = s
        .list_sessions(None, 10, None)
        .await
        .unwrap()
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(listed, [sid]);

    // A stale epoch, or kept rows that are not live rows of the canonical session, change
    // nothing.
    let stale = s
        .commit_rotation(&fence, &rotation(0, vec![done.rows[0].id], vec![]))
        .await;
    assert!(matches!(stale, Err(StoreError::WrongState(_))), "{stale:?}");
    let gone = s
        .commit_rotation(&fence, &rotation(1, vec![rows[0].id], vec![]))
        .await;
    assert!(matches!(gone, Err(StoreError::WrongState(_))), "{gone:?}");
    let root = s.get_session(sid).await.unwrap().unwrap();
    assert_eq!(
        (root.transcript_id, root.compression_epoch),
        (Some(child), 1)
    );
    // A holder that lost its lease cannot rotate.
    s.release_lease(&fence).await.unwrap();
    let fenced = s
        .commit_rotation(&fence, &rotation(1, vec![done.rows[0].id], vec![]))
        .await;
    assert!(matches!(fenced, Err(StoreError::Fenced(_))), "{fenced:?}");
}
on_both!(r6_4_a_rotation_moves_the_live_transcript_into_a_child);
