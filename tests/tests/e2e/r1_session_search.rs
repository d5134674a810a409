//! Session search (issue 26): `GET /v1/sessions?q=` finds the caller's sessions whose title
//! holds the text or whose transcript holds its words (word prefixes, all required), on SQLite
//! (FTS5) and PostgreSQL (`tsvector`). Another principal's sessions stay out (the operator sees
//! all), query syntax is never passed through, a deleted session is no longer found.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use turnkey_tests::wait::BOUND;
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

/// The ids `q` finds for `api`.
async fn found(api: &Api, q: &str) -> Vec<String> {
    let r = api.get(&format!("/v1/sessions?q={}", urlencode(q))).await;
    assert_eq!(r.status, 200, "{q:?}: {}", r.text);
    r.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn turn(api: &Api, session: &str, text: &str) {
    let a = api.submit_accepted(session, text).await;
    let done = api.wait_terminal(&a, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
}

async fn search(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_user_text("Zebra", Reply::text("stripes are noted"));
    provider.on_user_text("", Reply::text("fine"));
    let opts = TurnkeyOptions::new(&provider);
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let tk = Turnkey::start(opts).await;
    let op = tk.api();
    let created = op.post("/v1/tokens", &json!({"name": "alice"})).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let alice = op.with_token(Some(&created.str_field("token")));

    let zebra = alice.create_session_id().await;
    turn(&alice, &zebra, "Yesterday the Zebra crossed the river").await;
    turn(&alice, &zebra, "and then it rained").await;
    let budget = alice.create_session_id().await;
    let r = alice
        .patch_session(&budget, &json!({"title": "Budget plan 2027"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    turn(&alice, &budget, "numbers only").await;
    let theirs = op.create_session_id().await;
    turn(&op, &theirs, "a zebra of the operator").await;

    assert_eq!(found(&alice, "zebra").await, std::slice::from_ref(&zebra));
    assert_eq!(
        found(&alice, "ZEB").await,
        std::slice::from_ref(&zebra),
        "a word prefix"
    );
    assert_eq!(
        found(&alice, "river zebra").await,
        std::slice::from_ref(&zebra),
        "all words"
    );
    assert!(
        found(&alice, "zebra budget").await.is_empty(),
        "all words, one row"
    );
    assert_eq!(
        found(&alice, "stripes").await,
        std::slice::from_ref(&zebra),
        "the answers too"
    );
    assert_eq!(
        found(&alice, "budget plan").await,
        std::slice::from_ref(&budget),
        "the title"
    );
    assert!(
        found(&alice, "\"*() OR NEAR(").await.is_empty(),
        "no query syntax"
    );
    assert!(found(&alice, "' OR 1=1 --").await.len() <= 2);
    let mut everyone = found(&op, "zebra").await;
    everyone.sort();
    let mut both = vec![zebra.clone(), theirs.clone()];
    both.sort();
    assert_eq!(everyone, both, "the operator sees everyone's");

    let long = "x".repeat(201);
    let r = alice.get(&format!("/v1/sessions?q={long}")).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.error_code(), Some("invalid_query"));
    let r = alice.get("/v1/sessions?q=").await;
    assert_eq!(
        r.body["sessions"].as_array().unwrap().len(),
        2,
        "empty: all"
    );

    let d = alice
        .try_send(
            reqwest::Method::DELETE,
            &format!("/v1/sessions/{zebra}"),
            None,
            &[],
        )
        .await
        .unwrap();
    assert_eq!(d.status, 204, "{}", d.text);
    assert!(
        found(&alice, "zebra").await.is_empty(),
        "deleted: not found"
    );
    assert_eq!(found(&op, "zebra").await, [theirs]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_session_search_finds_words_of_old_messages_and_titles_sqlite() {
    search(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_session_search_finds_words_of_old_messages_and_titles_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    search(Some(db.url())).await;
}
