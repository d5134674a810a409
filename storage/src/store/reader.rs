//! The store's reads. On a SQLite file they run on connections of the store's own
//! ([`super::sqlite`]), in the task that asks, like the writer's statements: a read in WAL mode
//! waits for no lock, and SQLite's work for one of a turn's reads is far less than a round trip
//! to a pooled connection's worker thread. A connection is taken from the idle ones for the
//! length of one statement and put back; one is opened when none is idle, so there are never
//! more than the threads that read at once. On PostgreSQL (and an in-memory SQLite, which only
//! the pool's connections can share) reads go to the pool.
use super::sqlite;
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DbBackend, DbErr, ExecResult, QueryResult, Statement,
};
use std::sync::{Arc, Mutex, PoisonError};

/// Where reads run.
#[derive(Clone, Debug)]
pub(crate) enum Reader {
    Pool(DatabaseConnection),
    Sqlite(Arc<Readers>),
}

/// Idle read connections to one SQLite file.
pub(crate) struct Readers {
    url: String,
    idle: Mutex<Vec<rusqlite::Connection>>,
}

impl std::fmt::Debug for Readers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readers").finish_non_exhaustive()
    }
}

/// At most this many idle connections are kept; more are closed when put back.
const KEEP_IDLE: usize = 16;

impl Readers {
    /// Reads of the SQLite file at `url`, with one connection opened now (so that a bad path
    /// fails at start, not at the first read).
    pub(crate) fn open(url: &str) -> Result<Arc<Self>, DbErr> {
        let first = sqlite::open(url)?;
        Ok(Arc::new(Self {
            url: url.to_owned(),
            idle: Mutex::new(vec![first]),
        }))
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> Result<T, DbErr>,
    ) -> Result<T, DbErr> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match idle {
            Some(c) => c,
            None => sqlite::open(&self.url)?,
        };
        let out = f(&conn);
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < KEEP_IDLE {
            idle.push(conn);
        }
        out
    }
}

impl Reader {
    fn refuse_write() -> DbErr {
        DbErr::Custom("a write was sent to the store's read connections".into())
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for Reader {
    fn get_database_backend(&self) -> DbBackend {
        match self {
            Reader::Pool(c) => c.get_database_backend(),
            Reader::Sqlite(_) => DbBackend::Sqlite,
        }
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        match self {
            Reader::Pool(c) => c.execute_raw(stmt).await,
            Reader::Sqlite(_) => Err(Self::refuse_write()),
        }
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        match self {
            Reader::Pool(c) => c.execute_unprepared(sql).await,
            Reader::Sqlite(_) => Err(Self::refuse_write()),
        }
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        match self {
            Reader::Pool(c) => c.query_one_raw(stmt).await,
            Reader::Sqlite(r) => r.with(|c| Ok(sqlite::query(c, &stmt, true)?.pop())),
        }
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        match self {
            Reader::Pool(c) => c.query_all_raw(stmt).await,
            Reader::Sqlite(r) => r.with(|c| sqlite::query(c, &stmt, false)),
        }
    }

    fn support_returning(&self) -> bool {
        match self {
            Reader::Pool(c) => c.support_returning(),
            Reader::Sqlite(_) => true,
        }
    }
}
