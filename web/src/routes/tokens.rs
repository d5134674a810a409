//! API tokens (operator only; SPEC R13.8): `POST /v1/tokens` creates a principal of kind
//! `token` and a bearer token for it, shown once (only its hash is stored), optionally expiring
//! (`expires_in_s`) and read-only; `GET /v1/tokens` lists the tokens not revoked;
//! `DELETE /v1/tokens/{id}` revokes one: 401 from then on, and its open event streams and
//! WebSocket connections end. Creating and revoking are audited.
use super::reject_privileged_fields;
use crate::auth::{generate_token, AuthPrincipal};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use actix_web::{delete, get, post};
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use turnkey_storage::{now_ms, rfc3339, ApiToken, NewToken};
use utoipa::ToSchema;

pub const TOKEN_PRINCIPAL_KIND: &str = "token";
const MAX_NAME_CHARS: usize = 200;
/// The longest `expires_in_s`: ten years.
pub const MAX_EXPIRES_IN_S: u64 = 10 * 365 * 24 * 3600;

#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateToken {
    /// 1–200 characters (`400 invalid_name` otherwise).
    #[schema(min_length = 1, max_length = 200, required = true)]
    pub name: Option<String>,
    /// Seconds until the token stops working (1 to ten years; `400 invalid_expiry`
    /// otherwise). Absent: it does not expire.
    #[schema(minimum = 1)]
    pub expires_in_s: Option<Value>,
    /// A read-only token gets 403 `read_only` on anything that writes. Default false.
    pub read_only: Option<bool>,
    /// Other fields: refused when they name a right (`400 forbidden_field`), else ignored.
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

/// A new API token. The token itself is shown only in this answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedToken {
    pub token: String,
    pub token_id: String,
    pub principal_id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_s: Option<u64>,
    /// When it stops working (RFC 3339), or null.
    pub expires_at: Option<String>,
    pub read_only: bool,
}

/// A token as listed: never its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenView {
    pub id: String,
    pub principal_id: String,
    pub name: Option<String>,
    pub created_at: String,
    pub expires_at: Option<String>,
    /// Noted at most once a minute.
    pub last_used_at: Option<String>,
    pub read_only: bool,
    /// Whether its `expires_at` has passed (it is refused).
    pub expired: bool,
}

impl From<ApiToken> for TokenView {
    fn from(t: ApiToken) -> Self {
        Self {
            expired: t.expires_at.is_some_and(|at| at <= now_ms()),
            id: t.id,
            principal_id: t.principal_id,
            name: t.name,
            created_at: rfc3339(t.created_at),
            expires_at: t.expires_at.map(rfc3339),
            last_used_at: t.last_used_at.map(rfc3339),
            read_only: t.read_only,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenView>,
}

/// `expires_in_s`: a whole number of seconds from 1 to [`MAX_EXPIRES_IN_S`].
fn expiry(v: Option<&Value>) -> Result<Option<u64>, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match v.as_u64() {
        Some(s) if (1..=MAX_EXPIRES_IN_S).contains(&s) => Ok(Some(s)),
        _ => Err(ApiError::bad_request(
            "invalid_expiry",
            format!("expires_in_s must be a whole number of seconds from 1 to {MAX_EXPIRES_IN_S}"),
        )),
    }
}

/// Creates an API token for a principal of its own (operator only).
#[utoipa::path(
    operation_id = "create_token",
    tag = "tokens",
    request_body = CreateToken,
    responses(
        (status = 201, description = "The token, shown only here", body = CreatedToken),
        (status = 400, description = "`invalid_name`, `invalid_expiry`, `forbidden_field`, `invalid_json`, `invalid_body`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "`forbidden`: only the operator may create tokens", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/tokens")]
pub async fn create(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    body: web::Json<CreateToken>,
) -> Result<HttpResponse, ApiError> {
    who.operator_only("create tokens")?;
    let body = body.into_inner();
    reject_privileged_fields(&body.extra)?;
    // Control characters (NUL above all, which PostgreSQL's text refuses) never reach the store.
    let name = turnkey_actors::limits::sanitize_text(&body.name.unwrap_or_default())
        .trim()
        .to_owned();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(ApiError::bad_request(
            "invalid_name",
            format!("name must be 1 to {MAX_NAME_CHARS} characters"),
        ));
    }
    let expires_in_s = expiry(body.expires_in_s.as_ref())?;
    let read_only = body.read_only.unwrap_or(false);
    let expires_at = expires_in_s.map(|s| {
        now_ms().saturating_add(i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX))
    });
    let store = state.gateway.store();
    let principal_id = uuid::Uuid::now_v7().to_string();
    store
        .ensure_principal(&principal_id, &name, TOKEN_PRINCIPAL_KIND)
        .await?;
    let token = generate_token();
    let stored = store
        .create_token(NewToken {
            principal_id: &principal_id,
            raw: &token,
            name: Some(name.clone()),
            expires_at,
            read_only,
            by: &who.0.id,
        })
        .await?;
    tracing::info!(%principal_id, token_id = %stored.id, %name, read_only, ?expires_in_s, "token created");
    Ok(HttpResponse::Created().json(CreatedToken {
        token,
        token_id: stored.id,
        principal_id,
        name,
        expires_in_s,
        expires_at: expires_at.map(rfc3339),
        read_only,
    }))
}

/// Lists the API tokens not revoked, oldest first (operator only).
#[utoipa::path(
    operation_id = "list_tokens",
    tag = "tokens",
    responses(
        (status = 200, description = "The tokens, never their secrets", body = TokenList),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`forbidden`: only the operator may list tokens", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/tokens")]
pub async fn list(
    state: web::Data<AppState>,
    who: AuthPrincipal,
) -> Result<HttpResponse, ApiError> {
    who.operator_only("list tokens")?;
    let tokens = state.gateway.store().list_tokens().await?;
    Ok(HttpResponse::Ok().json(TokenList {
        tokens: tokens.into_iter().map(TokenView::from).collect(),
    }))
}

/// Revokes an API token (operator only): refused (401) from then on, and its open event
/// streams and WebSocket connections end.
#[utoipa::path(
    operation_id = "revoke_token",
    tag = "tokens",
    params(("id" = String, Path, description = "The token's id (`token_id`)")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`forbidden`: only the operator may revoke tokens", body = ErrorBody),
        (status = 404, description = "`not_found`: no such token, or revoked already", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[delete("/v1/tokens/{id}")]
pub async fn revoke(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    who.operator_only("revoke tokens")?;
    let id = path.into_inner();
    if id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(ApiError::not_found(format!(
            "token {}",
            crate::error::truncated(&id, 64)
        )));
    }
    if !state.gateway.store().revoke_token(&id, &who.0.id).await? {
        return Err(ApiError::not_found(format!("live token {id}")));
    }
    state.tokens.revoked(&id);
    tracing::info!(token_id = %id, "token revoked");
    Ok(HttpResponse::NoContent().finish())
}
