//! Response hardening and CORS, one middleware for every answer (API.md "Security headers and
//! CORS"):
//! - every answer: `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer`,
//!   `X-Frame-Options: DENY`;
//! - the web UI (`/`, `/ui/...`): a strict Content-Security-Policy that allows only the UI's own
//!   files (no inline script or style, nothing from elsewhere);
//! - everything else (the API, health, metrics, errors): `Cache-Control: no-store` and
//!   `Content-Security-Policy: default-src 'none'; frame-ancestors 'none'`;
//! - CORS for the exact origins of `server.cors_origins`: a preflight from one of them is
//!   answered here (204) without reaching a route, one from any other origin is refused (403
//!   `cors_origin_not_allowed`, `cors_method_not_allowed`, `cors_header_not_allowed`), and a
//!   real request from a listed origin gets `Access-Control-Allow-Origin`. A real request from
//!   another origin is served without CORS headers, so the browser keeps the answer from the
//!   page; it is not refused, because the UI's own same-origin requests carry `Origin` too.
use crate::error::ApiError;
use crate::startup::AppState;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{web, HttpResponse, ResponseError};

/// The policy of the UI's pages and files: only its own script, style and images (and `data:`
/// images, and `blob:` ones: the thumbnails of files the page read itself with the token),
/// requests only to this origin, never framed, no `<base>`, forms post here only.
pub const UI_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
     form-action 'self'";
/// The policy of every other answer: JSON and event streams load nothing and are never framed.
pub const API_CSP: &str = "default-src 'none'; frame-ancestors 'none'";

/// Methods a cross-origin page may use (the API's own).
pub const CORS_METHODS: &[Method] = &[Method::GET, Method::POST, Method::PATCH, Method::DELETE];
/// Request headers a cross-origin page may send, beyond the CORS-safelisted ones.
pub const CORS_HEADERS: &[&str] = &[
    "authorization",
    "content-type",
    "idempotency-key",
    "last-event-id",
    "x-turnkey-session",
];
/// Response headers a cross-origin page may read, beyond the CORS-safelisted ones.
const CORS_EXPOSED: &str = "Retry-After, WWW-Authenticate";
/// How long a browser may cache a preflight answer, in seconds.
const CORS_MAX_AGE_S: &str = "600";

/// Whether a path is the web UI's (its page and its files) rather than the API's.
pub fn is_ui_path(path: &str) -> bool {
    path == "/" || path.starts_with("/ui/")
}

/// The exact origins of `server.cors_origins` (checked at start-up by the configuration).
#[derive(Clone, Debug, Default)]
pub struct CorsPolicy {
    origins: Vec<String>,
}

impl CorsPolicy {
    pub fn new(origins: Vec<String>) -> Self {
        Self { origins }
    }

    pub fn enabled(&self) -> bool {
        !self.origins.is_empty()
    }

    fn allows(&self, origin: &str) -> bool {
        self.origins.iter().any(|o| o == origin)
    }

    /// Judges a preflight from `origin`: the headers of a 204, or the refusal.
    fn preflight(&self, origin: &str, headers: &HeaderMap) -> Result<HttpResponse, ApiError> {
        let refused = |code, message: String| ApiError::new(StatusCode::FORBIDDEN, code, message);
        if !self.allows(origin) {
            return Err(refused(
                "cors_origin_not_allowed",
                format!("the origin {origin:?} is not in server.cors_origins"),
            ));
        }
        let method = headers
            .get(header::ACCESS_CONTROL_REQUEST_METHOD)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !CORS_METHODS.iter().any(|m| m.as_str() == method) {
            return Err(refused(
                "cors_method_not_allowed",
                format!(
                    "the method {:?} is not allowed across origins",
                    crate::routes::truncated(method, 32)
                ),
            ));
        }
        let requested = headers
            .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty());
        for name in requested {
            if !CORS_HEADERS.contains(&name.as_str()) {
                return Err(refused(
                    "cors_header_not_allowed",
                    format!(
                        "the header {:?} is not allowed across origins; allowed: {}",
                        crate::routes::truncated(&name, 64),
                        CORS_HEADERS.join(", ")
                    ),
                ));
            }
        }
        let methods = CORS_METHODS
            .iter()
            .map(Method::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        Ok(HttpResponse::NoContent()
            .insert_header((header::ACCESS_CONTROL_ALLOW_ORIGIN, origin))
            .insert_header((header::ACCESS_CONTROL_ALLOW_METHODS, methods))
            .insert_header((
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                CORS_HEADERS.join(", "),
            ))
            .insert_header((header::ACCESS_CONTROL_MAX_AGE, CORS_MAX_AGE_S))
            .finish())
    }
}

/// The request's `Origin`, when it has a readable one.
fn origin_of(req: &ServiceRequest) -> Option<String> {
    req.headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn is_preflight(req: &ServiceRequest) -> bool {
    req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The middleware (`actix_web::middleware::from_fn`): answers CORS preflights, then adds the
/// security headers (and CORS headers) to whatever the app answered.
pub async fn secure(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let cors = req
        .app_data::<web::Data<AppState>>()
        .map(|s| s.cors.clone())
        .unwrap_or_default();
    let origin = origin_of(&req);
    let ui = is_ui_path(req.path());
    if cors.enabled() && is_preflight(&req) {
        if let Some(origin) = &origin {
            let answer = cors
                .preflight(origin, req.headers())
                .unwrap_or_else(|e| e.error_response());
            let mut res = req.into_response(answer).map_into_right_body();
            harden(res.headers_mut(), ui);
            vary_on_origin(res.headers_mut());
            return Ok(res);
        }
    }
    let mut res = next.call(req).await?.map_into_left_body();
    harden(res.headers_mut(), ui);
    if cors.enabled() {
        vary_on_origin(res.headers_mut());
        if let Some(origin) = origin.filter(|o| cors.allows(o)) {
            if let Ok(value) = HeaderValue::from_str(&origin) {
                let headers = res.headers_mut();
                headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
                headers.insert(
                    header::ACCESS_CONTROL_EXPOSE_HEADERS,
                    HeaderValue::from_static(CORS_EXPOSED),
                );
            }
        }
    }
    Ok(res)
}

/// The headers every answer carries, and the UI's or the API's policy.
fn harden(headers: &mut HeaderMap, ui: bool) {
    let set = |headers: &mut HeaderMap, name: HeaderName, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(headers, header::REFERRER_POLICY, "no-referrer");
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    if ui {
        set(headers, header::CONTENT_SECURITY_POLICY, UI_CSP);
        // The UI's files say how they may be cached (revalidated by ETag); anything else
        // under its paths (a 404) is not kept.
        if !headers.contains_key(header::CACHE_CONTROL) {
            set(headers, header::CACHE_CONTROL, "no-store");
        }
    } else {
        set(headers, header::CONTENT_SECURITY_POLICY, API_CSP);
        set(headers, header::CACHE_CONTROL, "no-store");
    }
}

/// Answers differ by `Origin` once CORS is on, so caches must keep them apart.
fn vary_on_origin(headers: &mut HeaderMap) {
    let already = headers
        .get_all(header::VARY)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim().eq_ignore_ascii_case("origin"));
    if !already {
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preflight_headers(method: &str, headers: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(
            header::ACCESS_CONTROL_REQUEST_METHOD,
            HeaderValue::from_str(method).unwrap_or_else(|_| HeaderValue::from_static("")),
        );
        if !headers.is_empty() {
            map.insert(
                header::ACCESS_CONTROL_REQUEST_HEADERS,
                HeaderValue::from_str(headers).unwrap_or_else(|_| HeaderValue::from_static("")),
            );
        }
        map
    }

    fn code(r: Result<HttpResponse, ApiError>) -> Option<&'static str> {
        r.err().map(|e| e.code)
    }

    #[test]
    fn ui_paths_are_the_page_and_its_files() {
        assert!(is_ui_path("/"));
        assert!(is_ui_path("/ui/app.js"));
        assert!(!is_ui_path("/v1/sessions"));
        assert!(!is_ui_path("/uix"));
        assert!(!is_ui_path("/healthz"));
    }

    #[test]
    fn a_preflight_is_judged_by_origin_method_and_headers() {
        let cors = CorsPolicy::new(vec!["https://ui.example.com".into()]);
        let ok = cors.preflight(
            "https://ui.example.com",
            &preflight_headers("POST", "Authorization, Content-Type, Idempotency-Key"),
        );
        assert_eq!(ok.map(|r| r.status()).ok(), Some(StatusCode::NO_CONTENT));
        let h = preflight_headers("POST", "authorization");
        assert_eq!(
            code(cors.preflight("https://evil.example.com", &h)),
            Some("cors_origin_not_allowed")
        );
        assert_eq!(
            code(cors.preflight("https://ui.example.com/", &h)),
            Some("cors_origin_not_allowed"),
            "origins match exactly"
        );
        assert_eq!(
            code(cors.preflight("https://ui.example.com", &preflight_headers("PUT", ""))),
            Some("cors_method_not_allowed")
        );
        assert_eq!(
            code(cors.preflight(
                "https://ui.example.com",
                &preflight_headers("GET", "authorization, x-secret")
            )),
            Some("cors_header_not_allowed")
        );
    }

    #[test]
    fn vary_names_origin_once() {
        let mut h = HeaderMap::new();
        h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        vary_on_origin(&mut h);
        vary_on_origin(&mut h);
        let all: Vec<_> = h.get_all(header::VARY).collect();
        assert_eq!(all.len(), 2, "{all:?}");
    }
}
