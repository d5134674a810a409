//! Security headers and CORS on the real binary (API.md "Security headers and CORS"): every
//! answer carries nosniff, no-referrer and DENY; the UI its strict CSP; API answers (errors
//! included) `no-store` and `default-src 'none'`; a preflight from a configured origin is
//! answered, one from any other origin refused in the API's error shape; without
//! `server.cors_origins` no CORS header is sent at all. A bad origin stops `serve` (exit 2).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use turnkey_tests::harness::turnkey_binary;
use turnkey_tests::{ScriptedProvider, Turnkey, TurnkeyOptions};

const UI_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
     form-action 'self'";
const API_CSP: &str = "default-src 'none'; frame-ancestors 'none'";
const ALLOWED: &str = "https://ui.example.com";

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

async fn call(
    tk: &Turnkey,
    method: Method,
    path: &str,
    token: bool,
    headers: &[(&str, &str)],
) -> Answer {
    let mut req = http().request(method, format!("{}{path}", tk.url));
    if token {
        req = req.bearer_auth(&tk.token);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = req.send().await.unwrap();
    Answer {
        status: res.status(),
        headers: res.headers().clone(),
        body: res.text().await.unwrap_or_default(),
    }
}

fn assert_common(a: &Answer, what: &str) {
    assert_eq!(
        a.header("x-content-type-options"),
        Some("nosniff"),
        "{what}"
    );
    assert_eq!(a.header("referrer-policy"), Some("no-referrer"), "{what}");
    assert_eq!(a.header("x-frame-options"), Some("DENY"), "{what}");
}

fn assert_api(a: &Answer, what: &str) {
    assert_common(a, what);
    assert_eq!(a.header("cache-control"), Some("no-store"), "{what}");
    assert_eq!(a.header("content-security-policy"), Some(API_CSP), "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_every_answer_carries_the_security_headers_and_no_cors_by_default() {
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;

    // The UI: its page and files under the strict policy, revalidated by ETag.
    let page = call(&tk, Method::GET, "/", false, &[]).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_common(&page, "GET /");
    assert_eq!(page.header("content-security-policy"), Some(UI_CSP));
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(page.body.contains("/ui/app.js"), "{}", page.body);
    let etag = page.header("etag").unwrap().to_owned();
    let again = call(&tk, Method::GET, "/", false, &[("If-None-Match", &etag)]).await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    assert_common(&again, "GET / revalidated");
    for (file, kind) in [
        ("app.js", "text/javascript"),
        ("style.css", "text/css"),
        ("markdown.js", "text/javascript"),
    ] {
        let a = call(&tk, Method::GET, &format!("/ui/{file}"), false, &[]).await;
        assert_eq!(a.status, StatusCode::OK, "{file}");
        assert_common(&a, file);
        assert_eq!(a.header("content-security-policy"), Some(UI_CSP), "{file}");
        assert!(
            a.header("content-type").unwrap().starts_with(kind),
            "{file}"
        );
    }
    let missing = call(&tk, Method::GET, "/ui/nope.js", false, &[]).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["error"]["code"], "not_found");
    assert_common(&missing, "a missing UI file");
    assert_eq!(missing.header("cache-control"), Some("no-store"));

    // A /v1 answer, an error, health and an unknown path: the API's policy.
    let list = call(&tk, Method::GET, "/v1/sessions", true, &[]).await;
    assert_eq!(list.status, StatusCode::OK);
    assert_api(&list, "GET /v1/sessions");
    let unauthorized = call(&tk, Method::GET, "/v1/sessions", false, &[]).await;
    assert_eq!(unauthorized.status, StatusCode::UNAUTHORIZED);
    assert_eq!(unauthorized.json()["error"]["code"], "unauthorized");
    assert_api(&unauthorized, "401");
    let bad = call(&tk, Method::GET, "/v1/sessions/abc", true, &[]).await;
    assert_eq!(bad.json()["error"]["code"], "invalid_id");
    assert_api(&bad, "400");
    assert_api(
        &call(&tk, Method::GET, "/healthz", false, &[]).await,
        "healthz",
    );
    assert_api(&call(&tk, Method::GET, "/nowhere", false, &[]).await, "404");

    // The event stream too.
    let s: Value = http()
        .post(format!("{}/v1/sessions", tk.url))
        .bearer_auth(&tk.token)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = s["id"].as_str().unwrap();
    let sse = http()
        .get(format!("{}/v1/sessions/{id}/events", tk.url))
        .bearer_auth(&tk.token)
        .header("Accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), StatusCode::OK);
    assert_eq!(
        sse.headers().get("cache-control").unwrap(),
        "no-store",
        "event streams are not kept either"
    );
    drop(sse);

    // No CORS configured: a preflight gets no CORS headers (the browser refuses), and answers
    // name no origin.
    let pre = call(
        &tk,
        Method::OPTIONS,
        "/v1/sessions",
        false,
        &[
            ("Origin", ALLOWED),
            ("Access-Control-Request-Method", "POST"),
        ],
    )
    .await;
    assert!(pre.status.is_client_error(), "{}", pre.status);
    assert_eq!(pre.header("access-control-allow-origin"), None);
    let cross = call(
        &tk,
        Method::GET,
        "/v1/sessions",
        true,
        &[("Origin", ALLOWED)],
    )
    .await;
    assert_eq!(cross.status, StatusCode::OK);
    assert_eq!(cross.header("access-control-allow-origin"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_cors_preflight_is_allowed_for_configured_origins_and_refused_for_others() {
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).env(
        "TURNKEY__SERVER__CORS_ORIGINS",
        &format!("{ALLOWED}, http://127.0.0.1:5173"),
    ))
    .await;

    let preflight = |origin: &'static str, method: &'static str, headers: &'static str| {
        let tk = &tk;
        async move {
            call(
                tk,
                Method::OPTIONS,
                "/v1/sessions/00000000-0000-0000-0000-000000000000/submissions",
                false,
                &[
                    ("Origin", origin),
                    ("Access-Control-Request-Method", method),
                    ("Access-Control-Request-Headers", headers),
                ],
            )
            .await
        }
    };

    let ok = preflight(
        ALLOWED,
        "POST",
        "authorization, content-type, idempotency-key",
    )
    .await;
    assert_eq!(ok.status, StatusCode::NO_CONTENT, "{}", ok.body);
    assert_eq!(ok.header("access-control-allow-origin"), Some(ALLOWED));
    let methods = ok.header("access-control-allow-methods").unwrap();
    for m in ["GET", "POST", "PATCH"] {
        assert!(methods.contains(m), "{methods}");
    }
    let allowed = ok
        .header("access-control-allow-headers")
        .unwrap()
        .to_ascii_lowercase();
    for h in [
        "authorization",
        "content-type",
        "idempotency-key",
        "last-event-id",
        "x-turnkey-session",
    ] {
        assert!(allowed.contains(h), "{allowed}");
    }
    assert!(ok.header("access-control-max-age").is_some());
    assert!(ok.header("vary").unwrap().contains("Origin"));
    assert_api(&ok, "preflight");
    let second = preflight("http://127.0.0.1:5173", "GET", "last-event-id").await;
    assert_eq!(second.status, StatusCode::NO_CONTENT);

    for (origin, method, headers, code) in [
        (
            "https://evil.example.com",
            "POST",
            "authorization",
            "cors_origin_not_allowed",
        ),
        (
            "https://ui.example.com:8443",
            "POST",
            "authorization",
            "cors_origin_not_allowed",
        ),
        (ALLOWED, "PUT", "authorization", "cors_method_not_allowed"),
        (
            ALLOWED,
            "POST",
            "authorization, x-other",
            "cors_header_not_allowed",
        ),
    ] {
        let refused = preflight(origin, method, headers).await;
        assert_eq!(
            refused.status,
            StatusCode::FORBIDDEN,
            "{origin} {method} {headers}"
        );
        assert_eq!(
            refused.json()["error"]["code"],
            code,
            "{origin} {method} {headers}: {}",
            refused.body
        );
        assert_eq!(refused.header("access-control-allow-origin"), None);
        assert_api(&refused, "a refused preflight");
    }

    // Real requests: the listed origin may read the answer (errors too); another may not.
    let listed = call(
        &tk,
        Method::GET,
        "/v1/sessions",
        true,
        &[("Origin", ALLOWED)],
    )
    .await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(listed.header("access-control-allow-origin"), Some(ALLOWED));
    assert!(listed
        .header("access-control-expose-headers")
        .unwrap()
        .contains("Retry-After"));
    let error = call(
        &tk,
        Method::GET,
        "/v1/sessions",
        false,
        &[("Origin", ALLOWED)],
    )
    .await;
    assert_eq!(error.status, StatusCode::UNAUTHORIZED);
    assert_eq!(error.header("access-control-allow-origin"), Some(ALLOWED));
    let other = call(
        &tk,
        Method::GET,
        "/v1/sessions",
        true,
        &[("Origin", "https://evil.example.com")],
    )
    .await;
    assert_eq!(
        other.status,
        StatusCode::OK,
        "served, but the browser keeps it from the page"
    );
    assert_eq!(other.header("access-control-allow-origin"), None);
    assert!(other.header("vary").unwrap().contains("Origin"));
    // The UI's own same-origin requests carry Origin too and are served as usual.
    let same = call(&tk, Method::GET, "/", false, &[("Origin", &tk.url)]).await;
    assert_eq!(same.status, StatusCode::OK);
}

#[test]
fn r1_1_a_bad_cors_origin_stops_serve_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let binary = turnkey_binary().unwrap();
    for (value, key) in [
        ("https://ui.example.com/", "server.cors_origins[0]"),
        ("*", "server.cors_origins[0]"),
        (
            "https://ok.example.com,ftp://files.example.com",
            "server.cors_origins[1]",
        ),
    ] {
        let mut cmd = Command::new(&binary);
        cmd.args(["serve", "--bind", "127.0.0.1:0"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars() {
            if k.starts_with("TURNKEY__") || k.starts_with("OPENAI_") || k == "DATABASE_URL" {
                cmd.env_remove(k);
            }
        }
        let mut child = cmd
            .env("TURNKEY__SERVER__DATA_DIR", dir.path().join("data"))
            .env("TURNKEY__SERVER__CORS_ORIGINS", value)
            .spawn()
            .unwrap();
        // Bounded: a configuration wrongly accepted would serve until killed.
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(status.and_then(|s| s.code()), Some(2), "{value}: {stderr}");
        assert!(stderr.contains(key), "{value}: {stderr}");
    }
}
