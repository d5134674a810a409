//! Secrets masked (SPEC R13.8; `[security] redact_secrets`) against the real binary, on SQLite
//! and PostgreSQL: a file the agent reads holds the provider key, the operator token and a
//! GitHub token; a user pastes an AWS key. None of them is in the stored transcript, the
//! events, the spill-free tool result or any request sent to the model afterwards; the masks
//! are. With `redact_secrets = false` the same file's values reach the model (the positive
//! control).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use turnkey_tests::wait::BOUND;
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
