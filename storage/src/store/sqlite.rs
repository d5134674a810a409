//! The SQLite writer's own connection (rusqlite), driven in the calling task.
//!
//! Through sqlx-sqlite every statement is a round trip to the connection's worker thread: two
//! or more thread wake-ups and 70–100 µs of CPU before SQLite does anything (issue 27,
//! `storage/benches/write_paths.rs`). Here the store holds the connection itself and runs a
//! statement where it is asked for, in the task that holds the writer (see [`super::writer`]):
//! SQLite's work for one statement of a turn is a few microseconds, far less than a hop. Only
//! what can wait on the disk or on another process leaves the task: the `COMMIT` (the fsync)
//! and a `BEGIN` that finds the file's write lock taken.
//!
//! The facts keep their sea-orm queries: [`execute`] and [`query`] take the `Statement`
//! sea-orm built, bind its values, and answer sea-orm's `ExecResult` and `QueryResult`, built
//! from values ([`wrap_rows`]). Such a row's values must have the exact type the reading field
//! asks for, so each column is typed by the entities' own column definitions ([`kind_of`]),
//! not by what SQLite happened to store.
use crate::metrics::STORE;
use sea_orm::sea_query::Value;
use sea_orm::sqlx::error::{DatabaseError, ErrorKind};
use sea_orm::{
    ColumnTrait, ColumnType, DbBackend, DbErr, EntityTrait, ExecResult, IdenStatic, Iterable,
    MockDatabase, MockDatabaseTrait, MockExecResult, QueryResult, RuntimeErr, Statement,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long a statement waits for another process's write lock (as the sqlx pools do).
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Prepared statements kept per connection: more than the store's distinct write statements.
const STATEMENT_CACHE: usize = 512;

/// Opens the database at sqlx URL `url` the way the store's pools open it: WAL, full fsync,
/// foreign keys, a 30 s busy timeout.
pub(crate) fn open(url: &str) -> Result<rusqlite::Connection, DbErr> {
    let conn = rusqlite::Connection::open(filename(url)?).map_err(to_db_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(to_db_err)?;
    // The savepoints of group commit journal the pages they change: in memory, not in a
    // temporary file (a write() per page).
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; \
         PRAGMA temp_store = MEMORY;",
    )
    .map_err(to_db_err)?;
    // Query planner stability: a plan does not depend on the values bound. Without it SQLite
    // compiles a statement again whenever a new value is bound to a parameter the planner
    // looked at, such as sea-orm's `LIMIT ?` of every `.one()`, which undoes the statement
    // cache. The schema has no partial index, which is what the planner would look at values
    // for.
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map_err(to_db_err)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// WAL size past which the checkpointer also waits for the writer ([`checkpointer`]).
const WAL_LIMIT: u64 = 64 << 20;

/// At most one checkpoint per this long: each one fsyncs the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// Starts the thread that checkpoints the WAL of the database at `url` into the database file,
/// so that the writer's commits do not (the writer's connection runs with
/// `wal_autocheckpoint = 0`). Left to SQLite, the commit that passes 1,000 WAL pages copies
/// them all and fsyncs the database file while it holds the one writer. Here a `PASSIVE`
/// checkpoint on a connection of its own, woken after commits, copies what no reader still
/// needs without taking the write lock; a WAL grown past [`WAL_LIMIT`] all the same (readers
/// always behind) is checkpointed with `RESTART`, which waits for the writer. Wake it with
/// the sender's `try_send(())`; it ends when the sender is dropped.
pub(crate) fn checkpointer(url: &str) -> Result<std::sync::mpsc::SyncSender<()>, DbErr> {
    let conn = open(url)?;
    let wal = wal_path(url)?;
    let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
    std::thread::Builder::new()
        .name("sqlite-checkpoint".into())
        .spawn(move || loop {
            match woken.recv() {
                Ok(()) => {}
                Err(_) => return,
            }
            let big = std::fs::metadata(&wal).map(|m| m.len() > WAL_LIMIT).unwrap_or(false);
            let mode = if big { "RESTART" } else { "PASSIVE" };
            let started = Instant::now();
            let done = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
                Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
            });
            match done {
                Ok((wal_frames, copied)) => tracing::trace!(
                    target: "turnkey_storage::sql",
                    mode,
                    wal_frames,
                    copied,
                    micros = started.elapsed().as_micros() as u64,
                    "checkpoint"
                ),
                Err(e) => tracing::warn!(error = %e, mode, "WAL checkpoint failed; retried after the next commit"),
            }
            std::thread::sleep(CHECKPOINT_EVERY);
        })
        .map_err(|e| DbErr::Custom(format!("could not start the checkpoint thread: {e}")))?;
    Ok(wake)
}

/// The database file of sqlx URL `url`, parsed as the store's pools parse it.
fn filename(url: &str) -> Result<std::path::PathBuf, DbErr> {
    use sea_orm::sqlx::sqlite::SqliteConnectOptions;
    use std::str::FromStr;
    let options = SqliteConnectOptions::from_str(url)
        .map_err(|e| DbErr::Conn(RuntimeErr::Internal(format!("sqlite url: {e}"))))?;
    Ok(options.get_filename().to_path_buf())
}

/// The WAL file of the database at sqlx URL `url`.
fn wal_path(url: &str) -> Result<std::path::PathBuf, DbErr> {
    let mut wal = filename(url)?.into_os_string();
    wal.push("-wal");
    Ok(wal.into())
}

/// Runs `stmt` for its effect.
pub(crate) fn execute(conn: &rusqlite::Connection, stmt: &Statement) -> Result<ExecResult, DbErr> {
    let started = Instant::now();
    let out = (|| {
        let mut prepared = conn.prepare_cached(&stmt.sql).map_err(to_db_err)?;
        bind(&mut prepared, stmt)?;
        let rows = prepared.raw_execute().map_err(to_db_err)?;
        exec_result(conn, rows as u64)
    })();
    counted(&stmt.sql, started, out.is_err());
    out
}

/// Runs SQL without values (one or more statements).
pub(crate) fn execute_unprepared(conn: &rusqlite::Connection, sql: &str) -> Result<(), DbErr> {
    let started = Instant::now();
    let out = conn.execute_batch(sql).map_err(to_db_err);
    counted(sql, started, out.is_err());
    out
}

/// Runs one statement without values, prepared once (`BEGIN`, `SAVEPOINT`, `COMMIT` …).
pub(crate) fn control(conn: &rusqlite::Connection, sql: &str) -> Result<(), DbErr> {
    let started = Instant::now();
    let out = conn
        .prepare_cached(sql)
        .and_then(|mut s| s.raw_execute())
        .map(drop)
        .map_err(to_db_err);
    counted(sql, started, out.is_err());
    out
}

/// Runs `stmt` and answers its rows: all of them, or at most one if `one`.
pub(crate) fn query(
    conn: &rusqlite::Connection,
    stmt: &Statement,
    one: bool,
) -> Result<Vec<QueryResult>, DbErr> {
    let started = Instant::now();
    let out = (|| {
        let mut prepared = conn.prepare_cached(&stmt.sql).map_err(to_db_err)?;
        bind(&mut prepared, stmt)?;
        let columns: Vec<(String, Kind)> = prepared
            .column_names()
            .into_iter()
            .map(|name| (name.to_owned(), kind_of(name)))
            .collect();
        let mut rows = prepared.raw_query();
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(to_db_err)? {
            let mut values = BTreeMap::new();
            for (i, (name, kind)) in columns.iter().enumerate() {
                let raw = row.get_ref(i).map_err(to_db_err)?;
                values.insert(name.clone(), kind.value(raw)?);
            }
            out.push(values);
            if one {
                break;
            }
        }
        wrap_rows(out)
    })();
    counted(&stmt.sql, started, out.is_err());
    out
}

/// sea-orm's result of a statement that changed `rows` rows on `conn`.
pub(crate) fn exec_result(conn: &rusqlite::Connection, rows: u64) -> Result<ExecResult, DbErr> {
    let done = MockExecResult {
        last_insert_id: u64::try_from(conn.last_insert_rowid()).unwrap_or_default(),
        rows_affected: rows,
    };
    MockDatabase::new(DbBackend::Sqlite)
        .append_exec_results([done])
        .execute(0, Statement::from_string(DbBackend::Sqlite, String::new()))
}

/// sea-orm's rows from rows of values. sea-orm 2.0.4 builds a `QueryResult` from values only in
/// its in-memory database (`MockDatabase`): its `ProxyRow`, made for this, does not compile
/// beside sqlx-sqlite in 2.0.4 (it still boxes strings that sea-query 1.0 no longer boxes).
/// So the in-memory database hands the rows back; nothing else of it is used, and no
/// statement runs in it.
fn wrap_rows(rows: Vec<BTreeMap<String, Value>>) -> Result<Vec<QueryResult>, DbErr> {
    MockDatabase::new(DbBackend::Sqlite)
        .append_query_results([rows])
        .query(0, Statement::from_string(DbBackend::Sqlite, String::new()))
}

/// Counts a statement and its time for `/metrics`, as sea-orm's callback does for the pools'.
pub(crate) fn counted(sql: &str, started: Instant, failed: bool) {
    let elapsed = started.elapsed();
    STORE.statements.fetch_add(1, Ordering::Relaxed);
    STORE.statement_time.observe_duration(elapsed);
    tracing::trace!(
        target: "turnkey_storage::sql",
        micros = elapsed.as_micros() as u64,
        failed,
        sql = %sql,
    );
}

fn bind(prepared: &mut rusqlite::CachedStatement<'_>, stmt: &Statement) -> Result<(), DbErr> {
    let Some(values) = &stmt.values else {
        return Ok(());
    };
    for (i, v) in values.0.iter().enumerate() {
        prepared
            .raw_bind_parameter(i + 1, to_sql(v)?)
            .map_err(to_db_err)?;
    }
    Ok(())
}

/// A sea-query value as SQLite stores it, the way sqlx-sqlite encodes it.
fn to_sql(v: &Value) -> Result<rusqlite::types::Value, DbErr> {
    use rusqlite::types::Value as S;
    let int = |i: Option<i64>| i.map_or(S::Null, S::Integer);
    Ok(match v {
        Value::Bool(b) => int(b.map(i64::from)),
        Value::TinyInt(i) => int(i.map(i64::from)),
        Value::SmallInt(i) => int(i.map(i64::from)),
        Value::Int(i) => int(i.map(i64::from)),
        Value::BigInt(i) => int(*i),
        Value::TinyUnsigned(i) => int(i.map(i64::from)),
        Value::SmallUnsigned(i) => int(i.map(i64::from)),
        Value::Unsigned(i) => int(i.map(i64::from)),
        Value::BigUnsigned(i) => {
            match i {
                Some(u) => S::Integer(i64::try_from(*u).map_err(|_| {
                    DbErr::Type(format!("{u} does not fit SQLite's 64-bit integer"))
                })?),
                None => S::Null,
            }
        }
        Value::Float(f) => f.map_or(S::Null, |f| S::Real(f64::from(f))),
        Value::Double(f) => f.map_or(S::Null, S::Real),
        Value::String(s) => s.clone().map_or(S::Null, S::Text),
        Value::Char(c) => c.map_or(S::Null, |c| S::Text(c.to_string())),
        Value::Bytes(b) => b.clone().map_or(S::Null, S::Blob),
        Value::Json(j) => j.as_ref().map_or(S::Null, |j| S::Text(j.to_string())),
        other => {
            return Err(DbErr::Type(format!(
                "the SQLite writer does not bind {other:?}"
            )))
        }
    })
}

/// The Rust type a result column is read into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Bool,
    Int,
    BigInt,
    Double,
    Text,
    Bytes,
    /// Not a column of any entity (an alias such as `n`): typed by what SQLite stored.
    Stored,
}

impl Kind {
    fn of(column: &ColumnType) -> Kind {
        match column {
            ColumnType::Boolean => Kind::Bool,
            ColumnType::TinyInteger
            | ColumnType::SmallInteger
            | ColumnType::Integer
            | ColumnType::TinyUnsigned
            | ColumnType::SmallUnsigned => Kind::Int,
            ColumnType::BigInteger | ColumnType::Unsigned | ColumnType::BigUnsigned => Kind::BigInt,
            ColumnType::Float | ColumnType::Double | ColumnType::Decimal(_) => Kind::Double,
            ColumnType::Binary(_)
            | ColumnType::VarBinary(_)
            | ColumnType::Blob
            | ColumnType::Bit(_)
            | ColumnType::VarBit(_) => Kind::Bytes,
            ColumnType::Char(_) | ColumnType::String(_) | ColumnType::Text => Kind::Text,
            _ => Kind::Stored,
        }
    }

    /// The value of a result cell, typed for the field that reads it. A NULL is a NULL of the
    /// column's type (sea-orm reads any NULL into an `Option` as `None`).
    fn value(self, raw: rusqlite::types::ValueRef<'_>) -> Result<Value, DbErr> {
        use rusqlite::types::ValueRef as R;
        let mistyped = |what: &str| DbErr::Type(format!("a {what} where {self:?} was expected"));
        Ok(match (self, raw) {
            (Kind::Bool, R::Null) => Value::Bool(None),
            (Kind::Int, R::Null) => Value::Int(None),
            (Kind::BigInt, R::Null) => Value::BigInt(None),
            (Kind::Double, R::Null) => Value::Double(None),
            (Kind::Text, R::Null) | (Kind::Stored, R::Null) => Value::String(None),
            (Kind::Bytes, R::Null) => Value::Bytes(None),
            (Kind::Bool, R::Integer(i)) => Value::Bool(Some(i != 0)),
            (Kind::Int, R::Integer(i)) => Value::Int(Some(
                i32::try_from(i).map_err(|_| mistyped("64-bit integer"))?,
            )),
            (Kind::BigInt | Kind::Stored, R::Integer(i)) => Value::BigInt(Some(i)),
            (Kind::Double, R::Integer(i)) => Value::Double(Some(i as f64)),
            (Kind::Double | Kind::Stored, R::Real(f)) => Value::Double(Some(f)),
            (Kind::Text | Kind::Stored, R::Text(t)) => Value::String(Some(
                std::str::from_utf8(t)
                    .map_err(|_| mistyped("text that is not UTF-8"))?
                    .to_owned(),
            )),
            (Kind::Bytes | Kind::Stored, R::Blob(b)) => Value::Bytes(Some(b.to_vec())),
            (Kind::Bytes, R::Text(t)) => Value::Bytes(Some(t.to_vec())),
            (_, R::Integer(_)) => return Err(mistyped("integer")),
            (_, R::Real(_)) => return Err(mistyped("real")),
            (_, R::Text(_)) => return Err(mistyped("text")),
            (_, R::Blob(_)) => return Err(mistyped("blob")),
        })
    }
}

/// Adds every column of entity `E` to `map`; a name already there with another kind is
/// recorded in `clashes`.
fn add_entity<E: EntityTrait>(
    map: &mut HashMap<&'static str, Kind>,
    clashes: &mut Vec<&'static str>,
) {
    for column in E::Column::iter() {
        let kind = Kind::of(column.def().get_column_type());
        let name = column.as_str();
        if let Some(before) = map.insert(name, kind) {
            if before != kind {
                clashes.push(name);
            }
        }
    }
}

struct Kinds {
    map: HashMap<&'static str, Kind>,
    /// Names two entities type differently (none: a unit test holds this).
    #[cfg_attr(not(test), allow(dead_code))]
    clashes: Vec<&'static str>,
}

fn kinds() -> &'static Kinds {
    static KINDS: OnceLock<Kinds> = OnceLock::new();
    KINDS.get_or_init(|| {
        use crate::entity::*;
        let mut map = HashMap::new();
        let mut clashes = Vec::new();
        macro_rules! all {
            ($($e:ident),* $(,)?) => { $( add_entity::<$e::Entity>(&mut map, &mut clashes); )* };
        }
        all!(
            admission,
            api_token,
            approval,
            audit_entry,
            background_process,
            chat_session,
            compression_lock,
            connected_provider,
            event,
            file,
            inbound_update,
            interrupt_request,
            lease,
            memory_change,
            memory_entry,
            memory_pending,
            message,
            outbox,
            principal,
            principal_usage,
            review,
            schedule,
            session,
            session_key,
            skill,
            skill_proposal,
            skill_use,
            subagent_task,
            tool_run,
            usage,
        );
        Kinds { map, clashes }
    })
}

/// The kind of result column `name`, from the entities' definitions.
pub(crate) fn kind_of(name: &str) -> Kind {
    kinds().map.get(name).copied().unwrap_or(Kind::Stored)
}

/// A SQLite error as sea-orm reports a database's, so that callers tell a unique violation
/// (`is_unique_violation`) or a busy database as they do from sqlx.
pub(crate) fn to_db_err(e: rusqlite::Error) -> DbErr {
    let code = match &e {
        rusqlite::Error::SqliteFailure(f, _) => Some(f.extended_code),
        _ => None,
    };
    let err = SqliteError {
        message: e.to_string(),
        code,
    };
    DbErr::Exec(RuntimeErr::SqlxError(Arc::new(
        sea_orm::sqlx::Error::Database(Box::new(err)),
    )))
}

/// A SQLite error from the writer's connection, as a sqlx database error.
#[derive(Debug)]
struct SqliteError {
    message: String,
    /// SQLite's extended result code.
    code: Option<i32>,
}

impl std::fmt::Display for SqliteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SqliteError {}

impl DatabaseError for SqliteError {
    fn message(&self) -> &str {
        &self.message
    }

    fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.code.map(|c| c.to_string().into())
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> ErrorKind {
        match self.code {
            // SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY
            Some(2067 | 1555) => ErrorKind::UniqueViolation,
            // SQLITE_CONSTRAINT_FOREIGNKEY
            Some(787) => ErrorKind::ForeignKeyViolation,
            // SQLITE_CONSTRAINT_NOTNULL
            Some(1299) => ErrorKind::NotNullViolation,
            // SQLITE_CONSTRAINT_CHECK
            Some(275) => ErrorKind::CheckViolation,
            _ => ErrorKind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_name_has_one_type_across_the_entities() {
        assert!(
            kinds().clashes.is_empty(),
            "columns typed differently in two entities: {:?}",
            kinds().clashes
        );
        assert_eq!(kind_of("attempt"), Kind::Int);
        assert_eq!(kind_of("read_only"), Kind::Bool);
        assert_eq!(kind_of("seq"), Kind::BigInt);
        assert_eq!(kind_of("payload"), Kind::Text);
        assert_eq!(kind_of("n"), Kind::Stored);
    }

    #[test]
    fn values_round_trip_through_sqlite_with_their_types() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (attempt INTEGER, read_only INTEGER, seq INTEGER, payload TEXT, cost_usd REAL, data BLOB)").unwrap();
        let insert = Statement::from_sql_and_values(
            sea_orm::DbBackend::Sqlite,
            "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)",
            [
                Value::Int(Some(7)),
                Value::Bool(Some(true)),
                Value::BigInt(Some(1 << 40)),
                Value::String(Some("é\u{1F600}".into())),
                Value::Double(Some(0.25)),
                Value::Bytes(Some(vec![0, 255])),
            ],
        );
        let done = execute(&conn, &insert).unwrap();
        assert_eq!(done.rows_affected(), 1);
        let null = Statement::from_string(
            sea_orm::DbBackend::Sqlite,
            "INSERT INTO t VALUES (NULL, NULL, NULL, NULL, NULL, NULL)",
        );
        execute(&conn, &null).unwrap();
        let select = Statement::from_string(sea_orm::DbBackend::Sqlite, "SELECT * FROM t");
        let rows = query(&conn, &select, false).unwrap();
        assert_eq!(rows.len(), 2);
        let r = &rows[0];
        assert_eq!(r.try_get::<i32>("", "attempt").unwrap(), 7);
        assert!(r.try_get::<bool>("", "read_only").unwrap());
        assert_eq!(r.try_get::<i64>("", "seq").unwrap(), 1 << 40);
        assert_eq!(r.try_get::<String>("", "payload").unwrap(), "é\u{1F600}");
        assert_eq!(r.try_get::<f64>("", "cost_usd").unwrap(), 0.25);
        assert_eq!(r.try_get::<Vec<u8>>("", "data").unwrap(), vec![0, 255]);
        let n = &rows[1];
        assert_eq!(n.try_get::<Option<i32>>("", "attempt").unwrap(), None);
        assert_eq!(n.try_get::<Option<String>>("", "payload").unwrap(), None);
        assert!(n.try_get::<i64>("", "seq").is_err());
        assert_eq!(query(&conn, &select, true).unwrap().len(), 1);
    }

    #[test]
    fn a_unique_violation_is_reported_as_sqlx_reports_one() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (id TEXT PRIMARY KEY); INSERT INTO t VALUES ('a')")
            .unwrap();
        let again =
            Statement::from_string(sea_orm::DbBackend::Sqlite, "INSERT INTO t VALUES ('a')");
        let err = execute(&conn, &again).unwrap_err();
        assert!(super::super::is_unique_violation(&err), "{err}");
        let other =
            Statement::from_string(sea_orm::DbBackend::Sqlite, "INSERT INTO nowhere VALUES (1)");
        assert!(!super::super::is_unique_violation(
            &execute(&conn, &other).unwrap_err()
        ));
    }
}
