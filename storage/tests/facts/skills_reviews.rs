//! Skills, pending memory writes and reviews in the store (SPEC R5.2, R10.4, R4.5), on SQLite
//! and PostgreSQL: a proposal is decided once and its change commits with the decision; a
//! pending write is applied against the store as it is when approved, or stays pending; a
//! review is due after `every` ended turns, commits everything it made in one transaction or
//! nothing but its usage, and one whose owner died is closed once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{self, answer_row, completed_end, owner, take_and_claim};
use turnkey_storage::*;

fn usage(tokens: i64) -> NewUsage {
    NewUsage {
        provider: "p".into(),
        model: "m".into(),
        input_tokens: tokens,
        output_tokens: 1,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost_usd: 0.5,
    }
}

/// Runs one turn of `sid` to its end.
async fn one_turn(s: &Store, sid: SessionId, text: &str) {
    let o = owner();
    s.admit(common::new_adm(sid, &format!("r-{text}"), text))
        .await
        .unwrap();
    let (fence, turn, claimed) = take_and_claim(s, sid, &o, 60_000).await;
    let a = claimed.expect("claimed").admission;
    let end = completed_end(a.id, turn, vec![answer_row(turn, "ok")], vec![usage(10)]);
    s.commit_turn_end(&fence, &end).await.unwrap();
    s.release_lease(&fence).await.unwrap();
}

on_both!(r5_2_a_proposal_is_decided_once_and_its_change_commits_with_it);
async fn r5_2_a_proposal_is_decided_once_and_its_change_commits_with_it(s: Store) {
    let p = s
        .propose_skill(&NewSkillProposal {
            action: "create".into(),
            name: "lint".into(),
            description: Some("Lint.".into()),
            content: Some("---\nname: lint\ndescription: Lint.\n---\nRun it.\n".into()),
            old: None,
            new: None,
            session_id: None,
        })
        .await
        .unwrap();
    assert_eq!(s.pending_skill_proposals().await.unwrap().len(), 1);
    assert_eq!(
        s.stored_skill("lint").await.unwrap(),
        None,
        "nothing before"
    );
    let change = SkillChange::Put {
        name: "lint".into(),
        description: "Lint.".into(),
        content: "---\nname: lint\ndescription: Lint.\n---\nRun it.\n".into(),
    };
    assert_eq!(
        s.decide_skill_proposal(p.id, true, Some(&change))
            .await
            .unwrap(),
        ProposalDecided::Decided
    );
    let stored = s.stored_skill("lint").await.unwrap().expect("applied");
    assert_eq!(stored.description, "Lint.");
    let gone = SkillChange::Delete {
        name: "lint".into(),
    };
    assert_eq!(
        s.decide_skill_proposal(p.id, true, Some(&gone))
            .await
            .unwrap(),
        ProposalDecided::AlreadyDecided("approved".into())
    );
    assert!(
        s.stored_skill("lint").await.unwrap().is_some(),
        "a second decision changes nothing"
    );
    assert!(s.pending_skill_proposals().await.unwrap().is_empty());
    s.record_skill_use("lint").await.unwrap();
    s.record_skill_use("lint").await.unwrap();
    let uses = s.skill_uses().await.unwrap();
    assert_eq!(
        uses.iter()
            .map(|u| (u.name.as_str(), u.uses))
            .collect::<Vec<_>>(),
        [("lint", 2)]
    );
    assert!(s.delete_skill("lint").await.unwrap());
    assert!(!s.delete_skill("lint").await.unwrap());
}

on_both!(r10_4_a_review_is_due_after_every_n_turns_and_commits_all_it_made_at_once);
async fn r10_4_a_review_is_due_after_every_n_turns_and_commits_all_it_made_at_once(s: Store) {
    let sid = common::session(&s).await;
    let o = owner();
    one_turn(&s, sid, "one").await;
    assert!(s
        .begin_review_if_due(sid, None, 2, &o)
        .await
        .unwrap()
        .is_none());
    one_turn(&s, sid, "two").await;
    assert_eq!(s.ended_turns(sid).await.unwrap(), 2);
    let (review, started) = s
        .begin_review_if_due(sid, None, 2, &o)
        .await
        .unwrap()
        .expect("due after two turns");
    assert_eq!(started.kind, EventKind::ReviewStarted);
    assert!(
        s.begin_review_if_due(sid, None, 2, &o)
            .await
            .unwrap()
            .is_none(),
        "not due again until two more turns end"
    );
    let before = s.get_session(sid).await.unwrap().unwrap();
    let staged = |text: &str| StagedEdit {
        target: MemoryTarget::Profile,
        action: "add".into(),
        text: Some(text.into()),
        old_text: None,
    };
    let writes = ReviewWrites {
        memory: vec![(staged("Name: Ann"), 100), (staged(&"x".repeat(200)), 100)],
        proposals: vec![NewSkillProposal {
            action: "delete".into(),
            name: "old".into(),
            description: None,
            content: None,
            old: None,
            new: None,
            session_id: Some(sid),
        }],
        usage: vec![usage(7), usage(8)],
        ..ReviewWrites::default()
    };
    let ReviewEnd::Finished { events, actions } =
        s.finish_review(&review, "alice", &writes).await.unwrap()
    else {
        panic!("it was running")
    };
    assert_eq!(actions, 2, "the write that does not fit is left out");
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::MemoryUpdated, EventKind::ReviewFinished]);
    let entries = s
        .memory_entries("alice", MemoryTarget::Profile)
        .await
        .unwrap();
    assert_eq!(entries.len(), 1);
    let changes = s.memory_changes("alice", 10).await.unwrap();
    assert_eq!(
        (changes[0].by, changes[0].session_id),
        (ChangedBy::Review, Some(sid))
    );
    assert_eq!(s.pending_skill_proposals().await.unwrap().len(), 1);
    let after = s.get_session(sid).await.unwrap().unwrap();
    assert_eq!(after.usage.input_tokens, before.usage.input_tokens + 15);
    // Ended once: a cancel after the finish changes nothing.
    assert!(s
        .cancel_review(&review, "input", &[usage(99)])
        .await
        .unwrap()
        .is_none());
    let again = s.get_session(sid).await.unwrap().unwrap();
    assert_eq!(again.usage.input_tokens, after.usage.input_tokens);
}

on_both!(r4_5_a_cancelled_review_writes_only_its_usage_and_a_dead_ones_is_closed_once);
async fn r4_5_a_cancelled_review_writes_only_its_usage_and_a_dead_ones_is_closed_once(s: Store) {
    let sid = common::session(&s).await;
    let o = owner();
    one_turn(&s, sid, "one").await;
    let (review, _) = s
        .begin_review_if_due(sid, None, 1, &o)
        .await
        .unwrap()
        .unwrap();
    let cancelled = s
        .cancel_review(&review, "input", &[usage(5)])
        .await
        .unwrap()
        .expect("it was running");
    assert_eq!(cancelled.kind, EventKind::ReviewCancelled);
    assert_eq!(cancelled.data["reason"], "input");
    let writes = ReviewWrites {
        memory: vec![(
            StagedEdit {
                target: MemoryTarget::Memory,
                action: "add".into(),
                text: Some("late".into()),
                old_text: None,
            },
            100,
        )],
        ..ReviewWrites::default()
    };
    assert!(matches!(
        s.finish_review(&review, "alice", &writes).await.unwrap(),
        ReviewEnd::NotRunning
    ));
    assert!(s
        .memory_entries("alice", MemoryTarget::Memory)
        .await
        .unwrap()
        .is_empty());

    one_turn(&s, sid, "two").await;
    let (second, _) = s
        .begin_review_if_due(sid, None, 1, &o)
        .await
        .unwrap()
        .unwrap();
    let running = s.running_reviews().await.unwrap();
    assert_eq!(
        running.iter().map(|r| r.id).collect::<Vec<_>>(),
        [second.id]
    );
    assert_eq!(running[0].owner, o);
    let closed = s.interrupt_review(&second).await.unwrap().expect("closed");
    assert_eq!(closed.data["reason"], "interrupted");
    assert!(s.interrupt_review(&second).await.unwrap().is_none(), "once");
    assert!(s.running_reviews().await.unwrap().is_empty());
    let statuses: Vec<String> = s
        .reviews(sid)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, ["cancelled", "interrupted"]);
}

on_both!(r10_4_a_pending_write_is_applied_against_the_store_as_it_is_when_approved);
async fn r10_4_a_pending_write_is_applied_against_the_store_as_it_is_when_approved(s: Store) {
    let sid = common::session(&s).await;
    let o = owner();
    one_turn(&s, sid, "one").await;
    let (review, _) = s
        .begin_review_if_due(sid, None, 1, &o)
        .await
        .unwrap()
        .unwrap();
    let add = |text: &str| {
        (
            StagedEdit {
                target: MemoryTarget::Profile,
                action: "add".into(),
                text: Some(text.into()),
                old_text: None,
            },
            20,
        )
    };
    let writes = ReviewWrites {
        memory: vec![add("Name: Bo"), add("Likes: tea")],
        memory_pending: true,
        ..ReviewWrites::default()
    };
    s.finish_review(&review, "bo", &writes).await.unwrap();
    assert!(s
        .memory_entries("bo", MemoryTarget::Profile)
        .await
        .unwrap()
        .is_empty());
    let pending = s.pending_memory("bo").await.unwrap();
    assert_eq!(pending.len(), 2);
    assert!(s.pending_memory("someone").await.unwrap().is_empty());
    assert!(matches!(
        s.decide_pending_memory("someone", pending[0].id, true, |_| 20)
            .await,
        Err(StoreError::NotFound(_))
    ));
    // The store filled up since: the approval is refused and the write stays pending.
    let api = Author {
        by: ChangedBy::Api,
        session: None,
    };
    let fill = MemoryEdit::Add {
        text: "012345678901",
    };
    s.edit_memory("bo", MemoryTarget::Profile, fill, 20, &api)
        .await
        .unwrap();
    let refused = s
        .decide_pending_memory("bo", pending[1].id, true, |_| 20)
        .await
        .unwrap();
    assert!(matches!(
        refused,
        PendingDecided::Refused(MemoryWrite::Full { .. }, _)
    ));
    assert_eq!(s.pending_memory("bo").await.unwrap().len(), 2);
    let applied = s
        .decide_pending_memory("bo", pending[0].id, true, |_| 20)
        .await
        .unwrap();
    let PendingDecided::Applied(MemoryWrite::Done { event, .. }) = applied else {
        panic!("{applied:?}")
    };
    assert_eq!(event.expect("announced").session_id, sid);
    assert_eq!(
        s.decide_pending_memory("bo", pending[1].id, false, |_| 20)
            .await
            .unwrap(),
        PendingDecided::Denied
    );
    assert_eq!(
        s.decide_pending_memory("bo", pending[1].id, true, |_| 20)
            .await
            .unwrap(),
        PendingDecided::AlreadyDecided("denied".into())
    );
    assert!(s.pending_memory("bo").await.unwrap().is_empty());
}
