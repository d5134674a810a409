//! SPEC R13.8: a principal's model tokens of the day, counted by the commits that end its
//! turns, over shards chosen by session (so that its sessions' turn ends do not queue on one
//! row lock), and summed when read.
use crate::common;

use common::*;
use sea_orm::ConnectionTrait;
use turnkey_storage::*;

fn call(input_tokens: i64, output_tokens: i64) -> NewUsage {
    NewUsage {
        provider: "p".into(),
        model: "m".into(),
        input_tokens,
        output_tokens,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost_usd: 0.0,
    }
}

/// Runs one turn on `sid` whose calls spent `calls`.
async fn turn_spending(s: &Store, sid: SessionId, calls: Vec<NewUsage>) {
    s.admit(new_adm(sid, "r", "go")).await.expect("admit");
    let (fence, turn, claimed) = take_and_claim(s, sid, &owner(), 60_000).await;
    let a = claimed.expect("claimed").admission;
    let end = completed_end(a.id, turn, vec![answer_row(turn, "ok")], calls);
    let (_, released) = s
        .commit_turn_end_and_release(&fence, &end)
        .await
        .expect("end");
    assert!(released);
}

/// Rows of `principal`'s counter on `day`.
async fn counter_rows(s: &Store, principal: &str, day: i64) -> i64 {
    let backend = s.connection().get_database_backend();
    let row = s
        .connection()
        .query_one_raw(sea_orm::Statement::from_sql_and_values(
            backend,
            match backend {
                sea_orm::DbBackend::Postgres => {
                    "SELECT count(*) AS n FROM principal_usage_shards WHERE principal = $1 AND day = $2"
                }
                _ => "SELECT count(*) AS n FROM principal_usage_shards WHERE principal = ? AND day = ?",
            },
            [principal.into(), day.into()],
        ))
        .await
        .expect("count")
        .expect("a row");
    row.try_get("", "n").expect("n")
}

on_both!(r13_8_a_principals_tokens_of_the_day_sum_over_its_sessions);
async fn r13_8_a_principals_tokens_of_the_day_sum_over_its_sessions(s: Store) {
    let today = day_of(now_ms());
    assert_eq!(s.tokens_on_day("operator", today).await.unwrap(), 0);
    // 24 sessions of one principal, one turn each of two calls: 3 + 2 + 4 + 1 = 10 tokens.
    for _ in 0..24 {
        let sid = session(&s).await;
        turn_spending(&s, sid, vec![call(3, 2), call(4, 1)]).await;
    }
    assert_eq!(s.tokens_on_day("operator", today).await.unwrap(), 240);
    // The sessions spread over several rows, which the read sums.
    let rows = counter_rows(&s, "operator", today).await;
    assert!((2..=16).contains(&rows), "{rows} counter rows");
    // Another day and another principal count nothing of it.
    assert_eq!(s.tokens_on_day("operator", today - 1).await.unwrap(), 0);
    assert_eq!(s.tokens_on_day("someone", today).await.unwrap(), 0);
    // A turn that spent nothing adds nothing.
    let sid = session(&s).await;
    turn_spending(&s, sid, vec![]).await;
    assert_eq!(s.tokens_on_day("operator", today).await.unwrap(), 240);
}

/// A database whose counter was one row per principal and day keeps its counts when migrated
/// to shards (the migration is undone, an old row written, and redone).
#[tokio::test]
async fn r13_8_migrating_to_shards_keeps_the_days_count() {
    use migration::MigratorTrait;
    let dir = std::env::temp_dir().join(format!("tk-shards-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let url = format!("sqlite://{}/t.db?mode=rwc", dir.display());
    let today = day_of(now_ms());
    // Undone: the shards' migration and every one after it.
    let back = migrations_through("m20261218_000001_usage_shards");
    let db = sea_orm::Database::connect(&url).await.expect("connect");
    migration::Migrator::up(&db, None).await.expect("up");
    migration::Migrator::down(&db, Some(back))
        .await
        .expect("down");
    db.execute_unprepared(&format!(
        "INSERT INTO principal_usage (principal, day, tokens) VALUES ('operator', {today}, 42), ('alice', {today}, 7)"
    ))
    .await
    .expect("an old counter row");
    migration::Migrator::up(&db, None).await.expect("up again");
    db.close().await.expect("close");

    let s = Store::connect(&url).await.expect("connect");
    assert_eq!(s.tokens_on_day("operator", today).await.unwrap(), 42);
    assert_eq!(s.tokens_on_day("alice", today).await.unwrap(), 7);
    let sid = session(&s).await;
    turn_spending(&s, sid, vec![call(5, 3)]).await;
    assert_eq!(s.tokens_on_day("operator", today).await.unwrap(), 50);
    // And back: the shards fold into one row per principal and day.
    s.connection().clone().close().await.expect("close");
    let db = sea_orm::Database::connect(&url).await.expect("connect");
    migration::Migrator::down(&db, Some(back))
        .await
        .expect("down");
    let row = db
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Sqlite,
            format!("SELECT count(*) AS n, sum(tokens) AS t FROM principal_usage WHERE principal = 'operator' AND day = {today}"),
        ))
        .await
        .expect("read")
        .expect("row");
    let (n, t): (i64, i64) = (row.try_get("", "n").unwrap(), row.try_get("", "t").unwrap());
    assert_eq!((n, t), (1, 50));
    db.close().await.expect("close");
    std::fs::remove_dir_all(&dir).ok();
}
