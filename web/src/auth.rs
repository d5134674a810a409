//! Bearer-token authentication for every `/v1` route: the `AuthPrincipal` extractor turns
//! `Authorization: Bearer TOKEN` into the principal the server trusts (never a body field).
//!
//! A token is checked against the store on every request, so a revoked or expired one is refused
//! (401) at once. A read-only token may only GET, HEAD or OPTIONS (403 `read_only`; the WebSocket
//! refuses its writing methods). `TokenWatch` notes uses (at most once a minute per token) and
//! broadcasts revocations made here, so event streams of a revoked token end at once; they also
//! ask the store again every keep-alive interval (a revocation on another replica, an expiry).
use crate::error::ApiError;
use crate::state::AppState;
use actix_web::dev::Payload;
use actix_web::http::{header, Method};
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

/// What a bearer token grants beyond its principal (the operator's grants everything).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Grant {
    /// The API token's id; `None` for the operator's token.
    pub token_id: Option<String>,
    /// A read-only token: anything that writes is 403 `read_only`.
    pub read_only: bool,
    /// When the token stops working (ms); an open stream ends then.
    pub expires_at: Option<i64>,
}

impl Grant {
    /// Whether an open stream of this token must end now (expired); revocation is told by
    /// [`crate::state::TokenWatch`].
    pub fn expired(&self, now_ms: i64) -> bool {
        self.expires_at.is_some_and(|at| at <= now_ms)
    }
}

/// The authenticated caller of a request, and what its token grants.
#[derive(Clone, Debug)]
pub struct AuthPrincipal(pub Principal, pub Grant);

impl AuthPrincipal {
    pub fn is_operator(&self) -> bool {
        is_operator(&self.0)
    }

    /// 403 `forbidden` ("only the operator may WHAT") for anyone but the operator.
    pub fn operator_only(&self, what: &str) -> Result<(), ApiError> {
        if self.is_operator() {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!("only the operator may {what}")))
        }
    }
}

/// The 403 a read-only token gets for anything that writes.
pub fn read_only_refusal() -> ApiError {
    ApiError::new(
        actix_web::http::StatusCode::FORBIDDEN,
        "read_only",
        "this token is read-only",
    )
}

/// Whether the token behind `grant` still works: not expired, and (asked of the store)
/// not revoked. The operator's always does.
pub async fn still_live(state: &AppState, grant: &Grant) -> bool {
    let Some(id) = &grant.token_id else {
        return true;
    };
    if grant.expired(turnkey_storage::now_ms()) {
        return false;
    }
    match state.gateway.store().token_is_live(id).await {
        Ok(live) => live,
        Err(e) => {
            // The store cannot say: keep the stream; the next look asks again.
            tracing::warn!(token = %id, error = %e, "cannot check a stream's token");
            true
        }
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
        let method = req.method().clone();
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
            let (principal, grant) = authenticate(&state, &token).await?;
            let reads = matches!(method, Method::GET | Method::HEAD | Method::OPTIONS);
            if grant.read_only && !reads {
                return Err(read_only_refusal());
            }
            Ok(Self(principal, grant))
        })
    }
}

/// The principal a bearer token stands for, and what it grants: the operator, or the owner of
/// a live API token (a revoked or expired one is 401 at once). Every door authenticates
/// through here (HTTP headers, the WebSocket's `auth` message).
pub async fn authenticate(state: &AppState, token: &str) -> Result<(Principal, Grant), ApiError> {
    if tokens_match(token, &state.operator_token) {
        state.operator_used.note();
        return Ok((operator_principal(), Grant::default()));
    }
    match state.gateway.store().principal_for_token(token).await {
        Ok(Some(g)) => {
            state.tokens.used(state.gateway.store(), &g.token_id);
            Ok((
                g.principal,
                Grant {
                    token_id: Some(g.token_id),
                    read_only: g.read_only,
                    expires_at: g.expires_at,
                },
            ))
        }
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
    let (principal, grant) = authenticate(&state, &token).await?;
    if grant.read_only && req.method() != Method::GET {
        return Err(read_only_refusal());
    }
    Ok(AuthPrincipal(principal, grant))
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
