//! Scheduled jobs in the store (SPEC R1.5), on SQLite and PostgreSQL: rows by owner, the
//! compare-and-set that records a handled due time (one winner among racing schedulers, never
//! backwards, nothing for a deleted schedule), and the start-up synchronization of the
//! configuration's schedules (kept ones keep their history, removed ones go, API ones stay,
//! two replicas starting at once make no duplicate).
#![allow(clippy::unwrap_used, clippy::expect_used)]
use crate::common;

use turnkey_storage::*;

fn new_schedule(session: SessionId, owner: &str, source: ScheduleSource) -> NewSchedule {
    NewSchedule {
        id: ScheduleId::new(),
        session_id: session,
        owner: owner.into(),
        cron: "*/2 * * * * *".into(),
        text: "tick".into(),
        missed: MissedPolicy::RunOnce,
        source,
        once_at: None,
    }
}

on_both!(r1_5_schedules_are_listed_by_owner_and_deleted);
async fn r1_5_schedules_are_listed_by_owner_and_deleted(s: Store) {
    let session = common::session(&s).await;
    let a = s
        .create_schedule(new_schedule(session, "operator", ScheduleSource::Api))
        .await
        .expect("create");
    let mut other = new_schedule(session, "p2", ScheduleSource::Api);
    other.missed = MissedPolicy::Skip;
    let b = s.create_schedule(other.clone()).await.expect("create");
    assert_eq!(b.missed, MissedPolicy::Skip);
    assert_eq!(b.owner, "p2");
    assert_eq!(b.last_due_at, None);
    assert_eq!(s.get_schedule(a.id).await.expect("get"), Some(a.clone()));
    let all: Vec<_> = s.list_schedules(None).await.expect("list");
    assert_eq!(all, vec![a.clone(), b.clone()], "oldest first");
    assert_eq!(
        s.list_schedules(Some("p2")).await.expect("list"),
        vec![b.clone()]
    );
    assert!(s.delete_schedule(b.id).await.expect("delete"));
    assert!(!s.delete_schedule(b.id).await.expect("delete again"));
    assert_eq!(s.list_schedules(None).await.expect("list"), vec![a]);
}

on_both!(r1_5_the_handled_due_time_moves_by_compare_and_set);
async fn r1_5_the_handled_due_time_moves_by_compare_and_set(s: Store) {
    let session = common::session(&s).await;
    let sched = s
        .create_schedule(new_schedule(session, "operator", ScheduleSource::Api))
        .await
        .expect("create");
    // Racing schedulers that read the same state: exactly one moves it.
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move { s.advance_schedule(sched.id, None, 2_000).await })
        })
        .collect();
    let mut won = 0;
    for r in racers {
        won += usize::from(r.await.expect("task").expect("advance"));
    }
    assert_eq!(won, 1, "one winner");
    let read = |s: Store| async move { s.get_schedule(sched.id).await.expect("get").unwrap() };
    assert_eq!(read(s.clone()).await.last_due_at, Some(2_000));
    // A stale reader changes nothing, and it never moves backwards.
    assert!(!s
        .advance_schedule(sched.id, None, 4_000)
        .await
        .expect("stale"));
    assert!(!s
        .advance_schedule(sched.id, Some(2_000), 1_000)
        .await
        .expect("backwards"));
    assert!(s
        .advance_schedule(sched.id, Some(2_000), 4_000)
        .await
        .expect("next"));
    assert_eq!(read(s.clone()).await.last_due_at, Some(4_000));
    // A deleted schedule records nothing.
    assert!(s.delete_schedule(sched.id).await.expect("delete"));
    assert!(!s
        .advance_schedule(sched.id, Some(4_000), 6_000)
        .await
        .expect("deleted"));
}

on_both!(r1_5_config_schedules_are_synchronized_and_keep_their_history);
async fn r1_5_config_schedules_are_synchronized_and_keep_their_history(s: Store) {
    let session = common::session(&s).await;
    let api = s
        .create_schedule(new_schedule(session, "operator", ScheduleSource::Api))
        .await
        .expect("api schedule");
    let a = new_schedule(session, "operator", ScheduleSource::Config);
    let b = new_schedule(session, "operator", ScheduleSource::Config);
    let c = new_schedule(session, "operator", ScheduleSource::Config);
    let first = s
        .sync_config_schedules(vec![a.clone(), b.clone()])
        .await
        .expect("sync");
    assert_eq!(
        first,
        ConfigSchedulesSynced {
            added: 2,
            kept: 0,
            removed: 0
        }
    );
    assert!(s
        .advance_schedule(a.id, None, 8_000)
        .await
        .expect("advance"));

    // The next start: a is kept with its history, b was removed from the file, c is new.
    let second = s
        .sync_config_schedules(vec![a.clone(), c.clone()])
        .await
        .expect("sync");
    assert_eq!(
        second,
        ConfigSchedulesSynced {
            added: 1,
            kept: 1,
            removed: 1
        }
    );
    let listed = s.list_schedules(None).await.expect("list");
    let ids: Vec<ScheduleId> = listed.iter().map(|x| x.id).collect();
    assert!(ids.contains(&api.id), "API schedules are not touched");
    assert!(ids.contains(&a.id) && ids.contains(&c.id) && !ids.contains(&b.id));
    let kept = listed.iter().find(|x| x.id == a.id).unwrap();
    assert_eq!(
        kept.last_due_at,
        Some(8_000),
        "a kept schedule keeps its history"
    );
    assert_eq!(kept.source, ScheduleSource::Config);

    // Two replicas starting with the same file at once: no duplicate, no error.
    let d = new_schedule(session, "operator", ScheduleSource::Config);
    let wanted = vec![a.clone(), c.clone(), d.clone()];
    let replicas: Vec<_> = (0..2)
        .map(|_| {
            let s = s.clone();
            let wanted = wanted.clone();
            tokio::spawn(async move { s.sync_config_schedules(wanted).await })
        })
        .collect();
    let mut added = 0;
    for r in replicas {
        added += r.await.expect("task").expect("sync").added;
    }
    assert_eq!(added, 1, "d inserted once");
    assert_eq!(s.list_schedules(None).await.expect("list").len(), 4);

    // An empty file removes every configured schedule, and only those.
    let last = s.sync_config_schedules(Vec::new()).await.expect("sync");
    assert_eq!(last.removed, 3);
    assert_eq!(s.list_schedules(None).await.expect("list"), vec![api]);
}
