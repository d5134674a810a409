//! The web UI at `GET /` in real headless Chromium (SPEC R1.1, R11.1), against the real binary
//! and the scripted provider: sign-in (a wrong token shows the 401 message), a new session, a
//! streamed answer, a reload mid-stream that continues without a repeated word, interrupt, an
//! approval answered from the page with its tool card, phone width, and model output that
//! tries to run script and must not. Screenshots go to `target/screenshots/`. Without Chromium
//! and chromedriver the tests print "skipping: …", unless `TURNKEY_REQUIRE_BROWSER=1` (CI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::Mutex;
use turnkey_tests::browser::{Browser, DESKTOP, PAGE_WAIT, PHONE};
use turnkey_tests::cut_proxy::CutProxy;
use turnkey_tests::harness::DEFAULT_MAX_RESUMES;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

/// One browser at a time: the machine has two cores, and Chromium is heavy. The other web UI
/// modules take it too.
pub(crate) static SERIAL: Mutex<()> = Mutex::const_new(());

use turnkey_tests::wait::{eventually, BOUND, PAGE_SETTLES};

/// Opens the UI and signs in with `token` through the form.
/// The first `times` requests asking for a "long story" stream `s01 ` to `s30 ` over 9 s: a
/// test cuts the answer mid-stream.
pub(crate) fn tell_a_slow_story(provider: &ScriptedProvider, times: usize) {
    let story: Vec<String> = (1..=30).map(|i| format!("s{i:02} ")).collect();
    let story: Vec<&str> = story.iter().map(String::as_str).collect();
    provider.on_user_text_times(
        "long story",
        Reply::chunks(&story, Duration::from_millis(300)),
        times,
    );
}

pub(crate) async fn sign_in(b: &Browser, tk: &Turnkey) {
    b.goto(&format!("{}/", tk.url)).await;
    b.wait_visible("#signin-form", PAGE_WAIT).await;
    b.type_into("#token", &tk.token).await;
    b.click("#signin-form button[type=submit]").await;
    b.wait_visible("#new-session", PAGE_WAIT).await;
}

/// Creates a session from the page and waits until its composer is shown and the address names
/// it: a session other than the one open before (which already showed a composer and an
/// address, so neither alone says the new one is there).
pub(crate) async fn new_session(b: &Browser) -> String {
    let before = b.js("return location.hash;", vec![]).await;
    let before = before.as_str().unwrap_or_default().to_owned();
    b.click("#new-session").await;
    b.wait_visible("#composer", PAGE_WAIT).await;
    let hash = b
        .wait_js(
            "the new session in the address",
            PAGE_WAIT,
            &format!(
                "return /^#\\/s\\/[0-9a-f-]{{36}}$/.test(location.hash) && location.hash !== {before:?} \
                 ? location.hash.slice(4) : null;"
            ),
        )
        .await;
    hash.as_str().unwrap().to_owned()
}

pub(crate) async fn send(b: &Browser, text: &str) {
    b.type_into("#input", text).await;
    b.click("#send").await;
}

/// The text of the assistant's answer blocks, joined.
const ANSWER_JS: &str = "return Array.from(document.querySelectorAll('.msg.assistant .md'))\
     .map(e => e.textContent).join('|');";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_ui_signs_in_streams_survives_a_reload_mid_stream_and_interrupts() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r1_1_ui_signs_in_streams…").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    // Forty words, one every 150 ms: about six seconds of streaming to reload in the middle of.
    let words: Vec<String> = (1..=40).map(|i| format!("w{i:02} ")).collect();
    let full = words.concat();
    let chunks: Vec<&str> = words.iter().map(String::as_str).collect();
    provider.on_user_text("story", Reply::chunks(&chunks, Duration::from_millis(150)));
    let endless: Vec<String> = (1..=400).map(|i| format!("n{i} ")).collect();
    let endless: Vec<&str> = endless.iter().map(String::as_str).collect();
    provider.on_user_text("count", Reply::chunks(&endless, Duration::from_millis(200)));
    let tk =
        Turnkey::start(TurnkeyOptions::new(&provider).extra_toml("[agent]\ndelta_flush_ms = 50\n"))
            .await;

    // A wrong token is refused with the 401 message, and nothing is kept.
    b.goto(&format!("{}/", tk.url)).await;
    b.wait_visible("#signin-form", PAGE_WAIT).await;
    b.type_into("#token", "tk_not_the_token").await;
    b.click("#signin-form button[type=submit]").await;
    let error = b.wait_visible("#signin-error", PAGE_WAIT).await;
    assert!(error.contains("401"), "{error}");
    assert_eq!(
        b.js("return localStorage.getItem('turnkey.token');", vec![])
            .await,
        Value::Null
    );
    b.screenshot("ui-signin-401").await;

    sign_in(&b, &tk).await;
    let session = new_session(&b).await;
    send(&b, "tell me a story").await;

    // Streaming: part of the answer is shown before the turn ends.
    let shown = b
        .wait_js(
            "the first words",
            BOUND,
            &format!("{ANSWER_JS_FN} const t = answer(); return t.includes('w03') ? t : null;"),
        )
        .await;
    let shown = shown.as_str().unwrap().to_owned();
    assert!(!shown.contains("w40"), "not streamed: {shown}");
    b.screenshot("ui-streaming").await;

    // Reload in the middle of the answer: the page comes back with the words so far and goes
    // on; at no time is a word shown twice, and every view is a prefix of the answer.
    b.client.refresh().await.expect("reload");
    b.wait_visible("#composer", PAGE_WAIT).await;
    let mut views = 0;
    let finished = eventually(BOUND, "the whole answer after the reload", || {
        views += 1;
        async {
            let text = b.js(ANSWER_JS, vec![]).await;
            let text = text.as_str().unwrap_or_default().to_owned();
            assert!(
                full.starts_with(text.trim_end()) || text.trim_end().is_empty(),
                "after the reload the answer reads {text:?}, which is not a prefix of {full:?}"
            );
            (text.trim_end() == full.trim_end()).then_some(text)
        }
    })
    .await;
    assert!(views > 3, "the reload landed after the answer had finished");
    assert_eq!(finished.matches("w01").count(), 1, "{finished}");
    let status = b
        .wait_js(
            "the turn's usage footer",
            BOUND,
            "const f = document.querySelector('.msg.assistant .turn-foot'); \
             return f && !f.hidden ? f.textContent : null;",
        )
        .await;
    assert!(status.as_str().unwrap().contains("tokens"), "{status}");
    assert_eq!(
        b.text("#session-title").await.as_deref(),
        Some("tell me a story"),
        "an untitled session is named after its first message"
    );
    b.screenshot("ui-after-reload").await;

    // Interrupt: a long answer is stopped from the page and settles as interrupted.
    send(&b, "count to four hundred").await;
    b.wait_js(
        "the running state",
        BOUND,
        "return document.querySelector('#state').dataset.state === 'running' \
         && !document.querySelector('#interrupt').disabled \
         && document.body.textContent.includes('n2 ');",
    )
    .await;
    b.click("#interrupt").await;
    b.wait_js(
        "the interrupted note",
        BOUND,
        "return Array.from(document.querySelectorAll('.turn-note')).some(n => n.textContent.startsWith('Interrupted'));",
    )
    .await;
    b.wait_js(
        "the idle state",
        BOUND,
        "return document.querySelector('#state').dataset.state === 'idle' && document.querySelector('#interrupt').disabled;",
    )
    .await;
    let api = tk.api();
    let events = api.all_events(&session, 0).await;
    let finished: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "turn.finished")
        .collect();
    assert_eq!(finished.len(), 2, "{events:?}");
    assert_eq!(finished[1]["data"]["result"], "interrupted");
    assert!(provider.request_count_for("count") == 1);
    b.screenshot("ui-interrupted").await;

    // Sign-out forgets the token.
    b.click("#sign-out").await;
    b.wait_visible("#signin-form", PAGE_WAIT).await;
    assert_eq!(
        b.js("return localStorage.getItem('turnkey.token');", vec![])
            .await,
        Value::Null
    );
    b.close().await;
}

/// `answer()` in page scripts: the assistant blocks' text.
const ANSWER_JS_FN: &str =
    "const answer = () => Array.from(document.querySelectorAll('.msg.assistant .md'))\
     .map(e => e.textContent).join('|');";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_ui_answers_an_approval_and_shows_the_tool_card_also_at_phone_width() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r1_1_ui_answers_an_approval…").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.push(Reply::TextThenToolCalls(
        "Let me read your notes.".into(),
        vec![(
            "call_notes".into(),
            "read_file".into(),
            json!({"path": "notes.txt"}),
        )],
    ));
    provider.push(Reply::text(
        "Your notes say **hello from the notes**. See [the docs](https://example.com/docs).",
    ));
    let tk = Turnkey::start(
        TurnkeyOptions::new(&provider)
            .extra_toml("[tools]\napproval = \"always\"\napproval_timeout_s = 300\n"),
    )
    .await;
    let workspace = tk.dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("notes.txt"), "hello from the notes\n").unwrap();

    sign_in(&b, &tk).await;
    let session = new_session(&b).await;
    send(&b, "what do my notes say?").await;

    // The approval card: the tool's name and arguments, the buttons and a countdown.
    let countdown = b
        .wait_visible(".tool-card .approval .countdown", BOUND)
        .await;
    assert!(countdown.starts_with("expires in"), "{countdown}");
    b.wait_js(
        "the countdown to tick",
        Duration::from_secs(5),
        &format!(
            "const c = document.querySelector('.approval .countdown').textContent; \
             return c !== {countdown:?} && c.startsWith('expires in');"
        ),
    )
    .await;
    let card = b.text(".tool-card").await.unwrap();
    assert!(card.contains("read_file"), "{card}");
    assert!(card.contains("notes.txt"), "{card}");
    b.screenshot("ui-approval").await;
    let pending = tk.api().session(&session).await;
    assert_eq!(
        pending.body["pending_approvals"].as_array().map(Vec::len),
        Some(1),
        "{}",
        pending.text
    );

    b.click(".approval button.approve").await;
    let status = b
        .wait_js(
            "the tool to finish",
            BOUND,
            "const c = document.querySelector('.tool-card'); \
             return c && c.dataset.status === 'ok' ? c.querySelector('.tool-status').textContent : null;",
        )
        .await;
    assert!(status.as_str().unwrap().starts_with("ok"), "{status}");
    let result = b.text(".tool-card .tool-result").await.unwrap();
    assert!(result.contains("hello from the notes"), "{result}");
    let resolved = b.text(".tool-card .resolved").await.unwrap();
    assert_eq!(resolved, "Approved");
    b.wait_js(
        "the final answer",
        BOUND,
        "return Array.from(document.querySelectorAll('.msg.assistant strong'))\
         .some(s => s.textContent === 'hello from the notes');",
    )
    .await;
    let link = b
        .js(
            "const a = document.querySelector('.msg.assistant a'); \
             return a ? [a.getAttribute('href'), a.rel] : null;",
            vec![],
        )
        .await;
    assert_eq!(
        link,
        json!(["https://example.com/docs", "noopener noreferrer"])
    );
    let adm_events = tk.api().all_events(&session, 0).await;
    let resolved: Vec<&Value> = adm_events
        .iter()
        .filter(|e| e["kind"] == "approval.resolved")
        .collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["data"]["decision"], "approve");
    b.wait_js(
        "the session list to follow the state",
        PAGE_WAIT,
        "return !document.querySelector('#sessions').textContent.includes('running');",
    )
    .await;
    b.screenshot("ui-tool-card-desktop").await;

    // The same chat at phone width: one column, nothing wider than the screen, the session
    // list behind its button.
    b.resize(PHONE).await;
    b.wait_js(
        "the phone layout",
        PAGE_WAIT,
        "return getComputedStyle(document.querySelector('#toggle-sessions')).display !== 'none' \
         && getComputedStyle(document.querySelector('#sidebar')).display === 'none';",
    )
    .await;
    let overflow = b
        .js(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
            vec![],
        )
        .await;
    assert!(
        overflow.as_i64().unwrap_or(1) <= 0,
        "wider than the screen by {overflow}px"
    );
    b.screenshot("ui-phone").await;
    b.click("#toggle-sessions").await;
    b.wait_visible("#sessions a[aria-current=page]", PAGE_WAIT)
        .await;
    b.screenshot("ui-phone-sessions").await;
    b.resize(DESKTOP).await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_ui_model_output_never_runs_script() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r1_1_ui_model_output_never_runs_script").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    let hostile = "Look: <img src=x onerror=alert(1)> and [x](javascript:alert(1)) and \
                   <script>alert(2)</script> and [y](JaVaScRiPt:alert(3)) and \
                   [z](data:text/html,<script>alert(4)</script>) and <a href=\"javascript:alert(5)\">a</a> \
                   and `<b onmouseover=alert(6)>code</b>` and [ok](https://example.com/ok)";
    provider.on_user_text("hostile", Reply::text(hostile));
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    sign_in(&b, &tk).await;
    // Any alert is recorded instead of shown; a dialog left open would also fail the next
    // WebDriver command.
    b.js(
        "window.__alerts = []; for (const f of ['alert', 'confirm', 'prompt']) \
         window[f] = (m) => { window.__alerts.push(String(m)); };",
        vec![],
    )
    .await;
    new_session(&b).await;
    send(&b, "be hostile <img src=x onerror=alert(7)>").await;
    b.wait_js(
        "the hostile answer",
        BOUND,
        "return Array.from(document.querySelectorAll('.msg.assistant .md'))\
         .some(e => e.textContent.includes('[ok]') || e.textContent.includes(' ok'));",
    )
    .await;
    // Give anything that could fire (image error handlers) the time to do it: a handler the
    // page did not run leaves no fact to wait for.
    tokio::time::sleep(PAGE_SETTLES).await;
    let verdict = b
        .js(
            "const t = document.querySelector('#transcript'); \
             return { \
               alerts: window.__alerts, \
               imgs: t.querySelectorAll('img').length, \
               scripts: t.querySelectorAll('script').length, \
               handlers: Array.from(t.querySelectorAll('*')).filter(e => \
                 Array.from(e.attributes).some(a => a.name.startsWith('on'))).length, \
               hrefs: Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href')), \
               text: t.textContent, \
               title: document.querySelector('#session-title').textContent, \
               listed: document.querySelector('#sessions').textContent };",
            vec![],
        )
        .await;
    assert_eq!(verdict["alerts"], json!([]), "{verdict}");
    assert_eq!(verdict["imgs"], 0, "{verdict}");
    assert_eq!(verdict["scripts"], 0, "{verdict}");
    assert_eq!(verdict["handlers"], 0, "{verdict}");
    let hrefs: Vec<String> = verdict["hrefs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h.as_str().map(str::to_owned))
        .collect();
    assert!(
        hrefs.iter().all(|h| {
            let h = h.to_ascii_lowercase();
            !h.starts_with("javascript:") && !h.starts_with("data:")
        }),
        "{hrefs:?}"
    );
    assert!(
        hrefs.contains(&"https://example.com/ok".to_string()),
        "{hrefs:?}"
    );
    let text = verdict["text"].as_str().unwrap();
    // The markup is shown as the text it is.
    assert!(text.contains("<img src=x onerror=alert(1)>"), "{text}");
    assert!(text.contains("<script>alert(2)</script>"), "{text}");
    assert!(text.contains("<b onmouseover=alert(6)>code</b>"), "{text}");
    assert!(
        verdict["title"].as_str().unwrap().contains("<img"),
        "the title is text too: {verdict}"
    );
    b.screenshot("ui-xss").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_1_ui_reconnects_after_a_dropped_stream_without_repeating_a_word() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r11_1_ui_reconnects…").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    let words: Vec<String> = (1..=40).map(|i| format!("r{i:02} ")).collect();
    let full = words.concat();
    let chunks: Vec<&str> = words.iter().map(String::as_str).collect();
    provider.on_user_text("story", Reply::chunks(&chunks, Duration::from_millis(150)));
    let tk =
        Turnkey::start(TurnkeyOptions::new(&provider).extra_toml("[agent]\ndelta_flush_ms = 50\n"))
            .await;
    // The browser reaches turnkey only through a proxy that can drop every connection.
    let proxy = CutProxy::start(&tk.url).await;
    b.goto(&format!("{}/", proxy.url)).await;
    b.wait_visible("#signin-form", PAGE_WAIT).await;
    b.type_into("#token", &tk.token).await;
    b.click("#signin-form button[type=submit]").await;
    b.wait_visible("#new-session", PAGE_WAIT).await;
    let session = new_session(&b).await;
    send(&b, "tell me a story").await;
    b.wait_js(
        "the first words",
        BOUND,
        &format!("{ANSWER_JS_FN} return answer().includes('r04');"),
    )
    .await;

    // The network drops mid-answer: the page reconnects by itself and goes on from the last
    // seq it showed; every view is a prefix of the answer.
    proxy.cut_all();
    eventually(BOUND, "the whole answer after the drop", || async {
        let text = b.js(ANSWER_JS, vec![]).await;
        let text = text.as_str().unwrap_or_default().trim_end().to_owned();
        assert!(
            full.starts_with(&text),
            "after the drop the answer reads {text:?}, not a prefix of {full:?}"
        );
        (text == full.trim_end()).then_some(())
    })
    .await;
    // The reconnect asked for the events after what was shown, not for the whole log again.
    let path = format!("GET /v1/sessions/{session}/events?since=");
    let sinces: Vec<i64> = proxy
        .client_bytes()
        .iter()
        .flat_map(|c| {
            c.match_indices(&path)
                .map(|(i, _)| &c[i + path.len()..])
                .collect::<Vec<_>>()
        })
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect();
    assert!(
        sinces.len() >= 2,
        "one stream, then a reconnect: {sinces:?}"
    );
    assert!(
        sinces[1..].iter().any(|&s| s > sinces[0]),
        "the reconnect resumed from the last seq shown: {sinces:?}"
    );
    let events = tk.api().all_events(&session, 0).await;
    let deltas = events
        .iter()
        .filter(|e| e["kind"] == "message.delta")
        .count();
    assert!(deltas > 2, "the answer streamed in pieces: {deltas}");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_4_r13_9_ui_shows_a_resumed_turn_then_one_left_unknown_and_retries_it() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r2_4_ui_shows_a_turn_left_unknown…").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    tell_a_slow_story(&provider, DEFAULT_MAX_RESUMES + 1);
    provider.on_user_text("long story", Reply::text("The story, told again in full."));
    let mut tk =
        Turnkey::start(TurnkeyOptions::new(&provider).extra_toml("[agent]\ndelta_flush_ms = 50\n"))
            .await;
    let proxy = CutProxy::start(&tk.url).await;
    b.goto(&format!("{}/", proxy.url)).await;
    b.wait_visible("#signin-form", PAGE_WAIT).await;
    b.type_into("#token", &tk.token).await;
    b.click("#signin-form button[type=submit]").await;
    b.wait_visible("#new-session", PAGE_WAIT).await;
    let session = new_session(&b).await;
    send(&b, "tell me a long story").await;
    b.wait_js(
        "the first words",
        BOUND,
        &format!("{ANSWER_JS_FN} return answer().includes('s03');"),
    )
    .await;

    // The process dies mid-answer; a new one starts on the same database (another port,
    // behind the same proxy address). The turn had started no side effect, so it resumes by
    // itself (SPEC R13.9): the page reconnects, says so, and drops the cut text for the
    // answer that starts again. Cut again, it resumes again, up to `[agent] max_resumes`.
    for attempt in 2..=DEFAULT_MAX_RESUMES + 1 {
        tk.kill();
        tk.restart().await;
        proxy.retarget(&tk.url);
        proxy.cut_all();
        let note = b
            .wait_js(
                &format!("the resumed note of attempt {attempt}"),
                BOUND,
                &format!(
                    "const n = Array.from(document.querySelectorAll('.turn-note')).find(n => \
                     n.textContent.startsWith('Resumed by itself') && \
                     n.textContent.includes('(attempt {attempt})')); \
                     return n ? n.textContent : null;"
                ),
            )
            .await;
        assert!(
            note.as_str()
                .unwrap()
                .contains("the server stopped mid-answer"),
            "{note}"
        );
        let shown = b
            .wait_js(
                "the resumed answer's first words",
                BOUND,
                &format!("{ANSWER_JS_FN} const t = answer(); return t.includes('s03') ? t : null;"),
            )
            .await;
        let shown = shown.as_str().unwrap().to_owned();
        assert_eq!(
            shown.matches("s01").count(),
            1,
            "the cut text is replaced: {shown}"
        );
        if attempt == 2 {
            b.screenshot("ui-resumed-turn").await;
        }
    }

    // Cut once more, the last resumed attempt is not resumed again: the outcome is unknown.
    tk.kill();
    tk.restart().await;
    proxy.retarget(&tk.url);
    proxy.cut_all();
    let banner = b.wait_visible(".banner button.retry", BOUND).await;
    assert_eq!(banner, "Retry the turn");
    let text = b.text("#banners").await.unwrap();
    assert!(text.contains("outcome is unknown"), "{text}");
    b.screenshot("ui-unknown-turn").await;

    // A reload finds it again from the transcript, and Retry runs the input once more.
    b.client.refresh().await.expect("reload");
    b.wait_visible(".banner button.retry", BOUND).await;
    let note = b
        .wait_js(
            "the boundary note",
            PAGE_WAIT,
            "const n = document.querySelector('.turn-note.warn'); return n ? n.textContent : null;",
        )
        .await;
    assert!(
        note.as_str().unwrap().starts_with("Outcome unknown"),
        "{note}"
    );
    b.click(".banner button.retry").await;
    b.wait_js(
        "the retried answer",
        BOUND,
        &format!("{ANSWER_JS_FN} return answer().includes('The story, told again in full.');"),
    )
    .await;
    assert_eq!(b.count(".banner").await, 0, "the banner is gone");
    let events = tk.api().all_events(&session, 0).await;
    let unknown: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "turn.unknown")
        .collect();
    assert_eq!(unknown.len(), 1, "{events:?}");
    let original = unknown[0]["data"]["admission_id"]
        .as_str()
        .or(unknown[0]["admission_id"].as_str())
        .unwrap();
    let adm = tk.api().admission(original).await;
    assert!(adm.body["retried_by"].is_string(), "{}", adm.text);
    assert_eq!(
        provider.request_count_for("long story"),
        DEFAULT_MAX_RESUMES + 2,
        "run once, resumed `max_resumes` times, retried once"
    );
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_1_ui_offers_retry_or_skip_for_a_tool_run_left_unknown() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r13_1_ui_offers_retry_or_skip…").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.push(Reply::tool_call(
        "call_side",
        "terminal",
        json!({"command": "echo ran >> side_effect.txt"}),
    ));
    provider.push(Reply::text("Finished without running it again."));
    // The process dies after the command ran and before its result was stored.
    let mut tk = Turnkey::start(
        TurnkeyOptions::new(&provider)
            .extra_toml("[tools]\napproval = \"off\"\n")
            .env("FAILPOINTS", "tool.before_result=return"),
    )
    .await;
    let proxy = CutProxy::start(&tk.url).await;
    b.goto(&format!("{}/", proxy.url)).await;
    b.wait_visible("#signin-form", PAGE_WAIT).await;
    b.type_into("#token", &tk.token).await;
    b.click("#signin-form button[type=submit]").await;
    b.wait_visible("#new-session", PAGE_WAIT).await;
    let session = new_session(&b).await;
    send(&b, "append once").await;
    assert!(
        tk.wait_exit(BOUND).await.is_some(),
        "turnkey did not die at tool.before_result"
    );
    let effects_file = tk.dir.path().join("workspace").join("side_effect.txt");
    let side_effects = || {
        std::fs::read_to_string(&effects_file)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    assert_eq!(side_effects(), 1);
    tk.restart_with_env(&[]).await;
    proxy.retarget(&tk.url);
    proxy.cut_all();

    // The card says the outcome is unknown and a banner asks a person to decide.
    b.wait_visible(".banner button.skip", BOUND).await;
    let banner = b.text("#banners").await.unwrap();
    assert!(
        banner.contains("terminal") && banner.contains("may or may not have run"),
        "{banner}"
    );
    let status = b.text(".tool-card .tool-status").await.unwrap();
    assert!(status.starts_with("outcome unknown"), "{status}");
    b.wait_js(
        "the session list back",
        PAGE_WAIT,
        "return document.querySelector('#chat-error').hidden;",
    )
    .await;
    b.screenshot("ui-unknown-tool-run").await;
    b.click(".banner button.skip").await;
    b.wait_js(
        "the answer after the skip",
        BOUND,
        &format!("{ANSWER_JS_FN} return answer().includes('Finished without running it again.');"),
    )
    .await;
    assert_eq!(b.count(".banner").await, 0, "the banner is gone");
    assert_eq!(side_effects(), 1, "skipped, never run again");
    let view = tk.api().session(&session).await;
    assert_eq!(view.body["unknown_tool_runs"], json!([]), "{}", view.text);
    b.close().await;
}

/// The model picker in the chat's header (issue 26): it lists `GET /v1/models` with the
/// session's model chosen; choosing another sends it at once and the next turn runs on that
/// provider; after a reload the choice is still shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_ui_picks_the_model_of_the_next_turn() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r8_4_ui_picks_the_model…").await else {
        return;
    };
    let primary = ScriptedProvider::start();
    let second = ScriptedProvider::start();
    primary.on_user_text("first", Reply::text("from the primary"));
    second.on_user_text("second", Reply::text("from the second"));
    let tk = Turnkey::start(TurnkeyOptions::new(&primary).extra_toml(&format!(
        "[[providers]]\nname = \"second\"\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"other-model\"\n",
        second.base_url
    )))
    .await;
    sign_in(&b, &tk).await;
    let session = new_session(&b).await;
    let options = b
        .wait_js(
            "the picker's options",
            PAGE_WAIT,
            "const p = document.getElementById('model'); \
             return p && !p.hidden && p.options.length === 2 \
               ? [Array.from(p.options).map(o => o.value), p.value] : null;",
        )
        .await;
    assert_eq!(
        options,
        json!([["scripted-model", "other-model"], "scripted-model"])
    );
    let labels = b
        .js(
            "return Array.from(document.getElementById('model').options).map(o => o.textContent);",
            vec![],
        )
        .await;
    assert_eq!(
        labels,
        json!(["scripted-model · scripted", "other-model · second"]),
        "each model names its provider"
    );
    send(&b, "first question").await;
    b.wait_js(
        "the primary's answer",
        BOUND,
        "return document.body.textContent.includes('from the primary') || null;",
    )
    .await;

    b.js(
        "const p = document.getElementById('model'); p.value = 'other-model'; \
         p.dispatchEvent(new Event('change'));",
        vec![],
    )
    .await;
    let api = tk.api();
    eventually(BOUND, "the session's model is the chosen one", || async {
        (api.session(&session).await.body["model"] == "other-model").then_some(())
    })
    .await;
    send(&b, "second question").await;
    b.wait_js(
        "the second provider's answer",
        BOUND,
        "return document.body.textContent.includes('from the second') || null;",
    )
    .await;
    assert_eq!(second.requests()[0].body["model"], "other-model");

    b.js("location.reload();", vec![]).await;
    let chosen = b
        .wait_js(
            "the picker after a reload",
            PAGE_WAIT,
            "const p = document.getElementById('model'); \
             return p && !p.hidden && p.options.length === 2 ? p.value : null;",
        )
        .await;
    assert_eq!(chosen, "other-model");
    b.close().await;
}

/// A first run with no model (issue 26): the chat says so and links to the Models page; there
/// the operator connects the scripted provider through the "Connect a model" form. A wrong
/// model name is refused with the server's reason and nothing is saved; the right one is
/// listed with its key masked and answers the next message, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_ui_connects_a_model_that_answers_without_a_restart() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r8_4_ui_connects_a_model…").await else {
        return;
    };
    const KEY: &str = "sk-from-the-form-0123456789";
    let model = ScriptedProvider::start();
    model.on_user_text(
        "hello there",
        Reply::text("answered by the connected model"),
    );
    let tk = Turnkey::start(TurnkeyOptions::new(&model).first_run(&[])).await;
    sign_in(&b, &tk).await;
    new_session(&b).await;
    b.wait_visible(".banner.no-model", PAGE_WAIT).await;
    b.click(".banner.no-model a.connect-model").await;
    b.wait_visible("#connect-model", PAGE_WAIT).await;
    assert!(
        b.text(".providers")
            .await
            .unwrap_or_default()
            .contains("No model is connected yet"),
        "the page says nothing is connected"
    );
    b.js(
        "document.getElementById('provider-name').value = '';",
        vec![],
    )
    .await;
    b.type_into("#provider-name", "my-model").await;
    b.type_into("#provider-base-url", &model.base_url).await;
    b.type_into("#provider-api-key", KEY).await;
    b.type_into("#provider-model", "wrong-model").await;
    b.click("#provider-connect").await;
    let refusal = b
        .wait_js(
            "the refusal under the form",
            BOUND,
            "const e = document.getElementById('provider-error');              return e && !e.hidden && e.textContent ? e.textContent : null;",
        )
        .await;
    let refusal = refusal.as_str().unwrap();
    assert!(
        refusal.contains("provider_check_failed") && refusal.contains("scripted-model"),
        "{refusal}"
    );
    assert!(!refusal.contains(KEY), "{refusal}");
    b.screenshot("r8_4_connect_refused").await;
    assert_eq!(
        tk.api().get("/v1/providers").await.body["providers"],
        json!([]),
        "nothing saved"
    );

    b.js(
        "document.getElementById('provider-model').value = '';",
        vec![],
    )
    .await;
    b.type_into("#provider-model", "scripted-model").await;
    b.click("#provider-connect").await;
    b.wait_js(
        "the connected provider in the list",
        BOUND,
        "const l = document.querySelector('.provider[data-name=\"my-model\"]');          return l ? l.textContent : null;",
    )
    .await;
    let shown = b.text(".providers").await.unwrap_or_default();
    assert!(
        shown.contains("key …6789") && !shown.contains(KEY),
        "{shown}"
    );
    assert!(shown.contains("connected here"), "{shown}");
    assert!(
        b.wait_js(
            "the key field emptied",
            PAGE_WAIT,
            "return document.getElementById('provider-api-key').value === '' || null;"
        )
        .await
            == json!(true)
    );
    b.screenshot("r8_4_connected").await;

    // Back to the chat: the picker lists the model with its provider, and it answers.
    b.click("#new-session").await;
    b.wait_visible("#composer", PAGE_WAIT).await;
    let label = b
        .wait_js(
            "the picker with the connected model",
            PAGE_WAIT,
            "const p = document.getElementById('model');              return p && !p.hidden && p.options.length === 1 ? p.options[0].textContent : null;",
        )
        .await;
    assert_eq!(label, "scripted-model · my-model");
    assert_eq!(b.count(".banner.no-model").await, 0);
    send(&b, "hello there").await;
    b.wait_js(
        "the connected model's answer",
        BOUND,
        &format!(
            "{ANSWER_JS_FN} return answer().includes('answered by the connected model') || null;"
        ),
    )
    .await;
    let asked = model.requests().pop().unwrap();
    assert_eq!(
        asked.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    b.close().await;
}

/// A 1×1 red PNG, base64.
const DOT_PNG_B64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVQI12P4z8AAAAMBAQAY3Y2wAAAAAElFTkSuQmCC";

/// Files in the page (issue 26): a PNG dropped on the chat and a text file pasted into the
/// message box are uploaded at once and shown as chips; the message goes with them, the vision
/// model gets the image, and the transcript shows the image as a thumbnail (read with the
/// token) and the other file as a chip, also after a reload. A file picked with the Attach
/// button goes alone, without text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_ui_uploads_by_drop_paste_and_button_and_shows_thumbnails() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r2_2_ui_uploads…").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.on_user_text("what are these", Reply::text("a dot and some notes"));
    provider.on_user_text("alone.txt", Reply::text("got the file"));
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).provider_model("gpt-4o")).await;
    sign_in(&b, &tk).await;
    let session = new_session(&b).await;

    // One drop, one paste: DataTransfer objects as a person's browser makes them.
    let drop_and_paste = format!(
        "const bytes = Uint8Array.from(atob('{DOT_PNG_B64}'), c => c.charCodeAt(0)); \
         const dropped = new DataTransfer(); \
         dropped.items.add(new File([bytes], 'dot.png', {{type: 'image/png'}})); \
         document.getElementById('chat').dispatchEvent(new DragEvent('drop', \
           {{dataTransfer: dropped, bubbles: true, cancelable: true}})); \
         const pasted = new DataTransfer(); \
         pasted.items.add(new File(['alpha, beta'], 'notes.txt', {{type: 'text/plain'}})); \
         document.getElementById('input').dispatchEvent(new ClipboardEvent('paste', \
           {{clipboardData: pasted, bubbles: true, cancelable: true}}));"
    );
    b.js(&drop_and_paste, vec![]).await;
    b.wait_js(
        "two uploaded chips",
        PAGE_WAIT,
        "const c = document.querySelectorAll('#pending-files .pending-file[data-state=ready]'); \
         return c.length === 2 ? true : null;",
    )
    .await;
    send(&b, "what are these?").await;
    let answered = b
        .wait_js(
            "the answer",
            BOUND,
            "const e = document.getElementById('chat-error'); \
             if (e && !e.hidden && e.textContent) return 'error: ' + e.textContent; \
             return document.body.textContent.includes('a dot and some notes') || null;",
        )
        .await;
    assert_eq!(answered, true, "{answered}");
    let req = provider
        .requests()
        .into_iter()
        .find(|r| r.last_user_text.contains("what are these"))
        .unwrap();
    let sent = req.body["messages"].to_string();
    assert!(
        sent.contains(&format!("data:image/png;base64,{DOT_PNG_B64}")),
        "the image reached the model: {sent}"
    );
    assert!(sent.contains("[file attached: notes.txt"), "{sent}");
    assert_eq!(
        b.count("#pending-files .pending-file").await,
        0,
        "chips cleared"
    );

    let shown = "const t = document.querySelector('.msg.user img.thumb'); \
         const chip = Array.from(document.querySelectorAll('.msg.user .file-chip')) \
           .some(c => c.textContent.includes('notes.txt')); \
         return t && t.complete && t.naturalWidth === 1 && chip ? true : null;";
    b.wait_js("the thumbnail and the chip", PAGE_WAIT, shown)
        .await;
    b.js("location.reload();", vec![]).await;
    b.wait_js(
        "the thumbnail and the chip after a reload",
        PAGE_WAIT,
        shown,
    )
    .await;

    // The Attach button's input, and no text.
    b.js(
        "const dt = new DataTransfer(); \
         dt.items.add(new File(['just a file'], 'alone.txt', {type: 'text/plain'})); \
         const input = document.getElementById('file-input'); \
         input.files = dt.files; input.dispatchEvent(new Event('change'));",
        vec![],
    )
    .await;
    b.wait_js(
        "the picked file's chip",
        PAGE_WAIT,
        "return document.querySelector('#pending-files .pending-file[data-state=ready]') ? true : null;",
    )
    .await;
    b.click("#send").await;
    b.wait_js(
        "the answer to the file alone",
        BOUND,
        "return document.body.textContent.includes('got the file') || null;",
    )
    .await;
    let api = tk.api();
    let rows = api.messages(&session).await;
    let last_user = rows.iter().rev().find(|m| m["role"] == "user").unwrap();
    assert_eq!(
        last_user["attachments"][0]["name"], "alone.txt",
        "{last_user}"
    );
    b.close().await;
}

/// The session list's search box, rename and delete (issue 26): a word of an earlier message
/// finds its session, a rename shows in the header and the list, a delete (confirmed) removes
/// it from the list and the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_ui_searches_renames_and_deletes_sessions() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r1_1_ui_searches…").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.on_user_text("", Reply::text("ok"));
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let aardvark = api.create_session_id().await;
    let a = api
        .submit_accepted(&aardvark, "tell me about the aardvark")
        .await;
    api.wait_terminal(&a, BOUND).await;
    let other = api.create_session_id().await;
    let a = api.submit_accepted(&other, "something else").await;
    api.wait_terminal(&a, BOUND).await;

    sign_in(&b, &tk).await;
    b.wait_js(
        "both sessions listed",
        PAGE_WAIT,
        "return document.querySelectorAll('#sessions .session-link').length === 2 || null;",
    )
    .await;
    b.type_into("#session-search", "aardv").await;
    let hit = b
        .wait_js(
            "one session found",
            PAGE_WAIT,
            "const l = document.querySelectorAll('#sessions .session-link'); \
             return l.length === 1 ? l[0].getAttribute('href') : null;",
        )
        .await;
    assert_eq!(hit, format!("#/s/{aardvark}"));

    b.click("#sessions .session-link").await;
    b.wait_visible("#rename", PAGE_WAIT).await;
    b.click("#rename").await;
    b.js(
        "const f = document.querySelector('.rename-field'); f.value = 'About aardvarks'; \
         f.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter'}));",
        vec![],
    )
    .await;
    eventually(BOUND, "the new title on the server", || async {
        (api.session(&aardvark).await.body["title"] == "About aardvarks").then_some(())
    })
    .await;
    b.wait_js(
        "the new title in the list",
        PAGE_WAIT,
        "return document.querySelector('#sessions').textContent.includes('About aardvarks') || null;",
    )
    .await;

    b.js("window.confirm = () => true;", vec![]).await;
    b.click("#delete").await;
    eventually(BOUND, "the session deleted", || async {
        (api.session(&aardvark).await.status == 404).then_some(())
    })
    .await;
    b.wait_js(
        "no match left",
        PAGE_WAIT,
        "return document.querySelector('#sessions .session-none') ? true : null;",
    )
    .await;
    assert_eq!(api.session(&other).await.status, 200, "the other one stays");
    b.close().await;
}

/// An answer has a Copy button, and so has each of its code blocks (highlighted, with the
/// bundled highlighter); Regenerate sends the
/// turn's input again and a new answer follows; a failed turn says why in words, its code
/// after (issue 26).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_ui_copies_regenerates_and_explains_failures() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r1_1_ui_copies…").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("first take:\n```rust\nfn main() {}\n```"));
    provider.push(Reply::text("second take"));
    provider.push(Reply::error(400, "the model refused this request"));
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).provider_toml("max_retries = 0")).await;
    sign_in(&b, &tk).await;
    new_session(&b).await;
    send(&b, "write a program").await;
    b.wait_js(
        "the answer with its copy buttons",
        BOUND,
        "const a = document.querySelector('.msg.assistant'); \
         return a && a.querySelector('pre .copy') && !a.querySelector('.turn-actions .copy').hidden \
           && !a.querySelector('.regenerate').hidden \
           && a.querySelector('pre code .tk-kw') && a.querySelector('pre code .tk-kw').textContent === 'fn' \
           ? true : null;",
    )
    .await;
    b.click(".msg.assistant .regenerate").await;
    b.wait_js(
        "the second answer",
        BOUND,
        "return document.body.textContent.includes('second take') || null;",
    )
    .await;
    let asked: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| r.last_user_text.clone())
        .collect();
    assert_eq!(asked, ["write a program", "write a program"]);

    send(&b, "and now?").await;
    let note = b
        .wait_js(
            "the failure, explained",
            BOUND,
            "const n = Array.from(document.querySelectorAll('.turn-note')).map(n => n.textContent) \
               .find(t => t.startsWith('Failed')); return n || null;",
        )
        .await;
    let note = note.as_str().unwrap();
    assert!(
        note.contains("the model refused this request") && note.ends_with(')'),
        "{note}"
    );
    b.close().await;
}
