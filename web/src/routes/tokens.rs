//! `POST /v1/tokens` (operator only): creates a principal of kind `token` and a bearer token
//! for it. The token is shown once; only its hash is stored.
use super::reject_privileged_fields;
use crate::auth::{generate_token, AuthPrincipal};
use crate::error::ApiError;
use crate::startup::AppState;
use actix_web::{web, HttpResponse};
use serde::Deserialize;
use serde_json::{json, Map, Value};

pub const TOKEN_PRINCIPAL_KIND: &str = "token";
const MAX_NAME_CHARS: usize = 200;

#[derive(Debug, Deserialize)]
pub struct CreateToken {
    pub name: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

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
    Ok(HttpResponse::Created().json(json!({
        "token": token,
        "token_id": token_id,
        "principal_id": principal_id,
        "name": name,
    })))
}
