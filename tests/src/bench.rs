//! What the benchmarks measure besides latency: the server process's CPU time and memory (from
//! `/proc/<pid>`), its own counters (from `/metrics`), and the raw limits of the machine they
//! run on, measured in the same run: fsyncs per second and rows per second of a batched insert.
#![allow(clippy::expect_used, clippy::unwrap_used)]
use sea_orm::{ConnectionTrait, Database, TransactionTrait};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// The provider a benchmark runs against: the scripted one, answering every turn at once with
/// an echo, and a compression summary request with a short summary (an echo of the
/// conversation would be as long as what it replaces: a useless compression, then a cooldown).
pub fn instant_provider() -> crate::ScriptedProvider {
    let provider = crate::ScriptedProvider::start();
    provider.forget_bodies();
    provider.on_user_text(
        "[turnkey:compress]",
        crate::scripted::Reply::text("The user sent numbered load turns; each was answered."),
    );
    provider
}

/// The server a benchmark measures: the release `turnkey` (or `TURNKEY_BIN`) against the
/// instant scripted `provider`, deltas flushed every 20 ms, on a fresh SQLite file or on
/// `database_url`.
pub async fn start_server(
    provider: &crate::ScriptedProvider,
    database_url: Option<&str>,
) -> crate::Turnkey {
    crate::Turnkey::start(server_options(provider, database_url)).await
}

/// `start_server`'s options, for a benchmark that changes one of them before starting.
pub fn server_options(
    provider: &crate::ScriptedProvider,
    database_url: Option<&str>,
) -> crate::TurnkeyOptions {
    let mut options =
        crate::TurnkeyOptions::new(provider).extra_toml("[agent]\ndelta_flush_ms = 20\n");
    if let Some(url) = database_url {
        options = options.database(url);
    }
    options
}

/// Submits `text` to session `sid` with `request_id` and answers the receipt's admission id.
/// A submission the connection lost before its answer is sent again with the same request id,
/// as a client should (the server admits it once): a pooled keep-alive connection that the
/// server closes as idle just when a request goes out on it fails that request
/// (`IncompleteMessage`), which an open-loop bench with many connections meets within minutes.
pub async fn submit(
    http: &reqwest::Client,
    base: &str,
    auth: &str,
    sid: &str,
    text: &str,
    request_id: &str,
) -> String {
    let body = serde_json::json!({"text": text, "request_id": request_id});
    let url = format!("{base}/v1/sessions/{sid}/submissions");
    let mut tries = 0;
    let resp = loop {
        tries += 1;
        match http
            .post(&url)
            .header("authorization", auth)
            .json(&body)
            .send()
            .await
        {
            Ok(resp) => break resp,
            Err(e) if tries < 3 && (e.is_request() || e.is_connect()) => {
                eprintln!("submit {request_id}: {e}; sending it again");
            }
            Err(e) => panic!("submit {request_id}: {e}"),
        }
    };
    let receipt: serde_json::Value = resp.json().await.expect("receipt");
    receipt["admission_id"]
        .as_str()
        .expect("admission")
        .to_owned()
}

/// `/proc` reports CPU times in USER_HZ, which Linux fixes at 100 for user space.
const USER_HZ: f64 = 100.0;

/// CPU seconds (user + system) the process `pid` has used so far.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the `(comm)`, which may itself hold spaces: state is field 3, utime 14,
    // stime 15 (1-based), so 11 and 12 after the state.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

/// Resident set size of `pid`, in MiB.
pub fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// The unlabelled samples of a Prometheus text page (`name value`), plus labelled ones under
/// their full series name (`name{label="v"}`).
pub async fn scrape(base: &str) -> BTreeMap<String, f64> {
    let Ok(resp) = reqwest::get(format!("{base}/metrics")).await else {
        return BTreeMap::new();
    };
    let text = resp.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// `after - before` of one series, when the server exports it.
pub fn delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    key: &str,
) -> Option<f64> {
    Some(after.get(key)? - before.get(key).copied().unwrap_or(0.0))
}

/// fsyncs per second on the filesystem of `dir`: 4 KiB written and `fdatasync`ed in a loop
/// for `for_how_long`.
pub fn fsyncs_per_second(dir: &Path, for_how_long: Duration) -> f64 {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).expect("probe file");
    let block = [7u8; 4096];
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < for_how_long {
        f.write_all(&block).expect("write");
        f.sync_data().expect("fdatasync");
        n += 1;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    drop(f);
    std::fs::remove_file(&path).ok();
    rate
}

/// Rows per second of a batched insert in one transaction (500 rows per statement, 20,000
/// rows): into a fresh SQLite file in `dir` (WAL, `synchronous=FULL`, like turnkey's), or into a
/// scratch table of `database_url` when it is PostgreSQL.
pub async fn batched_rows_per_second(dir: &Path, database_url: Option<&str>) -> f64 {
    let url = match database_url {
        Some(u) if u.starts_with("postgres") => u.to_owned(),
        _ => format!("sqlite://{}?mode=rwc", dir.join("rows-probe.db").display()),
    };
    // One connection, so that the pragmas hold for the transaction below.
    let mut opts = sea_orm::ConnectOptions::new(url.clone());
    opts.max_connections(1).sqlx_logging(false);
    let db = Database::connect(opts).await.expect("probe database");
    let sqlite = url.starts_with("sqlite");
    if sqlite {
        db.execute_unprepared("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
            .await
            .expect("pragmas");
    }
    db.execute_unprepared(
        "DROP TABLE IF EXISTS tk_rows_probe; \
         CREATE TABLE tk_rows_probe (session_id TEXT NOT NULL, seq BIGINT NOT NULL, \
         kind TEXT NOT NULL, payload TEXT NOT NULL, created_at BIGINT NOT NULL, \
         PRIMARY KEY (session_id, seq))",
    )
    .await
    .expect("probe table");
    const ROWS: usize = 20_000;
    const PER_STATEMENT: usize = 500;
    let started = Instant::now();
    let tx = db.begin().await.expect("begin");
    for chunk in 0..ROWS / PER_STATEMENT {
        let values: Vec<String> = (0..PER_STATEMENT)
            .map(|i| {
                let seq = chunk * PER_STATEMENT + i;
                format!(
                    "('s{}', {seq}, 'message.delta', '{{\"text\":\"probe\"}}', 0)",
                    seq % 64
                )
            })
            .collect();
        tx.execute_unprepared(&format!(
            "INSERT INTO tk_rows_probe (session_id, seq, kind, payload, created_at) VALUES {}",
            values.join(",")
        ))
        .await
        .expect("insert");
    }
    tx.commit().await.expect("commit");
    let rate = ROWS as f64 / started.elapsed().as_secs_f64();
    db.execute_unprepared("DROP TABLE tk_rows_probe")
        .await
        .expect("drop probe table");
    rate
}

/// Round trips per second of the store's stack on this machine, and the CPU each costs: one
/// task sends a primary-key read after another for `for_how_long` through a sea-orm connection
/// set up like turnkey's (sqlx; for SQLite a file in `dir` in WAL mode, so each statement is a
/// hop to the connection's worker thread and back), into a scratch table of `database_url`
/// when it is PostgreSQL. CPU is this process's, which does nothing else meanwhile.
pub async fn statement_round_trips(
    dir: &Path,
    database_url: Option<&str>,
    for_how_long: Duration,
) -> (f64, f64) {
    use sea_orm::{DbBackend, Statement};
    let url = match database_url {
        Some(u) if u.starts_with("postgres") => u.to_owned(),
        _ => format!("sqlite://{}?mode=rwc", dir.join("trips-probe.db").display()),
    };
    let mut opts = sea_orm::ConnectOptions::new(url.clone());
    opts.max_connections(1)
        .test_before_acquire(false)
        .sqlx_logging(false);
    let db = Database::connect(opts).await.expect("probe database");
    let backend = db.get_database_backend();
    db.execute_unprepared(
        "DROP TABLE IF EXISTS tk_trips_probe; \
         CREATE TABLE tk_trips_probe (id BIGINT PRIMARY KEY, payload TEXT NOT NULL); \
         INSERT INTO tk_trips_probe (id, payload) VALUES (1, 'probe'), (2, 'probe')",
    )
    .await
    .expect("probe table");
    let sql = match backend {
        DbBackend::Postgres => "SELECT payload FROM tk_trips_probe WHERE id = $1",
        _ => "SELECT payload FROM tk_trips_probe WHERE id = ?",
    };
    let cpu_before = cpu_seconds(std::process::id()).unwrap_or(0.0);
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < for_how_long {
        let read = Statement::from_sql_and_values(backend, sql, [((n % 2) as i64 + 1).into()]);
        db.query_one_raw(read).await.expect("probe read");
        n += 1;
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(std::process::id()).unwrap_or(0.0) - cpu_before;
    db.execute_unprepared("DROP TABLE tk_trips_probe")
        .await
        .expect("drop probe table");
    let n = n.max(1) as f64;
    (n / wall, cpu / n * 1e6)
}
