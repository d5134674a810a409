//! Process-wide measurements in a form `/metrics` renders as Prometheus text: a lock-free
//! histogram with fixed buckets, and the store's own counters (statements run, write
//! transactions committed, time spent waiting for the writer).
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds (the last bucket is `+Inf`).
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    10.0, 60.0,
];

/// Upper bounds of the size buckets (rows, requests per batch).
pub const SIZE_BUCKETS: [f64; 16] = [
    1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// A Prometheus histogram with fixed buckets; `observe` is a few relaxed atomic adds.
pub struct Histogram {
    bounds: &'static [f64; 16],
    /// Per bucket (not cumulative); the last one is `+Inf`.
    counts: [AtomicU64; 17],
    /// Sum of the observations, in millionths of their unit.
    sum_micros: AtomicU64,
}

impl Histogram {
    pub const fn new(bounds: &'static [f64; 16]) -> Self {
        Self {
            bounds,
            counts: [const { AtomicU64::new(0) }; 17],
            sum_micros: AtomicU64::new(0),
        }
    }

    pub const fn latency() -> Self {
        Self::new(&LATENCY_BUCKETS)
    }

    pub const fn size() -> Self {
        Self::new(&SIZE_BUCKETS)
    }

    pub fn observe(&self, value: f64) {
        let i = self
            .bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        // Saturating: a negative or absurd value must not wrap the sum.
        let micros = (value.max(0.0) * 1e6).min(u64::MAX as f64) as u64;
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Appends the `_bucket`, `_sum` and `_count` lines of one labelled series (`labels` is
    /// `key="value",…` or empty). The `# HELP`/`# TYPE` header is the caller's, once per name.
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            let le = match self.bounds.get(i) {
                Some(b) => b.to_string(),
                None => "+Inf".to_owned(),
            };
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

/// Writes the `# HELP` and `# TYPE` lines of a metric.
pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The store's counters, for every `Store` of the process.
pub struct StoreMetrics {
    /// SQL statements run (reads and writes, inside transactions or not).
    pub statements: AtomicU64,
    /// Write transactions begun (each commits with one fsync, or rolls back).
    pub write_transactions: AtomicU64,
    /// Leases taken from a holder that had expired or died.
    pub lease_takeovers: AtomicU64,
    /// Cross-replica notices sent with a commit (PostgreSQL; see `notify`).
    pub notices_sent: AtomicU64,
    /// Notices a commit did not send because no other replica listened.
    pub notices_skipped: AtomicU64,
    /// PostgreSQL: one-statement writes that found another commit had overtaken their
    /// snapshot, wrote nothing and ran again (see `store::admissions::one_statement`).
    pub stale_snapshots: AtomicU64,
    /// Time from asking for a write transaction to holding it (on SQLite: the queue for the
    /// one writer).
    pub write_wait: Histogram,
    /// How long a write transaction held the SQLite writer, from its `BEGIN` or `SAVEPOINT`
    /// to handing the connection on (its group's `COMMIT` included when it ran it).
    pub write_hold: Histogram,
    /// How long a group's `COMMIT` took on SQLite (its fsync).
    pub commit_time: Histogram,
    /// On SQLite, from a write transaction handing the writer on to a queued one to that one
    /// running: the writer is idle meanwhile, waiting for the next member's task to be polled.
    pub write_handoff: Histogram,
    /// How long a statement ran, as sea-orm measured it.
    pub statement_time: Histogram,
    /// Write transactions per commit (SQLite group commit; see `store::writer`).
    pub commit_group: Histogram,
}

pub static STORE: StoreMetrics = StoreMetrics {
    statements: AtomicU64::new(0),
    write_transactions: AtomicU64::new(0),
    lease_takeovers: AtomicU64::new(0),
    notices_sent: AtomicU64::new(0),
    notices_skipped: AtomicU64::new(0),
    stale_snapshots: AtomicU64::new(0),
    write_wait: Histogram::latency(),
    write_hold: Histogram::latency(),
    commit_time: Histogram::latency(),
    write_handoff: Histogram::latency(),
    statement_time: Histogram::latency(),
    commit_group: Histogram::size(),
};

/// SQLite's own heap in this process, in bytes: what it holds now and the most it has held
/// since the process started. Page caches (up to `cache_size` per connection), prepared
/// statements and schemas of every SQLite connection of the process count here, whichever
/// store opened them; a process on PostgreSQL holds next to nothing.
pub fn sqlite_memory() -> (i64, i64) {
    // SAFETY: both functions take no pointers and read SQLite's global counters under its own
    // mutex (the library is built with SQLITE_THREADSAFE=1); they are callable at any time,
    // before any connection is opened included. `0` asks for the high-water mark without
    // resetting it.
    #[allow(unsafe_code)]
    unsafe {
        (
            libsqlite3_sys::sqlite3_memory_used(),
            libsqlite3_sys::sqlite3_memory_highwater(0),
        )
    }
}

impl StoreMetrics {
    pub fn render(&self, out: &mut String) {
        for (name, help, value) in [
            (
                "turnkey_store_statements_total",
                "SQL statements the store ran.",
                &self.statements,
            ),
            (
                "turnkey_store_write_transactions_total",
                "Write transactions the store began.",
                &self.write_transactions,
            ),
            (
                "turnkey_lease_takeovers_total",
                "Session leases taken from a holder that had expired or died.",
                &self.lease_takeovers,
            ),
            (
                "turnkey_notices_sent_total",
                "Cross-replica notices sent with a commit (PostgreSQL).",
                &self.notices_sent,
            ),
            (
                "turnkey_notices_skipped_total",
                "Cross-replica notices not sent because no other replica listened.",
                &self.notices_skipped,
            ),
            (
                "turnkey_store_stale_snapshots_total",
                "One-statement writes (PostgreSQL) that another commit overtook and that ran again.",
                &self.stale_snapshots,
            ),
        ] {
            header(out, name, "counter", help);
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        let (used, highwater) = sqlite_memory();
        for (name, help, value) in [
            (
                "turnkey_sqlite_memory_bytes",
                "SQLite's heap in this process (page caches, prepared statements, schemas).",
                used,
            ),
            (
                "turnkey_sqlite_memory_highwater_bytes",
                "The most SQLite's heap in this process has held since it started.",
                highwater,
            ),
        ] {
            header(out, name, "gauge", help);
            let _ = writeln!(out, "{name} {value}");
        }
        for (name, help, histogram) in [
            (
                "turnkey_store_write_wait_seconds",
                "Wait for a write transaction to begin.",
                &self.write_wait,
            ),
            (
                "turnkey_store_write_hold_seconds",
                "Time a write transaction held the SQLite writer.",
                &self.write_hold,
            ),
            (
                "turnkey_store_commit_seconds",
                "Time a SQLite group commit took (its fsync).",
                &self.commit_time,
            ),
            (
                "turnkey_store_write_handoff_seconds",
                "Time the SQLite writer waited for the next queued write transaction to run.",
                &self.write_handoff,
            ),
            (
                "turnkey_store_statement_seconds",
                "Time one SQL statement took.",
                &self.statement_time,
            ),
            (
                "turnkey_store_commit_group_transactions",
                "Write transactions that shared one commit (SQLite group commit).",
                &self.commit_group,
            ),
        ] {
            header(out, name, "histogram", help);
            histogram.render(out, name, "");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_the_sum_adds_up() {
        let h = Histogram::latency();
        h.observe(0.0002);
        h.observe(0.003);
        h.observe(0.003);
        h.observe(100.0);
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "stage=\"a\"");
        assert!(
            out.contains("x_seconds_bucket{stage=\"a\",le=\"0.0001\"} 0\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{stage=\"a\",le=\"0.00025\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{stage=\"a\",le=\"0.005\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{stage=\"a\",le=\"60\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{stage=\"a\",le=\"+Inf\"} 4\n"),
            "{out}"
        );
        assert!(out.contains("x_seconds_count{stage=\"a\"} 4\n"), "{out}");
        let sum: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix("x_seconds_sum{stage=\"a\"} "))
            .and_then(|v| v.parse().ok())
            .expect("sum line");
        assert!((sum - 100.0062).abs() < 1e-6, "{sum}");
        assert_eq!(h.count(), 4);
    }

    #[test]
    fn an_unlabelled_series_has_no_empty_braces() {
        let h = Histogram::size();
        h.observe(3.0);
        let mut out = String::new();
        h.render(&mut out, "b", "");
        assert!(out.contains("b_bucket{le=\"3\"} 1\n"), "{out}");
        assert!(out.contains("b_sum 3\n"), "{out}");
        assert!(out.contains("b_count 1\n"), "{out}");
    }
}
