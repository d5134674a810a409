//! `turnkey chat`, the terminal client (SPEC R1.2), driven through a pseudo-terminal against
//! the real `turnkey serve` and the scripted provider: streamed answers with the usage line,
//! tool progress, approvals answered y and n, Ctrl-C interrupting a slow turn, resuming a
//! session with its history, a server restart followed without repeats (and a line typed
//! while it was down sent once), and the exit codes of a bad token and bad usage.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use turnkey_tests::chat_pty::{chat_command, ChatPty};
use turnkey_tests::harness::DEFAULT_MAX_RESUMES;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::{eventually, BOUND};
pub(crate) const PROMPT: &str = "you> ";

pub(crate) async fn start(provider: &ScriptedProvider, tools_toml: &str) -> Turnkey {
    Turnkey::start(TurnkeyOptions::new(provider).extra_toml(&format!("[tools]\n{tools_toml}\n")))
        .await
}

/// Runs blocking pty work off the async worker (the server's clients share the runtime).
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// `turnkey chat` against `tk` with its token, on a pty, in `tk`'s dir.
pub(crate) fn chat(tk: &Turnkey, extra: &[&str]) -> ChatPty {
    let mut args = vec!["--url", tk.url.as_str(), "--token", tk.token.as_str()];
    args.extend_from_slice(extra);
    ChatPty::spawn(chat_command(&args, tk.dir.path()))
}

/// The session id from the first lines of a new conversation.
pub(crate) fn session_id(pty: &mut ChatPty) -> String {
    pty.expect("session ");
    let id = pty.expect("\r\n").trim().to_owned();
    assert_eq!(id.len(), 36, "a session id: {id:?}");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_chat_streams_the_answer_and_shows_the_usage_line() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::chunks(
        &["Hello", ", streamed", " world"],
        Duration::from_millis(150),
    ));
    let tk = start(&provider, "approval = \"off\"").await;
    let api = tk.api();

    let mut pty = chat(&tk, &[]);
    let session = blocking(|| {
        let id = session_id(&mut pty);
        pty.expect(&format!("turnkey chat --session {id}"));
        pty.expect(PROMPT);
        pty.send_line("say hello");
        pty.expect("Hello, streamed world");
        let usage = pty.expect(PROMPT);
        assert!(usage.contains("[completed | tokens: "), "{usage:?}");
        assert!(usage.contains("| cost: $"), "{usage:?}");
        id
    });
    // The session is real and holds the turn; the submission carried an Idempotency-Key.
    let messages = api.messages(&session).await;
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[0]["content"], "say hello");
    assert_eq!(messages[1]["content"], "Hello, streamed world");
    let events = api.all_events(&session, 0).await;
    let queued: Vec<_> = events
        .iter()
        .filter(|e| e["kind"] == "admission.queued")
        .collect();
    assert_eq!(queued.len(), 1, "one input, one admission");
    let admission = api
        .admission(queued[0]["admission_id"].as_str().unwrap())
        .await;
    assert_eq!(admission.body["outcome"]["result"], "completed");

    // Ctrl-D at the prompt leaves with 0.
    let code = blocking(|| {
        pty.ctrl_d();
        pty.exit_code(BOUND)
    });
    assert_eq!(code, 0, "{}", pty.output());
    assert_eq!(pty.count("Hello, streamed world"), 1, "{}", pty.output());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_a_tool_round_shows_started_progress_and_completed() {
    let provider = ScriptedProvider::start();
    // Over 5 s, so the running call sends one sign of life (`tool.progress`).
    provider.push(Reply::TextThenToolCalls(
        "Let me check. ".into(),
        vec![(
            "c1".into(),
            "terminal".into(),
            json!({"command": "sleep 6; echo tool-output-42"}),
        )],
    ));
    provider.push(Reply::text("The tool said 42."));
    let tk = start(&provider, "approval = \"off\"").await;

    let mut pty = chat(&tk, &[]);
    blocking(|| {
        pty.expect(PROMPT);
        pty.send_line("run the tool");
        pty.expect("Let me check.");
        pty.expect(r#"[tool] terminal {"command":"sleep 6; echo tool-output-42"}"#);
        pty.expect("[tool] terminal: ");
        pty.expect("[tool] terminal ok in ");
        pty.expect("tool-output-42");
        pty.expect("The tool said 42.");
        pty.expect("[completed | tokens: ");
        pty.expect(PROMPT);
        pty.ctrl_c();
        assert_eq!(
            pty.exit_code(BOUND),
            0,
            "Ctrl-C at the prompt leaves with 0"
        );
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_approvals_are_asked_with_the_time_left_and_answered_y_and_n() {
    let provider = ScriptedProvider::start();
    let tk = start(
        &provider,
        "approval = \"dangerous\"\napproval_timeout_s = 120",
    )
    .await;
    let ws = tk.dir.path().join("workspace");
    provider.push(Reply::tool_call(
        "a1",
        "terminal",
        json!({"command": "echo yes > approved"}),
    ));
    provider.push(Reply::text("ran it"));
    provider.push(Reply::tool_call(
        "d1",
        "terminal",
        json!({"command": "echo no > denied"}),
    ));
    provider.push(Reply::text("did not run it"));

    let mut pty = chat(&tk, &[]);
    blocking(|| {
        pty.expect(PROMPT);
        pty.send_line("please approve");
        pty.expect(r#"Approve terminal {"command":"echo yes > approved"}? [y/n] ("#);
        let left = pty.expect(" left) ");
        assert!(
            left.contains("min") || left.trim().parse::<u32>().is_ok(),
            "{left:?}"
        );
        pty.send_line("y");
        pty.expect("[approval] terminal: approved");
        pty.expect("[tool] terminal ok in ");
        pty.expect("ran it");
        pty.expect(PROMPT);

        pty.send_line("please deny");
        pty.expect(r#"Approve terminal {"command":"echo no > denied"}? [y/n]"#);
        pty.send_line("maybe");
        pty.expect("[please answer y or n]");
        pty.expect(r#"Approve terminal {"command":"echo no > denied"}? [y/n]"#);
        pty.send_line("n");
        pty.expect("[approval] terminal: denied");
        pty.expect("[tool] terminal denied");
        pty.expect("did not run it");
        pty.expect(PROMPT);
    });
    assert!(ws.join("approved").exists(), "approved call ran");
    assert!(!ws.join("denied").exists(), "denied call did not run");
    blocking(|| {
        pty.ctrl_d();
        assert_eq!(pty.exit_code(BOUND), 0);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_a_failed_turn_shows_its_reason_and_the_conversation_goes_on() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::error(400, "model_not_found"));
    let tk = Turnkey::start(
        TurnkeyOptions::new(&provider)
            .provider_toml("max_retries = 0")
            .extra_toml("[tools]\napproval = \"off\"\n"),
    )
    .await;
    let mut pty = chat(&tk, &[]);
    blocking(|| {
        pty.expect(PROMPT);
        pty.send_line("this fails");
        let failed = pty.expect(PROMPT);
        assert!(
            failed.contains("[failed: provider_client_error ("),
            "the reason and its message: {failed:?}"
        );
        assert!(failed.contains("| tokens: "), "{failed:?}");
        pty.send_line("this works");
        pty.expect("ok: this works");
        pty.expect(PROMPT);
        pty.ctrl_d();
        assert_eq!(pty.exit_code(BOUND), 0);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_an_approval_left_open_is_asked_again_on_resume() {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "approval = \"always\"\napproval_timeout_s = 300").await;
    provider.push(Reply::tool_call(
        "r1",
        "read_file",
        json!({"path": "notes.txt"}),
    ));
    provider.push(Reply::text("read it"));
    std::fs::create_dir_all(tk.dir.path().join("workspace")).unwrap();
    std::fs::write(tk.dir.path().join("workspace/notes.txt"), "note").unwrap();

    // Ctrl-D while the question is open: the client leaves, the approval stays pending.
    let mut first = chat(&tk, &[]);
    let session = blocking(|| {
        let id = session_id(&mut first);
        first.expect(PROMPT);
        first.send_line("read my notes");
        first.expect(r#"Approve read_file {"path":"notes.txt"}? [y/n]"#);
        first.ctrl_d();
        first.expect("it stays pending");
        assert_eq!(first.exit_code(BOUND), 0);
        id
    });
    let view = tk.api().session(&session).await;
    assert_eq!(
        view.body["pending_approvals"].as_array().map(Vec::len),
        Some(1),
        "{}",
        view.text
    );

    // Resumed: the question is asked again, answered, and the turn ends.
    let mut again = chat(&tk, &["--session", &session]);
    blocking(|| {
        again.expect("you> read my notes");
        again.expect("[a turn is running; its output follows]");
        again.expect(r#"Approve read_file {"path":"notes.txt"}? [y/n]"#);
        again.send_line("yes");
        again.expect("[approval] read_file: approved");
        again.expect("[tool] read_file ok in ");
        again.expect("read it");
        again.expect("[completed | tokens: ");
        again.expect(PROMPT);
        again.ctrl_c();
        assert_eq!(again.exit_code(BOUND), 0);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_a_line_typed_during_a_turn_is_sent_and_a_steered_one_ends_with_the_turn_it_joined() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::tool_call(
        "s1",
        "terminal",
        json!({"command": "sleep 2; echo slept"}),
    ));
    provider.push(Reply::text("done with both"));
    let tk = Turnkey::start(
        TurnkeyOptions::new(&provider)
            .extra_toml("[agent]\nbusy_policy = \"steer\"\n[tools]\napproval = \"off\"\n"),
    )
    .await;
    let mut pty = chat(&tk, &[]);
    let session = blocking(|| {
        let id = session_id(&mut pty);
        pty.expect(PROMPT);
        pty.send_line("start the work");
        pty.expect("[tool] terminal {");
        // Typed while the tool runs: sent at once, it joins the running turn.
        pty.send_line("and mind the second thing");
        pty.expect("[input joined the running turn (steered)]");
        pty.expect("done with both");
        let end = pty.expect(PROMPT);
        assert_eq!(end.matches("[completed").count(), 1, "{end:?}");
        pty.ctrl_d();
        assert_eq!(pty.exit_code(BOUND), 0);
        id
    });
    // One turn answered both inputs; the steered one is a user row of that turn.
    let users: Vec<String> = tk
        .api()
        .messages(&session)
        .await
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(users, ["start the work", "and mind the second thing"]);
    assert_eq!(provider.request_count(), 2);
    assert_eq!(pty.count("[completed"), 1, "{}", pty.output());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_ctrl_c_interrupts_a_slow_turn_and_the_prompt_returns_within_10_s() {
    let provider = ScriptedProvider::start();
    let words: Vec<String> = (0..60).map(|i| format!("w{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    provider.push(Reply::chunks(&words, Duration::from_millis(500)));
    let tk = start(&provider, "approval = \"off\"").await;
    let api = tk.api();

    let mut pty = chat(&tk, &[]);
    let (session, took) = blocking(|| {
        let id = session_id(&mut pty);
        pty.expect(PROMPT);
        pty.send_line("tell me a long story");
        pty.expect("w2 ");
        let pressed = Instant::now();
        pty.ctrl_c();
        pty.expect("[interrupting the turn]");
        let said = pty.expect_within(PROMPT, Duration::from_secs(10));
        // Said once, in its turn's line (issue 38): no code or message repeating it.
        assert!(said.contains("[interrupted | tokens: "), "{said}");
        assert_eq!(said.matches("interrupt").count(), 1, "{said}");
        (id, pressed.elapsed())
    });
    assert!(took < Duration::from_secs(10), "prompt back after {took:?}");
    // The lease is released just after the turn's end is committed (and shown).
    eventually(
        Duration::from_secs(5),
        "idle session after the turn",
        || async { (api.session(&session).await.body["state"] == "idle").then_some(()) },
    )
    .await;
    let events = api.all_events(&session, 0).await;
    let finished: Vec<_> = events
        .iter()
        .filter(|e| e["kind"] == "turn.finished")
        .collect();
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["data"]["result"], "interrupted");
    assert!(
        !pty.output().contains("w59 "),
        "the story stopped: {}",
        pty.output()
    );

    // The conversation goes on after the interrupt; Ctrl-C at the idle prompt leaves with 0.
    blocking(|| {
        pty.send_line("and now?");
        pty.expect("ok: and now?");
        pty.expect(PROMPT);
        pty.ctrl_c();
        assert_eq!(pty.exit_code(BOUND), 0);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_session_resume_shows_the_history_then_follows() {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "approval = \"off\"").await;

    let mut first = chat(&tk, &[]);
    let session = blocking(|| {
        let id = session_id(&mut first);
        first.expect(PROMPT);
        first.send_line("remember the apples");
        first.expect("ok: remember the apples");
        first.expect(PROMPT);
        first.ctrl_d();
        assert_eq!(first.exit_code(BOUND), 0);
        id
    });

    let mut again = chat(&tk, &["--session", &session]);
    blocking(|| {
        again.expect(&format!("session {session} (2 messages)"));
        again.expect("you> remember the apples");
        again.expect("ok: remember the apples");
        again.expect(PROMPT);
        again.send_line("and the pears");
        again.expect("ok: and the pears");
        again.expect("[completed | tokens: ");
        again.expect(PROMPT);
        again.ctrl_d();
        assert_eq!(again.exit_code(BOUND), 0);
    });
    // The history is shown once, not repainted from the event log.
    assert_eq!(
        again.count("ok: remember the apples"),
        1,
        "{}",
        again.output()
    );
    assert_eq!(again.count("ok: and the pears"), 1, "{}", again.output());
    assert_eq!(tk.api().messages(&session).await.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_a_server_restart_is_followed_without_repeats_and_a_line_typed_meanwhile_runs_once() {
    let provider = ScriptedProvider::start();
    let mut tk = start(&provider, "approval = \"off\"").await;
    let api = tk.api();
    let mut pty = chat(&tk, &[]);
    blocking(|| {
        pty.expect(PROMPT);
        pty.send_line("first input");
        pty.expect("ok: first input");
        pty.expect(PROMPT);
    });

    // A turn cut by a crash resumes by itself (SPEC R13.9): its shown text stays shown once per
    // attempt, marked as cut, and the resumed attempt streams after it. Cut once more than
    // `[agent] max_resumes` allows, it is `unknown`.
    for _ in 0..=DEFAULT_MAX_RESUMES {
        provider.push(Reply::chunks(
            &["alpha-part ", "omega-part"],
            Duration::from_secs(2),
        ));
    }
    blocking(|| {
        pty.send_line("slow input");
        pty.expect("alpha-part ");
    });
    tk.kill();
    blocking(|| {
        pty.expect("[connection lost: ");
        // In words, not the network library's error chain (issue 38).
        let why = pty.expect("]");
        assert!(
            why == "the server closed the connection; reconnecting"
                || why == "the server does not answer; reconnecting",
            "{why:?}"
        );
    });
    for resume in 1..=DEFAULT_MAX_RESUMES {
        tk.start_again_at_same_address().await;
        blocking(|| {
            pty.expect("[reconnected]");
            pty.expect(&format!(
                "[cut off: the server stopped mid-turn; the turn resumes by itself (attempt {})",
                resume + 1
            ));
            pty.expect("alpha-part ");
        });
        tk.kill();
        blocking(|| {
            pty.expect("[connection lost: ");
        });
    }
    tk.start_again_at_same_address().await;
    blocking(|| {
        pty.expect("[reconnected]");
        pty.expect("[outcome unknown: ");
        pty.expect("type /retry");
        pty.expect(PROMPT);
        // /retry runs the unknown input once more, on request.
        pty.send_line("/retry");
        pty.expect("ok: slow input");
        pty.expect(PROMPT);
    });

    // A line typed while the server is down is sent again under the same key, and runs once.
    tk.kill();
    blocking(|| {
        pty.expect("[connection lost: ");
        pty.send_line("typed while down");
        pty.expect("[not sent yet: ");
        let why = pty.expect("]");
        assert!(
            why.starts_with("the server does not answer; sending again"),
            "{why:?}"
        );
    });
    // Past the client's first retry (500 ms after the refusal), so the line is sent again while
    // the server is down too; a refused connection leaves no fact to wait for, and the client
    // says `not sent yet` only once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    tk.start_again_at_same_address().await;
    blocking(|| {
        pty.expect("ok: typed while down");
        pty.expect(PROMPT);
        pty.ctrl_d();
        assert_eq!(pty.exit_code(BOUND), 0);
    });

    let out = pty.output().to_owned();
    // Each cut attempt's text once, with a mark between.
    assert_eq!(
        out.matches("alpha-part").count(),
        DEFAULT_MAX_RESUMES + 1,
        "{out}"
    );
    assert_eq!(
        out.matches("[cut off: ").count(),
        DEFAULT_MAX_RESUMES,
        "{out}"
    );
    for shown_once in [
        "ok: first input",
        "ok: slow input",
        "ok: typed while down",
        "[outcome unknown: ",
    ] {
        assert_eq!(
            out.matches(shown_once).count(),
            1,
            "{shown_once:?} in:\n{out}"
        );
    }
    assert!(!out.contains("omega-part"), "{out}");
    assert_eq!(provider.request_count_for("typed while down"), 1);
    let sessions = api.get("/v1/sessions").await;
    let session = sessions.body["sessions"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let user_rows: Vec<String> = tk
        .api()
        .messages(&session)
        .await
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        user_rows,
        [
            "first input",
            "slow input",
            "slow input",
            "typed while down"
        ],
        "one admission per line (the retry is the second `slow input`)"
    );
}

/// Runs `turnkey chat` without a terminal, stdin from `input`; returns (exit code, stdout,
/// stderr).
fn run_piped(
    args: &[&str],
    dir: &Path,
    env: &[(&str, &str)],
    input: &str,
) -> (i32, String, String) {
    use std::io::Write;
    let mut cmd = chat_command(args, dir);
    cmd.envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let deadline = Instant::now() + BOUND;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("turnkey chat {args:?} did not end within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_the_token_comes_from_the_flag_the_environment_or_the_operator_file() {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "approval = \"off\"").await;
    let url = tk.url.clone();
    let token = tk.token.clone();
    let dir = tempfile::tempdir().unwrap();

    // A wrong token: a clear message and exit 1.
    let (code, _, err) = blocking(|| {
        run_piped(
            &["--url", &url, "--token", "tk_wrong"],
            dir.path(),
            &[],
            "hi\n",
        )
    });
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("refused the token from --token"), "{err}");
    let (code, _, err) = blocking(|| {
        run_piped(
            &["--url", &url],
            dir.path(),
            &[("TURNKEY_TOKEN", "tk_wrong")],
            "",
        )
    });
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("refused the token from $TURNKEY_TOKEN"),
        "{err}"
    );

    // The environment, then ./data/operator.token; piped input runs line by line, then exits 0.
    let (code, out, err) = blocking(|| {
        run_piped(
            &["--url", &url],
            dir.path(),
            &[("TURNKEY_TOKEN", &token)],
            "from env\n",
        )
    });
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ok: from env"), "{out}");
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/operator.token"), format!("{token}\n")).unwrap();
    let (code, out, err) = blocking(|| {
        run_piped(
            &["--url", &url],
            dir.path(),
            &[],
            "from file\nsecond line\n",
        )
    });
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ok: from file"), "{out}");
    assert!(out.contains("ok: second line"), "{out}");
    assert_eq!(out.matches("[completed | tokens: ").count(), 2, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_bad_usage_exits_2_and_an_unreachable_server_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let with_token = ["--token", "tk_x"];
    for (args, says) in [
        (vec!["--nope"], "--nope"),
        (vec!["--session", "abc"], "is not a session id"),
        (vec!["--url", "ftp://127.0.0.1:1"], "http://"),
        (vec!["--url", "127.0.0.1:8080"], "--url"),
    ] {
        let args: Vec<&str> = args.iter().copied().chain(with_token).collect();
        let (code, out, err) = blocking(|| run_piped(&args, dir.path(), &[], ""));
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // No token anywhere (no flag, no variable, no ./data/operator.token).
    let (code, _, err) =
        blocking(|| run_piped(&["--url", "http://127.0.0.1:1"], dir.path(), &[], ""));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no token"), "{err}");
    // Nothing listens on port 1.
    let (code, _, err) = blocking(|| {
        run_piped(
            &["--url", "http://127.0.0.1:1", "--token", "tk_x"],
            dir.path(),
            &[],
            "",
        )
    });
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot reach http://127.0.0.1:1"), "{err}");
}

/// `/attach PATH` uploads a file and the next line goes with it; `/model` lists the models and
/// `/model NAME` switches (issue 26). A path that cannot be read is said, nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_attach_sends_a_file_with_the_next_line_and_model_switches() {
    let provider = ScriptedProvider::start();
    provider.on_user_text("what is in the file", Reply::text("two numbers"));
    provider.on_user_text("and now", Reply::text("still here"));
    let tk = start(&provider, "approval = \"off\"").await;
    let api = tk.api();
    let file = tk.dir.path().join("numbers.csv");
    std::fs::write(&file, "a,b\n1,2\n").unwrap();

    let mut pty = chat(&tk, &[]);
    let session = blocking(|| {
        let id = session_id(&mut pty);
        pty.expect(PROMPT);
        pty.send_line("/attach /nonexistent/nothing.txt");
        pty.expect("[cannot read /nonexistent/nothing.txt");
        pty.send_line(&format!("/attach {}", file.display()));
        pty.expect("[attached numbers.csv (text/plain, 8 bytes); it goes with your next message]");
        pty.send_line("what is in the file?");
        pty.expect("two numbers");
        pty.expect(PROMPT);
        pty.send_line("/model");
        pty.expect("* scripted-model");
        pty.send_line("/model nonexistent");
        pty.expect("[not switched:");
        pty.send_line("and now?");
        pty.expect("still here");
        pty.expect(PROMPT);
        id
    });
    let messages = api.messages(&session).await;
    assert_eq!(messages[0]["content"], "what is in the file?");
    assert_eq!(
        messages[0]["attachments"][0]["name"], "numbers.csv",
        "{messages:?}"
    );
    assert!(
        messages[2].get("attachments").is_none(),
        "the file went with one message only: {messages:?}"
    );
    let sent = provider.requests()[0].body["messages"].to_string();
    assert!(sent.contains("[file attached: numbers.csv"), "{sent}");
    let code = blocking(|| {
        pty.ctrl_d();
        pty.exit_code(BOUND)
    });
    assert_eq!(code, 0, "{}", pty.output());
}
