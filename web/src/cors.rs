//! CORS for the exact origins of `server.cors_origins` (API.md "Security headers and CORS"):
//! what a cross-origin page may send and read, and the answer to its preflight. The middleware
//! that applies it to every request is `security::secure`.
use crate::error::{truncated, ApiError};
use actix_web::http::header::{self, HeaderMap};
use actix_web::http::{Method, StatusCode};
use actix_web::HttpResponse;

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
pub const CORS_EXPOSED: &str = "Retry-After, WWW-Authenticate";
/// How long a browser may cache a preflight answer, in seconds.
const CORS_MAX_AGE_S: &str = "600";

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

    pub fn allows(&self, origin: &str) -> bool {
        self.origins.iter().any(|o| o == origin)
    }

    /// Judges a preflight from `origin`: the headers of a 204, or the refusal.
    pub fn preflight(&self, origin: &str, headers: &HeaderMap) -> Result<HttpResponse, ApiError> {
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
                    truncated(method, 32)
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
                        truncated(&name, 64),
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

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::HeaderValue;

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
}
