//! The `Store`: connection set-up and the transaction and fencing primitives every durable
//! write goes through. Each submodule owns one family of facts.
//!
//! # Ordering and fencing
//!
//! - Every status change commits with the event that announces it: `admit` with
//!   `admission.queued`, the claim with `turn.started`, `mark_unknown` with `turn.unknown`, the
//!   turn end with its tail rows, usage, receipt, `message.complete` and `turn.finished`, each with
//!   the session's new `status`. A crash never leaves an event that contradicts a receipt.
//! - Fencing (`check_fence`): every turn write transaction makes an `UPDATE` of its lease row
//!   matching holder and generation. Being an update it takes the row lock on PostgreSQL and the
//!   write lock on SQLite for the rest of the transaction, so a takeover cannot land between the
//!   check and the commit. On PostgreSQL every fenced transaction locks rows in one order (lease,
//!   admission, session, the owner's counter last), so none can deadlock another. On SQLite (one
//!   writer, no row locks) the turn end checks last, by the statement that gives the lease up
//!   (`release_in`): nothing it wrote is visible before the commit, and a lost lease rolls it all
//!   back. A turn end refused because the new holder settled the turn meanwhile is reported as
//!   `Fenced`, as a check made first would have been.
//! - SQLite write transactions are `BEGIN IMMEDIATE` (a transaction that reads before it writes
//!   cannot fail to upgrade its lock under another process), in WAL mode with
//!   `synchronous=FULL` and a 30 s busy timeout.
//! - Times are epoch milliseconds (`BIGINT`) in every table, so lease expiry is a plain integer
//!   compare on both backends; the API renders RFC 3339.
mod admissions;
mod approvals;
mod audit;
mod canonical;
pub use audit::{AuditEntry, NewAudit};
mod chats;
pub use chats::Inbound;
mod compression;
pub use compression::{Compaction, CompactionDone, Replaced};
mod interrupts;
pub use interrupts::{InterruptRequest, InterruptStatus};
mod convert;
mod deletion;
mod files;
pub use deletion::Deleted;
pub use files::StoredFile;
mod leases;
pub use leases::{ClaimAs, HolderIsDead, LeaseClaim};
mod log;
mod memory;
pub use memory::{
    Author, ChangedBy, MemoryChange, MemoryEdit, MemoryEntry, MemoryTarget, MemoryWrite,
};
mod memory_pending;
pub use memory_pending::{PendingDecided, PendingMemory, StagedEdit};
mod outbox;
mod reviews;
pub use reviews::{Review, ReviewEnd, ReviewWrites};
mod skills;
pub use skills::{
    NewSkillProposal, ProposalDecided, SkillChange, SkillProposal, SkillUse, StoredSkill,
};
mod processes;
mod providers;
pub use providers::ConnectedProvider;
mod quotas;
mod responses;
pub use processes::{BackgroundProcess, NewBackgroundProcess, ProcessEnd};
pub use quotas::{day_of, next_day_at};
mod rotation;
pub use rotation::{Rotation, RotationDone};
mod schedules;
mod search;
pub use schedules::{ConfigSchedulesSynced, MissedPolicy, NewSchedule, Schedule, ScheduleSource};
mod sessions;
mod subagents;
pub use subagents::{NewSubagentTask, SubagentTask};
mod tail;
mod tokens;
pub use tokens::{hash_token, ApiToken, NewToken, TokenGrant, LAST_USED_GRAIN_MS};
mod reader;
mod sqlite;
mod tool_runs;
mod turn_end;
mod writer;
pub(crate) use writer::WriteTx;
pub(crate) use writer::Writer;

use crate::entity::{event, lease, session};
pub use crate::error::{Result, StoreError};
use crate::ids::{now_ms, Seq};
use crate::metrics::STORE;
use crate::model::{Event, Fence, NewEvent};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectOptions, ConnectionTrait, Database, DatabaseConnection,
    DbBackend, DbErr, EntityTrait, QueryFilter, Statement, TransactionTrait, UpdateMany,
};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The PostgreSQL advisory lock key `migrate` takes ("turnkey" in ASCII).
const MIGRATION_LOCK: i64 = 0x0074_7572_6e6b_6579;

/// Handle to the database; cheap to clone (the pools are shared).
#[derive(Clone, Debug)]
pub struct Store {
    /// The pool: reads and writes on PostgreSQL, migrations on both.
    db: DatabaseConnection,
    /// Reads: the pool, or on a SQLite file connections of the store's own (see [`reader`]).
    reads: reader::Reader,
    /// Writes. On SQLite, one connection of the store's own with group commit (see [`writer`]
    /// and [`sqlite`]): the database
    /// has one writer anyway, and queueing for it here is first come first served, where eight
    /// connections racing for the file's write lock sleep in SQLite's busy handler (1, 2, 5 …
    /// 100 ms backoff) while it is free. On PostgreSQL the same pool as `db`: its row locks
    /// let writers run side by side.
    writes: Writer,
    /// Whether another replica listens for notices (PostgreSQL; see [`crate::notify`]).
    peers: std::sync::Arc<crate::notify::Peers>,
}

impl Store {
    /// Connects to `url` (sqlite:// or postgres://). SQLite runs in WAL mode with a generous busy
    /// timeout so that several processes can share one file, and full fsync so that an admitted
    /// input survives even a power loss.
    pub async fn connect(url: &str) -> Result<Self> {
        let sqlite = url.starts_with("sqlite");
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let mut db = Database::connect(Self::options(url, if sqlite { 8 } else { 16 })).await?;
        db.set_metric_callback(count_statement);
        let peers = crate::notify::Peers::new();
        let writes = if sqlite && !in_memory {
            Writer::grouped(url)?
        } else {
            Writer::plain(db.clone(), peers.clone())
        };
        let reads = if sqlite && !in_memory {
            reader::Reader::Sqlite(reader::Readers::open(url)?)
        } else {
            reader::Reader::Pool(db.clone())
        };
        if db.get_database_backend() == DbBackend::Postgres {
            crate::notify::Peers::watch(&peers, db.get_postgres_connection_pool().clone());
        }
        Ok(Self {
            db,
            reads,
            writes,
            peers,
        })
    }

    fn options(url: &str, connections: u32) -> ConnectOptions {
        let mut opts = ConnectOptions::new(url.to_owned());
        // A pooled connection is pinged before use only once it has sat idle long enough to
        // have been dropped by a server or a proxy (PostgreSQL). A SQLite connection is a file
        // handle in this process that cannot go away; pinging it on every checkout cost one
        // more round trip to its worker thread for every read and every write transaction.
        if url.starts_with("sqlite") {
            opts.test_before_acquire(false);
            // A file handle never goes stale, so nothing is gained by reaping idle or old
            // connections, and without either sqlx starts no maintenance task: that task's
            // pass races a closing pool (sqlx 0.9 can then count usize::MAX idle connections
            // and spin through them without yielding, which hangs the runtime's shutdown).
            opts.idle_timeout(None).max_lifetime(None);
        } else {
            opts.test_before_acquire_if_idle_for(Duration::from_secs(5));
        }
        opts.sqlx_logging(false)
            .max_connections(connections)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .map_sqlx_sqlite_opts(|o| {
                use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
                o.journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(Duration::from_secs(30))
                    .foreign_keys(true)
            });
        opts
    }

    /// Applies the pending migrations. On PostgreSQL, replicas that start together against
    /// one database take turns: each migrates inside one transaction that first takes a
    /// transaction-scoped advisory lock, so the second finds nothing pending instead of racing
    /// the first to create the same tables (the migrations then commit all at once, or none).
    pub async fn migrate(&self) -> Result<()> {
        use migration::MigratorTrait;
        if self.backend() != DbBackend::Postgres {
            migration::Migrator::up(&self.db, None).await?;
            return Ok(());
        }
        let tx = self.db.begin().await?;
        tx.execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_advisory_xact_lock($1)",
            [MIGRATION_LOCK.into()],
        ))
        .await?;
        migration::Migrator::up(&tx, None).await?;
        tx.commit().await?;
        Ok(())
    }

    /// True when the store answers and every migration is applied (`/readyz`).
    pub async fn is_ready(&self) -> bool {
        use migration::MigratorTrait;
        match migration::Migrator::get_pending_migrations(&self.db).await {
            Ok(pending) => pending.is_empty(),
            Err(_) => false,
        }
    }

    pub fn backend(&self) -> DbBackend {
        self.db.get_database_backend()
    }

    pub(crate) fn peers(&self) -> &crate::notify::Peers {
        &self.peers
    }

    /// The connection pool (for a caller outside the store: a test, a migration).
    /// Starts listening for the notices of other writers (see [`crate::notify`]).
    pub async fn notices(&self) -> Result<crate::notify::Notices> {
        crate::notify::listen(self.connection(), self.peers()).await
    }

    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// Where the store's reads run.
    pub(crate) fn reader(&self) -> &reader::Reader {
        &self.reads
    }

    /// The connection for a write outside a transaction (one statement, committed alone).
    pub(crate) fn writer(&self) -> &Writer {
        &self.writes
    }

    /// Runs `fact` with this store on the SQLite writer's thread ([`writer::WriterThread`])
    /// while others wait for the writer, else here (and always here on PostgreSQL). For a
    /// turn's own write transactions: run where the writer is, the next queued one starts as
    /// soon as the last hands the writer on, where a task on a busy runtime thread leaves the
    /// writer idle until that thread polls it. Sent there, the fact runs to its end even if
    /// the caller stops waiting, like a commit.
    pub(crate) async fn on_writer<T, F, Fut>(&self, fact: F) -> Result<T>
    where
        F: FnOnce(Store) -> Fut,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        use tracing::Instrument;
        match self.writes.thread() {
            Some(thread) => thread
                .spawn(fact(self.clone()).instrument(tracing::Span::current()))
                .await
                .map_err(|e| StoreError::Unavailable(format!("the writer thread failed: {e}")))?,
            None => fact(self.clone()).await,
        }
    }

    /// A write transaction: on SQLite one of a commit group (see [`writer`]).
    pub(crate) async fn write_tx(&self) -> Result<WriteTx> {
        Ok(self.writes.begin().await?)
    }
}

/// sea-orm's per-statement callback: counts the statement and its time for `/metrics`.
fn count_statement(info: &sea_orm::metric::Info<'_>) {
    STORE.statements.fetch_add(1, Ordering::Relaxed);
    STORE.statement_time.observe_duration(info.elapsed);
    // `RUST_LOG=turnkey_storage::sql=trace` lists every statement with its time.
    tracing::trace!(
        target: "turnkey_storage::sql",
        micros = info.elapsed.as_micros() as u64,
        failed = info.failed,
        sql = %info.statement.sql,
    );
}

/// Fails with `Fenced` unless `fence` still holds its session's lease. It is an UPDATE, not a
/// SELECT, so that it locks the lease row (PostgreSQL) or holds the write lock (SQLite) until
/// the transaction ends: a takeover cannot slip in between this check and the write it guards.
pub(crate) async fn check_fence<C: ConnectionTrait>(db: &C, fence: &Fence) -> Result<()> {
    let res = lease::Entity::update_many()
        .col_expr(
            lease::Column::Generation,
            Expr::col(lease::Column::Generation),
        )
        .filter(lease::Column::SessionId.eq(fence.session_id.to_string()))
        .filter(lease::Column::HolderInstance.eq(fence.instance.to_string()))
        .filter(lease::Column::Generation.eq(fence.generation.0))
        .exec(db)
        .await?;
    if res.rows_affected == 1 {
        Ok(())
    } else {
        Err(StoreError::Fenced(fence.session_id.to_string()))
    }
}

/// Appends one event inside `db`'s transaction, taking the next per-session seq.
pub(crate) async fn insert_event(db: &WriteTx, ev: &NewEvent) -> Result<Event> {
    let mut out = insert_events(db, std::slice::from_ref(ev)).await?;
    out.pop()
        .ok_or_else(|| StoreError::Corrupt("an appended event was not returned".into()))
}

/// Rows per multi-row `INSERT` of events (7 parameters a row; far below every backend's limit).
const EVENT_ROWS_PER_INSERT: usize = 256;

/// More changes to a session row, added to an `UPDATE` of it (see
/// [`log::append_to_session`]).
pub(crate) type SessionBumpFn<'a> =
    dyn Fn(UpdateMany<session::Entity>) -> UpdateMany<session::Entity> + Sync + 'a;

/// Commits `tx` with `event` if `moved` rows were changed by it, else rolls it back: a change
/// made (and announced) once, whoever tries. Answers the committed event.
pub(crate) async fn announce_once(
    tx: WriteTx,
    moved: u64,
    event: NewEvent,
) -> Result<Option<Event>> {
    if moved == 0 {
        tx.rollback().await?;
        return Ok(None);
    }
    let mut evs = insert_events(&tx, &[event]).await?;
    tx.commit().await?;
    Ok(evs.pop())
}

/// Appends `evs` inside `db`'s transaction, each session's in their order, with two statements
/// per session however many there are: one `UPDATE … RETURNING` moves the session's seq on
/// by their count, one multi-row `INSERT` writes them. Answers the events in `evs`'s order.
pub(crate) async fn insert_events(db: &WriteTx, evs: &[NewEvent]) -> Result<Vec<Event>> {
    // Sessions in first-seen order, each with the indexes of its events.
    let mut sessions: Vec<(crate::ids::SessionId, Vec<usize>)> = Vec::new();
    for (i, ev) in evs.iter().enumerate() {
        match sessions.iter_mut().find(|(s, _)| *s == ev.session_id) {
            Some((_, idx)) => idx.push(i),
            None => sessions.push((ev.session_id, vec![i])),
        }
    }
    let created_at = now_ms();
    let mut out: Vec<Option<Event>> = vec![None; evs.len()];
    for (session_id, idx) in sessions {
        let sid = session_id.to_string();
        let n = i64::try_from(idx.len()).unwrap_or(i64::MAX);
        let bumped = session::Entity::update_many()
            .col_expr(
                session::Column::LastEventSeq,
                Expr::col(session::Column::LastEventSeq).add(n),
            )
            .filter(session::Column::Id.eq(sid.clone()))
            .exec_with_returning(db)
            .await?;
        let last = bumped
            .first()
            .map(|s| s.last_event_seq)
            .ok_or_else(|| StoreError::NotFound(format!("session {sid}")))?;
        let first = last - n + 1;
        let mine: Vec<&NewEvent> = idx.iter().map(|&i| &evs[i]).collect();
        let written = write_event_rows(db, session_id, first, &mine, created_at).await?;
        for (&i, ev) in idx.iter().zip(written) {
            out[i] = Some(ev);
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// Inserts `evs`, all of `session_id`, with the seqs from `first` on (moved on by the caller in
/// the same transaction), in multi-row inserts, and tells readers on other replicas.
pub(crate) async fn write_event_rows(
    db: &WriteTx,
    session_id: crate::ids::SessionId,
    first: i64,
    evs: &[&NewEvent],
    created_at: i64,
) -> Result<Vec<Event>> {
    let sid = session_id.to_string();
    let mut rows = Vec::with_capacity(evs.len());
    let mut out = Vec::with_capacity(evs.len());
    for (seq, ev) in (first..).zip(evs) {
        rows.push(event::ActiveModel {
            session_id: Set(sid.clone()),
            seq: Set(seq),
            turn_id: Set(ev.turn_id.map(|t| t.to_string())),
            admission_id: Set(ev.admission_id.map(|a| a.to_string())),
            kind: Set(ev.kind.as_str().to_owned()),
            payload: Set(ev.data.to_string()),
            created_at: Set(created_at),
        });
        out.push(committed(ev, seq, created_at));
    }
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let chunk: Vec<_> = rows.by_ref().take(EVENT_ROWS_PER_INSERT).collect();
        event::Entity::insert_many(chunk)
            .exec_without_returning(db)
            .await?;
    }
    // Readers of the session on other replicas (PostgreSQL): one notice per session,
    // delivered at commit.
    db.send_notice(crate::notify::NoticeKind::Events, session_id, None);
    Ok(out)
}

/// `ev` as committed at `seq`, written at `created_at`.
pub(crate) fn committed(ev: &NewEvent, seq: i64, created_at: i64) -> Event {
    Event {
        session_id: ev.session_id,
        seq: Seq(seq),
        kind: ev.kind,
        turn_id: ev.turn_id,
        admission_id: ev.admission_id,
        created_at: crate::ids::rfc3339(created_at),
        data: ev.data.clone(),
    }
}

/// How often a one-statement write runs when other commits keep overtaking its snapshot,
/// before the transaction it stands for takes over.
pub(crate) const ONE_STATEMENT_ATTEMPTS: usize = 3;

impl Store {
    /// PostgreSQL: runs `sql`, one of the one-statement writes (`admissions::one_statement`,
    /// `leases::one_statement`, `turn_end::one_statement`), outside a transaction, so that the
    /// server commits it alone. Answers its one row, or `None` when it called
    /// `turnkey_overtaken` and PostgreSQL undid it.
    pub(crate) async fn one_statement(
        &self,
        what: &str,
        sql: &str,
        values: Vec<sea_orm::Value>,
    ) -> Result<Option<sea_orm::QueryResult>> {
        STORE.write_transactions.fetch_add(1, Ordering::Relaxed);
        let ran = self
            .db
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                sql,
                values,
            ))
            .await;
        match ran {
            Err(e) if is_overtaken(&e) => Ok(None),
            other => other?
                .map(Some)
                .ok_or_else(|| StoreError::Corrupt(format!("{what}'s statement answered no row"))),
        }
    }
}

/// PostgreSQL: the statement called `turnkey_overtaken` (SQLSTATE `TK409`, migration
/// `m20261219_000001_overtaken`) and was undone: a one-statement write found that another
/// commit had overtaken its snapshot.
pub(crate) fn is_overtaken(err: &DbErr) -> bool {
    use sea_orm::{sqlx, RuntimeErr};
    match err {
        DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e)) => {
            matches!(&**e, sqlx::Error::Database(d) if d.code().as_deref() == Some("TK409"))
        }
        _ => false,
    }
}

/// True when `err` is a unique-constraint violation (a lost insert race).
pub(crate) fn is_unique_violation(err: &DbErr) -> bool {
    use sea_orm::{sqlx, RuntimeErr};
    // Through sqlx's own error kinds, which the SQLite writer's errors carry too
    // (see [`sqlite::to_db_err`]).
    match err {
        DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e)) => {
            matches!(&**e, sqlx::Error::Database(d)
                if d.kind() == sqlx::error::ErrorKind::UniqueViolation)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use crate::model::EventKind;
    use crate::status::AdmissionStatus;

    /// The one-statement writes spell the statuses they count and the event kinds as the rest
    /// of the store does, and set no status of their own: a move's statuses are bound from a
    /// `StatusMove` (`admissions::status`).
    #[test]
    fn one_statement_writes_name_statuses_and_kinds_as_the_store_does() {
        use AdmissionStatus::*;
        for (sql, names) in [
            (
                super::admissions::ADMIT,
                vec![
                    Queued.as_str(),
                    Started.as_str(),
                    EventKind::AdmissionQueued.as_str(),
                ],
            ),
            (
                super::leases::TAKE_AND_CLAIM,
                vec![
                    Queued.as_str(),
                    Started.as_str(),
                    EventKind::TurnStarted.as_str(),
                ],
            ),
            (
                super::turn_end::TURN_END,
                vec![Queued.as_str(), Started.as_str()],
            ),
        ] {
            for name in names.into_iter().chain([EventKind::Status.as_str()]) {
                assert!(sql.contains(&format!("'{name}'")), "{name}");
            }
            assert!(!sql.contains("SET status = '"), "a move's status is bound");
        }
    }

    /// What the one-statement writes bind for their moves: the status set, then the status
    /// the row must still have; a move the status machine does not know is refused.
    #[test]
    fn r2_4_one_statement_moves_are_the_machines() {
        use super::admissions::StatusMove;
        use AdmissionStatus::*;
        let claim = StatusMove::checked(Queued, Started).map(StatusMove::values);
        let ended = StatusMove::checked(Started, Terminal).map(StatusMove::values);
        assert_eq!(claim.ok(), Some(["started".into(), "queued".into()]));
        assert_eq!(ended.ok(), Some(["terminal".into(), "started".into()]));
        assert!(StatusMove::checked(Terminal, Started).is_err());
        assert!(StatusMove::checked(Unknown, Terminal).is_err());
    }
}
