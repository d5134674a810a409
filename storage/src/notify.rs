//! Cross-replica wake-ups (SPEC R13.6). On PostgreSQL a write that another replica must react
//! to also runs `pg_notify('turnkey', 'kind:origin:session[:turn]')` inside its own
//! transaction, so a notice goes out if and only if the write commits. [`Notices`] is what a
//! process hears: PostgreSQL's notices through a `LISTEN` connection that reconnects, or, on
//! SQLite (several processes may share one file), a poll of `PRAGMA data_version`. Whenever
//! notices may have been missed (a reconnect, a full queue, any SQLite change) it says
//! [`Wake::Resync`]: re-read the store once. Notices only wake; the store stays the truth.
//!
//! A notifying commit costs PostgreSQL more than a plain one (it queues the notices under one
//! global lock at commit), and a replica ignores the notices it sent itself, so a store sends
//! notices only while another turnkey listener may hear them ([`Peers`]):
//! - every `LISTEN` connection is named `turnkey-listen:<store id>` (`application_name`, which
//!   `pg_stat_activity` shows to every role), and a task of each store reads every
//!   [`PEER_CHECK_EVERY`] whether a backend of the same database has such a name other than its
//!   own. A write transaction collects its notices (each distinct one once) and, just before
//!   `COMMIT`, sends them in one statement unless a reading begun less than
//!   [`PEER_READING_FRESH_FOR`] ago found no other listener. No reading yet, a failed one, or a
//!   stale one: it sends.
//! - A listener that has just started may be missed by a reading begun before it connected;
//!   such a reading is trusted until at most [`PEER_READING_FRESH_FOR`] after its start, so a
//!   notice it suppressed was decided before the listener had listened that long, and its
//!   transaction commits a `COMMIT` round trip later. The listener therefore yields one
//!   [`Wake::Resync`] [`RESYNC_AFTER_LISTEN`] after each (re)connection of its `LISTEN`
//!   connection: whatever such a commit wrote, the consumer re-reads.
use crate::error::{Result, StoreError};
use crate::ids::{InstanceId, SessionId, TurnId};
use crate::metrics::STORE;
use sea_orm::sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use sea_orm::{ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, Statement};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The one channel every turnkey process on a database listens to.
pub const CHANNEL: &str = "turnkey";
/// How often SQLite's `data_version` is read.
pub const SQLITE_POLL: Duration = Duration::from_millis(250);
/// Notices waiting for the consumer; beyond this they are dropped and one resync is sent.
const QUEUE: usize = 1024;
/// Pause before reconnecting a broken `LISTEN` connection.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);
/// The `application_name` of every turnkey `LISTEN` connection starts with this; the store's
/// id follows (at most 63 bytes in all, PostgreSQL's limit).
pub const LISTENER_PREFIX: &str = "turnkey-listen:";
/// How often a store reads whether another turnkey listener is connected to its database.
pub const PEER_CHECK_EVERY: Duration = Duration::from_millis(500);
/// How long a reading that found no other listener lets commits skip their notices, counted
/// from the moment the reading began. Longer than [`PEER_CHECK_EVERY`], so that the next
/// reading normally replaces it before it goes stale.
pub const PEER_READING_FRESH_FOR: Duration = Duration::from_millis(750);
/// After each (re)connection of its `LISTEN` connection a listener yields one
/// [`Wake::Resync`] this much later: by then no peer still trusts a reading that missed it,
/// and a commit that skipped its notice on such a reading has had
/// `RESYNC_AFTER_LISTEN - PEER_READING_FRESH_FOR` to commit.
pub const RESYNC_AFTER_LISTEN: Duration = Duration::from_millis(1500);

/// What a notice announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NoticeKind {
    /// An input was admitted to the session's queue.
    Admitted,
    /// Events of the session were appended.
    Events,
    /// A person decided an approval or an `unknown` tool run of the session.
    Decision,
    /// Someone asked to interrupt the session's turn (a row of `interrupt_requests`).
    Interrupt,
    /// The replica running the turn acted on its interrupt requests.
    Interrupted,
    /// The session's turn lease was released.
    Released,
}

impl NoticeKind {
    pub const ALL: [NoticeKind; 6] = [
        Self::Admitted,
        Self::Events,
        Self::Decision,
        Self::Interrupt,
        Self::Interrupted,
        Self::Released,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admitted => "admitted",
            Self::Events => "events",
            Self::Decision => "decision",
            Self::Interrupt => "interrupt",
            Self::Interrupted => "interrupted",
            Self::Released => "released",
        }
    }
}

/// One notice: what happened to which session (and turn), and which process did it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub kind: NoticeKind,
    pub origin: InstanceId,
    pub session: SessionId,
    pub turn: Option<TurnId>,
}

/// A payload that is not `kind:origin:session[:turn]`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a turnkey notice: {0:?}")]
pub struct BadNotice(pub String);

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.kind.as_str(), self.origin, self.session)?;
        match self.turn {
            Some(t) => write!(f, ":{t}"),
            None => Ok(()),
        }
    }
}

impl FromStr for Notice {
    type Err = BadNotice;
    fn from_str(s: &str) -> std::result::Result<Self, BadNotice> {
        let bad = || BadNotice(s.to_owned());
        let mut parts = s.split(':');
        let kind = parts.next().ok_or_else(bad)?;
        let kind = NoticeKind::ALL
            .into_iter()
            .find(|k| k.as_str() == kind)
            .ok_or_else(bad)?;
        let origin = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let session = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let turn = match parts.next() {
            None => None,
            Some(t) => Some(t.parse().map_err(|_| bad())?),
        };
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Self {
            kind,
            origin,
            session,
            turn,
        })
    }
}

/// What a [`Notices`] stream yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wake {
    Notice(Notice),
    /// Notices may have been missed: whoever waits on one re-reads the store once.
    Resync,
}

static ORIGIN: OnceLock<InstanceId> = OnceLock::new();

/// Names this process in the notices it sends; the first call wins (one process, one
/// origin). Call it at start-up with the instance id, before the first write.
pub fn set_origin(instance: InstanceId) -> InstanceId {
    *ORIGIN.get_or_init(|| instance)
}

/// This process's origin in the notices it sends.
pub fn origin() -> InstanceId {
    *ORIGIN.get_or_init(InstanceId::new)
}

/// The payloads of `notices` for a statement that sends them (`pg_notify` over the array),
/// or none while no other replica listens. Once the statement has committed, [`count`] says
/// what became of them.
pub(crate) fn payloads(peers: &Peers, notices: &[Notice]) -> Vec<String> {
    if peers.may_listen() {
        notices.iter().map(Notice::to_string).collect()
    } else {
        Vec::new()
    }
}

/// Counts `announced` notices of a commit as sent (their [`payloads`] went out with it) or
/// as skipped (no other replica listened, so there were none).
pub(crate) fn count(announced: usize, sent: bool) {
    let counter = if sent {
        &STORE.notices_sent
    } else {
        &STORE.notices_skipped
    };
    counter.fetch_add(announced as u64, Ordering::Relaxed);
}

/// The notices a write transaction announces, each distinct one once, in first-announced
/// order.
#[derive(Debug, Default)]
pub(crate) struct Pending(Mutex<Vec<Notice>>);

impl Pending {
    pub(crate) fn push(&self, notice: Notice) {
        let mut pending = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !pending.contains(&notice) {
            pending.push(notice);
        }
    }

    fn take(&self) -> Vec<Notice> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Runs in `tx` just before its `COMMIT`: sends the pending notices in one statement, or
    /// none when `peers` says no other replica listens.
    pub(crate) async fn flush(
        &self,
        tx: &DatabaseTransaction,
        peers: &Peers,
    ) -> std::result::Result<(), sea_orm::DbErr> {
        let notices = self.take();
        if notices.is_empty() {
            return Ok(());
        }
        let payloads = payloads(peers, &notices);
        let sent = !payloads.is_empty();
        if sent {
            // `unnest` yields the payloads in array order, which is the order they are delivered.
            tx.execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload",
                [CHANNEL.into(), payloads.into()],
            ))
            .await?;
        }
        count(notices.len(), sent);
        Ok(())
    }
}

/// Whether another turnkey replica listens on this store's database (PostgreSQL), as the
/// store's watch task last read it.
#[derive(Debug)]
pub(crate) struct Peers {
    /// The `application_name` of this store's `LISTEN` connections.
    listen_name: String,
    reading: Mutex<Option<Reading>>,
}

#[derive(Clone, Copy, Debug)]
struct Reading {
    /// Another turnkey listener was connected.
    others: bool,
    /// When the reading's query was sent.
    began: Instant,
}

impl Peers {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            listen_name: format!("{LISTENER_PREFIX}{}", uuid::Uuid::now_v7()),
            reading: Mutex::new(None),
        })
    }

    /// False only while a reading begun less than [`PEER_READING_FRESH_FOR`] ago found no
    /// other listener; with no reading, a failed or a stale one, notices go out.
    pub(crate) fn may_listen(&self) -> bool {
        match *self.reading.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(r) => r.others || r.began.elapsed() >= PEER_READING_FRESH_FOR,
            None => true,
        }
    }

    /// The `application_name` of this store's `LISTEN` connections.
    pub(crate) fn name(&self) -> &str {
        &self.listen_name
    }

    fn record(&self, reading: Option<Reading>) {
        *self.reading.lock().unwrap_or_else(|e| e.into_inner()) = reading;
    }

    /// Reads, every [`PEER_CHECK_EVERY`] until the store is dropped or `pool` closed, whether
    /// another turnkey listener is connected to the database.
    pub(crate) fn watch(peers: &Arc<Self>, pool: PgPool) {
        tokio::spawn(watch_peers(Arc::downgrade(peers), pool));
    }
}

/// Whether a backend of the current database other than `own` is a turnkey listener.
/// `datname` and `application_name` are shown for every role's sessions, not only the
/// caller's.
const OTHER_LISTENERS: &str = "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
     WHERE datname = current_database() AND application_name LIKE $1 AND application_name <> $2)";

async fn watch_peers(peers: Weak<Peers>, pool: PgPool) {
    let pattern = format!("{LISTENER_PREFIX}%");
    let close = pool.close_event();
    tokio::pin!(close);
    let mut failing = false;
    loop {
        let Some(p) = peers.upgrade() else {
            return;
        };
        let began = Instant::now();
        let read = sea_orm::sqlx::query_scalar::<_, bool>(OTHER_LISTENERS)
            .bind(&pattern)
            .bind(&p.listen_name)
            .fetch_one(&pool);
        let reading = tokio::select! {
            _ = &mut close => return,
            r = tokio::time::timeout(PEER_CHECK_EVERY, read) => r,
        };
        match reading {
            Ok(Ok(others)) => {
                if failing {
                    tracing::info!("reading the other replicas' listeners again");
                }
                failing = false;
                p.record(Some(Reading { others, began }));
            }
            failed => {
                // Unknown: notices go out until a reading succeeds.
                p.record(None);
                if !failing {
                    let error = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => "timed out".to_owned(),
                    };
                    tracing::warn!(%error, "cannot read whether other replicas listen; sending every notice");
                }
                failing = true;
            }
        }
        drop(p);
        tokio::select! {
            _ = &mut close => return,
            _ = tokio::time::sleep(PEER_CHECK_EVERY) => {}
        }
    }
}

/// The wake-ups this process hears, in the order they arrive. Dropping it stops the listener.
pub struct Notices {
    rx: mpsc::Receiver<Wake>,
}

impl Notices {
    /// The next wake-up; `None` once the listener has stopped for good.
    pub async fn recv(&mut self) -> Option<Wake> {
        self.rx.recv().await
    }
}

/// Hands wake-ups to the consumer without ever blocking the listener: when the queue is full
/// the notice is dropped and a resync is owed.
struct Sink {
    tx: mpsc::Sender<Wake>,
    owe_resync: bool,
}

impl Sink {
    fn push(&mut self, wake: Wake) {
        if self.owe_resync && self.tx.try_send(Wake::Resync).is_ok() {
            self.owe_resync = false;
        }
        match self.tx.try_send(wake) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.owe_resync = true,
            // The consumer is gone; the task ends at its next look at `closed`.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

/// Starts listening on `db` (`Store::notices`): on PostgreSQL `LISTEN turnkey` on a
/// connection of its own (the first connect must succeed; later losses reconnect and say
/// `Resync`), on SQLite a poll of `PRAGMA data_version` on one dedicated connection.
pub(crate) async fn listen(db: &DatabaseConnection, peers: &Peers) -> Result<Notices> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let sink = Sink {
        tx,
        owe_resync: false,
    };
    match db.get_database_backend() {
        DbBackend::Postgres => {
            let pool = db.get_postgres_connection_pool();
            // A pool of one connection of its own, named for the other replicas' watch
            // (every reconnect too), closed with the store's pool.
            let name = peers.name();
            let options = (*pool.connect_options()).clone().application_name(name);
            let own = PgPoolOptions::new()
                .max_connections(1)
                .min_connections(0)
                .max_lifetime(None)
                .idle_timeout(None)
                .connect_lazy_with(options);
            let mut listener = PgListener::connect_with(&own).await.map_err(unavailable)?;
            listener.listen(CHANNEL).await.map_err(unavailable)?;
            tracing::debug!(listener = %name, "listening for notices");
            tokio::spawn(listen_pg(listener, own, pool.clone(), sink));
        }
        DbBackend::Sqlite => {
            let pool = db.get_sqlite_connection_pool();
            let mut conn = pool.acquire().await.map_err(unavailable)?.detach();
            // Read before returning: any commit after this call is seen as a change.
            let seen = data_version(&mut conn).await.map_err(unavailable)?;
            tokio::spawn(poll_sqlite(conn, seen, sink));
        }
        other => return Err(StoreError::Unavailable(format!("no notices on {other:?}"))),
    }
    Ok(Notices { rx })
}

fn unavailable(e: sea_orm::sqlx::Error) -> StoreError {
    StoreError::Unavailable(format!("notice listener: {e}"))
}

async fn listen_pg(mut listener: PgListener, own: PgPool, store: PgPool, mut sink: Sink) {
    let store_closed = store.close_event();
    tokio::pin!(store_closed);
    // Peers may have skipped notices until they saw this connection: re-read once when no
    // peer can still trust a reading that missed it.
    let mut resync_at = Some(Instant::now() + RESYNC_AFTER_LISTEN);
    loop {
        let next = tokio::select! {
            _ = sink.tx.closed() => break,
            _ = &mut store_closed => break,
            _ = sleep_until(resync_at), if resync_at.is_some() => {
                resync_at = None;
                sink.push(Wake::Resync);
                continue;
            }
            next = listener.try_recv() => next,
        };
        match next {
            Ok(Some(n)) => match n.payload().parse::<Notice>() {
                Ok(notice) => sink.push(Wake::Notice(notice)),
                Err(e) => tracing::warn!(error = %e, "ignoring a notice"),
            },
            // The connection dropped and was re-established (LISTEN included): whatever was
            // sent meanwhile is lost, and peers may skip notices until they see it again.
            Ok(None) => {
                tracing::warn!("notice connection lost and re-established; resyncing");
                sink.push(Wake::Resync);
                resync_at = Some(Instant::now() + RESYNC_AFTER_LISTEN);
            }
            Err(sea_orm::sqlx::Error::PoolClosed) => break,
            Err(e) => {
                tracing::warn!(error = %e, "notice connection lost; reconnecting");
                loop {
                    tokio::select! {
                        _ = sink.tx.closed() => return close(listener, own).await,
                        _ = &mut store_closed => return close(listener, own).await,
                        _ = tokio::time::sleep(RECONNECT_PAUSE) => {}
                    }
                    match listener.listen(CHANNEL).await {
                        Ok(()) => break,
                        Err(sea_orm::sqlx::Error::PoolClosed) => return close(listener, own).await,
                        Err(e) => tracing::warn!(error = %e, "notice reconnect failed"),
                    }
                }
                tracing::info!("notice connection re-established; resyncing");
                sink.push(Wake::Resync);
                resync_at = Some(Instant::now() + RESYNC_AFTER_LISTEN);
            }
        }
    }
    close(listener, own).await;
}

/// Waits until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Ends the `LISTEN` connection: other replicas stop counting it as a listener.
async fn close(listener: PgListener, own: PgPool) {
    // Dropping the listener hands its connection back (after `UNLISTEN *`); closing the pool
    // waits for that and closes it.
    drop(listener);
    own.close().await;
}

async fn data_version(
    conn: &mut sea_orm::sqlx::SqliteConnection,
) -> std::result::Result<i64, sea_orm::sqlx::Error> {
    sea_orm::sqlx::query_scalar::<_, i64>("PRAGMA data_version")
        .fetch_one(conn)
        .await
}

/// `data_version` changes when another connection (of any process) commits to the file.
async fn poll_sqlite(mut conn: sea_orm::sqlx::SqliteConnection, mut seen: i64, mut sink: Sink) {
    loop {
        tokio::select! {
            _ = sink.tx.closed() => return,
            _ = tokio::time::sleep(SQLITE_POLL) => {}
        }
        match data_version(&mut conn).await {
            Ok(v) if v != seen => {
                seen = v;
                sink.push(Wake::Resync);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "reading data_version failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(kind: NoticeKind, turn: Option<TurnId>) -> Notice {
        Notice {
            kind,
            origin: InstanceId::new(),
            session: SessionId::new(),
            turn,
        }
    }

    #[test]
    fn r13_6_every_kind_round_trips_with_and_without_a_turn() {
        for kind in NoticeKind::ALL {
            for turn in [None, Some(TurnId::new())] {
                let n = notice(kind, turn);
                let text = n.to_string();
                assert!(text.starts_with(&format!("{}:", kind.as_str())), "{text}");
                assert_eq!(text.parse::<Notice>(), Ok(n));
            }
        }
    }

    #[test]
    fn r13_6_payload_layout_is_kind_origin_session_turn() {
        let n = notice(NoticeKind::Interrupt, Some(TurnId::new()));
        let text = n.to_string();
        let parts: Vec<&str> = text.split(':').collect();
        assert_eq!(parts.len(), 4, "{text}");
        assert_eq!(parts[0], "interrupt");
        assert_eq!(parts[1], n.origin.to_string());
        assert_eq!(parts[2], n.session.to_string());
        assert_eq!(parts[3], n.turn.map(|t| t.to_string()).unwrap_or_default());
        // Well under PostgreSQL's 8000-byte payload limit.
        assert!(text.len() < 200);
    }

    #[test]
    fn r13_6_malformed_payloads_are_refused() {
        let good = notice(NoticeKind::Events, None).to_string();
        let session = SessionId::new();
        let origin = InstanceId::new();
        for bad in [
            String::new(),
            "events".to_string(),
            format!("events:{origin}"),
            format!("bogus:{origin}:{session}"),
            format!("events:not-a-uuid:{session}"),
            format!("events:{origin}:not-a-uuid"),
            format!("events:{origin}:{session}:not-a-uuid"),
            format!("{good}:{}:extra", TurnId::new()),
        ] {
            assert_eq!(bad.parse::<Notice>(), Err(BadNotice(bad.clone())), "{bad}");
        }
    }

    #[test]
    fn r13_6_a_full_queue_owes_one_resync() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut sink = Sink {
            tx,
            owe_resync: false,
        };
        let first = notice(NoticeKind::Events, None);
        sink.push(Wake::Notice(first.clone()));
        sink.push(Wake::Notice(notice(NoticeKind::Events, None)));
        assert!(sink.owe_resync, "the second notice did not fit");
        assert_eq!(rx.try_recv().ok(), Some(Wake::Notice(first)));
        let third = notice(NoticeKind::Decision, None);
        sink.push(Wake::Notice(third));
        // The owed resync goes first; the third notice is dropped, the resync covers it.
        assert_eq!(rx.try_recv().ok(), Some(Wake::Resync));
        assert!(sink.owe_resync, "the third notice did not fit either");
    }

    #[test]
    fn r13_6_a_transaction_sends_each_distinct_notice_once() {
        let pending = Pending::default();
        let events = notice(NoticeKind::Events, None);
        let admitted = Notice {
            kind: NoticeKind::Admitted,
            ..events.clone()
        };
        pending.push(events.clone());
        pending.push(admitted.clone());
        pending.push(events.clone());
        assert_eq!(pending.take(), [events, admitted]);
        assert!(pending.take().is_empty());
    }

    #[test]
    fn r13_6_only_a_fresh_reading_of_no_listener_skips_notices() {
        let peers = Peers::new();
        assert!(peers.name().starts_with(LISTENER_PREFIX));
        assert!(peers.name().len() <= 63, "PostgreSQL's NAMEDATALEN");
        assert!(peers.may_listen(), "no reading yet: send");
        let now = Instant::now();
        peers.record(Some(Reading {
            others: false,
            began: now,
        }));
        assert!(!peers.may_listen(), "a fresh reading of no listener: skip");
        peers.record(Some(Reading {
            others: true,
            began: now,
        }));
        assert!(peers.may_listen());
        let stale = now.checked_sub(PEER_READING_FRESH_FOR).expect("an instant");
        peers.record(Some(Reading {
            others: false,
            began: stale,
        }));
        assert!(peers.may_listen(), "a stale reading: send");
        peers.record(None);
        assert!(peers.may_listen(), "a failed reading: send");
        assert!(RESYNC_AFTER_LISTEN > PEER_READING_FRESH_FOR);
        assert!(PEER_READING_FRESH_FOR > PEER_CHECK_EVERY);
    }
}
