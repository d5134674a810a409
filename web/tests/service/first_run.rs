//! What a new user meets first, through the real binary: `doctor` changes nothing and fails on
//! any problem (no provider, a provider that does not answer, a store not migrated), `serve`
//! warns when no provider is set, and a bad `--bind` is a usage error before the store is touched.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may fail loudly
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};
use tempfile::TempDir;
use turnkey_web::startup::NO_PROVIDER_WARNING;

const BIN: &str = env!("CARGO_BIN_EXE_turnkey");

/// The binary in `dir` with nothing of this process's environment but PATH: the data
/// directory is the default `./data`, relative to `dir`.
fn command(dir: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn");
    c
}

fn with_provider(mut c: Command, base_url: &str) -> Command {
    c.env("OPENAI_BASE_URL", base_url)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_MODEL", "test-model");
    c
}

fn run(mut c: Command, args: &[&str]) -> (Option<i32>, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = c.args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    (status.code(), text)
}

/// Every path under `dir` with its size and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                todo.push(entry.path());
            }
            out.insert(entry.path(), (meta.len(), meta.modified().unwrap()));
        }
    }
    out
}

/// A loopback HTTP server that answers every request with `status` and `body`, and hands
/// over each request's head (request line and headers).
fn http_server(status: &'static str, body: &'static str) -> (String, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut head = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            let answer = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(answer.as_bytes()).unwrap();
            if tx.send(head).is_err() {
                return;
            }
        }
    });
    (base, rx)
}

const MODELS: &str = r#"{"object":"list","data":[{"id":"test-model","object":"model"}]}"#;

/// A loopback address where nothing listens.
fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/v1")
}

#[test]
fn doctor_on_an_empty_directory_creates_nothing() {
    let d = TempDir::new().unwrap();
    let (base, requests) = http_server("200 OK", MODELS);
    let (code, out) = run(with_provider(command(d.path()), &base), &["doctor"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("does not exist yet"), "{out}");
    assert!(
        snapshot(d.path()).is_empty(),
        "doctor created {:?}",
        snapshot(d.path())
    );
    // The provider was asked for its models, with the key as Bearer.
    let head = requests.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(head.starts_with("GET /v1/models HTTP/1.1"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("authorization: bearer sk-test"),
        "{head}"
    );
    assert!(out.contains("model test-model is listed"), "{out}");
    // One line on the OS sandbox (SPEC R13.7): what confines commands here, or why nothing
    // does (a warning in auto mode, not a problem).
    let sandbox = turnkey_tools::Sandbox::new(turnkey_tools::SandboxMode::Auto, false).unwrap();
    let line = if sandbox.state().enforced {
        "sandbox: ok: landlock ABI"
    } else {
        "sandbox: WARNING: NOT confined"
    };
    assert!(out.contains(line), "{out}");
}

#[test]
fn doctor_in_landlock_mode_reports_the_sandbox_or_fails() {
    let d = TempDir::new().unwrap();
    std::fs::write(
        d.path().join("turnkey.toml"),
        "[tools]\nsandbox = \"landlock\"\n",
    )
    .unwrap();
    let (base, _requests) = http_server("200 OK", MODELS);
    let (code, out) = run(with_provider(command(d.path()), &base), &["doctor"]);
    let sandbox = turnkey_tools::Sandbox::new(turnkey_tools::SandboxMode::Auto, false).unwrap();
    if sandbox.state().complete() {
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains("sandbox: ok: landlock ABI"), "{out}");
        assert!(out.contains("network denied"), "{out}");
    } else {
        assert_eq!(code, Some(1), "{out}");
        assert!(
            out.contains("sandbox: PROBLEM: tools.sandbox = \"landlock\""),
            "{out}"
        );
    }
}

#[test]
fn doctor_without_a_provider_exits_1() {
    let d = TempDir::new().unwrap();
    let mut c = command(d.path());
    c.env("TURNKEY__SERVER__DETECT_PROVIDERS", closed_port());
    let (code, out) = run(c, &["doctor"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("providers: PROBLEM: none configured"), "{out}");
    assert!(out.contains("doctor: 1 problem(s) found"), "{out}");
    assert!(snapshot(d.path()).is_empty());
}

/// Nothing configured, but a local server answers where `serve` would look: doctor says that
/// `serve` would use it, checks it, and finds no problem.
#[test]
fn doctor_without_a_provider_reports_the_local_server_serve_would_use() {
    let d = TempDir::new().unwrap();
    let (base, _requests) = http_server("200 OK", MODELS);
    let mut c = command(d.path());
    c.env(
        "TURNKEY__SERVER__DETECT_PROVIDERS",
        format!("{},{base}", closed_port()),
    );
    let (code, out) = run(c, &["doctor"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains(&format!(
            "serve would use the local server it finds at {base} (model test-model)"
        )),
        "{out}"
    );
    assert!(out.contains("model test-model is listed"), "{out}");
}

/// A model name the server does not serve is a problem, and the answer names what it serves.
#[test]
fn doctor_with_a_model_the_server_does_not_list_exits_1() {
    let d = TempDir::new().unwrap();
    let (base, _requests) = http_server("200 OK", MODELS);
    let mut c = with_provider(command(d.path()), &base);
    c.env("OPENAI_MODEL", "gpt-typo");
    let (code, out) = run(c, &["doctor"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("model \"gpt-typo\" is not among what it serves: test-model"),
        "{out}"
    );
}

#[test]
fn doctor_with_a_provider_that_does_not_answer_exits_1() {
    let d = TempDir::new().unwrap();
    let (code, out) = run(
        with_provider(command(d.path()), &closed_port()),
        &["doctor"],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("PROBLEM: GET http://127.0.0.1:"), "{out}");
    assert!(out.contains("no answer"), "{out}");

    // An answer that is an error is a problem too, and says which.
    let (base, _requests) = http_server("401 Unauthorized", r#"{"error":"bad key"}"#);
    let (code, out) = run(with_provider(command(d.path()), &base), &["doctor"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("answered HTTP 401"), "{out}");
    assert!(snapshot(d.path()).is_empty());
}

#[test]
fn doctor_reads_an_existing_store_without_changing_it() {
    let d = TempDir::new().unwrap();
    let (code, out) = run(command(d.path()), &["migrate"]);
    assert_eq!(code, Some(0), "{out}");
    let before = snapshot(d.path());
    // File times have a coarse resolution on some file systems.
    std::thread::sleep(Duration::from_millis(20));
    let (base, _requests) = http_server("200 OK", MODELS);
    let (code, out) = run(with_provider(command(d.path()), &base), &["doctor"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("reachable, migrated"), "{out}");
    // No file appears or goes, and the database and its WAL are untouched. The `-shm` file is
    // SQLite's shared-memory index, where every reader (a read-only one too) takes its read
    // lock, so its time may move.
    let after = snapshot(d.path());
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    let without_shm = |m: BTreeMap<PathBuf, (u64, SystemTime)>| {
        m.into_iter()
            .filter(|(p, _)| !p.to_string_lossy().ends_with("-shm"))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(
        without_shm(after),
        without_shm(before),
        "doctor changed the data directory"
    );
}

#[test]
fn doctor_reports_a_store_that_is_not_migrated() {
    let d = TempDir::new().unwrap();
    std::fs::create_dir(d.path().join("data")).unwrap();
    std::fs::write(d.path().join("data").join("turnkey.db"), b"").unwrap();
    let (base, _requests) = http_server("200 OK", MODELS);
    let (code, out) = run(with_provider(command(d.path()), &base), &["doctor"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("NOT migrated"), "{out}");
}

#[test]
fn serve_with_a_bad_bind_exits_2_before_touching_the_store() {
    let d = TempDir::new().unwrap();
    let (code, out) = run(command(d.path()), &["serve", "--bind", "nonsense"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("invalid config: server.bind:"), "{out}");
    assert!(snapshot(d.path()).is_empty(), "{:?}", snapshot(d.path()));
}

#[test]
fn serve_without_a_provider_says_how_to_set_one() {
    let d = TempDir::new().unwrap();
    let (_, err) = serve_once(d.path(), |_| {});
    assert!(err.contains(NO_PROVIDER_WARNING), "{err}");
    for needle in [
        "no_provider",
        "[[providers]]",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_MODEL",
        turnkey_web::configuration::DEFAULT_OPENAI_MODEL,
    ] {
        assert!(NO_PROVIDER_WARNING.contains(needle), "{needle}");
    }
}

/// The binary as a kernel without Landlock would run it: a seccomp filter (inherited, and
/// kept across exec) answers `ENOSYS` to the Landlock system calls.
fn without_landlock(mut c: Command) -> Command {
    use seccompiler::{SeccompAction, SeccompFilter, TargetArch};
    use std::os::unix::process::CommandExt;
    let rules = [
        libc::SYS_landlock_create_ruleset,
        libc::SYS_landlock_add_rule,
        libc::SYS_landlock_restrict_self,
    ]
    .into_iter()
    .map(|nr| (nr, vec![]))
    .collect();
    let arch = TargetArch::try_from(std::env::consts::ARCH).unwrap();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .unwrap();
    let program: seccompiler::BpfProgram = filter.try_into().unwrap();
    #[allow(unsafe_code)]
    // SAFETY: between fork and exec the closure makes two system calls (prctl, seccomp) on
    // a program built before the fork; it does not allocate on success.
    unsafe {
        c.pre_exec(move || {
            seccompiler::apply_filter(&program).map_err(|_| std::io::Error::last_os_error())
        });
    }
    c
}

#[test]
fn r13_7_serve_in_landlock_mode_refuses_a_kernel_without_landlock() {
    let d = TempDir::new().unwrap();
    std::fs::write(
        d.path().join("turnkey.toml"),
        "[tools]\nsandbox = \"landlock\"\n",
    )
    .unwrap();
    let (base, _requests) = http_server("200 OK", MODELS);
    let serve = without_landlock(with_provider(command(d.path()), &base));
    let (code, out) = run(serve, &["serve", "--bind", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("tools.sandbox: \"landlock\", but this kernel cannot confine commands: Landlock is not in this kernel"),
        "{out}"
    );
    assert!(!out.contains("listening on"), "{out}");
    let doctor = without_landlock(with_provider(command(d.path()), &base));
    let (code, out) = run(doctor, &["doctor"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("sandbox: PROBLEM: tools.sandbox = \"landlock\""),
        "{out}"
    );
}

#[test]
fn r13_7_serve_in_auto_mode_without_landlock_starts_and_says_it_loudly() {
    let d = TempDir::new().unwrap();
    let (base, _requests) = http_server("200 OK", MODELS);
    let doctor = without_landlock(with_provider(command(d.path()), &base));
    let (code, out) = run(doctor, &["doctor"]);
    assert_eq!(code, Some(0), "a warning is not a problem: {out}");
    assert!(out.contains("sandbox: WARNING: NOT confined"), "{out}");
    assert!(out.contains("Landlock is not in this kernel"), "{out}");

    let mut child = without_landlock(with_provider(command(d.path()), &base))
        .args(["serve", "--bind", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let listening = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.starts_with("listening on "));
    let pid = child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(listening, "serve did not start: {err}");
    assert!(
        err.contains("warning: the OS sandbox is NOT in force"),
        "{err}"
    );
    assert!(err.contains("Landlock is not in this kernel"), "{err}");
}

/// One `serve` on a free port in `dir`, detection asking only a port where nothing listens (the
/// usual ones may be a real server's): runs `during` with the listening address once it is
/// up, stops it with SIGTERM, checks it exited 0, and answers (stdout, stderr).
fn serve_once(dir: &Path, during: impl FnOnce(&str)) -> (String, String) {
    let mut child = command(dir)
        .env("TURNKEY__SERVER__DETECT_PROVIDERS", closed_port())
        .args(["serve", "--bind", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut out = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let addr = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                out.push_str(&line);
                out.push('\n');
                if let Some(addr) = line.strip_prefix("listening on http://") {
                    break Some(addr.to_owned());
                }
            }
            Err(_) => break None,
        }
    };
    if let Some(addr) = &addr {
        during(addr);
    }
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(addr.is_some(), "serve did not start: {err}");
    assert!(killed.success() && status.success(), "{status}: {err}");
    (out, err)
}

/// `GET /v1/sessions` with `token` over plain HTTP: the status code.
fn get_sessions(addr: &str, token: &str) -> u16 {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /v1/sessions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// A first start whose port is taken writes the operator token but cannot print it; every
/// later start says where it is until it has been used once (issue 26).
#[test]
fn the_operator_tokens_file_is_named_on_every_start_until_it_is_used() {
    let d = TempDir::new().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    let (code, out) = run(
        {
            let mut c = command(d.path());
            c.env("TURNKEY__SERVER__DETECT_PROVIDERS", closed_port());
            c
        },
        &["serve", "--bind", &port],
    );
    assert_eq!(code, Some(1), "{out}");
    let file = d.path().join("data").join("operator.token");
    let token = std::fs::read_to_string(&file).unwrap().trim().to_owned();
    assert!(!token.is_empty());
    drop(taken);

    for _ in 0..2 {
        let (stdout, stderr) = serve_once(d.path(), |_| {});
        assert!(!stdout.contains("operator token:"), "{stdout}");
        assert!(
            stderr.contains("operator token: not used yet; it is in ")
                && stderr.contains("data/operator.token"),
            "{stderr}"
        );
    }
    // A wrong token does not count as a use; the right one does.
    let (_, stderr) = serve_once(d.path(), |addr| {
        assert_eq!(get_sessions(addr, "tk_wrong"), 401);
        assert_eq!(get_sessions(addr, &token), 200);
    });
    assert!(
        stderr.contains("not used yet"),
        "said on the start it was used: {stderr}"
    );
    let (_, stderr) = serve_once(d.path(), |_| {});
    assert!(!stderr.contains("operator token"), "{stderr}");
}

/// `serve --help` says where the provider comes from: the OPENAI_* variables and the local
/// servers it looks for (issue 26).
#[test]
fn serve_help_names_the_provider_variables_and_the_local_search() {
    let d = TempDir::new().unwrap();
    let (code, out) = run(command(d.path()), &["serve", "--help"]);
    assert_eq!(code, Some(0), "{out}");
    for needle in [
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_MODEL",
        "server.detect_providers",
        "TURNKEY__",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
}
