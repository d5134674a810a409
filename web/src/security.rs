//! Response hardening and CORS, one middleware for every answer (API.md "Security headers and
//! CORS"):
//! - every answer: `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer`,
//!   `X-Frame-Options: DENY`;
//! - the web UI (`/`, `/ui/...`): a strict Content-Security-Policy that allows only the UI's own
//!   files (no inline script or style, nothing from elsewhere);
//! - everything else (the API, health, metrics, errors): `Cache-Control: no-store` and
//!   `Content-Security-Policy: default-src 'none'; frame-ancestors 'none'`;
//! - CORS for the exact origins of `server.cors_origins` (the policy is `cors::CorsPolicy`): a
//!   preflight from one of them is answered here (204) without reaching a route, one from any other origin is refused (403
//!   `cors_origin_not_allowed`, `cors_method_not_allowed`, `cors_header_not_allowed`), and a
//!   real request from a listed origin gets `Access-Control-Allow-Origin`. A real request from
//!   another origin is served without CORS headers, so the browser keeps the answer from the
//!   page; it is not refused, because the UI's own same-origin requests carry `Origin` too.
use crate::cors::CORS_EXPOSED;
use crate::state::AppState;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{web, ResponseError};

/// The policy of the UI's pages and files: only its own script, style and images (and `data:`
/// images, and `blob:` ones: the thumbnails of files the page read itself with the token),
/// requests only to this origin, never framed, no `<base>`, forms post here only.
pub const UI_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
     form-action 'self'";
/// The policy of every other answer: JSON and event streams load nothing and are never framed.
pub const API_CSP: &str = "default-src 'none'; frame-ancestors 'none'";

/// Whether a path is the web UI's (its page and its files) rather than the API's.
pub fn is_ui_path(path: &str) -> bool {
    path == "/" || path.starts_with("/ui/")
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

    #[test]
    fn ui_paths_are_the_page_and_its_files() {
        assert!(is_ui_path("/"));
        assert!(is_ui_path("/ui/app.js"));
        assert!(!is_ui_path("/v1/sessions"));
        assert!(!is_ui_path("/uix"));
        assert!(!is_ui_path("/healthz"));
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
