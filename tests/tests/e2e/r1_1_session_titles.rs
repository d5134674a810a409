//! Sessions are named after their first message whichever door made them (issue 38): one made
//! by `turnkey chat` and one made by the OpenAI endpoint take the first line of the person's
//! first message, cut at a word; a title a person gave is never replaced.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::r1_2_chat_cli::{blocking, chat, session_id, start, PROMPT};
use serde_json::{json, Value};
use turnkey_tests::wait::BOUND;
use turnkey_tests::ScriptedProvider;

const LONG: &str = "Could you look at the failing deploy of the billing service and tell me why";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_sessions_from_the_terminal_and_the_openai_door_are_titled_by_their_first_message() {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "approval = \"off\"").await;
    let api = tk.api();

    // `turnkey chat`: a new session, its first line.
    let mut pty = chat(&tk, &[]);
    let from_chat = blocking(|| {
        let id = session_id(&mut pty);
        pty.expect(PROMPT);
        pty.send_line("plan the trip to Lyon");
        pty.expect("ok: plan the trip to Lyon");
        pty.expect(PROMPT);
        pty.send_line("and book the hotel");
        pty.expect("ok: and book the hotel");
        pty.expect(PROMPT);
        id
    });
    assert_eq!(
        api.session(&from_chat).await.body["title"],
        "plan the trip to Lyon"
    );

    // The OpenAI endpoint: a session keyed by `user`, named after the last user message of
    // its first call (the one the turn answers), its first line, cut at a word.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let res = http
        .post(format!("{}/v1/chat/completions", tk.url))
        .bearer_auth(&tk.token)
        .timeout(BOUND)
        .json(&json!({"model": "scripted-model", "user": "bob",
            "messages": [{"role": "user", "content": format!("{LONG}\nThe logs are attached.")}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let from_openai = res
        .headers()
        .get("x-turnkey-session")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let body: Value = res.json().await.unwrap();
    assert!(
        body["choices"][0]["message"]["content"].is_string(),
        "{body}"
    );
    assert_eq!(
        api.session(&from_openai).await.body["title"],
        "Could you look at the failing deploy of the billing service…"
    );

    // A title a person gave stays.
    let renamed = api
        .patch_session(&from_openai, &json!({"title": "Billing deploy"}))
        .await;
    assert_eq!(renamed.status, 200, "{}", renamed.text);
    let again = http
        .post(format!("{}/v1/chat/completions", tk.url))
        .bearer_auth(&tk.token)
        .timeout(BOUND)
        .json(&json!({"model": "scripted-model", "user": "bob",
            "messages": [{"role": "user", "content": "anything new?"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(
        api.session(&from_openai).await.body["title"],
        "Billing deploy"
    );
}
