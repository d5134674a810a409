//! Picking a session's model (issue 26, SPEC R8.4) against the real binary, with two scripted
//! providers: the primary speaks OpenAI (`scripted-model`), the second Anthropic
//! (`claude-scripted`). `PATCH /v1/sessions/{id} {model}` takes one of `GET /v1/models`; the
//! next turn starts at preflight on the provider serving it, with the whole conversation
//! rebuilt in that provider's wire format; when the chosen provider fails, the chain falls back
//! to the others, each with its own model name. `/model` does the same from a chat.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use turnkey_tests::files::content_text;
use turnkey_tests::webhooks::{platforms_toml, telegram_message, Endpoints, Rows, Webhooks};
use turnkey_tests::{pg, Reply, ScriptedProvider, Turnkey, TurnkeyOptions, Wire};

use turnkey_tests::wait::BOUND;

const PRIMARY: &str = "scripted-model";
const SECOND: &str = "claude-scripted";
const ALICE: i64 = 4242;

async fn start(
    primary: &ScriptedProvider,
    second: &ScriptedProvider,
    database: Option<&str>,
    extra: &str,
) -> Turnkey {
    let opts = TurnkeyOptions::new(primary)
        .provider_toml("max_retries = 0")
        .extra_toml(&format!(
            r#"
[[providers]]
name = "second"
kind = "anthropic"
base_url = "{}"
api_key = "second-key"
model = "{SECOND}"
context_window = 16000
max_retries = 0
{extra}"#,
            second.base_url
        ));
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    Turnkey::start(opts).await
}

async fn model_switch(database: Option<&str>) {
    let primary = ScriptedProvider::start();
    let second = ScriptedProvider::start();
    let tk = start(&primary, &second, database, "").await;
    let api = tk.api();

    let models = api.get("/v1/models").await;
    assert_eq!(models.status, 200, "{}", models.text);
    let ids: Vec<&str> = models.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    let direct = [format!("direct/{PRIMARY}"), format!("direct/{SECOND}")];
    assert_eq!(
        ids,
        [PRIMARY, SECOND, direct[0].as_str(), direct[1].as_str()],
        "in the order of the chain, then each as a direct model"
    );

    let s = api.create_session_id().await;
    assert_eq!(api.session(&s).await.body["model"], PRIMARY);
    primary.push(Reply::text("answer one"));
    let a = api.submit_accepted(&s, "question one").await;
    let done = api.wait_terminal(&a, BOUND).await;
    assert_eq!(done["outcome"]["final_response"], "answer one", "{done}");

    // Refused: a model no provider serves, a value that is not a name. Nothing changes.
    for bad in [json!({"model": "gpt-nonexistent"}), json!({"model": 5})] {
        let r = api.patch_session(&s, &bad).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        assert_eq!(r.error_code(), Some("invalid_model"), "{}", r.text);
    }
    let r = api
        .patch_session(&s, &json!({"model": "gpt-nonexistent"}))
        .await;
    assert!(
        r.text.contains(SECOND),
        "the message names the choices: {}",
        r.text
    );
    assert_eq!(api.session(&s).await.body["model"], PRIMARY);

    // Switched: the next turn runs on the second provider, its wire, its model, the whole
    // conversation rebuilt for it.
    let r = api.patch_session(&s, &json!({"model": SECOND})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["model"], SECOND, "{}", r.text);
    second.push(Reply::text("answer two from the second"));
    let a = api.submit_accepted(&s, "question two").await;
    let done = api.wait_terminal(&a, BOUND).await;
    assert_eq!(
        done["outcome"]["final_response"], "answer two from the second",
        "{done}"
    );
    assert_eq!(primary.request_count(), 1, "the primary was not asked");
    let reqs = second.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].wire, Wire::Anthropic);
    assert_eq!(reqs[0].body["model"], SECOND);
    let said: Vec<String> = reqs[0].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| content_text(&m["content"]))
        .collect();
    assert!(
        said.iter().any(|t| t.contains("question one"))
            && said.iter().any(|t| t.contains("answer one"))
            && said.iter().any(|t| t.contains("question two")),
        "the whole conversation: {said:?}"
    );

    // The chosen provider fails: the chain falls back to the primary, which is asked for its
    // own model, not the chosen one.
    second.push(Reply::error(500, "down"));
    primary.push(Reply::text("answer three from the primary"));
    let a = api.submit_accepted(&s, "question three").await;
    let done = api.wait_terminal(&a, BOUND).await;
    assert_eq!(
        done["outcome"]["final_response"], "answer three from the primary",
        "{done}"
    );
    let last = primary.requests().pop().unwrap();
    assert_eq!(last.wire, Wire::OpenAi);
    assert_eq!(last.body["model"], PRIMARY, "{}", last.body);
    assert_eq!(
        api.session(&s).await.body["model"],
        SECOND,
        "the choice stays"
    );

    // Cleared: back to the primary's model.
    let r = api.patch_session(&s, &json!({"model": null})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["model"], PRIMARY, "{}", r.text);
    primary.push(Reply::text("answer four"));
    let a = api.submit_accepted(&s, "question four").await;
    api.wait_terminal(&a, BOUND).await;
    assert_eq!(second.request_count(), 2, "the second was not asked again");
    assert_eq!(primary.requests().pop().unwrap().body["model"], PRIMARY);

    // Someone else's session: 404, nothing changed.
    let r = api.post("/v1/tokens", &json!({"name": "stranger"})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = api
        .with_token(Some(&r.str_field("token")))
        .patch_session(&s, &json!({"model": SECOND}))
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(api.session(&s).await.body["model"], PRIMARY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_a_sessions_model_is_switched_for_its_next_turn_sqlite() {
    model_switch(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_a_sessions_model_is_switched_for_its_next_turn_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    model_switch(Some(db.url())).await;
}

/// `/model` from a chat: the list with the one in use marked, a switch, and a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_4_model_from_a_chat_lists_and_switches() {
    let primary = ScriptedProvider::start();
    let second = ScriptedProvider::start();
    let to = Endpoints::nowhere();
    let toml = platforms_toml(&to, &[&ALICE.to_string()], &[]);
    let tk = start(&primary, &second, None, &toml).await;
    let hooks = Webhooks::new(&tk.url);
    let rows = Rows::connect(&tk.database_url).await;
    let api = tk.api();

    let say = |id: i64, text: &'static str| {
        let hooks = &hooks;
        async move {
            let (r, _) = hooks
                .telegram(&telegram_message(id, ALICE, ALICE, text))
                .await;
            assert_eq!(r.status, 200, "{}", r.text);
            r
        }
    };
    let answer = |id: i64| {
        let rows = &rows;
        async move {
            rows.wait_outbox(&format!("cmd:telegram:{id}"), BOUND)
                .await
                .text()
                .to_owned()
        }
    };

    primary.push(Reply::text("hello back"));
    let r = say(1, "hello").await;
    let session = r.body["receipt"]["session_id"].as_str().unwrap().to_owned();
    let first = r.body["receipt"]["admission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    api.wait_terminal(&first, BOUND).await;

    say(2, "/model").await;
    let listed = answer(2).await;
    assert!(
        listed.contains(&format!("{PRIMARY} (in use)")) && listed.contains(SECOND),
        "{listed}"
    );

    say(3, "/model nonexistent").await;
    let refused = answer(3).await;
    assert!(refused.contains("not served"), "{refused}");
    assert_eq!(api.session(&session).await.body["model"], PRIMARY);

    say(4, "/model claude-scripted").await;
    let switched = answer(4).await;
    assert!(switched.contains(SECOND), "{switched}");
    assert_eq!(api.session(&session).await.body["model"], SECOND);

    second.push(Reply::text("from the second"));
    let r = say(5, "and now?").await;
    let id = r.body["receipt"]["admission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = api.wait_terminal(&id, BOUND).await;
    assert_eq!(
        done["outcome"]["final_response"], "from the second",
        "{done}"
    );
    assert_eq!(second.requests()[0].body["model"], SECOND);
}
