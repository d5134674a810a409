//! The `Store`: connection set-up and the transaction and fencing primitives every durable
//! write goes through. Each submodule owns one family of facts.
mod admissions;
mod approvals;
mod chats;
pub use chats::Inbound;
mod compression;
pub use compression::{Compaction, CompactionDone, Replaced};
mod interrupts;
pub use interrupts::{InterruptRequest, InterruptStatus};
mod convert;
mod leases;
pub use leases::LeaseClaim;
mod log;
mod outbox;
mod rotation;
pub use rotation::{Rotation, RotationDone};
mod schedules;
pub use schedules::{ConfigSchedulesSynced, MissedPolicy, NewSchedule, Schedule, ScheduleSource};
mod sessions;
mod tail;
mod tokens;
mod tool_runs;
mod turn_end;

use crate::entity::{event, lease, session};
use crate::ids::{now_ms, Seq};
use crate::model::{Event, Fence, NewEvent};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectOptions, ConnectionTrait, Database, DatabaseConnection,
    DatabaseTransaction, DbBackend, DbErr, EntityTrait, QueryFilter, SqliteTransactionMode,
    TransactionOptions, TransactionTrait,
};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] DbErr),
    /// The write belonged to a lease generation that no longer holds the session.
    #[error("fenced out: the turn lease for session {0} is held by another generation")]
    Fenced(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("request id {request_id} was already used with a different payload")]
    IdempotencyConflict { request_id: String },
    #[error("admission {0} is not in the state this change needs")]
    WrongState(String),
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Handle to the database; cheap to clone (the pool is shared).
#[derive(Clone, Debug)]
pub struct Store {
    db: DatabaseConnection,
}

impl Store {
    /// Connects to `url` (sqlite:// or postgres://). SQLite runs in WAL mode with a generous busy
    /// timeout so that several processes can share one file, and full fsync so that an admitted
    /// input survives even a power loss.
    pub async fn connect(url: &str) -> Result<Self> {
        let mut opts = ConnectOptions::new(url.to_owned());
        opts.sqlx_logging(false)
            .max_connections(if url.starts_with("sqlite") { 8 } else { 16 })
            .acquire_timeout(Duration::from_secs(30))
            .map_sqlx_sqlite_opts(|o| {
                use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
                o.journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(Duration::from_secs(30))
                    .foreign_keys(true)
            });
        let db = Database::connect(opts).await?;
        Ok(Self { db })
    }

    pub async fn migrate(&self) -> Result<()> {
        use migration::MigratorTrait;
        migration::Migrator::up(&self.db, None).await?;
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

    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// A write transaction. On SQLite it is `BEGIN IMMEDIATE`, taking the write lock up front:
    /// a deferred transaction that reads before it writes can fail to upgrade under a
    /// concurrent writer, which busy_timeout cannot cure.
    pub(crate) async fn write_tx(&self) -> Result<DatabaseTransaction> {
        Ok(self
            .db
            .begin_with_options(TransactionOptions {
                isolation_level: None,
                access_mode: None,
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            })
            .await?)
    }
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
pub(crate) async fn insert_event<C: ConnectionTrait>(db: &C, ev: &NewEvent) -> Result<Event> {
    let sid = ev.session_id.to_string();
    let bumped = session::Entity::update_many()
        .col_expr(
            session::Column::LastEventSeq,
            Expr::col(session::Column::LastEventSeq).add(1),
        )
        .filter(session::Column::Id.eq(sid.clone()))
        .exec_with_returning(db)
        .await?;
    let seq = bumped
        .first()
        .map(|s| s.last_event_seq)
        .ok_or_else(|| StoreError::NotFound(format!("session {sid}")))?;
    let created_at = now_ms();
    let payload = ev.data.to_string();
    event::Entity::insert(event::ActiveModel {
        session_id: Set(sid),
        seq: Set(seq),
        turn_id: Set(ev.turn_id.map(|t| t.to_string())),
        admission_id: Set(ev.admission_id.map(|a| a.to_string())),
        kind: Set(ev.kind.as_str().to_owned()),
        payload: Set(payload),
        created_at: Set(created_at),
    })
    .exec_without_returning(db)
    .await?;
    crate::notify::send(db, crate::notify::NoticeKind::Events, ev.session_id, None).await?;
    Ok(Event {
        session_id: ev.session_id,
        seq: Seq(seq),
        kind: ev.kind,
        turn_id: ev.turn_id,
        admission_id: ev.admission_id,
        created_at: crate::ids::rfc3339(created_at),
        data: ev.data.clone(),
    })
}

/// True when `err` is a unique-constraint violation (a lost insert race).
pub(crate) fn is_unique_violation(err: &DbErr) -> bool {
    matches!(
        err.sql_err(),
        Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
    )
}
