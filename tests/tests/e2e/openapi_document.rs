//! `GET /v1/openapi.json`: the OpenAPI document generated from the handlers. It is served
//! without a token, validates (`openapi-spec-validator`), documents the submission contract of
//! API.md, and every operation it lists is one the running server serves (the in-process test
//! `web/src/openapi.rs` holds it to the route table the other way too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::collections::BTreeSet;
use turnkey_tests::openapi_validator::OpenApiValidator;
use turnkey_tests::{Resp, ScriptedProvider, Turnkey, TurnkeyOptions};

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// The `#/components/schemas/NAME` a JSON response of `op` refers to for `status`.
fn response_schema(doc: &Value, path: &str, method: &str, status: &str) -> String {
    let media = &doc["paths"][path][method]["responses"][status]["content"]["application/json"];
    let reference = media["schema"]["$ref"]
        .as_str()
        .unwrap_or_else(|| panic!("{method} {path} {status} has no JSON schema: {media}"));
    reference
        .strip_prefix("#/components/schemas/")
        .unwrap_or_else(|| panic!("not a component reference: {reference}"))
        .to_owned()
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

fn required(schema: &Value) -> BTreeSet<String> {
    schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

/// A concrete path for a template: every `{param}` a fresh UUID (a tool call id is any id).
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|seg| {
            if seg.starts_with('{') && seg.ends_with('}') {
                uuid::Uuid::new_v4().to_string()
            } else {
                seg.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn is_route_miss(r: &Resp) -> bool {
    r.status == 404
        && r.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("no route for"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_validates_documents_the_contract_and_lists_only_served_routes() {
    let test = "openapi_document_validates_documents_the_contract_and_lists_only_served_routes";
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let anonymous = api.with_token(None);

    // Served without a token, as JSON.
    let r = anonymous.get("/v1/openapi.json").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.content_type.starts_with("application/json"),
        "{}",
        r.content_type
    );
    let doc = r.body;
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );
    assert_eq!(doc["info"]["title"], "turnkey");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["type"],
        "http"
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );

    // The submission contract: 202 with the receipt, 200 for a duplicate, 409
    // idempotency_conflict in the error shape, the Idempotency-Key header, bearer auth.
    let submit = "/v1/sessions/{id}/submissions";
    assert_eq!(response_schema(&doc, submit, "post", "202"), "Receipt");
    assert_eq!(response_schema(&doc, submit, "post", "200"), "Receipt");
    assert_eq!(response_schema(&doc, submit, "post", "409"), "ErrorBody");
    let conflict = doc["paths"][submit]["post"]["responses"]["409"]["description"]
        .as_str()
        .unwrap_or_default();
    assert!(conflict.contains("idempotency_conflict"), "{conflict}");
    let params = &doc["paths"][submit]["post"]["parameters"];
    assert!(
        params
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "Idempotency-Key" && p["in"] == "header"),
        "{params}"
    );
    assert_eq!(
        doc["paths"][submit]["post"]["security"],
        json!([{"bearer": []}])
    );
    let schemas = &doc["components"]["schemas"];
    let receipt = &schemas["Receipt"];
    assert_eq!(
        keys(&receipt["properties"]),
        [
            "admission_id",
            "duplicate",
            "retry_of",
            "seq",
            "session_id",
            "status"
        ]
        .map(String::from)
        .into()
    );
    assert_eq!(
        keys(&schemas["ErrorBody"]["properties"]),
        BTreeSet::from(["error".to_owned()])
    );
    assert_eq!(
        keys(&schemas["ErrorDetail"]["properties"]),
        ["code", "message"].map(String::from).into()
    );
    // Non-JSON answers have their real content types.
    let events = &doc["paths"]["/v1/sessions/{id}/events"]["get"]["responses"]["200"]["content"];
    assert!(
        events.get("text/event-stream").is_some() && events.get("application/json").is_some(),
        "{events}"
    );
    let metrics = &doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"];
    assert!(
        keys(metrics).iter().all(|k| k.starts_with("text/plain")),
        "{metrics}"
    );
    assert!(doc["paths"]["/v1/ws"]["get"]["responses"]
        .get("101")
        .is_some());

    // A real exchange answers in the documented shapes.
    let session = api.create_session_id().await;
    let first = api.submit(&session, "hello", Some("openapi-key")).await;
    assert_eq!(first.status, 202, "{}", first.text);
    let got = keys(&first.body);
    assert!(
        got.is_superset(&required(receipt)),
        "{got:?} lacks {:?}",
        required(receipt)
    );
    assert!(got.is_subset(&keys(&receipt["properties"])), "{got:?}");
    let other = api
        .submit(&session, "something else", Some("openapi-key"))
        .await;
    assert_eq!(other.status, 409, "{}", other.text);
    assert_eq!(other.error_code(), Some("idempotency_conflict"));
    assert_eq!(
        keys(&other.body["error"]),
        ["code", "message"].map(String::from).into()
    );

    // Every documented operation is served: no route miss, no 405; and a method the document
    // does not list on a documented path is a 405.
    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.len() >= 19, "too few paths: {:?}", paths.keys());
    for (template, item) in paths {
        let path = concrete(template);
        let documented: Vec<&str> = METHODS
            .into_iter()
            .filter(|m| item.get(*m).is_some())
            .collect();
        assert!(!documented.is_empty(), "{template} has no operation");
        for m in &documented {
            let method = reqwest::Method::from_bytes(m.to_uppercase().as_bytes()).unwrap();
            let r = anonymous.try_send(method, &path, None, &[]).await.unwrap();
            assert!(
                !is_route_miss(&r),
                "{m} {template} is documented, not served: {}",
                r.text
            );
            assert_ne!(
                r.status, 405,
                "{m} {template} is documented, not served: {}",
                r.text
            );
        }
        let undocumented = ["delete", "put", "patch", "post"]
            .into_iter()
            .find(|m| !documented.contains(m))
            .expect("a path that takes every method");
        let method = reqwest::Method::from_bytes(undocumented.to_uppercase().as_bytes()).unwrap();
        let r = anonymous.try_send(method, &path, None, &[]).await.unwrap();
        assert_eq!(r.status, 405, "{undocumented} {template}: {}", r.text);
        assert_eq!(
            r.error_code(),
            Some("method_not_allowed"),
            "{undocumented} {template}"
        );
    }

    // And it validates.
    let Some(validator) = OpenApiValidator::find_or_skip(test).await else {
        return;
    };
    if let Err(report) = validator.validate(&doc).await {
        panic!(
            "openapi-spec-validator {} rejects the document:\n{report}",
            validator.version
        );
    }
}
