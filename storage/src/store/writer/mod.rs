//! The store's write transactions, and group commit on SQLite.
//!
//! SQLite has one writer and each commit is one fsync of the WAL. The store gives it one
//! connection of its own ([`super::sqlite`]) and queues writers for it first come, first served
//! (a tokio mutex). The writer that holds it runs its statements in its own task, with no hop
//! to another thread; only a `COMMIT` (the fsync) and a `BEGIN` that finds another process
//! holding the file's write lock run on a blocking thread. A writer that
//! commits while others queue does not commit alone: it releases the connection with its
//! transaction still open, and the writers queued behind it run inside that same transaction,
//! each in a savepoint of its own. The group commits once, with one fsync, when its last
//! member finds no one queued (or the group is [`MAX_GROUP`] large); for a member that
//! committed earlier a task takes the connection once more and commits the group if no one has
//! yet. A `BEGIN` that waits and every commit run in tasks of their own, so a caller that
//! stops waiting cannot cut one half way nor strand its group (and SQLite's write lock, which
//! other processes wait for) open. Every
//! member's `commit` resolves only after the group's commit is durable, and with its result: a
//! failed group commit fails every member, as a failed commit always did. A member that rolls
//! back (or is dropped) undoes only its own savepoint; the group's first member runs without
//! a savepoint and, having no one before it, rolls back the transaction itself.
//!
//! PostgreSQL writers run side by side on their own connections (row locks, not one writer),
//! and the server already shares one WAL flush among commits that arrive together, so there
//! each write transaction is plain.
//! A plain transaction also carries the notices its writes announce ([`crate::notify`]):
//! each distinct one once, sent in one statement just before its `COMMIT`, or not at all while
//! no other replica listens.
use super::sqlite;
use crate::ids::{SessionId, TurnId};
use crate::metrics::STORE;
use crate::notify::{Notice, NoticeKind, Peers, Pending};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, ExecResult,
    QueryResult, SqliteTransactionMode, Statement, TransactionOptions, TransactionTrait,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{oneshot, Mutex};

mod group;
pub(crate) use group::Member;
use group::{settled, Group};

/// At most this many write transactions share one commit, so a steady stream of writers
/// cannot hold a group open (and its first members waiting) for long.
pub const MAX_GROUP: usize = 256;

/// How write transactions begin on this store.
#[derive(Clone, Debug)]
pub(crate) enum Writer {
    /// PostgreSQL (and an in-memory SQLite): a plain transaction per writer on the shared pool.
    Plain(DatabaseConnection, Arc<Peers>),
    /// SQLite: one connection of the store's own, group commit.
    Grouped(Arc<Shared>),
}

pub(crate) struct Shared {
    /// The writer's connection. Only the holder of `group` uses it; the mutex, never contended,
    /// lets the blocking task that commits borrow it.
    conn: Arc<std::sync::Mutex<rusqlite::Connection>>,
    group: Arc<Mutex<Group>>,
    /// Writers waiting for the connection.
    queued: AtomicUsize,
    /// Wakes the WAL checkpointer after a commit ([`sqlite::checkpointer`]).
    checkpoint: std::sync::mpsc::SyncSender<()>,
    /// Where a turn's write transactions run.
    thread: WriterThread,
}

/// A thread with a runtime of its own for the store's hot write transactions (a turn's
/// admission, lease and claim, and turn end; see `Store::on_writer`). It runs nothing else, so
/// when one of them hands the writer on, the next is polled at once. Its other work, the
/// commit's fsync, runs on its runtime's blocking threads. It ends when the store is dropped.
pub(crate) struct WriterThread {
    handle: tokio::runtime::Handle,
    /// Dropped with the store: the thread's runtime then stops.
    _stop: oneshot::Sender<()>,
}

impl WriterThread {
    fn start() -> Result<Self, DbErr> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("sqlite-writer")
            .build()
            .map_err(|e| DbErr::Custom(format!("could not start the writer's runtime: {e}")))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || {
                // Either the store was dropped (Err) or, never, told to stop (Ok): stop.
                let _ = runtime.block_on(stopped);
            })
            .map_err(|e| DbErr::Custom(format!("could not start the writer's thread: {e}")))?;
        Ok(Self {
            handle,
            _stop: stop,
        })
    }

    pub(crate) fn spawn<F>(&self, fact: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(fact)
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The connection behind `conn`'s lock. A panic while it was held (none is expected: the calls
/// under it answer errors) leaves the connection as usable as any other error would.
fn conn_of(
    conn: &std::sync::Mutex<rusqlite::Connection>,
) -> std::sync::MutexGuard<'_, rusqlite::Connection> {
    conn.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn run<T>(&self, f: impl FnOnce(&rusqlite::Connection) -> T) -> T {
        f(&conn_of(&self.conn))
    }

    /// Rolls back whatever transaction the connection is in, after a step failed part way.
    fn roll_back_all(&self, why: &str) {
        self.run(|c| {
            if !c.is_autocommit() {
                if let Err(e) = sqlite::control(c, "ROLLBACK") {
                    tracing::error!(error = %e, why, "the SQLite writer could not roll back");
                }
            }
        });
    }
}

/// Decrements `queued` however the wait ends (a cancelled caller included).
struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn immediate() -> TransactionOptions {
    // SQLite: `BEGIN IMMEDIATE` takes the write lock up front; a deferred transaction that
    // reads before it writes can fail to upgrade under a writer in another process.
    TransactionOptions {
        isolation_level: None,
        access_mode: None,
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
    }
}

/// SQLITE_BUSY: another connection holds the file's write lock.
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DatabaseBusy)
}

impl Writer {
    pub(crate) fn plain(conn: DatabaseConnection, peers: Arc<Peers>) -> Self {
        Writer::Plain(conn, peers)
    }

    /// Group commit on the SQLite database at `url`, through a connection of its own.
    pub(crate) fn grouped(url: &str) -> Result<Self, DbErr> {
        let conn = sqlite::open(url)?;
        // Checkpoints run on a thread of their own, not in this connection's commits.
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(sqlite::to_db_err)?;
        Ok(Writer::Grouped(Arc::new(Shared {
            conn: Arc::new(std::sync::Mutex::new(conn)),
            checkpoint: sqlite::checkpointer(url)?,
            thread: WriterThread::start()?,
            group: Arc::new(Mutex::new(Group {
                id: 0,
                open: false,
                handed_at: None,
                members: Vec::new(),
            })),
            queued: AtomicUsize::new(0),
        })))
    }

    /// The thread a turn's write transaction should run on: the writer's own (SQLite) while
    /// others wait for the writer, where the hand-off to the next is what bounds throughput.
    /// With no one waiting it runs where it is asked for: the two hops to that thread and back
    /// would only add to its latency (one session: 1.7 ms a turn more, turn_load).
    pub(crate) fn thread(&self) -> Option<&WriterThread> {
        match self {
            Writer::Plain(..) => None,
            Writer::Grouped(s) => (s.queued.load(Ordering::Relaxed) > 0).then_some(&s.thread),
        }
    }

    pub(crate) async fn begin(&self) -> Result<WriteTx, DbErr> {
        let asked = Instant::now();
        let tx = match self {
            Writer::Plain(conn, peers) => WriteTx::Plain(Plain {
                tx: Some(conn.begin_with_options(immediate()).await?),
                notices: Pending::default(),
                peers: peers.clone(),
            }),
            Writer::Grouped(shared) => {
                let guard = {
                    shared.queued.fetch_add(1, Ordering::Relaxed);
                    let _queued = Queued(&shared.queued);
                    shared.group.clone().lock_owned().await
                };
                Member::begin(shared.clone(), guard).await?
            }
        };
        STORE.write_wait.observe_duration(asked.elapsed());
        STORE.write_transactions.fetch_add(1, Ordering::Relaxed);
        Ok(tx)
    }
}

/// A write of one statement outside a transaction, committed alone (on SQLite as a member of
/// a commit group).
#[async_trait::async_trait]
impl ConnectionTrait for Writer {
    fn get_database_backend(&self) -> DbBackend {
        match self {
            Writer::Plain(c, _) => c.get_database_backend(),
            Writer::Grouped(_) => DbBackend::Sqlite,
        }
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        match self {
            Writer::Plain(c, _) => c.execute_raw(stmt).await,
            Writer::Grouped(_) => {
                let tx = self.begin().await?;
                let done = tx.execute_raw(stmt).await?;
                tx.commit().await?;
                Ok(done)
            }
        }
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        match self {
            Writer::Plain(c, _) => c.execute_unprepared(sql).await,
            Writer::Grouped(_) => {
                let tx = self.begin().await?;
                let done = tx.execute_unprepared(sql).await?;
                tx.commit().await?;
                Ok(done)
            }
        }
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        match self {
            Writer::Plain(c, _) => c.query_one_raw(stmt).await,
            Writer::Grouped(_) => {
                let tx = self.begin().await?;
                let row = tx.query_one_raw(stmt).await?;
                tx.commit().await?;
                Ok(row)
            }
        }
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        match self {
            Writer::Plain(c, _) => c.query_all_raw(stmt).await,
            Writer::Grouped(_) => {
                let tx = self.begin().await?;
                let rows = tx.query_all_raw(stmt).await?;
                tx.commit().await?;
                Ok(rows)
            }
        }
    }

    fn support_returning(&self) -> bool {
        match self {
            Writer::Plain(c, _) => c.support_returning(),
            Writer::Grouped(_) => true,
        }
    }
}

/// One write transaction: commit it, roll it back, or drop it (which rolls it back).
pub(crate) enum WriteTx {
    Plain(Plain),
    Grouped(Member),
}

pub(crate) struct Plain {
    /// `None` only while committing or rolling back.
    tx: Option<DatabaseTransaction>,
    /// Notices to send just before the commit (PostgreSQL; see [`crate::notify`]).
    notices: Pending,
    peers: Arc<Peers>,
}

impl WriteTx {
    fn plain(&self) -> Option<&DatabaseTransaction> {
        match self {
            WriteTx::Plain(p) => p.tx.as_ref(),
            WriteTx::Grouped(_) => None,
        }
    }

    /// Runs `f` on the group's connection (SQLite).
    fn on_group_connection<T>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> Result<T, DbErr>,
    ) -> Result<T, DbErr> {
        match self {
            WriteTx::Grouped(m) if m.guard.is_some() => m.shared.run(f),
            _ => Err(DbErr::Custom(
                "a write transaction is open until it is committed or rolled back".into(),
            )),
        }
    }

    /// Announces `kind` for `session` with this transaction's commit (PostgreSQL delivers it
    /// at commit, and not at all on rollback). A no-op on SQLite, whose readers poll
    /// `data_version` instead.
    pub(crate) fn send_notice(&self, kind: NoticeKind, session: SessionId, turn: Option<TurnId>) {
        if self.get_database_backend() != DbBackend::Postgres {
            return;
        }
        self.announce(Notice {
            kind,
            origin: crate::notify::origin(),
            session,
            turn,
        });
    }

    /// Announces `notice` with this transaction's commit (PostgreSQL), once however often it
    /// is announced. SQLite has no notices: its readers poll.
    pub(crate) fn announce(&self, notice: Notice) {
        if let WriteTx::Plain(p) = self {
            p.notices.push(notice);
        }
    }

    /// Commits; with group commit, resolves once the group's commit is durable. Runs to its
    /// end in a task of its own: a caller that stops waiting cannot cut a `RELEASE` or a
    /// `COMMIT` half way, nor strand a group (and SQLite's write lock) open.
    pub(crate) async fn commit(self) -> Result<(), DbErr> {
        settled(tokio::spawn(self.commit_to_end())).await?
    }

    async fn commit_to_end(mut self) -> Result<(), DbErr> {
        match &mut self {
            WriteTx::Plain(p) => match p.tx.take() {
                Some(tx) => {
                    // On failure the transaction is dropped, which rolls it back: no notice,
                    // no write.
                    p.notices.flush(&tx, &p.peers).await?;
                    tx.commit().await
                }
                None => Ok(()),
            },
            WriteTx::Grouped(m) => m.commit().await,
        }
    }

    /// Rolls back. On SQLite it runs in place: no fsync, nothing to wait for.
    pub(crate) async fn rollback(mut self) -> Result<(), DbErr> {
        match &mut self {
            WriteTx::Plain(p) => match p.tx.take() {
                Some(tx) => settled(tokio::spawn(tx.rollback())).await?,
                None => Ok(()),
            },
            WriteTx::Grouped(m) => m.roll_back(),
        }
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for WriteTx {
    fn get_database_backend(&self) -> DbBackend {
        match self.plain() {
            Some(tx) => tx.get_database_backend(),
            None => DbBackend::Sqlite,
        }
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        match self.plain() {
            Some(tx) => tx.execute_raw(stmt).await,
            None => self.on_group_connection(|c| sqlite::execute(c, &stmt)),
        }
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        match self.plain() {
            Some(tx) => tx.execute_unprepared(sql).await,
            None => self.on_group_connection(|c| {
                let changes = c.total_changes();
                sqlite::execute_unprepared(c, sql)?;
                sqlite::exec_result(c, c.total_changes().saturating_sub(changes))
            }),
        }
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        match self.plain() {
            Some(tx) => tx.query_one_raw(stmt).await,
            None => self.on_group_connection(|c| Ok(sqlite::query(c, &stmt, true)?.pop())),
        }
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        match self.plain() {
            Some(tx) => tx.query_all_raw(stmt).await,
            None => self.on_group_connection(|c| sqlite::query(c, &stmt, false)),
        }
    }

    fn support_returning(&self) -> bool {
        match self.plain() {
            Some(tx) => tx.support_returning(),
            None => true,
        }
    }
}
