//! Every string a client sends has a documented limit, enforced before the store, with the
//! same answer on SQLite and PostgreSQL (SPEC R2.2): an oversized or malformed field is a 400
//! with a stable code, never a 5xx, and nothing is half-written. Control characters (NUL
//! above all, which PostgreSQL's text refuses) are stripped from free text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use reqwest::Method;
use serde_json::{json, Value};
use turnkey_tests::{pg, Api, ScriptedProvider, Turnkey, TurnkeyOptions};

/// `(what, path suffix, body, extra header)` → expected status and code.
struct Case {
    what: &'static str,
    body: Value,
    header: Option<(&'static str, String)>,
    status: u16,
    code: &'static str,
}

fn case(what: &'static str, body: Value, status: u16, code: &'static str) -> Case {
    Case {
        what,
        body,
        header: None,
        status,
        code,
    }
}

async fn send(api: &Api, path: &str, c: &Case) -> (u16, Option<String>, String) {
    let headers: Vec<(&str, &str)> = c.header.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = api
        .try_send(Method::POST, path, Some(&c.body), &headers)
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", c.what));
    (r.status, r.error_code().map(str::to_owned), r.text)
}

async fn check(api: &Api, path: &str, cases: &[Case]) {
    for c in cases {
        let (status, code, text) = send(api, path, c).await;
        assert!(
            status < 500,
            "{}: a client input gave {status}: {text}",
            c.what
        );
        assert_eq!(
            (status, code.as_deref()),
            (c.status, Some(c.code)),
            "{}: {text}",
            c.what
        );
    }
}

async fn every_field_is_bounded_on(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let mut opts = TurnkeyOptions::new(&provider);
    if let Some(url) = database {
        opts = opts.database(url);
    }
    let tk = Turnkey::start(opts).await;
    let api = tk.api();

    let x = |n: usize| "x".repeat(n);
    check(
        &api,
        "/v1/sessions",
        &[
            case("title", json!({"title": x(201)}), 400, "field_too_long"),
            case(
                "system_message",
                json!({"system_message": x(32_001)}),
                400,
                "field_too_long",
            ),
            case("model", json!({"model": x(129)}), 400, "field_too_long"),
            case(
                "model charset",
                json!({"model": "a b"}),
                400,
                "invalid_field",
            ),
        ],
    )
    .await;
    let sessions = api.get("/v1/sessions").await;
    assert_eq!(
        sessions.body["sessions"].as_array().map(Vec::len),
        Some(0),
        "no session was half-created: {}",
        sessions.text
    );

    // NUL and other controls in free text are stripped, not a store error.
    let created = api
        .post(
            "/v1/sessions",
            &json!({"title": "a\u{0}b", "system_message": "be\u{0} brief"}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(created.body["title"], "ab");
    let session = created.str_field("id");
    let submissions = format!("/v1/sessions/{session}/submissions");

    let key = |n: usize| Some(("Idempotency-Key", "k".repeat(n)));
    let mut cases = vec![
        case(
            "request_id 10 KB",
            json!({"text": "hi", "request_id": x(10_240)}),
            400,
            "invalid_request_id",
        ),
        case(
            "request_id 256 bytes",
            json!({"text": "hi", "request_id": x(256)}),
            400,
            "invalid_request_id",
        ),
        case(
            "request_id with a space",
            json!({"text": "hi", "request_id": "a b"}),
            400,
            "invalid_request_id",
        ),
        case(
            "request_id not ASCII",
            json!({"text": "hi", "request_id": "ключ"}),
            400,
            "invalid_request_id",
        ),
        case(
            "request_id with NUL",
            json!({"text": "hi", "request_id": "a\u{0}b"}),
            400,
            "invalid_request_id",
        ),
        case("text", json!({"text": x(200_001)}), 400, "input_too_large"),
        case(
            "attachments count",
            json!({"text": "hi", "attachments": vec![json!({}); 17]}),
            400,
            "too_many_attachments",
        ),
        case(
            "attachment size",
            json!({"text": "hi", "attachments": [{"data": x(70_000)}]}),
            400,
            "field_too_long",
        ),
        case(
            "display",
            json!({"text": "hi", "display": {"d": x(17_000)}}),
            400,
            "field_too_long",
        ),
        case(
            "model override",
            json!({"text": "hi", "model": x(129)}),
            400,
            "field_too_long",
        ),
    ];
    let mut header_case = case(
        "Idempotency-Key 10 KB",
        json!({"text": "hi"}),
        400,
        "invalid_request_id",
    );
    header_case.header = key(10_240);
    cases.push(header_case);
    let mut header_case = case(
        "Idempotency-Key 256",
        json!({"text": "hi"}),
        400,
        "invalid_request_id",
    );
    header_case.header = key(256);
    cases.push(header_case);
    check(&api, &submissions, &cases).await;
    let view = api.session(&session).await;
    assert_eq!(
        view.body["queue_depth"], 0,
        "nothing was queued: {}",
        view.text
    );
    assert_eq!(
        view.body["last_event_seq"], 0,
        "nothing was announced: {}",
        view.text
    );

    // At the limit it is accepted, and idempotent.
    let at_limit = json!({"text": "hi\u{0}", "request_id": x(255)});
    let first = api.post(&submissions, &at_limit).await;
    assert_eq!(first.status, 202, "{}", first.text);
    let again = api.post(&submissions, &at_limit).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body["admission_id"], first.body["admission_id"]);

    check(
        &api,
        &format!("/v1/sessions/{session}/interrupt"),
        &[case(
            "reason",
            json!({"reason": x(501)}),
            400,
            "field_too_long",
        )],
    )
    .await;
    let token = api.post("/v1/tokens", &json!({"name": "bot\u{0}"})).await;
    assert_eq!(token.status, 201, "{}", token.text);
    assert_eq!(token.body["name"], "bot");
    let status = api
        .post_oversized(&submissions, 2 * 1024 * 1024)
        .await
        .expect("an answer");
    assert_eq!(status, 413);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_every_client_field_is_bounded_sqlite() {
    every_field_is_bounded_on(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_every_client_field_is_bounded_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    every_field_is_bounded_on(Some(db.url())).await;
}
