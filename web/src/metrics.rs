//! The counters behind `GET /metrics` (`routes::metrics`): HTTP requests by route pattern
//! (bounded cardinality) and status, open event streams, uptime; rendered in the Prometheus
//! text format with the gauges the handler reads at the time.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use turnkey_storage::OutboxStatus;
use turnkey_tools::SandboxState;

pub struct Metrics {
    started: Instant,
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    event_streams: AtomicI64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            requests: Mutex::new(BTreeMap::new()),
            event_streams: AtomicI64::new(0),
        }
    }

    /// `route` is the matched pattern (`/v1/sessions/{id}`), never the raw path.
    pub fn record_request(&self, route: &str, status: u16) {
        // A panic elsewhere while holding the lock leaves plain counters intact; keep counting.
        let mut map = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry((route.to_owned(), status)).or_insert(0) += 1;
    }

    /// Counts an open SSE stream until the guard is dropped.
    pub fn open_event_stream(self: &std::sync::Arc<Self>) -> EventStreamGuard {
        self.event_streams.fetch_add(1, Ordering::Relaxed);
        EventStreamGuard(self.clone())
    }

    /// `outbox`: the platform outbox's rows by status, when the store answered.
    pub fn render(
        &self,
        ready: bool,
        shutting_down: bool,
        outbox: Option<&BTreeMap<OutboxStatus, u64>>,
        sandbox: &SandboxState,
    ) -> String {
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, value: String| {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"
            ));
        };
        gauge("turnkey_up", "1 while the process serves.", "1".into());
        gauge(
            "turnkey_ready",
            "1 when the store is reachable and migrated.",
            u8::from(ready).to_string(),
        );
        gauge(
            "turnkey_shutting_down",
            "1 once a stop signal was received.",
            u8::from(shutting_down).to_string(),
        );
        gauge(
            "turnkey_uptime_seconds",
            "Seconds since the process started serving.",
            format!("{:.3}", self.started.elapsed().as_secs_f64()),
        );
        gauge(
            "turnkey_event_streams_open",
            "Server-sent event streams currently open.",
            self.event_streams.load(Ordering::Relaxed).to_string(),
        );
        gauge(
            "turnkey_sandbox_enforced",
            "1 when every command and MCP server is confined by Landlock (tools.sandbox).",
            u8::from(sandbox.enforced).to_string(),
        );
        gauge(
            "turnkey_sandbox_landlock_abi",
            "The kernel's Landlock ABI version; 0 without Landlock.",
            sandbox.landlock_abi.to_string(),
        );
        gauge(
            "turnkey_sandbox_network_denied",
            "1 when sandboxed commands cannot open network connections.",
            u8::from(sandbox.network_denied).to_string(),
        );
        gauge(
            "turnkey_sandbox_seccomp",
            "1 when the seccomp filter refusing non-Unix sockets is in force.",
            u8::from(sandbox.seccomp).to_string(),
        );
        if let Some(counts) = outbox {
            out.push_str(
                "# HELP turnkey_outbox_rows Platform messages in the outbox by status \
                 (unknown: cut mid-send by a crash, not sent again on their own).\n\
                 # TYPE turnkey_outbox_rows gauge\n",
            );
            for (status, n) in counts {
                out.push_str(&format!(
                    "turnkey_outbox_rows{{status=\"{}\"}} {n}\n",
                    status.as_str()
                ));
            }
        }
        out.push_str(&format!(
            "# HELP turnkey_build_info Build version.\n# TYPE turnkey_build_info gauge\n\
             turnkey_build_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        ));
        out.push_str(
            "# HELP turnkey_http_requests_total HTTP requests by route pattern and status.\n\
             # TYPE turnkey_http_requests_total counter\n",
        );
        let map = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        for ((route, status), n) in map.iter() {
            out.push_str(&format!(
                "turnkey_http_requests_total{{route=\"{}\",status=\"{status}\"}} {n}\n",
                escape_label(route)
            ));
        }
        drop(map);
        turnkey_actors::stages::TURNS.render(&mut out);
        turnkey_storage::metrics::STORE.render(&mut out);
        out
    }
}

pub struct EventStreamGuard(std::sync::Arc<Metrics>);

impl Drop for EventStreamGuard {
    fn drop(&mut self) {
        self.0.event_streams.fetch_sub(1, Ordering::Relaxed);
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_by_route_and_status() {
        let m = Metrics::new();
        m.record_request("/v1/sessions/{id}", 200);
        m.record_request("/v1/sessions/{id}", 200);
        m.record_request("unmatched", 404);
        let outbox = BTreeMap::from([(OutboxStatus::Pending, 2), (OutboxStatus::Unknown, 1)]);
        let sandbox = turnkey_tools::Sandbox::off();
        let text = m.render(true, false, Some(&outbox), sandbox.state());
        assert!(text.contains("turnkey_outbox_rows{status=\"unknown\"} 1\n"));
        assert!(text.contains("turnkey_outbox_rows{status=\"pending\"} 2\n"));
        assert!(text.contains("turnkey_up 1\n"));
        assert!(text.contains("turnkey_ready 1\n"));
        assert!(text.contains("turnkey_sandbox_enforced 0\n"));
        assert!(text.contains(
            "turnkey_http_requests_total{route=\"/v1/sessions/{id}\",status=\"200\"} 2\n"
        ));
        assert!(
            text.contains("turnkey_http_requests_total{route=\"unmatched\",status=\"404\"} 1\n")
        );
    }
}
