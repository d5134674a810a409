//! Every statement a turn sends finds its rows through an index: a full scan of a table that
//! grows with use (admissions, messages, events, the ledger…) would make each turn slower as
//! the database grows, which no benchmark of a fresh database shows. The test records the SQL
//! of a whole turn's store calls (the `turnkey_storage::sql` trace every statement emits) and
//! asks SQLite for each statement's plan (`EXPLAIN QUERY PLAN`).
#![allow(clippy::expect_used, clippy::unwrap_used)]
#[macro_use]
#[allow(unused_macros)]
mod common;

use common::*;
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use std::sync::{Arc, Mutex};
use tracing_subscriber::layer::{Context, SubscriberExt};
use turnkey_storage::*;

/// Collects the `sql` field of every `turnkey_storage::sql` event.
#[derive(Clone, Default)]
struct Statements(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "turnkey_storage::sql" {
            return;
        }
        struct Sql<'a>(&'a Mutex<Vec<String>>);
        impl tracing::field::Visit for Sql<'_> {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "sql" {
                    let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
                    all.push(format!("{value:?}"));
                }
            }
        }
        event.record(&mut Sql(&self.0));
    }
}

/// Runs what one turn asks of the store, and the reads around it (queue, replay, transcript),
/// on a store that already holds other sessions' rows.
async fn one_turn(s: &Store) {
    let other = session(s).await;
    s.admit(new_adm(other, "x", "elsewhere"))
        .await
        .expect("other");
    let sid = session(s).await;
    let o = owner();
    let first = s.admit(new_adm(sid, "a", "hello")).await.expect("admit");
    s.admit(new_adm(sid, "a", "hello"))
        .await
        .expect("duplicate");
    s.admit(new_adm(sid, "b", "later")).await.expect("second");
    s.find_admission_by_request(sid, "a")
        .await
        .expect("by request");
    let (fence, turn, claimed) = take_and_claim(s, sid, &o, 60_000).await;
    assert!(claimed.is_some());
    s.live_transcript_after(sid, i64::MIN)
        .await
        .expect("transcript");
    s.append_events(&[(Some(fence.clone()), delta(sid, turn, 0))])
        .await
        .expect("delta");
    let usage = NewUsage {
        provider: "p".into(),
        model: "m".into(),
        input_tokens: 10,
        output_tokens: 2,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost_usd: 0.0,
    };
    let answer = answer_row(turn, "hi");
    let end = completed_end(first.admission.id, turn, vec![answer], vec![usage]);
    s.commit_turn_end_and_release(&fence, &end)
        .await
        .expect("turn end");
    s.next_queued(sid).await.expect("next");
    s.queue_depth(sid).await.expect("depth");
    s.queued_admissions(sid).await.expect("queued");
    s.started_admissions(Some(sid)).await.expect("started");
    s.sessions_with_queued().await.expect("with queued");
    s.events_since(sid, Seq(0), 100).await.expect("replay");
    s.get_session(sid).await.expect("session");
    s.get_lease(sid).await.expect("lease");
    s.pending_interrupts_of_turn(turn)
        .await
        .expect("interrupts");
}

/// Tables whose size grows with use; a plan may scan only the small fixed ones.
const GROWING: [&str; 8] = [
    "sessions",
    "session_admissions",
    "session_events",
    "messages",
    "usage_ledger",
    "session_turn_leases",
    "tool_runs",
    "interrupt_requests",
];

#[tokio::test]
async fn every_statement_of_a_turn_uses_an_index() {
    let s = sqlite().await;
    let seen = Statements::default();
    let subscriber = tracing_subscriber::registry().with(seen.clone());
    {
        let _on = tracing::subscriber::set_default(subscriber);
        one_turn(&s).await;
    }
    let mut statements = seen.0.lock().unwrap().clone();
    statements.sort();
    statements.dedup();
    assert!(
        statements.len() >= 15,
        "the trace recorded the turn's statements: {statements:#?}"
    );
    // `EXPLAIN` plans with the schema its connection last read and, unlike a query, does not
    // check that schema is current: a pooled connection that read it before the last
    // migration plans without that migration's indexes (a real query would notice the change
    // and plan again). So the plans come from one connection that has just read the schema.
    let explain = s.connection().begin().await.expect("begin");
    explain
        .query_all_raw(Statement::from_string(
            DbBackend::Sqlite,
            "SELECT count(*) FROM sqlite_master",
        ))
        .await
        .expect("read the schema");
    let mut scans = Vec::new();
    for sql in &statements {
        let verb = sql.split_whitespace().next().unwrap_or_default();
        if !["SELECT", "UPDATE", "DELETE"].contains(&verb) {
            continue;
        }
        let plan = explain
            .query_all_raw(Statement::from_string(
                DbBackend::Sqlite,
                format!("EXPLAIN QUERY PLAN {sql}"),
            ))
            .await
            .unwrap_or_else(|e| panic!("cannot explain {sql}: {e}"));
        // A read of a transcript's live rows finds them by their epoch, not by testing every
        // row the session ever had (compressed rows stay, SPEC R6.4).
        let live_only = sql.contains("\"compressed_epoch\" IS NULL");
        let mut by_epoch = false;
        let mut details = Vec::new();
        for row in plan {
            let detail: String = row.try_get("", "detail").expect("detail");
            details.push(detail.clone());
            by_epoch |= detail.contains("compressed_epoch=?");
            let scanned = detail
                .strip_prefix("SCAN ")
                .and_then(|rest| rest.split_whitespace().next());
            if scanned.is_some_and(|t| GROWING.contains(&t)) {
                scans.push(format!("{detail}\n    in {sql}"));
            }
        }
        if live_only && !by_epoch {
            scans.push(format!(
                "live rows not found by their epoch ({})\n    in {sql}",
                details.join("; ")
            ));
        }
    }
    explain.rollback().await.expect("rollback");
    assert!(
        scans.is_empty(),
        "full scans of growing tables:\n{}",
        scans.join("\n")
    );
}
