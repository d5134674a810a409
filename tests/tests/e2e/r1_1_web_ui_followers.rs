//! The web UI beside other clients and across reloads, in real headless Chromium (SPEC R1.1,
//! R11.1, R13.9; issue 38): an input sent from another door shows at once with its words
//! (`admission.queued` carries them) and the page's own input shows once; a turn's "resumed"
//! and "cut off" notes come back after a reload (the transcript's turn facts); on a phone
//! "New session" closes the drawer; renaming raises no error in the page; the header never
//! says "0 tokens" of a turn that is running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::r1_1_web_ui::{new_session, send, sign_in, tell_a_slow_story, SERIAL};
use serde_json::Value;
use std::time::Duration;
use turnkey_tests::browser::{Browser, DESKTOP, PAGE_WAIT, PHONE};
use turnkey_tests::wait::BOUND;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

/// The text of every user row of the transcript, in order.
const USER_ROWS_JS: &str = "return Array.from(document.querySelectorAll('#transcript .msg.user'))\
     .map(e => e.textContent);";

/// `answer()` in page scripts: the assistant blocks' text.
const ANSWER_JS_FN: &str =
    "const answer = () => Array.from(document.querySelectorAll('.msg.assistant .md'))\
     .map(e => e.textContent).join('|');";

/// Collects the page's uncaught errors and unhandled rejections into `window.__errors`.
const CATCH_ERRORS_JS: &str = "window.__errors = []; \
     window.addEventListener('error', (e) => window.__errors.push(String(e.message))); \
     window.addEventListener('unhandledrejection', (e) => \
       window.__errors.push(String(e.reason && e.reason.message ? e.reason.message : e.reason)));";

fn strings(v: Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_1_ui_shows_an_input_sent_from_another_client_at_once_and_its_own_once() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r11_1_ui_shows_an_input_sent_from_another…").await
    else {
        return;
    };
    let provider = ScriptedProvider::start();
    let words: Vec<String> = (1..=12).map(|i| format!("e{i:02} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    provider.on_user_text(
        "from the terminal",
        Reply::chunks(&words, Duration::from_millis(300)),
    );
    let tk =
        Turnkey::start(TurnkeyOptions::new(&provider).extra_toml("[agent]\ndelta_flush_ms = 50\n"))
            .await;
    let api = tk.api();
    sign_in(&b, &tk).await;
    let session = new_session(&b).await;

    // Another client (here the HTTP API, as `turnkey chat` uses it) sends into the open
    // session: its words are shown before its answer has finished streaming.
    api.submit_accepted(&session, "sent from the terminal")
        .await;
    let seen = b
        .wait_js(
            "the other client's input",
            PAGE_WAIT,
            &format!(
                "{ANSWER_JS_FN} const rows = Array.from(document.querySelectorAll('#transcript .msg.user')); \
                 return rows.some(r => r.textContent.includes('sent from the terminal')) ? answer() : null;"
            ),
        )
        .await;
    assert!(
        !seen.as_str().unwrap().contains("e12"),
        "shown before its answer ended: {seen}"
    );
    b.wait_js(
        "its answer",
        BOUND,
        &format!("{ANSWER_JS_FN} return answer().includes('e12');"),
    )
    .await;

    // The page's own input: one row, not a second from its admission.queued.
    send(&b, "and this from the page").await;
    b.wait_js(
        "the page's own answer",
        BOUND,
        &format!("{ANSWER_JS_FN} return answer().includes('ok: and this from the page');"),
    )
    .await;
    let rows = strings(b.js(USER_ROWS_JS, vec![]).await);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows[0].contains("sent from the terminal"), "{rows:?}");
    assert!(rows[1].contains("and this from the page"), "{rows:?}");
    b.screenshot("ui-input-from-another-client").await;

    // A reload shows the same rows, from the transcript.
    b.client.refresh().await.expect("reload");
    b.wait_visible("#composer", PAGE_WAIT).await;
    b.wait_js(
        "the transcript after the reload",
        PAGE_WAIT,
        "return document.querySelectorAll('#transcript .msg.user').length === 2 || null;",
    )
    .await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_9_ui_keeps_the_resumed_and_cut_off_notes_after_a_reload() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r13_9_ui_keeps_the_resumed_and_cut_off_notes…").await
    else {
        return;
    };
    let provider = ScriptedProvider::start();
    // The first attempt streams slowly and is cut by a crash; every later call (the resumed
    // attempt and its continuations) is cut off by the output limit.
    tell_a_slow_story(&provider, 1);
    provider.on_user_text("", Reply::cut_off("The story, cut short. "));
    let mut tk =
        Turnkey::start(TurnkeyOptions::new(&provider).extra_toml("[agent]\ndelta_flush_ms = 50\n"))
            .await;
    sign_in(&b, &tk).await;
    new_session(&b).await;
    send(&b, "tell me a long story").await;
    b.wait_js(
        "the first words",
        BOUND,
        &format!("{ANSWER_JS_FN} return answer().includes('s03');"),
    )
    .await;
    tk.kill();
    tk.start_again_at_same_address().await;

    let notes_js = "const n = Array.from(document.querySelectorAll('.turn-note')).map(n => n.textContent); \
         return n.some(t => t.startsWith('Resumed by itself')) && n.includes('Cut off by the output limit') \
         ? n : null;";
    let live = strings(b.wait_js("the notes, live", BOUND, notes_js).await);
    b.screenshot("ui-notes-live").await;

    b.client.refresh().await.expect("reload");
    b.wait_visible("#composer", PAGE_WAIT).await;
    let reloaded = strings(
        b.wait_js("the notes after the reload", PAGE_WAIT, notes_js)
            .await,
    );
    assert_eq!(reloaded, live, "the same notes, in the same order");
    let resumed = reloaded
        .iter()
        .find(|n| n.starts_with("Resumed by itself"))
        .unwrap();
    assert!(resumed.contains("(attempt 2)"), "{resumed}");
    assert!(!resumed.contains("once"), "{resumed}");
    b.screenshot("ui-notes-after-reload").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_ui_renaming_raises_no_error_and_new_session_on_a_phone_closes_the_drawer() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r1_1_ui_renaming_raises_no_error…").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    sign_in(&b, &tk).await;
    b.js(CATCH_ERRORS_JS, vec![]).await;

    // Rename with the keyboard: Enter saves, and the page raises no error (taking the field
    // out of the page blurs it, which ended the edit a second time).
    let session = new_session(&b).await;
    b.click("#rename").await;
    b.js(
        "const f = document.querySelector('.rename-field'); f.value = 'Trip to Lyon'; f.focus();",
        vec![],
    )
    .await;
    let field = b.client.active_element().await.unwrap();
    field.send_keys("\u{E007}").await.unwrap();
    b.wait_js(
        "the new title in the header",
        PAGE_WAIT,
        "return document.querySelector('#session-title').textContent === 'Trip to Lyon' || null;",
    )
    .await;
    assert_eq!(api.session(&session).await.body["title"], "Trip to Lyon");
    b.wait_js(
        "the new title in the list",
        PAGE_WAIT,
        "return document.querySelector('#sessions').textContent.includes('Trip to Lyon') || null;",
    )
    .await;
    assert_eq!(b.count(".rename-field").await, 0);
    let errors = b.js("return window.__errors;", vec![]).await;
    assert_eq!(errors, serde_json::json!([]), "errors in the page");

    // On a phone the drawer is open over the chat; "New session" puts the new chat in front.
    b.resize(PHONE).await;
    b.click("#toggle-sessions").await;
    b.wait_js(
        "the drawer open",
        PAGE_WAIT,
        "return document.querySelector('#app').classList.contains('show-sessions') || null;",
    )
    .await;
    let other = new_session(&b).await;
    assert_ne!(other, session);
    b.wait_js(
        "the drawer closed",
        PAGE_WAIT,
        "return !document.querySelector('#app').classList.contains('show-sessions') \
         && getComputedStyle(document.querySelector('#sidebar')).display === 'none' || null;",
    )
    .await;
    assert_eq!(
        b.js(
            "return document.querySelector('#toggle-sessions').getAttribute('aria-expanded');",
            vec![]
        )
        .await,
        "false"
    );
    b.wait_visible("#input", PAGE_WAIT).await;
    b.screenshot("ui-phone-new-session").await;
    b.resize(DESKTOP).await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_ui_header_does_not_count_zero_tokens_while_a_turn_runs() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r1_1_ui_header_does_not_count_zero…").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    let words: Vec<String> = (1..=10).map(|i| format!("u{i:02} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    provider.on_user_text("slow", Reply::chunks(&words, Duration::from_millis(300)));
    let tk =
        Turnkey::start(TurnkeyOptions::new(&provider).extra_toml("[agent]\ndelta_flush_ms = 50\n"))
            .await;
    sign_in(&b, &tk).await;
    new_session(&b).await;
    assert_eq!(
        b.text("#usage").await.as_deref(),
        Some(""),
        "nothing spent yet"
    );
    send(&b, "a slow answer please").await;
    let running = b
        .wait_js(
            "the header while the turn runs",
            PAGE_WAIT,
            &format!(
                "{ANSWER_JS_FN} return answer().includes('u02') && \
                 !answer().includes('u10') ? document.querySelector('#usage').textContent : null;"
            ),
        )
        .await;
    let running = running.as_str().unwrap();
    assert!(
        !running.contains("0 in") && running.contains("counting this turn"),
        "{running:?}"
    );
    b.screenshot("ui-header-running").await;
    let done = b
        .wait_js(
            "the header after the turn",
            BOUND,
            "const t = document.querySelector('#usage').textContent; \
             return t.includes('tokens') && !t.includes('counting') ? t : null;",
        )
        .await;
    assert!(!done.as_str().unwrap().starts_with("0 in"), "{done}");
    b.close().await;
}
