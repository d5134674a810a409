//! Replicas that start together against one fresh PostgreSQL database (SPEC R13.6, the
//! deployment's two replicas): each runs `migrate`, none fails, and the schema is applied once.
#![allow(clippy::expect_used, clippy::unwrap_used)]
use crate::common;

use sea_orm::ConnectionTrait;
use turnkey_storage::*;

#[tokio::test]
async fn r13_6_replicas_migrating_one_fresh_database_at_once_all_succeed() {
    let admin = match Store::connect("postgres://postgres@127.0.0.1:5432/test").await {
        Ok(a) => a,
        Err(e) if std::env::var("TURNKEY_REQUIRE_PG").as_deref() != Ok("1") => {
            println!("skipping: PostgreSQL not reachable at 127.0.0.1:5432 ({e})");
            return;
        }
        Err(e) => panic!("TURNKEY_REQUIRE_PG=1 but PostgreSQL is not reachable: {e}"),
    };
    let name = format!("tk_migrate_{}", uuid::Uuid::new_v4().simple());
    admin
        .connection()
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    let url = format!("postgres://postgres@127.0.0.1:5432/{name}");
    let mut replicas = Vec::new();
    for _ in 0..4 {
        replicas.push(Store::connect(&url).await.expect("connect"));
    }
    let runs: Vec<_> = replicas
        .iter()
        .map(|s| {
            let s = s.clone();
            tokio::spawn(async move { s.migrate().await })
        })
        .collect();
    for (i, run) in runs.into_iter().enumerate() {
        let r = run.await.expect("join");
        assert!(r.is_ok(), "replica {i} failed to migrate: {r:?}");
    }
    for s in &replicas {
        assert!(s.is_ready().await, "every migration is applied");
    }
    let applied = replicas[0]
        .connection()
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT count(*) AS n, count(DISTINCT version) AS d FROM seaql_migrations",
        ))
        .await
        .unwrap()
        .unwrap();
    let n: i64 = applied.try_get("", "n").unwrap();
    let d: i64 = applied.try_get("", "d").unwrap();
    assert_eq!(n, d, "each migration is recorded once");
    for s in replicas {
        s.connection().clone().close().await.expect("close");
    }
    common::drop_postgres(&name).await;
}

/// SPEC R6.1: a database made before the session row kept its last prompt size gets it from
/// the usage ledger when migrated (the migration is undone and redone on a session with a
/// recorded turn of two calls: the last call is the one kept).
#[tokio::test]
async fn r6_1_migrating_fills_the_last_prompt_size_from_the_ledger() {
    use migration::MigratorTrait;
    use serde_json::json;
    let dir = std::env::temp_dir().join(format!("tk-migrate-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let url = format!("sqlite://{}/t.db?mode=rwc", dir.display());
    let s = Store::connect(&url).await.expect("connect");
    s.migrate().await.expect("migrate");
    let sid = common::session(&s).await;
    let o = common::owner();
    let fence = common::lease(&s, sid, &o, 60_000).await.unwrap();
    let a = s
        .admit(common::new_adm(sid, "a", "go"))
        .await
        .unwrap()
        .admission;
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
    let kept = s.last_prompt_usage(sid).await.unwrap().expect("recorded");
    assert_eq!(kept.0, 4_000);
    s.connection().clone().close().await.expect("close");

    let db = sea_orm::Database::connect(&url).await.expect("connect");
    let back = common::migrations_through("m20261208_000001_last_prompt_on_session");
    migration::Migrator::down(&db, Some(back))
        .await
        .expect("down");
    migration::Migrator::up(&db, None).await.expect("up");
    db.close().await.expect("close");

    let s = Store::connect(&url).await.expect("connect");
    assert_eq!(s.last_prompt_usage(sid).await.unwrap(), Some(kept));
    let fresh = common::session(&s).await;
    assert_eq!(s.last_prompt_usage(fresh).await.unwrap(), None);
}
