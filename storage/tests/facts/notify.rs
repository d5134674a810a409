//! Cross-replica notices (SPEC R13.6): on PostgreSQL a committed admission sends `admitted`
//! and `events` for its session, a write that does not commit (a duplicate admission, a
//! refused decision) sends nothing, and a second connection pool (another replica) hears them;
//! on SQLite another pool's commit is heard as `Resync`. Interrupt requests move
//! `pending → done | missed` once, each move announced. A replica that is the only turnkey
//! listener on its database sends no notices; once another listens, they flow within the
//! check period, and a new listener re-reads once when its peers have surely seen it.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use crate::common;

use std::time::Duration;
use turnkey_storage::metrics::STORE;
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
    // By then no reading of `s` that missed the new listener is trusted any more.
    tokio::time::sleep(notify::PEER_READING_FRESH_FOR).await;
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
    // Another replica hears them (on SQLite the store's own poll sees every commit of its
    // other connections).
    let listener = match s.backend() {
        sea_orm::DbBackend::Postgres => Store::connect(&url_of(&s)).await.expect("connect"),
        _ => s.clone(),
    };
    let mut heard = listener.notices().await.expect("listen");
    tokio::time::sleep(notify::PEER_READING_FRESH_FOR).await;
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

/// The URL of `s`'s PostgreSQL database.
fn url_of(s: &Store) -> String {
    let opts = s
        .connection()
        .get_postgres_connection_pool()
        .connect_options();
    let db = opts.get_database().expect("a database name");
    format!("postgres://postgres@127.0.0.1:5432/{db}")
}

/// A plain `LISTEN turnkey` connection, not named as a turnkey listener: it hears what is sent
/// without making anyone send.
async fn observer(url: &str) -> sea_orm::sqlx::postgres::PgListener {
    use sea_orm::sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
    let opts: PgConnectOptions = url.parse().expect("url");
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(opts.application_name("notify-test-observer"))
        .await
        .expect("connect");
    let mut l = PgListener::connect_with(&pool).await.expect("listener");
    l.listen(notify::CHANNEL).await.expect("listen");
    l
}

/// The notices `l` hears within `quiet` of each other, as parsed payloads.
async fn observed(l: &mut sea_orm::sqlx::postgres::PgListener, quiet: Duration) -> Vec<Notice> {
    let mut got = Vec::new();
    while let Ok(next) = tokio::time::timeout(quiet, l.try_recv()).await {
        let n = next.expect("observer connection").expect("not reconnected");
        got.push(n.payload().parse().expect("a turnkey notice"));
    }
    got
}

#[tokio::test]
async fn r13_6_a_lone_replica_sends_no_notices_until_another_listens() {
    use std::sync::atomic::Ordering;
    let Some((s, db)) = common::postgres().await else {
        return;
    };
    let url = url_of(&s);
    // The replica listens itself (it ignores its own notices) and a bystander listens too.
    let mut own = s.notices().await.expect("listen");
    let mut watcher = observer(&url).await;
    let sid = common::session(&s).await;
    // A reading begun after both connected.
    tokio::time::sleep(notify::PEER_READING_FRESH_FOR).await;

    let skipped = STORE.notices_skipped.load(Ordering::Relaxed);
    let first = s
        .admit(common::new_adm(sid, "r1", "alone"))
        .await
        .expect("admit");
    assert!(!first.duplicate);
    let seen = observed(&mut watcher, Duration::from_millis(600)).await;
    assert!(seen.is_empty(), "a lone replica sent {seen:?}");
    assert!(
        STORE.notices_skipped.load(Ordering::Relaxed) >= skipped + 2,
        "admitted and events were skipped"
    );
    // Nor did its own listener hear anything but, at most, its start-up resync.
    let wakes = drain(&mut own, Duration::from_millis(100)).await;
    assert!(
        wakes.iter().all(|w| *w == Wake::Resync),
        "own notices: {wakes:?}"
    );
    // The write itself committed.
    assert_eq!(
        s.next_queued(sid).await.expect("read").map(|a| a.id),
        Some(first.admission.id)
    );

    // A second replica starts listening: within the check period the notices flow.
    let other = Store::connect(&url).await.expect("connect");
    let mut heard = other.notices().await.expect("listen");
    let started = tokio::time::Instant::now();
    let bound = notify::PEER_READING_FRESH_FOR + notify::PEER_CHECK_EVERY;
    let mut flowing = None;
    for i in 0..40 {
        s.admit(common::new_adm(sid, &format!("flow-{i}"), "two"))
            .await
            .expect("admit");
        let seen = observed(&mut watcher, Duration::from_millis(50)).await;
        if seen
            .iter()
            .any(|n| n.kind == NoticeKind::Admitted && n.session == sid)
        {
            flowing = Some(started.elapsed());
            break;
        }
        if started.elapsed() > bound * 2 {
            break;
        }
    }
    let flowing = flowing.expect("notices never flowed once another replica listened");
    println!("notices flowed {flowing:?} after a peer listened");
    assert!(
        flowing <= bound,
        "notices flowed {flowing:?} after a peer listened"
    );
    let wakes = drain(&mut heard, Duration::from_millis(300)).await;
    assert!(
        kinds(&wakes, sid).contains(&NoticeKind::Admitted),
        "{wakes:?}"
    );

    // The second replica stops listening: the first goes back to sending nothing.
    drop(heard);
    tokio::time::sleep(notify::PEER_READING_FRESH_FOR + notify::PEER_CHECK_EVERY).await;
    observed(&mut watcher, Duration::from_millis(50)).await;
    drain(&mut own, Duration::from_millis(50)).await;
    s.admit(common::new_adm(sid, "alone-again", "one"))
        .await
        .expect("admit");
    let seen = observed(&mut watcher, Duration::from_millis(600)).await;
    assert!(seen.is_empty(), "alone again, yet sent {seen:?}");

    let wakes = drain(&mut own, Duration::from_millis(100)).await;
    assert!(kinds(&wakes, sid).is_empty(), "own notices: {wakes:?}");

    drop(own);
    other.connection().clone().close().await.expect("close");
    s.connection().clone().close().await.expect("close");
    common::drop_postgres(&db).await;
}

#[tokio::test]
async fn r13_6_a_new_listener_resyncs_once_when_its_peers_have_seen_it() {
    let Some((s, db)) = common::postgres().await else {
        return;
    };
    let url = url_of(&s);
    // `s` is alone, and knows it.
    let _own = s.notices().await.expect("listen");
    let sid = common::session(&s).await;
    tokio::time::sleep(notify::PEER_READING_FRESH_FOR).await;

    // A second replica starts listening, and `s` writes at once, likely on a reading that
    // has not seen the newcomer yet.
    let other = Store::connect(&url).await.expect("connect");
    let mut heard = other.notices().await.expect("listen");
    let listening = tokio::time::Instant::now();
    s.admit(common::new_adm(sid, "r1", "racing"))
        .await
        .expect("admit");

    let mut resync = None;
    while let Ok(Some(w)) =
        tokio::time::timeout(notify::RESYNC_AFTER_LISTEN * 2, heard.recv()).await
    {
        if w == Wake::Resync {
            resync = Some(listening.elapsed());
            break;
        }
    }
    let resync = resync.expect("the start-up resync never came");
    // Not before every peer's reading that missed the newcomer went stale.
    assert!(
        resync >= notify::RESYNC_AFTER_LISTEN - Duration::from_millis(50),
        "resync after {resync:?}"
    );
    assert!(
        resync <= notify::RESYNC_AFTER_LISTEN + Duration::from_millis(500),
        "resync after {resync:?}"
    );
    // Whatever the notice did, the re-read finds the write.
    assert!(s.next_queued(sid).await.expect("read").is_some());
    // Once.
    let after = drain(&mut heard, Duration::from_millis(600)).await;
    assert!(!after.contains(&Wake::Resync), "{after:?}");

    other.connection().clone().close().await.expect("close");
    s.connection().clone().close().await.expect("close");
    common::drop_postgres(&db).await;
}
