//! Tests of the PostgreSQL helper: a fresh database exists while its guard lives and is gone
//! after (skips with one line when there is no server, unless TURNKEY_REQUIRE_PG=1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use turnkey_tests::pg;

async fn exists(name: &str) -> bool {
    let admin = Database::connect(pg::ADMIN_URL).await.unwrap();
    let row = admin
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT count(*) AS n FROM pg_database WHERE datname = $1",
            [name.into()],
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get::<i64>("", "n").unwrap() == 1
}

#[tokio::test]
async fn pg_fresh_database_lives_as_long_as_its_guard() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    let conn = Database::connect(db.url()).await.unwrap();
    conn.execute_unprepared("CREATE TABLE t (x int)")
        .await
        .unwrap();
    conn.close().await.unwrap();
    let name = db.name.clone();
    assert!(exists(&name).await);
    drop(db);
    assert!(!exists(&name).await, "dropped with its guard");
}
