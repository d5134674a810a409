//! Bearer-token authentication for every `/v1` route: the `AuthPrincipal` extractor turns
//! `Authorization: Bearer TOKEN` into the principal the server trusts (never a body field).
use crate::error::ApiError;
use crate::startup::AppState;
use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpRequest};
use futures::future::LocalBoxFuture;
use rand::RngCore;
use sha2::{Digest, Sha256};
use turnkey_storage::Principal;

/// Id and kind of the operator principal, who may do everything.
pub const OPERATOR_ID: &str = "operator";
pub const OPERATOR_KIND: &str = "operator";

pub fn operator_principal() -> Principal {
    Principal {
        id: OPERATOR_ID.into(),
        name: OPERATOR_ID.into(),
        kind: OPERATOR_KIND.into(),
    }
}

pub fn is_operator(p: &Principal) -> bool {
    p.kind == OPERATOR_KIND
}

/// A fresh secret: `tk_` and 32 random bytes in hex.
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("tk_{}", hex::encode(bytes))
}

/// Compares the SHA-256 digests, so the time taken says nothing about where the inputs differ
/// (nor about their lengths).
pub fn tokens_match(given: &str, expected: &str) -> bool {
    let a = Sha256::digest(given.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// The authenticated caller of a request.
#[derive(Clone, Debug)]
pub struct AuthPrincipal(pub Principal);

impl AuthPrincipal {
    pub fn is_operator(&self) -> bool {
        is_operator(&self.0)
    }
}

fn bearer(req: &HttpRequest) -> Result<String, ApiError> {
    let value = req
        .headers()
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer token"))?;
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthorized("the Authorization header is not valid text"))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| ApiError::unauthorized("expected Authorization: Bearer TOKEN"))?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(ApiError::unauthorized(
            "expected Authorization: Bearer TOKEN",
        ));
    }
    Ok(token.to_owned())
}

impl FromRequest for AuthPrincipal {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let token = bearer(req);
        let state = req.app_data::<web::Data<AppState>>().cloned();
        Box::pin(async move {
            let token = token?;
            let state = state.ok_or_else(|| {
                ApiError::new(
                    actix_web::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "internal_error",
                    "application state is missing",
                )
            })?;
            authenticate(&state, &token).await.map(Self)
        })
    }
}

/// The principal a bearer token stands for: the operator, or the owner of an API token.
/// Every door authenticates through here (HTTP headers, the WebSocket's `auth` message).
pub async fn authenticate(state: &AppState, token: &str) -> Result<Principal, ApiError> {
    if tokens_match(token, &state.operator_token) {
        return Ok(operator_principal());
    }
    match state.gateway.store().principal_for_token(token).await {
        Ok(Some(p)) => Ok(p),
        Ok(None) => Err(ApiError::unauthorized("the token is not valid")),
        Err(e) => Err(ApiError::store(&e)),
    }
}

/// Authenticates a request's `Authorization: Bearer` header, for handlers that answer errors
/// in a shape of their own (the OpenAI-compatible routes).
pub async fn authenticate_request(req: &HttpRequest) -> Result<AuthPrincipal, ApiError> {
    let token = bearer(req)?;
    let state = req
        .app_data::<web::Data<AppState>>()
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                actix_web::http::StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "application state is missing",
            )
        })?;
    authenticate(&state, &token).await.map(AuthPrincipal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(tokens_match("tk_abc", "tk_abc"));
        assert!(!tokens_match("tk_abc", "tk_abd"));
        assert!(!tokens_match("tk_ab", "tk_abc"));
        assert!(!tokens_match("", "tk_abc"));
    }

    #[test]
    fn generated_tokens_are_prefixed_and_unique() {
        let a = generate_token();
        let b = generate_token();
        assert!(a.starts_with("tk_"));
        assert_eq!(a.len(), 3 + 64);
        assert_ne!(a, b);
    }
}
