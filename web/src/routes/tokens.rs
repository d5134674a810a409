//! `POST /v1/tokens` (operator only): creates a principal of kind `token` and a bearer token
//! for it. The token is shown once; only its hash is stored.
use super::reject_privileged_fields;
use crate::auth::{generate_token, AuthPrincipal};
use crate::error::{ApiError, ErrorBody};
use crate::startup::AppState;
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

pub const TOKEN_PRINCIPAL_KIND: &str = "token";
const MAX_NAME_CHARS: usize = 200;

#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateToken {
    /// 1–200 characters (`400 invalid_name` otherwise).
    #[schema(min_length = 1, max_length = 200, required = true)]
    pub name: Option<String>,
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
}

/// Creates an API token for a principal of its own (operator only).
#[utoipa::path(
    post,
    path = "/v1/tokens",
    operation_id = "create_token",
    tag = "tokens",
    request_body = CreateToken,
    responses(
        (status = 201, description = "The token, shown only here", body = CreatedToken),
        (status = 400, description = "`invalid_name`, `forbidden_field`, `invalid_json`, `invalid_body`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "`forbidden`: only the operator may create tokens", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn create(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    body: web::Json<CreateToken>,
) -> Result<HttpResponse, ApiError> {
    if !who.is_operator() {
        return Err(ApiError::forbidden("only the operator may create tokens"));
    }
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
    let store = state.gateway.store();
    let principal_id = uuid::Uuid::now_v7().to_string();
    store
        .ensure_principal(&principal_id, &name, TOKEN_PRINCIPAL_KIND)
        .await?;
    let token = generate_token();
    let token_id = store
        .create_token(&principal_id, &token, Some(name.clone()))
        .await?;
    tracing::info!(%principal_id, %token_id, %name, "token created");
    Ok(HttpResponse::Created().json(CreatedToken {
        token,
        token_id,
        principal_id,
        name,
    }))
}
