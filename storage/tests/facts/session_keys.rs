//! Sessions found by a door's key (the OpenAI endpoint's `user`): concurrent first uses of one
//! key end in one session on SQLite and PostgreSQL, and a key belongs to one principal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use turnkey_storage::*;

fn new_session(owner: &str) -> NewSession {
    NewSession {
        id: SessionId::new(),
        owner: owner.into(),
        platform: "api".into(),
        chat_key: None,
        title: None,
        model: None,
        system_message: None,
        system_prompt: "sys".into(),
        workspace_snapshot: None,
        seed: Vec::new(),
    }
}

on_both!(r1_1_concurrent_first_uses_of_a_key_make_one_session);
async fn r1_1_concurrent_first_uses_of_a_key_make_one_session(s: Store) {
    const CALLS: usize = 12;
    let calls: Vec<_> = (0..CALLS)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                s.keyed_session("p1", "openai.user", "alice", new_session("p1"))
                    .await
                    .expect("keyed session")
            })
        })
        .collect();
    let mut results: Vec<(Session, bool)> = Vec::with_capacity(CALLS);
    for call in calls {
        results.push(call.await.expect("task"));
    }
    let first = results[0].0.id;
    assert!(
        results.iter().all(|(sess, _)| sess.id == first),
        "one session for one key"
    );
    assert_eq!(
        results.iter().filter(|(_, created)| *created).count(),
        1,
        "exactly one call created it"
    );
    // The losers' session rows rolled back with their key rows: only the winner exists.
    let owned = s.list_sessions(Some("p1"), 100, None).await.expect("list");
    assert_eq!(owned.len(), 1, "no orphan session rows: {owned:?}");
    let again = s
        .find_keyed_session("p1", "openai.user", "alice")
        .await
        .expect("find");
    assert_eq!(again.map(|x| x.id), Some(first));
}

on_both!(r2_1_a_key_belongs_to_one_principal_and_one_door);
async fn r2_1_a_key_belongs_to_one_principal_and_one_door(s: Store) {
    let (a, _) = s
        .keyed_session("p1", "openai.user", "bob", new_session("p1"))
        .await
        .expect("p1");
    let (b, created) = s
        .keyed_session("p2", "openai.user", "bob", new_session("p2"))
        .await
        .expect("p2");
    assert!(created);
    assert_ne!(a.id, b.id, "another principal's key is another session");
    assert_eq!(b.owner, "p2");
    let (c, _) = s
        .keyed_session("p1", "openai.request", "bob", new_session("p1"))
        .await
        .expect("other door");
    assert_ne!(a.id, c.id, "another door's key is another session");
    assert!(s
        .find_keyed_session("p3", "openai.user", "bob")
        .await
        .expect("find")
        .is_none());
}
