//! Model providers (operator only; API.md `/v1/providers`): `GET` lists every provider in
//! fallback order with its key masked; `POST` connects one after asking it live, as `doctor`
//! does, whether it answers and serves the model (422 `provider_check_failed` with the reason
//! otherwise; nothing is stored); `DELETE /v1/providers/{name}` removes a connected one.
//! Connected providers follow the configured ones and apply to the next turn without a restart;
//! their keys are stored sealed (`security.secrets_key_file`) and masked like every secret.
use super::reject_privileged_fields;
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{delete, get, post};
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::time::Duration;
use turnkey_actors::provider_set::{NewProvider, ProviderView};
use turnkey_providers::{ProviderKind, Secret};
use utoipa::ToSchema;

/// How long the live check waits for the provider's `/models`.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// A provider to connect.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ConnectProvider {
    /// 1–64 letters, digits, `-`, `_` or `.`; not the name of a provider already there.
    #[schema(required = true)]
    pub name: Option<String>,
    /// `openai` (any Chat Completions server) or `anthropic`.
    #[schema(required = true)]
    pub kind: Option<String>,
    /// http(s) URL, usually ending in `/v1`; one with no path gets `/v1` when the server
    /// answers a model list there.
    #[schema(required = true)]
    pub base_url: Option<String>,
    /// Sent as the provider expects it; stored sealed, never shown again.
    pub api_key: Option<String>,
    /// One of the models the server lists.
    #[schema(required = true)]
    pub model: Option<String>,
    /// Tokens (1,024 to 10,000,000). Default: what the server says (llama.cpp, Ollama, LM
    /// Studio, vLLM), else 128,000.
    pub context_window: Option<u32>,
    /// Whether the model sees images. Default: known vision model families.
    pub vision: Option<bool>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: Map<String, Value>,
}

/// A provider as listed.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProviderInfo {
    pub name: String,
    /// `openai` or `anthropic`.
    pub kind: String,
    pub base_url: String,
    pub model: String,
    pub context_window: u32,
    pub vision: bool,
    /// The key's last four characters behind a mask (`…abcd`; `…` for a short one), or null.
    pub api_key: Option<String>,
    /// `configured` (turnkey.toml or `OPENAI_*`), `detected` (a local server found at start)
    /// or `connected` (added here; only these can be removed here).
    pub source: String,
    /// Writes compression summaries instead of answering turns.
    pub auxiliary: bool,
    /// Where `context_window` comes from: `configured` (set in the `[[providers]]` table or
    /// the connect request), `server` (read from the provider's server, see
    /// `context_window_read_from`) or `default` (128,000: none set and none read; a configured
    /// provider's server is not asked).
    pub context_window_source: String,
    /// The request the server said its window in (e.g. `llama.cpp GET /props`), or null.
    pub context_window_read_from: Option<String>,
    /// `primary` (answers first), `fallback` (answers when the ones before it fail) or
    /// `auxiliary` (writes compression summaries, answers no turn).
    pub role: String,
    /// Its place in the chain a turn tries: 1 for the primary, 2 for the first fallback, …;
    /// null for an auxiliary provider.
    pub order: Option<usize>,
    /// Whether it answers the next message of a session that chose no model: the primary,
    /// or the first fallback after providers cooling down after failures.
    pub answers_next: bool,
    /// The id of `GET /v1/models` that makes a session use this provider (its model's name, or
    /// `NAME/MODEL` when an earlier provider serves a model of that name).
    pub model_id: String,
}

impl From<ProviderView> for ProviderInfo {
    fn from(v: ProviderView) -> Self {
        Self {
            name: v.name,
            kind: v.kind.to_owned(),
            base_url: v.base_url,
            model: v.model,
            context_window: v.context_window,
            vision: v.vision,
            api_key: v.api_key,
            source: v.source.as_str().to_owned(),
            auxiliary: v.auxiliary,
            context_window_source: v.window.as_str().to_owned(),
            context_window_read_from: v.window.read_from().map(str::to_owned),
            role: v.role.as_str().to_owned(),
            order: v.role.order(),
            answers_next: v.answers_next,
            model_id: v.model_id,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProviderList {
    /// In fallback order: the primary first.
    pub providers: Vec<ProviderInfo>,
}

fn required(v: Option<String>, field: &str) -> Result<String, ApiError> {
    let v = turnkey_actors::limits::sanitize_text(&v.unwrap_or_default())
        .trim()
        .to_owned();
    if v.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_provider",
            format!("{field} is required"),
        ));
    }
    Ok(v)
}

/// Lists the providers in fallback order, keys masked (operator only).
#[utoipa::path(
    operation_id = "list_providers",
    tag = "providers",
    responses(
        (status = 200, description = "The providers, keys masked", body = ProviderList),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`forbidden`: only the operator may list providers", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/providers")]
pub async fn list(
    state: web::Data<AppState>,
    who: AuthPrincipal,
) -> Result<HttpResponse, ApiError> {
    who.operator_only("list providers")?;
    Ok(HttpResponse::Ok().json(ProviderList {
        providers: state
            .gateway
            .providers()
            .into_iter()
            .map(ProviderInfo::from)
            .collect(),
    }))
}

/// Connects a provider after a live check; it follows the configured ones and serves the next
/// turn without a restart (operator only).
#[utoipa::path(
    operation_id = "connect_provider",
    tag = "providers",
    request_body = ConnectProvider,
    responses(
        (status = 201, description = "Checked, stored and in use; the key masked", body = ProviderInfo),
        (status = 400, description = "`invalid_provider`, `forbidden_field`, `invalid_json`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`forbidden`: only the operator may connect providers", body = ErrorBody),
        (status = 409, description = "`provider_exists`: a provider has this name", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 422, description = "`provider_check_failed`: the provider did not answer, refused the key, or does not serve the model; the message says which", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/providers")]
pub async fn connect(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    body: web::Json<ConnectProvider>,
) -> Result<HttpResponse, ApiError> {
    who.operator_only("connect providers")?;
    let body = body.into_inner();
    reject_privileged_fields(&body.extra)?;
    let kind = required(body.kind, "kind")?;
    let kind = ProviderKind::from_name(&kind).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_provider",
            format!("kind must be \"openai\" or \"anthropic\", not {kind:?}"),
        )
    })?;
    let mut new = NewProvider {
        name: required(body.name, "name")?,
        kind,
        base_url: required(body.base_url, "base_url")?,
        api_key: body
            .api_key
            .map(|k| k.trim().to_owned())
            .filter(|k| !k.is_empty())
            .map(Secret::from),
        model: required(body.model, "model")?,
        context_window: body.context_window,
        vision: body.vision,
    };
    let mut config = state.gateway.provider_to_connect(&new)?;
    if let Some(root) = crate::provider_probe::with_api_root(&config, CHECK_TIMEOUT).await {
        tracing::info!(provider = %config.name, given = %config.base_url, used = %root, "base_url completed with /v1");
        config.base_url.clone_from(&root);
        new.base_url = root;
    }
    // The key may come back in the reason (a server echoing it): masked like every secret.
    if let Err(why) = crate::provider_probe::check_to_connect(&config, CHECK_TIMEOUT).await {
        let why = match &config.api_key {
            Some(k) => why.replace(k.expose(), turnkey_actors::redact::MASK),
            None => why,
        };
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "provider_check_failed",
            format!("provider {} was not connected: {why}", config.name),
        ));
    }
    let view = state.gateway.connect_provider(&new, &who.0.id).await?;
    tracing::info!(provider = %view.name, model = %view.model, base_url = %view.base_url, "provider connected");
    Ok(HttpResponse::Created().json(ProviderInfo::from(view)))
}

/// Removes a connected provider; turns from now on go without it (operator only).
#[utoipa::path(
    operation_id = "remove_provider",
    tag = "providers",
    params(("name" = String, Path, description = "The provider's name")),
    responses(
        (status = 204, description = "Removed"),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`forbidden`: only the operator may remove providers", body = ErrorBody),
        (status = 404, description = "`not_found`: no connected provider of this name", body = ErrorBody),
        (status = 409, description = "`provider_configured`: it comes from the configuration", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[delete("/v1/providers/{name}")]
pub async fn remove(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    who.operator_only("remove providers")?;
    state.gateway.remove_provider(&name, &who.0.id).await?;
    tracing::info!(provider = %name, "provider removed");
    Ok(HttpResponse::NoContent().finish())
}
