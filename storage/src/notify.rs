//! Cross-replica wake-ups (SPEC R13.6). On PostgreSQL a write that another replica must react
//! to also runs `pg_notify('turnkey', 'kind:origin:session[:turn]')` inside its own
//! transaction, so a notice goes out if and only if the write commits. [`Notices`] is what a
//! process hears: PostgreSQL's notices through a `LISTEN` connection that reconnects, or, on
//! SQLite (several processes may share one file), a poll of `PRAGMA data_version`. Whenever
//! notices may have been missed (a reconnect, a full queue, any SQLite change) it says
//! [`Wake::Resync`]: re-read the store once. Notices only wake; the store stays the truth.
use crate::ids::{InstanceId, SessionId, TurnId};
use crate::store::{Result, Store, StoreError};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::sync::mpsc;

/// The one channel every turnkey process on a database listens to.
pub const CHANNEL: &str = "turnkey";
/// How often SQLite's `data_version` is read.
pub const SQLITE_POLL: Duration = Duration::from_millis(250);
/// Notices waiting for the consumer; beyond this they are dropped and one resync is sent.
const QUEUE: usize = 1024;
/// Pause before reconnecting a broken `LISTEN` connection.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

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

/// Sends `kind` for `session` inside `db`'s transaction (PostgreSQL delivers it at commit, and
/// not at all on rollback). A no-op on SQLite, whose readers poll `data_version` instead.
pub(crate) async fn send<C: ConnectionTrait>(
    db: &C,
    kind: NoticeKind,
    session: SessionId,
    turn: Option<TurnId>,
) -> Result<()> {
    if db.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let notice = Notice {
        kind,
        origin: origin(),
        session,
        turn,
    };
    db.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT pg_notify($1, $2)",
        [CHANNEL.into(), notice.to_string().into()],
    ))
    .await?;
    Ok(())
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

impl Store {
    /// Starts listening: on PostgreSQL `LISTEN turnkey` on a connection of its own (the first
    /// connect must succeed; later losses reconnect and say `Resync`), on SQLite a poll of
    /// `PRAGMA data_version` on one dedicated connection.
    pub async fn notices(&self) -> Result<Notices> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let sink = Sink {
            tx,
            owe_resync: false,
        };
        match self.backend() {
            DbBackend::Postgres => {
                use sea_orm::sqlx::postgres::PgListener;
                let pool = self.connection().get_postgres_connection_pool();
                let mut listener = PgListener::connect_with(pool).await.map_err(unavailable)?;
                listener.listen(CHANNEL).await.map_err(unavailable)?;
                tokio::spawn(listen_pg(listener, sink));
            }
            DbBackend::Sqlite => {
                let pool = self.connection().get_sqlite_connection_pool();
                let mut conn = pool.acquire().await.map_err(unavailable)?.detach();
                // Read before returning: any commit after this call is seen as a change.
                let seen = data_version(&mut conn).await.map_err(unavailable)?;
                tokio::spawn(poll_sqlite(conn, seen, sink));
            }
            other => return Err(StoreError::Unavailable(format!("no notices on {other:?}"))),
        }
        Ok(Notices { rx })
    }
}

fn unavailable(e: sea_orm::sqlx::Error) -> StoreError {
    StoreError::Unavailable(format!("notice listener: {e}"))
}

async fn listen_pg(mut listener: sea_orm::sqlx::postgres::PgListener, mut sink: Sink) {
    loop {
        let next = tokio::select! {
            _ = sink.tx.closed() => return,
            next = listener.try_recv() => next,
        };
        match next {
            Ok(Some(n)) => match n.payload().parse::<Notice>() {
                Ok(notice) => sink.push(Wake::Notice(notice)),
                Err(e) => tracing::warn!(error = %e, "ignoring a notice"),
            },
            // The connection dropped and was re-established (LISTEN included): whatever was
            // sent meanwhile is lost.
            Ok(None) => {
                tracing::warn!("notice connection lost and re-established; resyncing");
                sink.push(Wake::Resync);
            }
            // The store is closing: nothing left to listen to.
            Err(sea_orm::sqlx::Error::PoolClosed) => return,
            Err(e) => {
                tracing::warn!(error = %e, "notice connection lost; reconnecting");
                loop {
                    tokio::select! {
                        _ = sink.tx.closed() => return,
                        _ = tokio::time::sleep(RECONNECT_PAUSE) => {}
                    }
                    match listener.listen(CHANNEL).await {
                        Ok(()) => break,
                        Err(sea_orm::sqlx::Error::PoolClosed) => return,
                        Err(e) => tracing::warn!(error = %e, "notice reconnect failed"),
                    }
                }
                tracing::info!("notice connection re-established; resyncing");
                sink.push(Wake::Resync);
            }
        }
    }
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
}
