//! SQLite's group commit: a member of the open group begins (the group's first runs in the
//! transaction itself, each later one in a savepoint), commits into the group or rolls back
//! its own part, and the group commits once, with one fsync, when its last member finds no one
//! queued (see the parent module).
use super::{conn_of, is_busy, sqlite, Shared, WriteTx, MAX_GROUP, STORE};
use sea_orm::DbErr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, OwnedMutexGuard};

pub(super) type Outcome = std::result::Result<(), String>;

/// The open group: whether its transaction is open, and the members that committed into it.
pub(super) struct Group {
    /// Bumped each time a group commits (or is abandoned); tells a member whether the group
    /// it joined is still open.
    pub(super) id: u64,
    /// `BEGIN` ran and neither `COMMIT` nor `ROLLBACK` yet.
    pub(super) open: bool,
    /// When the writer was last handed on to a queued writer (for `write_handoff`).
    pub(super) handed_at: Option<Instant>,
    pub(super) members: Vec<oneshot::Sender<Outcome>>,
}

pub(crate) struct Member {
    pub(super) shared: Arc<Shared>,
    /// The connection, held from `begin` to commit or rollback.
    pub(super) guard: Option<OwnedMutexGuard<Group>>,
    /// False for the group's first member, which runs in the group's transaction itself.
    pub(super) savepoint: bool,
    /// When it took the writer.
    pub(super) held_since: Instant,
}

/// The savepoint each member after the group's first runs in (one at a time, never nested).
const SAVEPOINT: &str = "SAVEPOINT member";
const RELEASE: &str = "RELEASE member";
const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO member";

/// The outcome of a task that runs a step of a write transaction to its end.
pub(super) async fn settled<T>(task: tokio::task::JoinHandle<T>) -> Result<T, DbErr> {
    task.await
        .map_err(|e| DbErr::Custom(format!("write transaction task failed: {e}")))
}

impl Member {
    pub(super) async fn begin(
        shared: Arc<Shared>,
        mut guard: OwnedMutexGuard<Group>,
    ) -> Result<WriteTx, DbErr> {
        if let Some(at) = guard.handed_at.take() {
            STORE.write_handoff.observe_duration(at.elapsed());
        }
        if guard.open {
            shared.run(|c| sqlite::control(c, SAVEPOINT))?;
            return Ok(WriteTx::Grouped(Member {
                shared,
                guard: Some(guard),
                savepoint: true,
                held_since: Instant::now(),
            }));
        }
        let held_since = Instant::now();
        // A step that failed half way can have left a transaction no group knows of.
        shared.roll_back_all("a transaction was open outside any group");
        // Most often no other process holds the write lock: take it here, without waiting.
        let now = shared.run(|c| {
            let started = Instant::now();
            let set = |d| c.busy_timeout(d).map_err(sqlite::to_db_err);
            set(Duration::ZERO)?;
            let began = c
                .prepare_cached("BEGIN IMMEDIATE")
                .and_then(|mut s| s.raw_execute());
            set(sqlite::BUSY_TIMEOUT)?;
            sqlite::counted("BEGIN IMMEDIATE", started, began.is_err());
            match began {
                Ok(_) => Ok(true),
                Err(e) if is_busy(&e) => Ok(false),
                Err(e) => Err(sqlite::to_db_err(e)),
            }
        })?;
        if !now {
            // Another process writes: wait for it (up to the busy timeout) on a blocking
            // thread, in a task that runs to its end, so that a caller that stops waiting
            // cannot leave the connection inside a transaction no member knows of (the member
            // the task answers is dropped, which rolls it back).
            let conn = shared.conn.clone();
            settled(tokio::task::spawn_blocking(move || {
                sqlite::control(&conn_of(&conn), "BEGIN IMMEDIATE")
            }))
            .await??;
        }
        guard.open = true;
        Ok(WriteTx::Grouped(Member {
            shared,
            guard: Some(guard),
            savepoint: false,
            held_since,
        }))
    }

    pub(super) async fn commit(&mut self) -> Result<(), DbErr> {
        let Some(mut guard) = self.guard.take() else {
            return Ok(());
        };
        if std::mem::take(&mut self.savepoint) {
            if let Err(e) = self.shared.run(|c| sqlite::control(c, RELEASE)) {
                // The savepoint could not be released: the group's transaction is in doubt.
                abandon(&self.shared, &mut guard, &e.to_string());
                return Err(e);
            }
        }
        let (tx, rx) = oneshot::channel();
        guard.members.push(tx);
        let joined = guard.id;
        if self.shared.queued.load(Ordering::Relaxed) == 0 || guard.members.len() >= MAX_GROUP {
            finish(&self.shared, &mut guard).await;
            hand_on(&self.shared, guard);
            STORE.write_hold.observe_duration(self.held_since.elapsed());
        } else {
            hand_on(&self.shared, guard);
            STORE.write_hold.observe_duration(self.held_since.elapsed());
            // Those queued now run inside the group; then take the connection once more and
            // commit the group unless one of them already did.
            let mut guard = self.shared.group.clone().lock_owned().await;
            if guard.id == joined {
                finish(&self.shared, &mut guard).await;
            }
        }
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(msg)) => Err(DbErr::Custom(format!("group commit failed: {msg}"))),
            Err(_) => Err(DbErr::Custom("group commit abandoned".into())),
        }
    }

    /// Undoes this member's writes: its savepoint, or (the group's first member, before anyone
    /// committed into the group) the group's transaction.
    pub(super) fn roll_back(&mut self) -> Result<(), DbErr> {
        let Some(mut guard) = self.guard.take() else {
            return Ok(());
        };
        STORE.write_hold.observe_duration(self.held_since.elapsed());
        if std::mem::take(&mut self.savepoint) {
            let undone = self.shared.run(|c| {
                sqlite::control(c, ROLLBACK_TO_SAVEPOINT)?;
                sqlite::control(c, RELEASE)
            });
            if let Err(e) = &undone {
                // The members before this one cannot be told apart from its writes any more.
                abandon(&self.shared, &mut guard, &e.to_string());
            }
            undone
        } else {
            guard.id += 1;
            guard.open = false;
            let undone = self.shared.run(|c| sqlite::control(c, "ROLLBACK"));
            if undone.is_err() {
                self.shared
                    .roll_back_all("a first member's rollback failed");
            }
            undone
        }
    }
}

/// Releases the writer, noting when if someone waits for it (`write_handoff`).
pub(super) fn hand_on(shared: &Shared, mut guard: OwnedMutexGuard<Group>) {
    if shared.queued.load(Ordering::Relaxed) > 0 {
        guard.handed_at = Some(Instant::now());
    }
}

/// Commits the open group on a blocking thread (the fsync) and tells every member how it went.
pub(super) async fn finish(shared: &Arc<Shared>, g: &mut Group) {
    let outcome = if std::mem::take(&mut g.open) {
        let conn = shared.conn.clone();
        let committed = tokio::task::spawn_blocking(move || {
            let c = conn_of(&conn);
            let started = Instant::now();
            let done = sqlite::control(&c, "COMMIT");
            STORE.commit_time.observe_duration(started.elapsed());
            if done.is_err() && !c.is_autocommit() {
                // A failed COMMIT can leave the transaction open: end it, so that the
                // connection's next BEGIN starts clean.
                if let Err(e) = sqlite::control(&c, "ROLLBACK") {
                    tracing::error!(error = %e, "the SQLite writer could not roll back a failed commit");
                }
            }
            done
        })
        .await;
        match committed {
            Ok(done) => done.map_err(|e| e.to_string()),
            Err(e) => Err(format!("the commit's task failed: {e}")),
        }
    } else {
        Err("the group's transaction is gone".into())
    };
    STORE.commit_group.observe(g.members.len() as f64);
    // Full means a checkpoint is already due.
    if let Err(std::sync::mpsc::TrySendError::Disconnected(())) = shared.checkpoint.try_send(()) {
        tracing::error!("the WAL checkpoint thread is gone");
    }
    g.id += 1;
    for m in g.members.drain(..) {
        // A member that stopped waiting (its caller was cancelled) needs no answer.
        let _ = m.send(outcome.clone());
    }
}

/// Rolls the open group back and fails its members.
pub(super) fn abandon(shared: &Shared, g: &mut Group, why: &str) {
    g.id += 1;
    g.open = false;
    shared.roll_back_all(why);
    for m in g.members.drain(..) {
        let _ = m.send(Err(why.to_owned()));
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if self.guard.is_some() {
            if let Err(e) = self.roll_back() {
                tracing::error!(error = %e, "a dropped write transaction could not roll back");
            }
        }
    }
}
