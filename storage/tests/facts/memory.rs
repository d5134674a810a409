//! Memory in the store (SPEC R5.2), on SQLite and PostgreSQL: a principal's notes and profile
//! are bounded in characters (a write that does not fit is refused with how full the store is,
//! and writes nothing), an entry is picked by a unique substring, each principal sees only its
//! own, every change is recorded with who made it and the text before and after, and writers
//! racing for the last room cannot pass the bound together.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use turnkey_storage::*;

const API: Author = Author {
    by: ChangedBy::Api,
    session: None,
};

async fn add(
    s: &Store,
    scope: &str,
    target: MemoryTarget,
    text: &str,
    limit: usize,
) -> MemoryWrite {
    s.edit_memory(scope, target, MemoryEdit::Add { text }, limit, &API)
        .await
        .expect("edit")
}

/// A change as the test reads it: action, author, session, before, after.
type Seen<'a> = (
    &'a str,
    ChangedBy,
    Option<SessionId>,
    Option<&'a str>,
    Option<&'a str>,
);

fn done(w: MemoryWrite) -> MemoryEntry {
    match w {
        MemoryWrite::Done { entry, .. } => entry,
        other => panic!("not written: {other:?}"),
    }
}

fn texts(entries: &[MemoryEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.text.as_str()).collect()
}

on_both!(r5_2_a_write_that_does_not_fit_is_refused_with_how_full_the_store_is);
async fn r5_2_a_write_that_does_not_fit_is_refused_with_how_full_the_store_is(s: Store) {
    let m = MemoryTarget::Memory;
    // Characters, not bytes: "é" counts one.
    match add(&s, "alice", m, "café déjà vu", 20).await {
        MemoryWrite::Done { entry, chars, .. } => {
            assert_eq!(chars, 12);
            assert_eq!(entry.chars(), 12);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        add(&s, "alice", m, "0123456789", 20).await,
        MemoryWrite::Full {
            chars: 12,
            limit: 20,
            needed: 10
        }
    );
    assert_eq!(
        texts(&s.memory_entries("alice", m).await.unwrap()),
        vec!["café déjà vu"],
        "a refused write writes nothing"
    );
    assert_eq!(s.memory_changes("alice", 10).await.unwrap().len(), 1);
    // Exactly at the bound fits.
    done(add(&s, "alice", m, "01234567", 20).await);
    // A replacement that shrinks always fits; one that grows past the bound does not.
    let grow = s
        .edit_memory(
            "alice",
            m,
            MemoryEdit::Replace {
                old_text: "0123",
                text: "0123456789",
            },
            20,
            &API,
        )
        .await
        .unwrap();
    assert!(
        matches!(grow, MemoryWrite::Full { chars: 20, .. }),
        "{grow:?}"
    );
    let shrink = s
        .edit_memory(
            "alice",
            m,
            MemoryEdit::Replace {
                old_text: "0123",
                text: "0",
            },
            20,
            &API,
        )
        .await
        .unwrap();
    assert!(
        matches!(shrink, MemoryWrite::Done { chars: 13, .. }),
        "{shrink:?}"
    );
    // The profile has its own bound.
    done(add(&s, "alice", MemoryTarget::Profile, "Alice, in Lyon", 20).await);
}

on_both!(r5_2_an_entry_is_picked_by_a_unique_substring);
async fn r5_2_an_entry_is_picked_by_a_unique_substring(s: Store) {
    let m = MemoryTarget::Memory;
    let tea = done(add(&s, "bob", m, "Bob drinks tea, no sugar", 500).await);
    done(add(&s, "bob", m, "Bob's cat is called Tea Leaf", 500).await);
    let edit = |old_text: &'static str| MemoryEdit::Replace {
        old_text,
        text: "Bob drinks coffee",
    };
    // "ea" is in both: refused, nothing written.
    assert_eq!(
        s.edit_memory("bob", m, edit("ea"), 500, &API)
            .await
            .unwrap(),
        MemoryWrite::Ambiguous { matches: 2 }
    );
    assert_eq!(
        s.edit_memory("bob", m, edit("juice"), 500, &API)
            .await
            .unwrap(),
        MemoryWrite::NoMatch
    );
    let replaced = done(
        s.edit_memory("bob", m, edit("no sugar"), 500, &API)
            .await
            .unwrap(),
    );
    assert_eq!(replaced.id, tea.id, "the entry keeps its id");
    assert_eq!(replaced.created_at, tea.created_at);
    assert_eq!(
        texts(&s.memory_entries("bob", m).await.unwrap()),
        vec!["Bob drinks coffee", "Bob's cat is called Tea Leaf"],
        "oldest first"
    );
    let removed = done(
        s.edit_memory("bob", m, MemoryEdit::Remove { old_text: "Leaf" }, 500, &API)
            .await
            .unwrap(),
    );
    assert_eq!(removed.text, "Bob's cat is called Tea Leaf");
    assert_eq!(
        texts(&s.memory_entries("bob", m).await.unwrap()),
        vec!["Bob drinks coffee"]
    );
}

on_both!(r5_2_each_principal_sees_only_its_own_memory);
async fn r5_2_each_principal_sees_only_its_own_memory(s: Store) {
    let m = MemoryTarget::Memory;
    let secret = done(add(&s, "alice", m, "Alice's surprise party is on Friday", 500).await);
    done(add(&s, "telegram:chat:42", m, "The group meets on Mondays", 500).await);
    assert!(s.memory_entries("bob", m).await.unwrap().is_empty());
    assert!(s
        .memory_entries("alice", MemoryTarget::Profile)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        s.principal_memory("alice").await.unwrap(),
        vec![secret.clone()],
        "both stores of one principal, no other's"
    );
    assert_eq!(
        texts(&s.memory_entries("telegram:chat:42", m).await.unwrap()),
        vec!["The group meets on Mondays"]
    );
    // Another principal can neither find it by its text nor remove it by its id.
    assert_eq!(
        s.edit_memory(
            "bob",
            m,
            MemoryEdit::Remove { old_text: "party" },
            500,
            &API
        )
        .await
        .unwrap(),
        MemoryWrite::NoMatch
    );
    assert_eq!(
        s.edit_memory("bob", m, MemoryEdit::RemoveId(secret.id), 500, &API)
            .await
            .unwrap(),
        MemoryWrite::NoMatch
    );
    assert!(s.memory_changes("bob", 10).await.unwrap().is_empty());
    assert_eq!(
        s.memory_entries("alice", m).await.unwrap(),
        vec![secret.clone()]
    );
    done(
        s.edit_memory("alice", m, MemoryEdit::RemoveId(secret.id), 500, &API)
            .await
            .unwrap(),
    );
    assert!(s.memory_entries("alice", m).await.unwrap().is_empty());
}

on_both!(r5_2_every_change_is_recorded_with_who_and_before_and_after);
async fn r5_2_every_change_is_recorded_with_who_and_before_and_after(s: Store) {
    let m = MemoryTarget::Profile;
    let session = common::session(&s).await;
    let tool = Author {
        by: ChangedBy::Tool,
        session: Some(session),
    };
    let review = Author {
        by: ChangedBy::Review,
        session: Some(session),
    };
    let added = s
        .edit_memory(
            "carol",
            m,
            MemoryEdit::Add {
                text: "Carol is vegetarian",
            },
            500,
            &tool,
        )
        .await
        .unwrap();
    // A change made from a session is announced there, in the same commit.
    let MemoryWrite::Done {
        entry,
        event: Some(event),
        ..
    } = added
    else {
        panic!("{added:?}");
    };
    assert_eq!(event.kind, EventKind::MemoryUpdated);
    assert_eq!(event.session_id, session);
    assert_eq!(
        event.data,
        serde_json::json!({"target": "profile", "action": "add", "chars": 19, "limit": 500, "by": "tool"})
    );
    let log = s.events_since(session, Seq(0), 100).await.unwrap();
    assert_eq!(log.last(), Some(&*event), "committed to the session's log");
    let edit = MemoryEdit::Replace {
        old_text: "vegetarian",
        text: "Carol is vegan",
    };
    done(s.edit_memory("carol", m, edit, 500, &review).await.unwrap());
    done(
        s.edit_memory("carol", m, MemoryEdit::RemoveId(entry.id), 500, &API)
            .await
            .unwrap(),
    );
    let changes = s.memory_changes("carol", 10).await.unwrap();
    let seen: Vec<Seen> = changes
        .iter()
        .rev()
        .map(|c| {
            assert_eq!(c.entry_id, entry.id);
            assert_eq!(c.target, m);
            (
                c.action.as_str(),
                c.by,
                c.session_id,
                c.before.as_deref(),
                c.after.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                "add",
                ChangedBy::Tool,
                Some(session),
                None,
                Some("Carol is vegetarian")
            ),
            (
                "replace",
                ChangedBy::Review,
                Some(session),
                Some("Carol is vegetarian"),
                Some("Carol is vegan")
            ),
            ("remove", ChangedBy::Api, None, Some("Carol is vegan"), None),
        ]
    );
    assert_eq!(
        s.memory_changes("carol", 1).await.unwrap().len(),
        1,
        "bounded"
    );
}

on_both!(r5_2_writers_racing_for_the_last_room_do_not_pass_the_bound_together);
async fn r5_2_writers_racing_for_the_last_room_do_not_pass_the_bound_together(s: Store) {
    let m = MemoryTarget::Memory;
    // Ten writers of 30 characters each against a bound of 100: three fit.
    let writers: Vec<_> = (0..10)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move {
                let text = format!("{i:02} {}", "x".repeat(27));
                add(&s, "dave", m, &text, 100).await
            })
        })
        .collect();
    let mut written = 0;
    let mut full = 0;
    for w in writers {
        match w.await.unwrap() {
            MemoryWrite::Done { .. } => written += 1,
            MemoryWrite::Full { limit: 100, .. } => full += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((written, full), (3, 7));
    let entries = s.memory_entries("dave", m).await.unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries.iter().map(MemoryEntry::chars).sum::<usize>(), 90);
    assert_eq!(s.memory_changes("dave", 100).await.unwrap().len(), 3);
}
