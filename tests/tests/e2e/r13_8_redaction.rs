//! Secrets masked (SPEC R13.8; `[security] redact_secrets`) against the real binary, on SQLite
//! and PostgreSQL: a file the agent reads holds the provider key, the operator token and a
//! GitHub token; a user pastes an AWS key. None of them is in the stored transcript, the
//! events, the spill-free tool result or any request sent to the model afterwards; the masks
//! are. With `redact_secrets = false` the same file's values reach the model (the positive
//! control).
//!
//! The other way round, what comes back from the model: an answer streamed with a secret cut
//! between two deltas, a memory entry the model (and the API) writes with one, a provider's
//! error that quotes its key, a platform chat's answer. None reaches the transcript, the
//! events, memory, the outbox row, the platform or the log; with masking off all of them do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use std::time::Duration;
use turnkey_tests::fake_platforms::FakePlatform;
use turnkey_tests::wait::BOUND;
use turnkey_tests::webhooks::{generic_message, Rows, Webhooks, GENERIC_SECRET};
use turnkey_tests::{pg, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

const PROVIDER_KEY: &str = "scripted-provider-key-0123456789";
const GITHUB: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789AB";
const AWS: &str = "AKIAABCDEFGHIJKLMNOP";

async fn masked(database: Option<&str>, redact: bool) {
    let provider = ScriptedProvider::start();
    provider.on_tool_result("read the env file", Reply::text("read it"));
    provider.on_user_text(
        "read the env file",
        Reply::tool_call("c1", "read_file", json!({"path": "app.env"})),
    );
    provider.on_user_text("my key", Reply::text("noted"));
    let security = if redact {
        ""
    } else {
        "[security]\nredact_secrets = false\n"
    };
    let opts = TurnkeyOptions::new(&provider)
        .provider_api_key(PROVIDER_KEY)
        .extra_toml(&format!("[tools]\napproval = \"off\"\n{security}"));
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let tk = Turnkey::start(opts).await;
    let api = tk.api();
    std::fs::write(
        tk.dir.path().join("workspace").join("app.env"),
        format!(
            "OPENAI_API_KEY={PROVIDER_KEY}\nTURNKEY_TOKEN={}\nGITHUB_TOKEN={GITHUB}\nPORT=8080\n",
            tk.token
        ),
    )
    .unwrap();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "read the env file").await;
    api.wait_terminal(&a, BOUND).await;
    let b = api
        .submit_accepted(&s, &format!("my key is {AWS}, keep it safe"))
        .await;
    api.wait_terminal(&b, BOUND).await;

    let secrets = [PROVIDER_KEY, tk.token.as_str(), GITHUB, AWS];
    let messages = serde_json::to_string(&api.messages(&s).await).unwrap();
    let events = serde_json::to_string(&api.all_events(&s, 0).await).unwrap();
    let sent: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    let sent = sent.join("\n");
    let result = provider.tool_result(1, "c1");
    assert!(
        result.contains("PORT=8080"),
        "the rest of the file is there: {result}"
    );
    for secret in secrets {
        for (what, text) in [("messages", &messages), ("model requests", &sent)] {
            assert_eq!(
                text.contains(secret),
                !redact,
                "{secret} in {what} (redact_secrets = {redact})"
            );
        }
        // Events carry tool previews, not the user's text: never a secret when masked.
        if redact {
            assert!(!events.contains(secret), "{secret} in events");
        }
    }
    if redact {
        assert!(result.contains("OPENAI_API_KEY=[redacted]"), "{result}");
        assert!(result.contains("[redacted: a GitHub token]"), "{result}");
        assert!(
            messages.contains("my key is [redacted: an AWS access key]"),
            "{messages}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_secrets_are_masked_before_they_are_stored_or_sent_sqlite() {
    masked(None, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_secrets_are_masked_before_they_are_stored_or_sent_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    masked(Some(db.url()), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_with_redaction_off_the_values_pass() {
    masked(None, false).await;
}

async fn answers_masked(database: Option<&str>, redact: bool) {
    let provider = ScriptedProvider::start();
    // The key cut between chunks a delta window apart, so between two `message.delta`s.
    let window = Duration::from_millis(400);
    provider.on_user_text(
        "leak it",
        Reply::chunks(
            &[
                "Sure: scripted-pro",
                "vider-key-0123456789 is the key, and generic-web",
                "hook-secret the other.",
            ],
            window,
        ),
    );
    provider.on_tool_result("remember it", Reply::text("remembered"));
    provider.on_user_text(
        "remember it",
        Reply::tool_call(
            "m1",
            "memory",
            json!({"action": "add", "target": "memory",
                   "text": format!("the provider key is {PROVIDER_KEY}")}),
        ),
    );
    provider.on_user_text(
        "fail now",
        Reply::Error {
            status: 401,
            body: json!({"error": {
                "message": format!("Incorrect API key provided: {PROVIDER_KEY}"),
                "type": "invalid_request_error", "code": "invalid_api_key"}}),
            retry_after: None,
        },
    );
    let gw = FakePlatform::webhook(GENERIC_SECRET);
    let security = if redact {
        ""
    } else {
        "[security]\nredact_secrets = false\n"
    };
    let opts = TurnkeyOptions::new(&provider)
        .provider_api_key(PROVIDER_KEY)
        .env("RUST_LOG", "info,turnkey_actors=debug,turnkey_web=debug")
        .extra_toml(&format!(
            "[tools]\napproval = \"off\"\n{security}{}",
            gw.config_toml("")
        ));
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let tk = Turnkey::start(opts).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    for text in ["leak it", "remember it", "fail now"] {
        let a = api.submit_accepted(&s, text).await;
        api.wait_terminal(&a, BOUND).await;
    }
    let posted = api
        .post(
            "/v1/memory",
            &json!({"target": "profile", "text": format!("my key: {PROVIDER_KEY}")}),
        )
        .await;
    assert_eq!(posted.status, 201, "{}", posted.text);
    let (hook, _) = Webhooks::new(&tk.url)
        .generic(&generic_message("room-1", "m-1", "alice", "leak it"))
        .await;
    assert_eq!(hook.status, 200, "{}", hook.text);
    let sent = gw.wait_accepted(&["reply"], 1, BOUND).await.unwrap();

    let messages = serde_json::to_string(&api.messages(&s).await).unwrap();
    let events = api.all_events(&s, 0).await;
    let deltas: String = events
        .iter()
        .filter(|e| e["kind"] == "message.delta")
        .filter_map(|e| e["data"]["text"].as_str())
        .collect();
    let events = serde_json::to_string(&events).unwrap();
    let memory = api.get("/v1/memory").await.text;
    let outbox = serde_json::to_string(
        &Rows::connect(&tk.database_url)
            .await
            .outbox()
            .await
            .iter()
            .map(|r| r.payload.clone())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let delivered =
        serde_json::to_string(&sent.iter().map(|c| &c.body).collect::<Vec<_>>()).unwrap();
    let log = tk.stderr();
    assert!(
        deltas.contains("Sure:"),
        "the answer streamed as deltas: {events}"
    );
    for secret in [PROVIDER_KEY, GENERIC_SECRET] {
        for (what, text) in [
            ("messages", &messages),
            ("streamed deltas", &deltas),
            ("events", &events),
            ("outbox rows", &outbox),
            ("the platform's message", &delivered),
        ] {
            assert_eq!(
                text.contains(secret),
                !redact,
                "{secret} in {what} (redact_secrets = {redact}): {text}"
            );
        }
    }
    for (what, text) in [("memory", &memory), ("the log", &log)] {
        assert_eq!(
            text.contains(PROVIDER_KEY),
            !redact,
            "the key in {what} (redact_secrets = {redact}): {text}"
        );
    }
    if redact {
        assert!(
            deltas.contains("Sure: [redacted] is the key, and [redacted] the other."),
            "{deltas}"
        );
        assert!(
            memory.contains("the provider key is [redacted]"),
            "{memory}"
        );
        assert!(memory.contains("my key: [redacted]"), "{memory}");
        assert!(
            events.contains("Incorrect API key provided: [redacted]"),
            "{events}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_the_models_answers_memory_errors_outbox_and_log_are_masked_sqlite() {
    answers_masked(None, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_the_models_answers_memory_errors_outbox_and_log_are_masked_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    answers_masked(Some(db.url()), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_with_redaction_off_the_models_secrets_pass() {
    answers_masked(None, false).await;
}
