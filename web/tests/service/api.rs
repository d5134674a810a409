//! The HTTP contract of API.md, in-process: error shapes, auth, sessions, submissions,
//! admissions and the JSON event page.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may fail loudly
use crate::common;

use actix_web::http::StatusCode;
use actix_web::test::{self, TestRequest};
use common::{bearer, operator, MAX_BODY};
use serde_json::{json, Value};
use tempfile::TempDir;

fn dir() -> TempDir {
    tempfile::tempdir().expect("tempdir")
}

async fn error_code<B: actix_web::body::MessageBody>(
    res: actix_web::dev::ServiceResponse<B>,
) -> (StatusCode, String) {
    let status = res.status();
    let body: Value = test::read_body_json(res).await;
    let code = body["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        body["error"]["message"].is_string(),
        "error body without a message: {body}"
    );
    (status, code)
}

#[actix_web::test]
async fn healthz_answers_ok_and_readyz_ready() {
    let d = dir();
    let (app, _) = test_app!(&d);
    let res = test::call_service(&app, TestRequest::get().uri("/healthz").to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
    let body: Value = test::read_body_json(res).await;
    assert_eq!(body, json!({"status": "ok"}));
    let res = test::call_service(&app, TestRequest::get().uri("/readyz").to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
    let body: Value = test::read_body_json(res).await;
    assert_eq!(body["status"], "ready");
    // What the OS sandbox confines (SPEC R13.7) is part of readiness's detail.
    let sandbox = &body["sandbox"];
    assert_eq!(sandbox["mode"], "auto", "{body}");
    for key in ["enforced", "network_denied", "network_rules", "seccomp"] {
        assert!(sandbox[key].is_boolean(), "{key}: {body}");
    }
    assert!(sandbox["landlock_abi"].is_u64(), "{body}");
    assert!(sandbox["summary"].is_string(), "{body}");
}

#[actix_web::test]
async fn metrics_are_prometheus_text() {
    let d = dir();
    let (app, _) = test_app!(&d);
    test::call_service(&app, TestRequest::get().uri("/healthz").to_request()).await;
    let res = test::call_service(&app, TestRequest::get().uri("/metrics").to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
    let text = String::from_utf8(test::read_body(res).await.to_vec()).unwrap_or_default();
    assert!(text.contains("turnkey_up 1\n"), "{text}");
    assert!(
        text.contains("turnkey_http_requests_total{route=\"/healthz\",status=\"200\"} 1"),
        "{text}"
    );
}

#[actix_web::test]
async fn unknown_routes_are_json_404() {
    let d = dir();
    let (app, _) = test_app!(&d);
    let res = test::call_service(&app, TestRequest::get().uri("/nope").to_request()).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );
    let req = TestRequest::delete().uri("/v1/sessions").to_request();
    let res = test::call_service(&app, req).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed".into())
    );
}

#[actix_web::test]
async fn missing_or_wrong_token_is_401() {
    let d = dir();
    let (app, _) = test_app!(&d);
    let res = test::call_service(&app, TestRequest::get().uri("/v1/sessions").to_request()).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::UNAUTHORIZED, "unauthorized".into())
    );
    let req = TestRequest::get()
        .uri("/v1/sessions")
        .insert_header(bearer("tk_wrong"))
        .to_request();
    let res = test::call_service(&app, req).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::UNAUTHORIZED, "unauthorized".into())
    );
}

/// Each bad body gets its status and stable code, and nothing is created.
#[actix_web::test]
async fn r2_2_bad_bodies_get_stable_codes() {
    let d = dir();
    let (app, state) = test_app!(&d);
    let oversized = json!({"title": "x".repeat(MAX_BODY * 2)}).to_string();
    let cases: [(&str, &str, String, StatusCode, &str); 4] = [
        (
            "malformed json",
            "application/json",
            "{\"title\": ".into(),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
        (
            "lone surrogate",
            "application/json",
            r#"{"title": "bad \ud800 text"}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_json",
        ),
        (
            "oversized",
            "application/json",
            oversized,
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        (
            "wrong content type",
            "text/plain",
            "{}".into(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
    ];
    for (what, content_type, payload, status, code) in cases {
        let req = TestRequest::post()
            .uri("/v1/sessions")
            .insert_header(operator())
            .insert_header(("Content-Type", content_type))
            .set_payload(payload)
            .to_request();
        let res = test::call_service(&app, req).await;
        assert_eq!(error_code(res).await, (status, code.into()), "{what}");
    }
    let sessions = state
        .gateway
        .store()
        .list_sessions(None, 10, None)
        .await
        .expect("list");
    assert!(sessions.is_empty(), "a refused body created nothing");
}

#[actix_web::test]
async fn r2_1_owner_id_field_is_rejected() {
    let d = dir();
    let (app, _) = test_app!(&d);
    for field in ["owner_id", "operator"] {
        let req = TestRequest::post()
            .uri("/v1/sessions")
            .insert_header(operator())
            .set_json(json!({"title": "t", field: "someone"}))
            .to_request();
        let res = test::call_service(&app, req).await;
        assert_eq!(
            error_code(res).await,
            (StatusCode::BAD_REQUEST, "forbidden_field".into())
        );
    }
}

async fn create_session<S, B>(app: &S, auth: (&'static str, String)) -> Value
where
    S: actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse<B>,
        Error = actix_web::Error,
    >,
    B: actix_web::body::MessageBody,
{
    let req = TestRequest::post()
        .uri("/v1/sessions")
        .insert_header(auth)
        .set_json(json!({"title": "hello"}))
        .to_request();
    let res = test::call_service(app, req).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    test::read_body_json(res).await
}

#[actix_web::test]
async fn sessions_are_created_read_and_listed() {
    let d = dir();
    let (app, _) = test_app!(&d);
    let created = create_session(&app, operator()).await;
    let id = created["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(created["title"], "hello");
    assert_eq!(created["canonical_id"], created["id"]);
    assert_eq!(created["state"], "idle");
    assert_eq!(created["queue_depth"], 0);
    assert!(created["created_at"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z')));

    let req = TestRequest::get()
        .uri(&format!("/v1/sessions/{id}"))
        .insert_header(operator())
        .to_request();
    let got: Value = test::call_and_read_body_json(&app, req).await;
    assert_eq!(got["id"], created["id"]);
    for key in ["parent_session_id", "last_event_seq", "usage", "updated_at"] {
        assert!(got.get(key).is_some(), "missing {key} in {got}");
    }

    let req = TestRequest::get()
        .uri("/v1/sessions?limit=10")
        .insert_header(operator())
        .to_request();
    let list: Value = test::call_and_read_body_json(&app, req).await;
    assert_eq!(list["sessions"][0]["id"], created["id"]);

    let req = TestRequest::get()
        .uri(&format!("/v1/sessions/{id}/messages"))
        .insert_header(operator())
        .to_request();
    let msgs: Value = test::call_and_read_body_json(&app, req).await;
    assert!(msgs["messages"].is_array());
}

#[actix_web::test]
async fn a_malformed_id_is_400_and_a_missing_one_404() {
    let d = dir();
    let (app, _) = test_app!(&d);
    for path in [
        "/v1/sessions/not-a-uuid",
        "/v1/sessions/1'%20or%20'1'='1",
        "/v1/sessions/..%2F..%2Fetc",
        "/v1/sessions/abc/messages",
        "/v1/admissions/abc",
    ] {
        let req = TestRequest::get()
            .uri(path)
            .insert_header(operator())
            .to_request();
        let res = test::call_service(&app, req).await;
        assert_eq!(
            error_code(res).await,
            (StatusCode::BAD_REQUEST, "invalid_id".into()),
            "{path}"
        );
    }
    let missing = uuid::Uuid::new_v4();
    for path in [
        format!("/v1/sessions/{missing}"),
        format!("/v1/admissions/{missing}"),
    ] {
        let req = TestRequest::get()
            .uri(&path)
            .insert_header(operator())
            .to_request();
        let res = test::call_service(&app, req).await;
        assert_eq!(
            error_code(res).await,
            (StatusCode::NOT_FOUND, "not_found".into()),
            "{path}"
        );
    }
}

#[actix_web::test]
async fn submissions_without_a_provider_are_503_no_provider() {
    let d = dir();
    let mut env = common::env_for(&d);
    env.remove("OPENAI_BASE_URL");
    let settings = turnkey_web::configuration::load_from(
        &turnkey_web::configuration::Overrides::default(),
        &env,
        d.path(),
    )
    .expect("settings");
    let (state, _) = turnkey_web::startup::prepare(&settings)
        .await
        .expect("state");
    let app = test::init_service(turnkey_web::startup::build_app(actix_web::web::Data::new(
        state,
    )))
    .await;
    let req = TestRequest::post()
        .uri("/v1/sessions")
        .insert_header(operator())
        .set_json(json!({}))
        .to_request();
    let session: Value = test::call_and_read_body_json(&app, req).await;
    let id = session["id"].as_str().expect("id");
    let req = TestRequest::post()
        .uri(&format!("/v1/sessions/{id}/submissions"))
        .insert_header(operator())
        .set_json(json!({"text": "hello"}))
        .to_request();
    let res = test::call_service(&app, req).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::SERVICE_UNAVAILABLE, "no_provider".into())
    );
    let req = TestRequest::get()
        .uri(&format!("/v1/sessions/{id}"))
        .insert_header(operator())
        .to_request();
    let session: Value = test::call_and_read_body_json(&app, req).await;
    assert_eq!(session["queue_depth"], 0, "nothing was queued");
}

async fn new_token<S, B>(app: &S, name: &str) -> String
where
    S: actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse<B>,
        Error = actix_web::Error,
    >,
    B: actix_web::body::MessageBody,
{
    let req = TestRequest::post()
        .uri("/v1/tokens")
        .insert_header(operator())
        .set_json(json!({"name": name}))
        .to_request();
    let res = test::call_service(app, req).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    let body: Value = test::read_body_json(res).await;
    assert!(body["principal_id"].is_string());
    body["token"].as_str().unwrap_or_default().to_owned()
}

#[actix_web::test]
async fn r2_1_others_sessions_are_404_and_tokens_are_operator_only() {
    let d = dir();
    let (app, _) = test_app!(&d);
    let alice = new_token(&app, "alice").await;
    let bob = new_token(&app, "bob").await;
    let session = create_session(&app, bearer(&alice)).await;
    let id = session["id"].as_str().unwrap_or_default().to_owned();

    let req = TestRequest::get()
        .uri(&format!("/v1/sessions/{id}"))
        .insert_header(bearer(&bob))
        .to_request();
    let res = test::call_service(&app, req).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );

    let req = TestRequest::get()
        .uri("/v1/sessions")
        .insert_header(bearer(&bob))
        .to_request();
    let list: Value = test::call_and_read_body_json(&app, req).await;
    assert_eq!(list["sessions"], json!([]));

    let req = TestRequest::post()
        .uri(&format!("/v1/sessions/{id}/submissions"))
        .insert_header(bearer(&bob))
        .set_json(json!({"text": "hi"}))
        .to_request();
    let res = test::call_service(&app, req).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::NOT_FOUND, "not_found".into())
    );

    let req = TestRequest::post()
        .uri("/v1/tokens")
        .insert_header(bearer(&alice))
        .set_json(json!({"name": "mallory"}))
        .to_request();
    let res = test::call_service(&app, req).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::FORBIDDEN, "forbidden".into())
    );
}

#[actix_web::test]
async fn r2_3_duplicate_submit_returns_the_same_receipt() {
    let d = dir();
    let (app, _) = test_app!(&d);
    let session = create_session(&app, operator()).await;
    let id = session["id"].as_str().unwrap_or_default().to_owned();
    let submit = |body: Value, key: Option<&str>| {
        let mut req = TestRequest::post()
            .uri(&format!("/v1/sessions/{id}/submissions"))
            .insert_header(operator())
            .set_json(body);
        if let Some(k) = key {
            req = req.insert_header(("Idempotency-Key", k.to_owned()));
        }
        req.to_request()
    };

    let res = test::call_service(&app, submit(json!({"text": "hi"}), Some("req-1"))).await;
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let first: Value = test::read_body_json(res).await;
    assert_eq!(first["duplicate"], false);
    assert_eq!(first["session_id"], session["id"]);

    let again = json!({"text": "hi", "request_id": "req-1"});
    let res = test::call_service(&app, submit(again, Some("req-1"))).await;
    assert_eq!(res.status(), StatusCode::OK);
    let second: Value = test::read_body_json(res).await;
    assert_eq!(second["duplicate"], true);
    assert_eq!(second["admission_id"], first["admission_id"]);
    assert_eq!(second["seq"], first["seq"]);

    let res = test::call_service(&app, submit(json!({"text": "other"}), Some("req-1"))).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::CONFLICT, "idempotency_conflict".into())
    );

    let mismatch = json!({"text": "hi", "request_id": "req-2"});
    let res = test::call_service(&app, submit(mismatch, Some("req-1"))).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::BAD_REQUEST, "idempotency_key_mismatch".into())
    );

    let res = test::call_service(&app, submit(json!({"text": "  "}), None)).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::BAD_REQUEST, "empty_input".into())
    );

    let forged = json!({"text": "hi", "owner_id": "operator"});
    let res = test::call_service(&app, submit(forged, None)).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::BAD_REQUEST, "forbidden_field".into())
    );

    let aid = first["admission_id"].as_str().unwrap_or_default();
    let req = TestRequest::get()
        .uri(&format!("/v1/admissions/{aid}"))
        .insert_header(operator())
        .to_request();
    let adm: Value = test::call_and_read_body_json(&app, req).await;
    assert_eq!(adm["admission_id"], first["admission_id"]);
    assert_eq!(adm["session_id"], session["id"]);
    assert!(
        ["queued", "started", "unknown", "terminal"]
            .contains(&adm["status"].as_str().unwrap_or("")),
        "{adm}"
    );

    let req = TestRequest::get()
        .uri(&format!("/v1/sessions/{id}/events?since=0"))
        .insert_header(operator())
        .to_request();
    let page: Value = test::call_and_read_body_json(&app, req).await;
    let events = page["events"].as_array().cloned().unwrap_or_default();
    assert!(!events.is_empty(), "{page}");
    assert_eq!(events[0]["kind"], "admission.queued");
    assert_eq!(events[0]["seq"], 1);
    assert_eq!(page["next_since"], events[events.len() - 1]["seq"]);
    for (i, ev) in events.iter().enumerate() {
        assert_eq!(ev["seq"], json!(i + 1), "events must be gap-free: {page}");
    }
}

#[actix_web::test]
async fn interrupt_answers_202_with_or_without_a_body() {
    let d = dir();
    let (app, _) = test_app!(&d);
    let session = create_session(&app, operator()).await;
    let id = session["id"].as_str().unwrap_or_default().to_owned();
    let req = TestRequest::post()
        .uri(&format!("/v1/sessions/{id}/interrupt"))
        .insert_header(operator())
        .to_request();
    let res = test::call_service(&app, req).await;
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let body: Value = test::read_body_json(res).await;
    assert_eq!(body, json!({"interrupted": false}));

    let req = TestRequest::post()
        .uri(&format!("/v1/sessions/{id}/interrupt"))
        .insert_header(operator())
        .set_json(json!({"reason": "enough"}))
        .to_request();
    let res = test::call_service(&app, req).await;
    assert_eq!(res.status(), StatusCode::ACCEPTED);

    let req = TestRequest::post()
        .uri(&format!("/v1/sessions/{id}/interrupt"))
        .insert_header(operator())
        .set_payload("{nope")
        .to_request();
    let res = test::call_service(&app, req).await;
    assert_eq!(
        error_code(res).await,
        (StatusCode::BAD_REQUEST, "invalid_json".into())
    );
}

#[actix_web::test]
async fn sessions_list_newest_first_and_pages_with_before() {
    let d = dir();
    let (app, _) = test_app!(&d);
    let older = create_session(&app, operator()).await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let newer = create_session(&app, operator()).await;
    let list = |q: String| {
        TestRequest::get()
            .uri(&format!("/v1/sessions{q}"))
            .insert_header(operator())
            .to_request()
    };
    let page: Value = test::call_and_read_body_json(&app, list(String::new())).await;
    assert_eq!(page["sessions"][0]["id"], newer["id"]);
    assert_eq!(page["sessions"][1]["id"], older["id"]);

    let before = newer["created_at"].as_str().unwrap().to_owned();
    let page: Value =
        test::call_and_read_body_json(&app, list(format!("?before={before}&limit=5"))).await;
    assert_eq!(page["sessions"].as_array().map(Vec::len), Some(1));
    assert_eq!(page["sessions"][0]["id"], older["id"]);

    for bad in ["?limit=abc", "?limit=0", "?before=yesterday"] {
        let res = test::call_service(&app, list(bad.to_owned())).await;
        assert_eq!(
            error_code(res).await,
            (StatusCode::BAD_REQUEST, "invalid_query".into()),
            "{bad}"
        );
    }
}
