//! The web UI's Models page and model picker with two providers in real headless Chromium
//! (SPEC R1.1, R8.4; issue 38, items 9 and 12), against the real binary: a local server is
//! detected at start and says its context window (llama.cpp `/props`); the page lists it as
//! the primary that answers the next message, with its window and where the number came from.
//! The operator connects a second server of the same model by hand, typing its address without
//! `/v1`: the page says, visibly, that it is the first fallback (not that it answers the next
//! message), what its base URL became, and how to pick it; the list shows both in order. The
//! chat's picker then offers both providers, and picking the second makes it answer. Without
//! Chromium and chromedriver the test prints "skipping: …", unless `TURNKEY_REQUIRE_BROWSER=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::r1_1_web_ui::{new_session, send, sign_in, SERIAL};
use serde_json::json;
use turnkey_tests::browser::{Browser, PAGE_WAIT};
use turnkey_tests::wait::{eventually, BOUND};
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

/// The text of the provider row named `name`, once it is listed.
fn row_js(name: &str) -> String {
    format!(
        "const l = document.querySelector('.provider[data-name=\"{name}\"]'); \
         return l ? l.textContent : null;"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_ui_shows_the_order_the_windows_and_picks_either_provider() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r8_4_ui_shows_the_order…").await else {
        return;
    };
    let detected = ScriptedProvider::start();
    detected.answer_path(
        "/props",
        json!({"default_generation_settings": {"n_ctx": 8192}}),
    );
    let by_hand = ScriptedProvider::start();
    by_hand.only_under_v1();
    by_hand.on_user_text("which one", Reply::text("answered by mine"));
    let tk = Turnkey::start(TurnkeyOptions::new(&detected).first_run(&[&detected.base_url])).await;
    sign_in(&b, &tk).await;
    b.click("#nav-models").await;
    b.wait_visible("#connect-model", PAGE_WAIT).await;
    let row = b
        .wait_js("the detected provider", PAGE_WAIT, &row_js("local"))
        .await;
    let row = row.as_str().unwrap();
    for said in [
        "primary",
        "answers the next message",
        "context window 8,192 tokens, read from the server (llama.cpp GET /props)",
        "found on this machine at start",
    ] {
        assert!(row.contains(said), "{said:?} in {row}");
    }

    let root = by_hand.base_url.trim_end_matches("/v1").to_owned();
    b.js(
        "document.getElementById('provider-name').value = '';",
        vec![],
    )
    .await;
    b.type_into("#provider-name", "mine").await;
    b.type_into("#provider-base-url", &root).await;
    b.type_into("#provider-model", "scripted-model").await;
    b.click("#provider-connect").await;
    let notice = b
        .wait_js(
            "the notice after connecting",
            BOUND,
            "const n = document.getElementById('provider-notice'); \
             return n && !n.hidden && n.offsetHeight > 0 && n.textContent ? n.textContent : null;",
        )
        .await;
    let notice = notice.as_str().unwrap();
    b.screenshot("r8_4_models_connected_fallback").await;
    assert!(!notice.contains("It answers the next message"), "{notice}");
    for said in [
        format!("Its base URL is {}.", by_hand.base_url),
        "local answers the next message; mine is fallback 1".to_owned(),
        "choose mine/scripted-model in a session's model picker".to_owned(),
    ] {
        assert!(notice.contains(&said), "{said:?} in {notice}");
    }
    let row = b
        .wait_js("the connected provider", BOUND, &row_js("mine"))
        .await;
    let row = row.as_str().unwrap();
    assert!(row.contains("fallback 1"), "{row}");
    assert!(!row.contains("answers the next message"), "{row}");
    let names = b
        .js(
            "return Array.from(document.querySelectorAll('.provider')).map(p => p.dataset.name);",
            vec![],
        )
        .await;
    assert_eq!(names, json!(["local", "mine"]), "the order turns try them");
    b.screenshot("r8_4_models_order").await;

    // The chat's picker offers both providers of the one model; the second answers when picked.
    let session = new_session(&b).await;
    let options = b
        .wait_js(
            "the picker's options",
            PAGE_WAIT,
            "const p = document.getElementById('model'); \
             return p && !p.hidden && p.options.length === 2 \
               ? Array.from(p.options).map(o => [o.value, o.textContent]) : null;",
        )
        .await;
    assert_eq!(
        options,
        json!([
            ["scripted-model", "scripted-model · local"],
            ["mine/scripted-model", "mine/scripted-model · mine"]
        ])
    );
    b.js(
        "const p = document.getElementById('model'); p.value = 'mine/scripted-model'; \
         p.dispatchEvent(new Event('change'));",
        vec![],
    )
    .await;
    let api = tk.api();
    eventually(BOUND, "the session's model is the chosen one", || async {
        (api.session(&session).await.body["model"] == "mine/scripted-model").then_some(())
    })
    .await;
    send(&b, "which one answers").await;
    b.wait_js(
        "the answer of the one picked",
        BOUND,
        "return document.body.textContent.includes('answered by mine') || null;",
    )
    .await;
    assert_eq!(detected.request_count(), 0, "the primary was not asked");
    b.close().await;
}
