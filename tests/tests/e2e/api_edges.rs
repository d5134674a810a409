//! Edge cases of the HTTP contract (API.md): authentication (SPEC R2.1), bodies that are not
//! understood or too large (R2.2), unknown ids, and the health endpoints.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use turnkey_tests::{Resp, ScriptedProvider, Turnkey, TurnkeyOptions};

fn assert_error(r: &Resp, status: u16, what: &str) -> String {
    assert_eq!(r.status, status, "{what}: {}", r.text);
    let code = r.error_code().unwrap_or_else(|| {
        panic!(
            "{what}: error body is {{\"error\":{{\"code\":..}}}}: {}",
            r.text
        )
    });
    assert!(
        !code.is_empty()
            && code
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "{what}: error code is snake_case: {code:?}"
    );
    assert!(
        r.body["error"]["message"].is_string(),
        "{what}: error has a message: {}",
        r.text
    );
    code.to_string()
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_1_missing_or_wrong_token_is_401_and_unknown_ids_are_404() {
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let anonymous = api.with_token(None);
    let wrong = api.with_token(Some("not-the-token"));
    let submit_path = format!("/v1/sessions/{session}/submissions");
    let grabby = json!({"text": "let me in", "owner_id": "operator", "operator": true});

    for (who, client) in [("no token", &anonymous), ("wrong token", &wrong)] {
        assert_error(&client.get("/v1/sessions").await, 401, who);
        assert_error(
            &client.get(&format!("/v1/sessions/{session}")).await,
            401,
            who,
        );
        assert_error(&client.post("/v1/sessions", &json!({})).await, 401, who);
        assert_error(&client.post(&submit_path, &grabby).await, 401, who);
        assert_error(
            &client
                .get(&format!("/v1/sessions/{session}/events?since=0"))
                .await,
            401,
            who,
        );
    }

    let missing = uuid();
    assert_error(&api.session(&missing).await, 404, "unknown session");
    assert_error(
        &api.submit(&missing, "hello", None).await,
        404,
        "submit to unknown session",
    );
    assert_error(
        &api.events(&missing, 0).await,
        404,
        "events of unknown session",
    );
    assert_error(
        &api.get(&format!("/v1/sessions/{missing}/messages")).await,
        404,
        "messages of unknown session",
    );
    assert_error(&api.admission(&uuid()).await, 404, "unknown admission");
    assert_eq!(
        api.asked_after_a_later_turn(&provider, &session, "a later turn")
            .await,
        ["a later turn"],
        "nothing was admitted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_1_payload_owner_fields_grant_nothing() {
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let operator = tk.api();
    let theirs = operator.create_session_id().await;

    let issued = operator
        .post("/v1/tokens", &json!({"name": "someone"}))
        .await;
    assert!(
        issued.status == 200 || issued.status == 201,
        "POST /v1/tokens (API.md Auth) issues an API token: {} {}",
        issued.status,
        issued.text
    );
    let token = issued.body["token"].as_str().unwrap_or_else(|| {
        panic!(
            "POST /v1/tokens answer has a `token` string: {}",
            issued.text
        )
    });
    let other = operator.with_token(Some(token));

    // The payload claims to be the operator / the owner; the server ignores or rejects that.
    let grabby = json!({"text": "read me your secrets", "owner_id": "operator", "operator": true});
    let r = other
        .post(&format!("/v1/sessions/{theirs}/submissions"), &grabby)
        .await;
    assert!(
        [404, 400, 422].contains(&r.status),
        "someone else's session stays hidden whatever the body says: {} {}",
        r.status,
        r.text
    );
    assert_error(&other.session(&theirs).await, 404, "someone else's session");
    assert_error(
        &other.events(&theirs, 0).await,
        404,
        "someone else's events",
    );

    let created = other
        .post(
            "/v1/sessions",
            &json!({"title": "mine", "owner_id": "operator", "operator": true}),
        )
        .await;
    assert!(
        [201, 400, 422].contains(&created.status),
        "owner fields are ignored or rejected: {} {}",
        created.status,
        created.text
    );
    let listed = other.get("/v1/sessions").await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let ids: Vec<&str> = listed.body["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("{{\"sessions\": [...]}}: {}", listed.text))
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert!(
        !ids.contains(&theirs.as_str()),
        "the operator's session is not listed to others"
    );
    if created.status == 201 {
        let mine = created.str_field("id");
        assert!(
            ids.contains(&mine.as_str()),
            "the new session belongs to its creator"
        );
        assert_eq!(other.session(&mine).await.status, 200);
    }
    assert_eq!(
        operator
            .asked_after_a_later_turn(&provider, &theirs, "a later turn")
            .await,
        ["a later turn"],
        "nothing ran for the intruder"
    );
    // The operator's submission left the session's owner with the admission service (it reads
    // no session row for the next one): another principal is still refused, as if the
    // session did not exist.
    let r = other
        .post(
            &format!("/v1/sessions/{theirs}/submissions"),
            &json!({"text": "and now?"}),
        )
        .await;
    assert_eq!(r.status, 404, "someone else's known session: {}", r.text);
    assert_eq!(
        operator
            .asked_after_a_later_turn(&provider, &theirs, "the last turn")
            .await,
        ["a later turn", "the last turn"],
        "nothing ran for the intruder's second try"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_malformed_or_oversized_bodies_are_refused() {
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let submit_path = format!("/v1/sessions/{session}/submissions");

    let truncated = api
        .send_raw(&submit_path, "application/json", b"{\"text\": ".to_vec())
        .await;
    let code = assert_error(&truncated, 400, "truncated JSON");
    let garbage = api
        .send_raw(&submit_path, "application/json", b"not json".to_vec())
        .await;
    assert_eq!(
        assert_error(&garbage, 400, "not JSON"),
        code,
        "a stable code for bad JSON"
    );
    let on_sessions = api
        .send_raw("/v1/sessions", "application/json", b"[1,".to_vec())
        .await;
    assert_eq!(
        assert_error(&on_sessions, 400, "bad JSON on /v1/sessions"),
        code
    );

    let no_text = api.post(&submit_path, &json!({"request_id": "x"})).await;
    assert!(
        [400, 422].contains(&no_text.status) && no_text.error_code().is_some(),
        "a submission without text is refused with an error code: {} {}",
        no_text.status,
        no_text.text
    );

    let status = api.post_oversized(&submit_path, 40 << 20).await;
    assert_eq!(status, Ok(413), "a 40 MiB body is over the limit");

    // The process is fine afterwards and nothing was admitted.
    assert_eq!(api.healthz().await.status, 200);
    let events = api.all_events(&session, 0).await;
    assert!(
        events.iter().all(|e| e["kind"] != "admission.queued"),
        "refused bodies admit nothing: {events:?}"
    );
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_health_and_ready_answer_without_token() {
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let anonymous = tk.api().with_token(None);
    let health = anonymous.healthz().await;
    assert_eq!(health.status, 200, "{}", health.text);
    assert_eq!(health.body, json!({"status": "ok"}));
    let ready = anonymous.readyz().await;
    assert_eq!(
        ready.status, 200,
        "the store is reachable and migrated: {}",
        ready.text
    );
}
