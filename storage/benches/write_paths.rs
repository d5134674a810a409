//! Issue 27, step 1: how to talk to SQLite, chosen by numbers. A turn's three write
//! transactions (admission; lease + claim; turn end) and its two reads (the authorization's
//! session row, the context's transcript rows), with the statements the store runs today (19
//! a turn, see docs/benchmarks.md "Nine statements fewer a turn"), on the real migrated schema,
//! three ways:
//!
//! - `seaorm`: today's path. sea-orm over sqlx-sqlite: every statement, `BEGIN` and `COMMIT` is a
//!   round trip to the connection's worker thread (25 a turn).
//! - `thread`: a thread of our own owns the writer connection (rusqlite, statements prepared
//!   once and cached) and runs a whole transaction per hop; what queued while it ran goes in
//!   the next group under one `COMMIT` (group commit, as the store does today). Reads go to two
//!   reader threads with their own connections (WAL), one hop per read.
//! - `raw_sql`: the control. Each transaction rendered to one SQL text with its values inlined
//!   and sent with `sqlx::raw_sql` in one hop (no binds, no rows back, so the claim's `RETURNING`
//!   cannot be read: it shows the floor of one hop through sqlx, not a usable design).
//!
//! Every path writes with `synchronous = FULL` in WAL mode, as the store does. It prints, per
//! path and number of concurrent sessions: turns/s, write transactions/s, the process's CPU per
//! turn and per write transaction, and the turn's p50/p95.
//!
//! ```sh
//! cargo bench -p turnkey-storage --bench write_paths            # BENCH_TURNS=2000 by default
//! BENCH_TURNS=4000 BENCH_SESSIONS=1,64 cargo bench -p turnkey-storage --bench write_paths
//! BENCH_NO_FTS=1 …   # without the session search's FTS5 triggers on `messages`
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sea_orm::{ConnectionTrait, DatabaseConnection, Statement, TransactionTrait, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use turnkey_storage::Store;

/// One bound value.
#[derive(Clone, Debug)]
enum V {
    I(i64),
    T(String),
}

/// A statement with `?` placeholders and its values, the same text for every path.
#[derive(Clone, Debug)]
struct Sql {
    text: &'static str,
    values: Vec<V>,
    /// Whether it answers rows the caller needs (`SELECT`, `RETURNING`).
    rows: bool,
}

fn q(text: &'static str, values: Vec<V>, rows: bool) -> Sql {
    Sql { text, values, rows }
}

fn t(s: impl Into<String>) -> V {
    V::T(s.into())
}

/// The ids one turn uses.
struct TurnIds {
    session: String,
    admission: String,
    turn: String,
    n: i64,
}

const PAYLOAD: &str = r#"{"text":"hello there, a short question for the model","attachments":[]}"#;
const ANSWER: &str = "A short answer from the model, about as long as a chat reply usually is.";

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The authorization read: the session row.
fn auth_read(ids: &TurnIds) -> Sql {
    q(
        "SELECT id, owner, platform, model, last_event_seq, last_message_idx FROM sessions WHERE id = ?",
        vec![t(&ids.session)],
        true,
    )
}

/// The context read: the transcript rows after the kept ones.
fn context_read(ids: &TurnIds) -> Sql {
    q(
        "SELECT id, idx, role, content, tool_calls, tool_call_id FROM messages WHERE session_id = ? AND idx > ? ORDER BY idx",
        vec![t(&ids.session), V::I((ids.n - 4).max(0) * 2)],
        true,
    )
}

fn admission(ids: &TurnIds) -> Vec<Sql> {
    let at = now();
    vec![
        q(
            "UPDATE sessions SET last_admission_seq = last_admission_seq + 1, last_event_seq = last_event_seq + 2, updated_at = ? WHERE id = ? RETURNING last_admission_seq, last_event_seq",
            vec![V::I(at), t(&ids.session)],
            true,
        ),
        q(
            "SELECT COUNT(*) FROM session_admissions WHERE session_id = ? AND status = 'queued'",
            vec![t(&ids.session)],
            true,
        ),
        q(
            "INSERT INTO session_admissions (id, session_id, seq, request_id, payload_digest, payload_json, principal, surface, status, created_at) VALUES (?, ?, ?, ?, ?, ?, 'operator', 'http', 'queued', ?) ON CONFLICT DO NOTHING",
            vec![t(&ids.admission), t(&ids.session), V::I(ids.n), t(format!("req-{}", ids.admission)), t("digest"), t(PAYLOAD), V::I(at)],
            false,
        ),
        q(
            "INSERT INTO session_events (session_id, seq, turn_id, admission_id, kind, payload, created_at) VALUES (?, ?, NULL, ?, 'admission.queued', '{\"seq_in_queue\":1}', ?), (?, ?, NULL, ?, 'status', '{\"state\":\"queued\"}', ?)",
            vec![t(&ids.session), V::I(ids.n * 6 + 1), t(&ids.admission), V::I(at), t(&ids.session), V::I(ids.n * 6 + 2), t(&ids.admission), V::I(at)],
            false,
        ),
    ]
}

fn claim(ids: &TurnIds) -> Vec<Sql> {
    let at = now();
    vec![
        q(
            "UPDATE session_turn_leases SET holder_instance = 'bench', holder_pid = 1, host = 'bench', turn_id = ?, generation = generation + 1, acquired_at = ?, expires_at = ? WHERE session_id = ? AND holder_instance IS NULL RETURNING generation",
            vec![t(&ids.turn), V::I(at), V::I(at + 60_000), t(&ids.session)],
            true,
        ),
        q(
            "SELECT id, seq, payload_json, (SELECT COUNT(*) FROM session_admissions WHERE session_id = ? AND status = 'queued'), (SELECT COUNT(*) FROM session_admissions WHERE session_id = ? AND status = 'started') FROM session_admissions WHERE session_id = ? AND status = 'queued' ORDER BY seq LIMIT 1",
            vec![t(&ids.session), t(&ids.session), t(&ids.session)],
            true,
        ),
        q(
            "UPDATE session_admissions SET status = 'started', owner_instance = 'bench', owner_pid = 1, owner_host = 'bench', turn_id = ?, started_at = ? WHERE id = ? AND status = 'queued'",
            vec![t(&ids.turn), V::I(at), t(&ids.admission)],
            false,
        ),
        q(
            "UPDATE sessions SET last_message_idx = last_message_idx + 1, last_event_seq = last_event_seq + 2, updated_at = ? WHERE id = ? RETURNING id, owner, platform, model, system_prompt, last_event_seq, last_message_idx",
            vec![V::I(at), t(&ids.session)],
            true,
        ),
        q(
            "INSERT INTO messages (id, session_id, idx, role, content, turn_id, admission_id, token_estimate, created_at) VALUES (?, ?, ?, 'user', ?, ?, ?, 12, ?)",
            vec![t(format!("{}-u", ids.turn)), t(&ids.session), V::I(ids.n * 2 + 1), t(PAYLOAD), t(&ids.turn), t(&ids.admission), V::I(at)],
            false,
        ),
        q(
            "INSERT INTO session_events (session_id, seq, turn_id, admission_id, kind, payload, created_at) VALUES (?, ?, ?, ?, 'turn.started', '{}', ?), (?, ?, ?, ?, 'status', '{\"state\":\"running\"}', ?)",
            vec![t(&ids.session), V::I(ids.n * 6 + 3), t(&ids.turn), t(&ids.admission), V::I(at), t(&ids.session), V::I(ids.n * 6 + 4), t(&ids.turn), t(&ids.admission), V::I(at)],
            false,
        ),
    ]
}

fn turn_end(ids: &TurnIds) -> Vec<Sql> {
    let at = now();
    vec![
        q(
            "INSERT INTO usage_ledger (id, turn_id, session_id, provider, model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, created_at) VALUES (?, ?, ?, 'bench', 'bench-model', 120, 30, 0, 0, 0.0, ?)",
            vec![t(format!("{}-usage", ids.turn)), t(&ids.turn), t(&ids.session), V::I(at)],
            false,
        ),
        q(
            "UPDATE session_admissions SET status = 'completed', outcome = ?, finished_at = ? WHERE id = ? AND status = 'started'",
            vec![t(format!("{{\"result\":\"completed\",\"final_response\":\"{ANSWER}\"}}")), V::I(at), t(&ids.admission)],
            false,
        ),
        q(
            "SELECT COUNT(*) FROM session_admissions WHERE session_id = ? AND status = 'queued'",
            vec![t(&ids.session)],
            true,
        ),
        q(
            "UPDATE sessions SET last_message_idx = last_message_idx + 1, last_event_seq = last_event_seq + 2, input_tokens = input_tokens + 120, output_tokens = output_tokens + 30, updated_at = ? WHERE id = ?",
            vec![V::I(at), t(&ids.session)],
            false,
        ),
        q(
            "INSERT INTO messages (id, session_id, idx, role, content, turn_id, admission_id, token_estimate, created_at) VALUES (?, ?, ?, 'assistant', ?, ?, ?, 18, ?)",
            vec![t(format!("{}-a", ids.turn)), t(&ids.session), V::I(ids.n * 2 + 2), t(ANSWER), t(&ids.turn), t(&ids.admission), V::I(at)],
            false,
        ),
        q(
            "INSERT INTO session_events (session_id, seq, turn_id, admission_id, kind, payload, created_at) VALUES (?, ?, ?, ?, 'turn.finished', '{}', ?), (?, ?, ?, ?, 'status', '{\"state\":\"idle\"}', ?)",
            vec![t(&ids.session), V::I(ids.n * 6 + 5), t(&ids.turn), t(&ids.admission), V::I(at), t(&ids.session), V::I(ids.n * 6 + 6), t(&ids.turn), t(&ids.admission), V::I(at)],
            false,
        ),
        q(
            "UPDATE session_turn_leases SET holder_instance = NULL, holder_pid = NULL, host = NULL, turn_id = NULL WHERE session_id = ? AND holder_instance = 'bench'",
            vec![t(&ids.session)],
            false,
        ),
    ]
}

// ---------- the paths ----------

#[async_trait::async_trait]
trait WritePath: Send + Sync {
    async fn read(&self, sql: Sql);
    async fn write(&self, tx: Vec<Sql>);
}

/// Today's path: sea-orm over sqlx-sqlite, one hop per statement.
struct SeaOrm {
    writer: DatabaseConnection,
    readers: DatabaseConnection,
}

fn sea_values(values: &[V]) -> Vec<Value> {
    values
        .iter()
        .map(|v| match v {
            V::I(i) => Value::BigInt(Some(*i)),
            V::T(s) => Value::String(Some(s.clone())),
        })
        .collect()
}

fn sea_statement(s: &Sql) -> Statement {
    Statement::from_sql_and_values(sea_orm::DbBackend::Sqlite, s.text, sea_values(&s.values))
}

#[async_trait::async_trait]
impl WritePath for SeaOrm {
    async fn read(&self, sql: Sql) {
        self.readers
            .query_all_raw(sea_statement(&sql))
            .await
            .unwrap();
    }

    async fn write(&self, tx: Vec<Sql>) {
        let txn = self.writer.begin().await.unwrap();
        for s in &tx {
            if s.rows {
                txn.query_all_raw(sea_statement(s)).await.unwrap();
            } else {
                txn.execute_raw(sea_statement(s)).await.unwrap();
            }
        }
        txn.commit().await.unwrap();
    }
}

/// A transaction for the writer thread, and where its result goes.
struct Job {
    tx: Vec<Sql>,
    done: oneshot::Sender<()>,
}

/// The writer connection on a thread of its own; a group of whole transactions per hop.
struct Thread {
    writer: std::sync::mpsc::Sender<Job>,
    readers: crossbeam_like::Pool,
}

fn rusqlite_params(values: &[V]) -> Vec<rusqlite::types::Value> {
    values
        .iter()
        .map(|v| match v {
            V::I(i) => rusqlite::types::Value::Integer(*i),
            V::T(s) => rusqlite::types::Value::Text(s.clone()),
        })
        .collect()
}

fn run_one(conn: &rusqlite::Connection, s: &Sql) {
    let mut stmt = conn.prepare_cached(s.text).unwrap();
    let params = rusqlite::params_from_iter(rusqlite_params(&s.values));
    if s.rows {
        let mut rows = stmt.query(params).unwrap();
        while let Some(row) = rows.next().unwrap() {
            // Read the first column, as a caller would read what it asked for.
            let _first: rusqlite::types::Value = row.get(0).unwrap();
        }
    } else {
        stmt.execute(params).unwrap();
    }
}

fn open(path: &str) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.busy_timeout(Duration::from_secs(30)).unwrap();
    conn.set_prepared_statement_cache_capacity(64);
    conn
}

fn writer_thread(path: String) -> std::sync::mpsc::Sender<Job> {
    let (send, recv) = std::sync::mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("sqlite-writer".into())
        .spawn(move || {
            let conn = open(&path);
            while let Ok(first) = recv.recv() {
                let mut group = vec![first];
                while group.len() < 256 {
                    match recv.try_recv() {
                        Ok(job) => group.push(job),
                        Err(_) => break,
                    }
                }
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                for (i, job) in group.iter().enumerate() {
                    // Each member in a savepoint of its own, as the store's group commit does.
                    let sp = format!("m{i}");
                    conn.execute_batch(&format!("SAVEPOINT {sp}")).unwrap();
                    for s in &job.tx {
                        run_one(&conn, s);
                    }
                    conn.execute_batch(&format!("RELEASE {sp}")).unwrap();
                }
                conn.execute_batch("COMMIT").unwrap();
                for job in group {
                    let _ = job.done.send(());
                }
            }
        })
        .unwrap();
    send
}

mod crossbeam_like {
    //! A few reader threads, each with its own connection, fed from one queue.
    use super::{open, run_one, Sql};
    use std::sync::{Arc, Mutex};
    use tokio::sync::oneshot;

    type Read = (Sql, oneshot::Sender<()>);

    #[derive(Clone)]
    pub struct Pool {
        send: std::sync::mpsc::Sender<Read>,
    }

    impl Pool {
        pub fn new(path: &str, threads: usize) -> Self {
            let (send, recv) = std::sync::mpsc::channel::<Read>();
            let recv = Arc::new(Mutex::new(recv));
            for i in 0..threads {
                let recv = recv.clone();
                let path = path.to_owned();
                std::thread::Builder::new()
                    .name(format!("sqlite-reader-{i}"))
                    .spawn(move || {
                        let conn = open(&path);
                        loop {
                            let next = recv.lock().unwrap().recv();
                            let Ok((sql, done)) = next else { return };
                            run_one(&conn, &sql);
                            let _ = done.send(());
                        }
                    })
                    .unwrap();
            }
            Self { send }
        }

        pub async fn read(&self, sql: Sql) {
            let (done, wait) = oneshot::channel();
            self.send.send((sql, done)).unwrap();
            wait.await.unwrap();
        }
    }
}

#[async_trait::async_trait]
impl WritePath for Thread {
    async fn read(&self, sql: Sql) {
        self.readers.read(sql).await;
    }

    async fn write(&self, tx: Vec<Sql>) {
        let (done, wait) = oneshot::channel();
        self.writer.send(Job { tx, done }).unwrap();
        wait.await.unwrap();
    }
}

/// The control: one `raw_sql` text per transaction, values inlined.
struct RawSql {
    pool: sea_orm::sqlx::SqlitePool,
    readers: DatabaseConnection,
}

fn inline(s: &Sql) -> String {
    let mut out = String::with_capacity(s.text.len() + 64);
    let mut values = s.values.iter();
    for c in s.text.chars() {
        if c == '?' {
            match values.next() {
                Some(V::I(i)) => out.push_str(&i.to_string()),
                Some(V::T(v)) => {
                    out.push('\'');
                    out.push_str(&v.replace('\'', "''"));
                    out.push('\'');
                }
                None => out.push_str("NULL"),
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[async_trait::async_trait]
impl WritePath for RawSql {
    async fn read(&self, sql: Sql) {
        self.readers
            .query_all_raw(sea_statement(&sql))
            .await
            .unwrap();
    }

    async fn write(&self, tx: Vec<Sql>) {
        let mut text = String::from("BEGIN IMMEDIATE;\n");
        for s in &tx {
            text.push_str(&inline(s));
            text.push_str(";\n");
        }
        text.push_str("COMMIT;");
        sea_orm::sqlx::raw_sql(sea_orm::sqlx::AssertSqlSafe(text))
            .execute(&self.pool)
            .await
            .unwrap();
    }
}

// ---------- the run ----------

async fn fresh_db(dir: &std::path::Path, name: &str, sessions: usize) -> String {
    let path = dir.join(format!("{name}.db"));
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let store = Store::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let db = store.connection().clone();
    if std::env::var("BENCH_NO_FTS").as_deref() == Ok("1") {
        // What the session search's FTS5 triggers cost a message insert (issue 26).
        db.execute_unprepared(
            "DROP TRIGGER messages_fts_insert; DROP TRIGGER messages_fts_delete; DROP TRIGGER messages_fts_update;",
        )
        .await
        .unwrap();
    }
    let at = now();
    for s in 0..sessions {
        let id = format!("s{s:04}");
        db.execute_unprepared(&format!(
            "INSERT INTO sessions (id, owner, platform, created_at, updated_at) VALUES ('{id}', 'operator', 'http', {at}, {at});
             INSERT INTO session_turn_leases (session_id, generation, acquired_at, expires_at) VALUES ('{id}', 0, {at}, {at});"
        ))
        .await
        .unwrap();
    }
    db.close().await.unwrap();
    path.display().to_string()
}

fn cpu_now() -> Duration {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).unwrap();
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    tv(u.user_time()) + tv(u.system_time())
}

async fn one_turn(path: &dyn WritePath, ids: &TurnIds) {
    path.read(auth_read(ids)).await;
    path.write(admission(ids)).await;
    path.write(claim(ids)).await;
    path.read(context_read(ids)).await;
    path.write(turn_end(ids)).await;
}

struct Figures {
    turns_per_s: f64,
    cpu_per_turn: Duration,
    p50: Duration,
    p95: Duration,
}

/// `turns` turns spread over `sessions` sessions; turn numbers start at `base` (so runs on one
/// database never reuse a message index or an event seq).
async fn run(path: Arc<dyn WritePath>, sessions: usize, turns: usize, base: i64) -> Figures {
    let per_session = turns.div_ceil(sessions);
    let cpu0 = cpu_now();
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(per_session);
            for n in 0..per_session {
                let ids = TurnIds {
                    session: format!("s{s:04}"),
                    admission: uuid::Uuid::now_v7().to_string(),
                    turn: uuid::Uuid::now_v7().to_string(),
                    n: base + n as i64,
                };
                let start = Instant::now();
                one_turn(path.as_ref(), &ids).await;
                lat.push(start.elapsed());
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let wall = t0.elapsed();
    let cpu = cpu_now() - cpu0;
    all.sort();
    let n = all.len();
    Figures {
        turns_per_s: n as f64 / wall.as_secs_f64(),
        cpu_per_turn: cpu / n as u32,
        p50: all[n / 2],
        p95: all[(n * 95 / 100).min(n - 1)],
    }
}

async fn sea_connection(path: &str, max: u32) -> DatabaseConnection {
    let mut opts = sea_orm::ConnectOptions::new(format!("sqlite://{path}"));
    opts.max_connections(max)
        .min_connections(max)
        .test_before_acquire(false)
        .sqlx_logging(false)
        .map_sqlx_sqlite_opts(|o| {
            o.journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(30))
        });
    sea_orm::Database::connect(opts).await.unwrap()
}

fn main() {
    let turns: usize = std::env::var("BENCH_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let sessions: Vec<usize> = std::env::var("BENCH_SESSIONS")
        .unwrap_or_else(|_| "1,64".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    // Two worker threads, like the 2-core machine the targets are for.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        println!("write paths: {turns} turns a run (3 write transactions, 2 reads, 19 statements a turn), synchronous=FULL, WAL");
        println!("| path | sessions | turns/s | write tx/s | CPU / turn | CPU / write tx | p50 | p95 |");
        println!("|---|---|---|---|---|---|---|---|");
        for &n in &sessions {
            for name in ["seaorm", "thread", "raw_sql"] {
                let db = fresh_db(dir.path(), &format!("{name}-{n}"), n).await;
                let path: Arc<dyn WritePath> = match name {
                    "seaorm" => Arc::new(SeaOrm {
                        writer: sea_connection(&db, 1).await,
                        readers: sea_connection(&db, 2).await,
                    }),
                    "thread" => Arc::new(Thread {
                        writer: writer_thread(db.clone()),
                        readers: crossbeam_like::Pool::new(&db, 2),
                    }),
                    _ => Arc::new(RawSql {
                        pool: sea_orm::sqlx::sqlite::SqlitePoolOptions::new()
                            .max_connections(1)
                            .connect_with(
                                sea_orm::sqlx::sqlite::SqliteConnectOptions::new()
                                    .filename(&db)
                                    .journal_mode(sea_orm::sqlx::sqlite::SqliteJournalMode::Wal)
                                    .synchronous(sea_orm::sqlx::sqlite::SqliteSynchronous::Full),
                            )
                            .await
                            .unwrap(),
                        readers: sea_connection(&db, 2).await,
                    }),
                };
                // Warm-up: prepared statements, page cache.
                run(path.clone(), n, n.max(20), 0).await;
                let f = run(path, n, turns, 1_000).await;
                println!(
                    "| {name} | {n} | {:.0} | {:.0} | {:.0} µs | {:.0} µs | {:.2} ms | {:.2} ms |",
                    f.turns_per_s,
                    f.turns_per_s * 3.0,
                    f.cpu_per_turn.as_secs_f64() * 1e6,
                    f.cpu_per_turn.as_secs_f64() * 1e6 / 3.0,
                    f.p50.as_secs_f64() * 1e3,
                    f.p95.as_secs_f64() * 1e3,
                );
            }
        }
    });
}
