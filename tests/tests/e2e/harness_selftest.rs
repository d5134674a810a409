//! Tests of the harness itself against a stand-in `turnkey` (a small Python HTTP server):
//! config file, listening line, token, restart, SIGKILL and self-kill detection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;
use turnkey_tests::{ScriptedProvider, Turnkey, TurnkeyOptions};

const FAKE: &str = r#"#!/usr/bin/env python3
import http.server, json, os, signal, sys, tomllib
args = sys.argv[1:]
assert args[0] == "serve", args
config = tomllib.load(open(args[args.index("--config") + 1], "rb"))
assert args[args.index("--bind") + 1] == "127.0.0.1:0"
token = config["auth"]["operator_token"]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        sys.stderr.write("fake: %s\n" % (a,))
    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/healthz":
            return self.answer(200, {"status": "ok"})
        if self.headers.get("Authorization") != "Bearer " + token:
            return self.answer(401, {"error": {"code": "unauthorized", "message": "no"}})
        if self.path == "/v1/config":
            return self.answer(200, {"config": config, "failpoints": os.environ.get("FAILPOINTS"),
                                     "cwd": os.getcwd()})
        if self.path == "/v1/die":
            os.kill(os.getpid(), signal.SIGKILL)
        self.answer(404, {"error": {"code": "not_found", "message": self.path}})
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
print("migrations done", flush=True)
print("listening on http://127.0.0.1:%d" % srv.server_address[1], flush=True)
srv.serve_forever()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_starts_restarts_and_kills_a_stand_in() {
    let bin_dir = tempfile::tempdir().unwrap();
    let bin = bin_dir.path().join("turnkey");
    std::fs::write(&bin, FAKE).unwrap();
    let mut perms = std::fs::metadata(&bin).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&bin, perms).unwrap();
    let provider = ScriptedProvider::start();
    let opts = TurnkeyOptions::new(&provider)
        .env("FAILPOINTS", "x=return")
        .binary(&bin);
    let mut tk = Turnkey::start(opts).await;
    let api = tk.api();
    assert_eq!(api.healthz().await.status, 200);
    let cfg = api.get("/v1/config").await;
    assert_eq!(cfg.status, 200, "{}", cfg.text);
    let config = &cfg.body["config"];
    assert_eq!(
        config["providers"][0]["base_url"],
        provider.base_url.as_str()
    );
    assert_eq!(config["providers"][0]["kind"], "openai");
    assert_eq!(config["database"]["url"], tk.database_url.as_str());
    assert!(tk.database_url.starts_with("sqlite://"));
    assert_eq!(config["lease"]["ttl_s"], 10);
    assert_eq!(cfg.body["failpoints"], "x=return");
    assert_eq!(
        cfg.body["cwd"].as_str().map(std::path::PathBuf::from),
        Some(tk.dir.path().canonicalize().unwrap())
    );
    assert_eq!(
        api.with_token(Some("bad")).get("/v1/config").await.status,
        401
    );

    let old_url = tk.url.clone();
    tk.restart_with_env(&[]).await;
    let cfg = tk.api().get("/v1/config").await;
    assert!(
        cfg.body["failpoints"].is_null(),
        "restart drops the failpoint"
    );
    assert_ne!(tk.url, old_url, "a new process on a new port");

    // A process that kills itself is noticed by wait_exit.
    let died = tk
        .api()
        .try_send(reqwest::Method::GET, "/v1/die", None, &[])
        .await;
    assert!(died.is_err());
    assert!(tk.wait_exit(Duration::from_secs(5)).await.is_some());
    assert!(!tk.is_running());

    tk.restart().await;
    assert!(tk.is_running());
    tk.kill();
    assert!(!tk.is_running());
    assert!(tk.log_tail(50).contains("listening on http://"));
}
