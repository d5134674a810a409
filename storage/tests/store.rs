//! The Store's durable facts against a real SQLite file: idempotent admission, the status
//! machine, fenced leases and gap-free event seqs.
#![allow(clippy::expect_used, clippy::unwrap_used)]
use serde_json::json;
use turnkey_storage::*;

/// A fresh, migrated SQLite file.
async fn sqlite() -> Store {
    let dir = std::env::temp_dir().join(format!("tk-store-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let s = Store::connect(&format!("sqlite://{}/t.db?mode=rwc", dir.display()))
        .await
        .expect("connect");
    s.migrate().await.expect("migrate");
    s
}

/// A fresh, migrated PostgreSQL database on 127.0.0.1:5432, or `None` (with a one-line reason)
/// when the server is not there and `TURNKEY_REQUIRE_PG` is not set.
async fn postgres() -> Option<(Store, String)> {
    use sea_orm::ConnectionTrait;
    let admin = match Store::connect("postgres://postgres@127.0.0.1:5432/test").await {
        Ok(a) => a,
        Err(e) if std::env::var("TURNKEY_REQUIRE_PG").as_deref() != Ok("1") => {
            println!("skipping: PostgreSQL not reachable at 127.0.0.1:5432 ({e})");
            return None;
        }
        Err(e) => panic!("TURNKEY_REQUIRE_PG=1 but PostgreSQL is not reachable: {e}"),
    };
    let name = format!("tk_store_{}", uuid::Uuid::new_v4().simple());
    admin
        .connection()
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    let s = Store::connect(&format!("postgres://postgres@127.0.0.1:5432/{name}"))
        .await
        .expect("connect");
    s.migrate().await.expect("migrate");
    Some((s, name))
}

/// Drops a database made by `postgres()`, so that runs leave no residue on the server.
async fn drop_postgres(name: &str) {
    use sea_orm::ConnectionTrait;
    let admin = Store::connect("postgres://postgres@127.0.0.1:5432/test")
        .await
        .expect("connect");
    admin
        .connection()
        .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .expect("drop database");
}

/// Runs one fact against both backends: `name::sqlite` and `name::postgres`.
macro_rules! on_both {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name(super::sqlite().await).await;
            }
            #[tokio::test]
            async fn postgres() {
                if let Some((s, db)) = super::postgres().await {
                    super::$name(s.clone()).await;
                    s.connection().clone().close().await.expect("close");
                    super::drop_postgres(&db).await;
                }
            }
        }
    };
}

async fn session(s: &Store) -> SessionId {
    let id = SessionId::new();
    s.create_session(NewSession {
        id,
        owner: "operator".into(),
        platform: "api".into(),
        chat_key: None,
        title: None,
        model: None,
        system_message: None,
        system_prompt: "sys".into(),
        workspace_snapshot: None,
    })
    .await
    .expect("session");
    id
}

fn owner() -> Owner {
    Owner {
        instance: InstanceId::new(),
        pid: 1,
        host: "h".into(),
    }
}

fn new_adm(session: SessionId, req: &str, text: &str) -> NewAdmission {
    NewAdmission {
        session_id: session,
        request_id: req.into(),
        payload_digest: format!("d-{text}"),
        payload: json!({"text": text}),
        principal: "operator".into(),
        surface: "api".into(),
    }
}

async fn lease(s: &Store, sid: SessionId, o: &Owner, ttl_ms: i64) -> Option<Fence> {
    s.try_acquire_lease(
        LeaseClaim {
            session: sid,
            owner: o,
            platform: "test",
            ttl_ms,
        },
        &|_| false,
    )
    .await
    .expect("lease")
}

on_both!(r2_3_same_request_id_admits_once_and_other_digest_conflicts);
async fn r2_3_same_request_id_admits_once_and_other_digest_conflicts(s: Store) {
    let sid = session(&s).await;
    let a = s.admit(new_adm(sid, "r1", "hi")).await.expect("admit");
    assert!(!a.duplicate);
    assert_eq!(a.admission.status, AdmissionStatus::Queued);
    assert_eq!(a.event.expect("event").kind, EventKind::AdmissionQueued);
    let b = s.admit(new_adm(sid, "r1", "hi")).await.expect("again");
    assert!(b.duplicate);
    assert_eq!(b.admission.id, a.admission.id);
    assert!(b.event.is_none());
    let c = s.admit(new_adm(sid, "r1", "other")).await;
    assert!(matches!(c, Err(StoreError::IdempotencyConflict { .. })));
}

on_both!(r2_5_fifo_is_ordered_by_seq);
async fn r2_5_fifo_is_ordered_by_seq(s: Store) {
    let sid = session(&s).await;
    let first = s.admit(new_adm(sid, "a", "1")).await.expect("a").admission;
    let second = s.admit(new_adm(sid, "b", "2")).await.expect("b").admission;
    assert!(second.seq > first.seq);
    assert_eq!(
        s.next_queued(sid).await.expect("q").expect("head").id,
        first.id
    );
    assert_eq!(s.queue_depth(sid).await.expect("depth"), 2);
}

on_both!(r2_4_claim_settle_and_unknown_follow_the_status_machine);
async fn r2_4_claim_settle_and_unknown_follow_the_status_machine(s: Store) {
    let sid = session(&s).await;
    let o = owner();
    let fence = lease(&s, sid, &o, 60_000).await.expect("free lease");
    let a = s.admit(new_adm(sid, "a", "1")).await.expect("a").admission;
    let turn = TurnId::new();
    let ev = s.claim(&fence, a.id, &o, turn).await.expect("claim");
    assert_eq!(ev.kind, EventKind::TurnStarted);
    // A second claim of the same admission is refused: it is no longer queued.
    assert!(matches!(
        s.claim(&fence, a.id, &o, TurnId::new()).await,
        Err(StoreError::WrongState(_))
    ));
    let unknown = s.mark_unknown(a.id, "owner died").await.expect("unknown");
    assert_eq!(unknown.expect("event").kind, EventKind::TurnUnknown);
    let got = s.get_admission(a.id).await.expect("get").expect("row");
    assert_eq!(got.status, AdmissionStatus::Unknown);
    // unknown is not settled later: the turn end is refused, the receipt stays unknown.
    let end = TurnEnd {
        admission_id: a.id,
        turn_id: turn,
        messages: vec![],
        usage: vec![],
        outcome: json!({"result": "completed"}),
        events: vec![],
    };
    assert!(matches!(
        s.commit_turn_end(&fence, &end).await,
        Err(StoreError::WrongState(_))
    ));
    assert!(s.mark_unknown(a.id, "again").await.expect("noop").is_none());
}

on_both!(r4_1_live_lease_is_exclusive_and_expired_one_is_taken_over);
async fn r4_1_live_lease_is_exclusive_and_expired_one_is_taken_over(s: Store) {
    let sid = session(&s).await;
    let (a, b) = (owner(), owner());
    let fa = lease(&s, sid, &a, 60_000).await.expect("a gets it");
    assert!(lease(&s, sid, &b, 60_000).await.is_none(), "b must wait");
    s.refresh_lease(&fa, 1).await.expect("shorten");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let fb = lease(&s, sid, &b, 60_000)
        .await
        .expect("b takes the expired lease");
    assert!(fb.generation > fa.generation);
    assert!(matches!(
        s.refresh_lease(&fa, 60_000).await,
        Err(StoreError::Fenced(_))
    ));
}

on_both!(r4_4_dead_holder_is_reclaimed_before_ttl);
async fn r4_4_dead_holder_is_reclaimed_before_ttl(s: Store) {
    let sid = session(&s).await;
    let (a, b) = (owner(), owner());
    lease(&s, sid, &a, 600_000).await.expect("a");
    let dead_a = a.instance;
    let fb = s
        .try_acquire_lease(
            LeaseClaim {
                session: sid,
                owner: &b,
                platform: "t",
                ttl_ms: 60_000,
            },
            &|h: &Owner| h.instance == dead_a,
        )
        .await
        .expect("try");
    assert!(fb.is_some());
}

on_both!(r13_3_stale_generation_cannot_write);
async fn r13_3_stale_generation_cannot_write(s: Store) {
    let sid = session(&s).await;
    let (a, b) = (owner(), owner());
    let fa = lease(&s, sid, &a, 1).await.expect("a");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let fb = lease(&s, sid, &b, 60_000).await.expect("b");
    let msg = NewMessage {
        id: MessageId::new(),
        role: Some(MessageRole::Assistant),
        content: Some("late".into()),
        ..Default::default()
    };
    assert!(matches!(
        s.append_message(&fa, &msg).await,
        Err(StoreError::Fenced(_))
    ));
    let ev = NewEvent {
        session_id: sid,
        kind: EventKind::MessageDelta,
        turn_id: None,
        admission_id: None,
        data: json!({"text": "x"}),
    };
    let res = s
        .append_events(&[(Some(fa.clone()), ev.clone()), (Some(fb.clone()), ev)])
        .await
        .expect("batch");
    assert!(matches!(res[0], Err(StoreError::Fenced(_))));
    assert!(
        res[1].is_ok(),
        "the current holder's event commits in the same batch"
    );
    assert!(s.list_messages(sid).await.expect("list").is_empty());
}

on_both!(r13_3_release_keeps_the_generation_growing);
async fn r13_3_release_keeps_the_generation_growing(s: Store) {
    let sid = session(&s).await;
    let a = owner();
    let f1 = lease(&s, sid, &a, 60_000).await.expect("1");
    assert!(s.release_lease(&f1).await.expect("release"));
    let f2 = lease(&s, sid, &a, 60_000).await.expect("2");
    assert!(f2.generation > f1.generation);
    assert!(!s
        .release_lease(&f1)
        .await
        .expect("stale release is a no-op"));
}

on_both!(r11_2_event_seqs_are_contiguous_across_writers);
async fn r11_2_event_seqs_are_contiguous_across_writers(s: Store) {
    let sid = session(&s).await;
    let mut tasks = Vec::new();
    for i in 0..10 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.admit(new_adm(sid, &format!("r{i}"), &format!("t{i}")))
                .await
        }));
    }
    for t in tasks {
        t.await.expect("join").expect("admit");
    }
    let evs = s.events_since(sid, Seq(0), 100).await.expect("events");
    let seqs: Vec<i64> = evs.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=10).collect::<Vec<_>>());
    let tail = s.events_since(sid, Seq(7), 100).await.expect("since 7");
    assert_eq!(
        tail.iter().map(|e| e.seq.0).collect::<Vec<_>>(),
        vec![8, 9, 10]
    );
}

on_both!(r10_4_turn_end_commits_tail_usage_receipt_and_events_together);
async fn r10_4_turn_end_commits_tail_usage_receipt_and_events_together(s: Store) {
    let sid = session(&s).await;
    let o = owner();
    let fence = lease(&s, sid, &o, 60_000).await.expect("lease");
    let a = s.admit(new_adm(sid, "a", "1")).await.expect("a").admission;
    let turn = TurnId::new();
    s.claim(&fence, a.id, &o, turn).await.expect("claim");
    let end = TurnEnd {
        admission_id: a.id,
        turn_id: turn,
        messages: vec![NewMessage {
            id: MessageId::new(),
            role: Some(MessageRole::Assistant),
            content: Some("done".into()),
            ..Default::default()
        }],
        usage: vec![NewUsage {
            provider: "p".into(),
            model: "m".into(),
            input_tokens: 10,
            output_tokens: 5,
            cache_read_tokens: 2,
            cache_write_tokens: 0,
            cost_usd: 0.5,
        }],
        outcome: json!({"result": "completed", "final_response": "done"}),
        events: vec![NewEvent {
            session_id: sid,
            kind: EventKind::TurnFinished,
            turn_id: Some(turn),
            admission_id: Some(a.id),
            data: json!({"result": "completed"}),
        }],
    };
    let evs = s.commit_turn_end(&fence, &end).await.expect("end");
    assert_eq!(evs[0].kind, EventKind::TurnFinished);
    let got = s.get_admission(a.id).await.expect("get").expect("row");
    assert_eq!(got.status, AdmissionStatus::Terminal);
    assert_eq!(got.outcome.expect("outcome")["final_response"], "done");
    let sess = s.get_session(sid).await.expect("get").expect("row");
    assert_eq!(sess.usage.input_tokens, 10);
    assert_eq!(
        s.list_messages(sid).await.expect("msgs")[0]
            .content
            .as_deref(),
        Some("done")
    );
}
