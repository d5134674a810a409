//! The store's write transactions, and group commit on SQLite.
//!
//! SQLite has one writer and each commit is one fsync of the WAL. The store gives it one
//! connection and queues writers for it first come, first served (a tokio mutex). A writer that
//! commits while others queue does not commit alone: it releases the connection with its
//! transaction still open, and the writers queued behind it run inside that same transaction,
//! each in a savepoint of its own. The group commits once, with one fsync, when its last
//! member finds no one queued (or the group is [`MAX_GROUP`] large); for a member that
//! committed earlier a task takes the connection once more and commits the group if no one has
//! yet. `BEGIN`, `SAVEPOINT`, commits and rollbacks run in tasks of their own, so a caller that
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
use crate::metrics::STORE;
use crate::notify::{Notice, Peers, Pending};
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, ExecResult,
    QueryResult, SqliteTransactionMode, Statement, TransactionOptions, TransactionTrait,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{oneshot, Mutex, OwnedMutexGuard};

/// At most this many write transactions share one commit, so a steady stream of writers
/// cannot hold a group open (and its first members waiting) for long.
pub const MAX_GROUP: usize = 256;

type Outcome = std::result::Result<(), String>;

/// The open group: its transaction and the members that committed into it.
struct Group {
    /// Bumped each time a group commits (or is abandoned); tells a member whether the group
    /// it joined is still open.
    id: u64,
    outer: Option<DatabaseTransaction>,
    members: Vec<oneshot::Sender<Outcome>>,
}

/// How write transactions begin on this store.
#[derive(Clone, Debug)]
pub(crate) enum Writer {
    /// PostgreSQL: a plain transaction per writer on the shared pool.
    Plain(DatabaseConnection, Arc<Peers>),
    /// SQLite: one connection, group commit.
    Grouped(Arc<Shared>),
}

pub(crate) struct Shared {
    conn: DatabaseConnection,
    group: Arc<Mutex<Group>>,
    /// Writers waiting for the connection.
    queued: AtomicUsize,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .finish_non_exhaustive()
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

impl Writer {
    pub(crate) fn plain(conn: DatabaseConnection, peers: Arc<Peers>) -> Self {
        Writer::Plain(conn, peers)
    }

    pub(crate) fn grouped(conn: DatabaseConnection) -> Self {
        Writer::Grouped(Arc::new(Shared {
            conn,
            group: Arc::new(Mutex::new(Group {
                id: 0,
                outer: None,
                members: Vec::new(),
            })),
            queued: AtomicUsize::new(0),
        }))
    }

    /// The connection for a write of one statement outside a transaction.
    pub(crate) fn connection(&self) -> &DatabaseConnection {
        match self {
            Writer::Plain(c, _) => c,
            Writer::Grouped(s) => &s.conn,
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
                let shared = shared.clone();
                // `BEGIN` / `SAVEPOINT` run to the end even if the caller stops waiting: cut
                // off half way they would leave the connection one level deeper than any
                // transaction object knows, and the group's COMMIT would only release a
                // savepoint. If the caller is gone, the member is dropped, which rolls it back.
                settled(tokio::spawn(Member::begin(shared, guard))).await??
            }
        };
        STORE.write_wait.observe_duration(asked.elapsed());
        STORE.write_transactions.fetch_add(1, Ordering::Relaxed);
        Ok(tx)
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

pub(crate) struct Member {
    shared: Arc<Shared>,
    /// The connection, held from `begin` to commit or rollback.
    guard: Option<OwnedMutexGuard<Group>>,
    /// `None` for the group's first member, which runs in the group's transaction itself.
    savepoint: Option<DatabaseTransaction>,
}

impl WriteTx {
    fn tx(&self) -> &DatabaseTransaction {
        let tx = match self {
            WriteTx::Plain(p) => p.tx.as_ref(),
            WriteTx::Grouped(m) => m
                .savepoint
                .as_ref()
                .or_else(|| m.guard.as_ref().and_then(|g| g.outer.as_ref())),
        };
        // Commit and rollback take `self`; no statement can run on a finished transaction.
        #[allow(clippy::expect_used)]
        tx.expect("a write transaction is open until it is committed or rolled back")
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

    /// Rolls back (in a task of its own, like `commit`).
    pub(crate) async fn rollback(self) -> Result<(), DbErr> {
        settled(tokio::spawn(self.rollback_to_end())).await?
    }

    async fn rollback_to_end(mut self) -> Result<(), DbErr> {
        match &mut self {
            WriteTx::Plain(p) => match p.tx.take() {
                Some(tx) => tx.rollback().await,
                None => Ok(()),
            },
            WriteTx::Grouped(m) => {
                let Some(mut guard) = m.guard.take() else {
                    return Ok(());
                };
                match m.savepoint.take() {
                    Some(sp) => sp.rollback().await,
                    None => {
                        // The first member: no one committed into the group yet.
                        guard.id += 1;
                        match guard.outer.take() {
                            Some(outer) => outer.rollback().await,
                            None => Ok(()),
                        }
                    }
                }
            }
        }
    }
}

/// The outcome of a task that runs a step of a write transaction to its end.
async fn settled<T>(task: tokio::task::JoinHandle<T>) -> Result<T, DbErr> {
    task.await
        .map_err(|e| DbErr::Custom(format!("write transaction task failed: {e}")))
}

impl Member {
    async fn begin(
        shared: Arc<Shared>,
        mut guard: OwnedMutexGuard<Group>,
    ) -> Result<WriteTx, DbErr> {
        let savepoint = match &guard.outer {
            Some(outer) => Some(outer.begin().await?),
            None => {
                guard.outer = Some(shared.conn.begin_with_options(immediate()).await?);
                None
            }
        };
        Ok(WriteTx::Grouped(Member {
            shared,
            guard: Some(guard),
            savepoint,
        }))
    }

    async fn commit(&mut self) -> Result<(), DbErr> {
        let Some(mut guard) = self.guard.take() else {
            return Ok(());
        };
        if let Some(sp) = self.savepoint.take() {
            if let Err(e) = sp.commit().await {
                // The savepoint could not be released: the group's transaction is in doubt.
                abandon(&mut guard, &e.to_string());
                return Err(e);
            }
        }
        let (tx, rx) = oneshot::channel();
        guard.members.push(tx);
        let joined = guard.id;
        if self.shared.queued.load(Ordering::Relaxed) == 0 || guard.members.len() >= MAX_GROUP {
            finish(&mut guard).await;
        } else {
            // Those queued now run inside the group; then take the connection once more and
            // commit the group unless one of them already did.
            drop(guard);
            let mut guard = self.shared.group.clone().lock_owned().await;
            if guard.id == joined {
                finish(&mut guard).await;
            }
        }
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(msg)) => Err(DbErr::Custom(format!("group commit failed: {msg}"))),
            Err(_) => Err(DbErr::Custom("group commit abandoned".into())),
        }
    }
}

/// Commits the open group and tells every member how it went.
async fn finish(g: &mut Group) {
    let outcome = match g.outer.take() {
        Some(outer) => outer.commit().await.map_err(|e| e.to_string()),
        None => Err("the group's transaction is gone".into()),
    };
    STORE.commit_group.observe(g.members.len() as f64);
    g.id += 1;
    for m in g.members.drain(..) {
        // A member that stopped waiting (its caller was cancelled) needs no answer.
        let _ = m.send(outcome.clone());
    }
}

/// Rolls the open group back and fails its members.
fn abandon(g: &mut Group, why: &str) {
    g.id += 1;
    // Dropping the transaction rolls it back before the connection's next statement.
    g.outer = None;
    for m in g.members.drain(..) {
        let _ = m.send(Err(why.to_owned()));
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        match self.savepoint.take() {
            // Dropping a savepoint rolls it back before the connection's next statement.
            Some(sp) => drop(sp),
            None => {
                guard.id += 1;
                guard.outer = None;
            }
        }
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for WriteTx {
    fn get_database_backend(&self) -> DbBackend {
        self.tx().get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        self.tx().execute_raw(stmt).await
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.tx().execute_unprepared(sql).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        self.tx().query_one_raw(stmt).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        self.tx().query_all_raw(stmt).await
    }

    fn support_returning(&self) -> bool {
        self.tx().support_returning()
    }
}
