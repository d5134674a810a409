//! Replicas that start together against one fresh PostgreSQL database (SPEC R13.6, the
//! deployment's two replicas): each runs `migrate`, none fails, and the schema is applied once.
#![allow(clippy::expect_used, clippy::unwrap_used)]
#[allow(unused_macros)] // `on_both!` is for the tests that run on both backends
mod common;

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
