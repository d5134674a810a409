//! A first run with no provider configured (issue 26), through the real binary: `serve` asks
//! the usual local ports for an OpenAI-compatible server and uses the first that lists a model,
//! saying so on stderr. Here a scripted server plays Ollama on its own port, 11434; a candidate
//! before it that does not answer is passed over. With nothing to find, submissions are 503
//! `no_provider`, as before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use turnkey_tests::{pg, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;

const OLLAMA: &str = "http://127.0.0.1:11434/v1";
/// Nothing listens on port 1 of the loopback.
const NOTHING: &str = "http://127.0.0.1:1/v1";

async fn answers_with(ollama: &ScriptedProvider, database: Option<&str>) {
    let opts = TurnkeyOptions::new(ollama).first_run(&[NOTHING, OLLAMA]);
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let tk = Turnkey::start(opts).await;
    let said = tk.stderr();
    assert!(
        said.contains(&format!(
            "provider: ollama (openai) at {OLLAMA}, model scripted-model (detected"
        )),
        "{said}"
    );
    assert!(!said.contains("no model provider is configured"), "{said}");

    let api = tk.api();
    let models = api.get("/v1/models").await;
    assert_eq!(
        models.body["data"][0]["id"], "scripted-model",
        "{}",
        models.text
    );
    let s = api.create_session_id().await;
    ollama.push(Reply::text("hello from the local model"));
    let a = api.submit_accepted(&s, "hello").await;
    let done = api.wait_terminal(&a, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert_eq!(
        done["outcome"]["final_response"], "hello from the local model",
        "{done}"
    );
    let last = ollama.requests().pop().unwrap();
    assert_eq!(last.body["model"], "scripted-model");
    assert!(
        !last
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("authorization")),
        "no key is sent to a detected server: {:?}",
        last.headers
    );
}

/// SQLite then PostgreSQL in one test: the port is one, so the two cannot run side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_a_first_run_with_no_configuration_answers_through_a_local_server() {
    let ollama = match ScriptedProvider::start_on(11434) {
        Ok(p) => p,
        // On a developer's machine a real Ollama may hold the port; where the suite must
        // prove every feature (CI, or any TURNKEY_REQUIRE_* flag) a skip would hide it.
        Err(e) if turnkey_tests::require::any_required() => {
            panic!("port 11434 is taken, so first-run detection cannot be tested: {e}")
        }
        Err(e) => {
            eprintln!("skipped: port 11434 is taken (a real Ollama?): {e}");
            return;
        }
    };
    answers_with(&ollama, None).await;
    if let Some(db) = pg::fresh_database().await {
        answers_with(&ollama, Some(db.url())).await;
    }
}

/// Nothing found: the server starts, says how to configure a provider, and refuses input with
/// 503 `no_provider`, admitting nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_a_first_run_that_finds_no_server_says_so_and_refuses_input() {
    let unused = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&unused).first_run(&[NOTHING])).await;
    let said = tk.stderr();
    assert!(said.contains("no model provider is configured"), "{said}");
    let api = tk.api();
    let s = api.create_session_id().await;
    let r = api.submit(&s, "hello", None).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.error_code(), Some("no_provider"), "{}", r.text);
    // It says how to connect one while the server runs, and that no restart is needed
    // (issue 38: it said "then restart").
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("POST /v1/providers")
            && message.contains("Models page")
            && message.contains("no restart"),
        "{message}"
    );
    assert!(!message.contains("then restart"), "{message}");
    assert_eq!(unused.request_count(), 0);
}

/// A port another program holds (llama.cpp's server listens on 8080 too, turnkey's default):
/// `serve` stops at once, says the address is taken and how to choose another (issue 38).
#[test]
fn r1_a_a_taken_port_stops_serve_with_a_hint_to_bind_elsewhere() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(turnkey_tests::harness::turnkey_binary().unwrap());
    cmd.args(["serve", "--bind", &addr.to_string()])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("TURNKEY__") || k.starts_with("OPENAI_") || k == "DATABASE_URL" {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .env("TURNKEY__SERVER__DATA_DIR", dir.path().join("data"))
        .spawn()
        .unwrap();
    // Bounded: a server that somehow bound would serve until killed.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut said).unwrap();
    let status = status.unwrap_or_else(|| panic!("serve did not stop: {said}"));
    assert!(!status.success(), "{said}");
    let line = said
        .lines()
        .find(|l| l.contains(&format!("cannot bind {addr}")))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        line.contains("already in use")
            && line.contains("llama.cpp")
            && line.contains("--bind 127.0.0.1:"),
        "{line}"
    );
    drop(taken);
}
