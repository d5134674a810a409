//! Cross-replica notices (SPEC R13.6): on PostgreSQL a committed admission sends `admitted`
//! and `events` for its session, a write that does not commit (a duplicate admission, a
//! refused decision) sends nothing, and a second connection pool (another replica) hears them;
//! on SQLite another pool's commit is heard as `Resync`. Interrupt requests move
//! `pending → done | missed` once, each move announced.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#[macro_use]
mod common;

use std::time::Duration;
use turnkey_storage::notify::{Notice, NoticeKind, Notices, Wake};
use turnkey_storage::*;

/// Every wake-up that arrives within `quiet` of the one before.
async fn drain(n: &mut Notices, quiet: Duration) -> Vec<Wake> {
    let mut got = Vec::new();
    while let Ok(Some(w)) = tokio::time::timeout(quiet, n.recv()).await {
        got.push(w);
    }
    got
}

fn kinds(wakes: &[Wake], session: SessionId) -> Vec<NoticeKind> {
    wakes
        .iter()
        .filter_map(|w| match w {
            Wake::Notice(Notice {
                kind, session: s, ..
            }) if *s == session => Some(*kind),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn r13_6_postgres_notices_go_out_iff_the_write_commits() {
    let Some((s, db)) = common::postgres().await else {
        return;
    };
    // Another replica: its own pool on the same database.
    let url = format!("postgres://postgres@127.0.0.1:5432/{db}");
    let other = Store::connect(&url).await.expect("connect");
    let mut heard = other.notices().await.expect("listen");
    let sid = common::session(&s).await;

    let first = s
        .admit(common::new_adm(sid, "r1", "hi"))
        .await
        .expect("admit");
    let wakes = drain(&mut heard, Duration::from_millis(500)).await;
    let got = kinds(&wakes, sid);
    assert!(got.contains(&NoticeKind::Admitted), "{wakes:?}");
    assert!(got.contains(&NoticeKind::Events), "{wakes:?}");
    // One transaction, one `events` notice however many events it appended.
    assert_eq!(got.iter().filter(|k| **k == NoticeKind::Events).count(), 1);
    for w in &wakes {
        if let Wake::Notice(n) = w {
            assert_eq!(n.origin, notify::origin(), "names the process that wrote");
        }
    }

    // A duplicate admission rolls back: nothing is announced.
    let again = s
        .admit(common::new_adm(sid, "r1", "hi"))
        .await
        .expect("admit");
    assert!(again.duplicate);
    assert_eq!(again.admission.id, first.admission.id);
    let wakes = drain(&mut heard, Duration::from_millis(300)).await;
    assert!(kinds(&wakes, sid).is_empty(), "{wakes:?}");

    // A decision on an approval that does not exist commits nothing, announces nothing.
    let refused = s
        .decide_approval(sid, ApprovalId::new(), ApprovalDecision::Approve, "op")
        .await;
    assert!(refused.is_err());
    let wakes = drain(&mut heard, Duration::from_millis(300)).await;
    assert!(kinds(&wakes, sid).is_empty(), "{wakes:?}");

    // Lease release is announced.
    let o = common::owner();
    let fence = common::lease(&s, sid, &o, 10_000).await.expect("free");
    assert!(s.release_lease(&fence).await.expect("release"));
    let wakes = drain(&mut heard, Duration::from_millis(500)).await;
    assert_eq!(kinds(&wakes, sid), [NoticeKind::Released], "{wakes:?}");

    drop(heard);
    other.connection().clone().close().await.expect("close");
    s.connection().clone().close().await.expect("close");
    common::drop_postgres(&db).await;
}

on_both!(r13_6_interrupt_requests_settle_once_and_are_announced);
async fn r13_6_interrupt_requests_settle_once_and_are_announced(s: Store) {
    let sid = common::session(&s).await;
    let (turn, target) = (TurnId::new(), InstanceId::new());
    let mut heard = s.notices().await.expect("listen");
    let r = s
        .request_interrupt(sid, turn, target, "stop it")
        .await
        .expect("request");
    assert_eq!(r.status, InterruptStatus::Pending);
    assert_eq!(r.target, target);
    assert_eq!(r.reason, "stop it");
    let mine = s.pending_interrupts_for(target).await.expect("pending");
    assert_eq!(mine.len(), 1);
    assert!(s
        .pending_interrupts_for(InstanceId::new())
        .await
        .expect("pending")
        .is_empty());
    assert_eq!(
        s.pending_interrupts_of_turn(turn)
            .await
            .expect("pending")
            .len(),
        1
    );
    assert_eq!(
        s.settle_interrupts(sid, turn, InterruptStatus::Done)
            .await
            .expect("settle"),
        1
    );
    // Settled once: a second answer changes nothing.
    assert_eq!(
        s.settle_interrupts(sid, turn, InterruptStatus::Missed)
            .await
            .expect("settle"),
        0
    );
    let done = s
        .get_interrupt_request(&r.id)
        .await
        .expect("get")
        .expect("row");
    assert_eq!(done.status, InterruptStatus::Done);
    assert!(s
        .pending_interrupts_for(target)
        .await
        .expect("pending")
        .is_empty());

    let wakes = drain(&mut heard, Duration::from_millis(600)).await;
    if s.backend() == sea_orm::DbBackend::Postgres {
        assert_eq!(
            kinds(&wakes, sid),
            [NoticeKind::Interrupt, NoticeKind::Interrupted],
            "{wakes:?}"
        );
    } else {
        // SQLite has no notices: a commit by another connection is a resync.
        assert!(wakes.contains(&Wake::Resync), "{wakes:?}");
    }
}
