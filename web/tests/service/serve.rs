//! The real `turnkey` binary: exit codes, the stdout lines scripts rely on, SIGTERM, and the
//! SSE stream over a real socket (gap-free replay, `Last-Event-ID`, live events).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may fail loudly
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_turnkey");

fn command(dir: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .env("TURNKEY__SERVER__DATA_DIR", dir.join("data"))
        .env("TURNKEY__TOOLS__WORKSPACE", dir.join("ws"));
    c
}

struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    base: String,
}

impl Running {
    fn start(dir: &Path) -> (Self, Vec<String>) {
        std::fs::create_dir_all(dir.join("ws")).unwrap();
        // A provider that refuses connections: turns fail fast, and submissions are admitted
        // (with no provider at all they would be refused with 503 no_provider).
        let mut child = command(dir)
            .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
            .args(["serve", "--bind", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn turnkey serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // From here on `Drop` reaps the child, even if a check below fails.
        let mut running = Self {
            child,
            lines,
            base: String::new(),
        };
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = running
                .lines
                .recv_timeout(left)
                .expect("no listening line in time");
            seen.push(line.clone());
            if let Some(addr) = line.strip_prefix("listening on http://") {
                running.base = format!("http://{addr}");
                return (running, seen);
            }
        }
    }

    fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(ok.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(self.lines.try_recv().is_err(), "nothing more on stdout");
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "turnkey did not stop after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Only reached when a test failed before `stop`: do not leave a server behind.
        if let Ok(None) = self.child.try_wait() {
            self.child.kill().ok();
            self.child.wait().ok();
        }
    }
}

#[test]
fn invalid_config_exits_2_and_names_the_key() {
    let d = TempDir::new().unwrap();
    let out = command(d.path())
        .env("TURNKEY__LEASE__TTL_S", "soon")
        .args(["serve", "--bind", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid config: lease.ttl_s:"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_usage_exits_2_and_chat_without_a_server_exits_1() {
    let d = TempDir::new().unwrap();
    let out = command(d.path())
        .args(["serve", "--nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // No --token, no TURNKEY_TOKEN, no ./data/operator.token: bad usage.
    let out = command(d.path()).args(["chat"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no token"));
    // Nothing listens on port 9.
    let out = command(d.path())
        .args(["chat", "--url", "http://127.0.0.1:9", "--token", "tk_x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach http://127.0.0.1:9"));
}

#[tokio::test]
async fn serve_prints_the_token_once_and_stops_on_sigterm() {
    let d = TempDir::new().unwrap();
    let (server, lines) = Running::start(d.path());
    assert_eq!(lines.len(), 2, "{lines:?}");
    let token = lines[0]
        .strip_prefix("operator token: tk_")
        .map(|t| format!("tk_{t}"))
        .expect("first line is the generated token");
    assert!(
        !server.base.ends_with(":0"),
        "the real port is printed: {}",
        server.base
    );

    let token_file = d.path().join("data").join("operator.token");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let http = reqwest::Client::new();
    let health: Value = http
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health, json!({"status": "ok"}));
    assert!(server.stop().success());

    let (server, lines) = Running::start(d.path());
    assert_eq!(
        lines.len(),
        1,
        "the token is printed only when generated: {lines:?}"
    );
    let res = http
        .get(format!("{}/v1/sessions", server.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(server.stop().success());
}

/// Reads SSE frames as `(id, event)` until `want` frames arrived or `quiet` passed without any.
async fn frames(res: &mut reqwest::Response, want: usize, quiet: Duration) -> Vec<(i64, String)> {
    let mut buf = String::new();
    let mut out = Vec::new();
    while out.len() < want {
        let chunk = match tokio::time::timeout(quiet, res.chunk()).await {
            Ok(Ok(Some(c))) => c,
            _ => break,
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut id = None;
            let mut event = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = v.parse::<i64>().ok();
                } else if let Some(v) = line.strip_prefix("event: ") {
                    event = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    let data: Value = serde_json::from_str(v).expect("data is JSON");
                    assert!(data["seq"].is_i64());
                }
            }
            if let (Some(id), Some(event)) = (id, event) {
                out.push((id, event));
            }
        }
    }
    out
}

#[tokio::test]
async fn r11_2_sse_replays_gap_free_honours_last_event_id_and_goes_live() {
    let d = TempDir::new().unwrap();
    let (server, lines) = Running::start(d.path());
    let token = lines[0].trim_start_matches("operator token: ").to_owned();
    let http = reqwest::Client::new();
    let session: Value = http
        .post(format!("{}/v1/sessions", server.base))
        .bearer_auth(&token)
        .json(&json!({"title": "sse"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = session["id"].as_str().unwrap().to_owned();
    let submit = |text: &str| {
        http.post(format!("{}/v1/sessions/{id}/submissions", server.base))
            .bearer_auth(&token)
            .json(&json!({"text": text}))
            .send()
    };
    let receipt: Value = submit("first").await.unwrap().json().await.unwrap();
    // Let the (provider-less) turn settle so that the log stops growing.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let adm: Value = http
            .get(format!(
                "{}/v1/admissions/{}",
                server.base,
                receipt["admission_id"].as_str().unwrap()
            ))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if adm["status"] == "terminal" || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page: Value = http
        .get(format!("{}/v1/sessions/{id}/events?since=0", server.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let stored: Vec<i64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert!(!stored.is_empty());
    let last = *stored.last().unwrap();

    let events_url = format!("{}/v1/sessions/{id}/events?since=0", server.base);
    let mut res = http
        .get(&events_url)
        .bearer_auth(&token)
        .header("Accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let replay = frames(&mut res, stored.len(), Duration::from_secs(3)).await;
    let ids: Vec<i64> = replay.iter().map(|(i, _)| *i).collect();
    assert_eq!(ids, stored, "the replay is the stored log, in order, once");
    assert_eq!(replay[0].1, "admission.queued");

    // Live: the next submission's events arrive on the open stream, continuing the seq.
    submit("second").await.unwrap();
    let live = frames(&mut res, 1, Duration::from_secs(5)).await;
    assert_eq!(live.first().map(|f| f.0), Some(last + 1), "{live:?}");
    assert_eq!(live[0].1, "admission.queued");
    drop(res);

    // Last-Event-ID wins over since.
    let mut res = http
        .get(&events_url)
        .bearer_auth(&token)
        .header("Accept", "text/event-stream")
        .header("Last-Event-ID", last.to_string())
        .send()
        .await
        .unwrap();
    let resumed = frames(&mut res, 1, Duration::from_secs(3)).await;
    assert_eq!(resumed.first().map(|f| f.0), Some(last + 1), "{resumed:?}");
    drop(res);
    assert!(server.stop().success());
}
