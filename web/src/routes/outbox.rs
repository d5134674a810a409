//! The platform outbox (SPEC R13.5): `GET /v1/outbox` lists the messages written for chat
//! platforms, newest first, optionally of one status (`?status=unknown` lists the ones a crash
//! cut mid-send, which are not sent again on their own); `POST /v1/outbox/{id}/resend` lets a
//! person send an `unknown` (or `failed`) one again. The operator sees every row; another
//! principal only the rows of its own sessions.
use super::id::{Id, OutboxRowId};
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::openapi::mirrors::OutboxStatusName;
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{get, post};
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use turnkey_storage::{rfc3339, Outbox, OutboxStatus, StoreError};
use utoipa::{IntoParams, ToSchema};

const DEFAULT_LIMIT: u64 = 100;
const MAX_LIMIT: u64 = 500;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OutboxQuery {
    /// Only rows in this status: `pending`, `sending`, `sent`, `failed` or `unknown`.
    pub status: Option<String>,
    /// At most this many rows (1–500, default 100).
    pub limit: Option<u64>,
}

/// One platform message (API.md "Platform replies").
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OutboxRow)]
pub struct OutboxView {
    pub id: String,
    /// `telegram`, `slack` or `webhook`.
    pub platform: String,
    /// The chat: `telegram:<chat_id>[:<thread_id>]`, `slack:<team>:<channel>[:<thread_ts>]`,
    /// `webhook:<chat_id>`.
    pub chat_key: String,
    pub session_id: Option<String>,
    pub turn_id: Option<String>,
    /// `reply:<admission_id>`, `approval:<approval_id>`, `unknown:<admission_id>`,
    /// `cmd:<platform>:<update>`, `draft:<turn_id>`, ...: written once.
    pub idempotency_key: String,
    /// `reply`, `notice`, `approval` or `draft`.
    pub kind: String,
    /// `{text, ...}`; an approval `{approval_id, name, args, reason, expires_at}`.
    #[schema(value_type = Object)]
    pub payload: Value,
    #[schema(value_type = OutboxStatusName)]
    pub status: OutboxStatus,
    /// Sends tried so far.
    pub attempts: i32,
    /// Pieces of a split message that are out.
    pub chunks_sent: i32,
    /// The platform's id of the (first) message: Telegram `message_id`, Slack `ts`.
    pub platform_message_id: Option<String>,
    /// The instance that last marked it `sending`.
    pub owner_instance: Option<String>,
    pub last_error: Option<String>,
    pub created_at: String,
    /// When a `pending` row is tried next.
    pub next_attempt_at: String,
    pub updated_at: String,
    pub sent_at: Option<String>,
}

impl From<Outbox> for OutboxView {
    fn from(o: Outbox) -> Self {
        Self {
            id: o.id,
            platform: o.platform,
            chat_key: o.chat_key,
            session_id: o.session_id,
            turn_id: o.turn_id,
            idempotency_key: o.idempotency_key,
            kind: o.kind,
            payload: o.payload,
            status: o.status,
            attempts: o.attempts,
            chunks_sent: o.chunks_sent,
            platform_message_id: o.platform_message_id,
            owner_instance: o.owner_instance,
            last_error: o.last_error,
            created_at: rfc3339(o.created_at),
            next_attempt_at: rfc3339(o.next_attempt_at),
            updated_at: rfc3339(o.updated_at),
            sent_at: o.sent_at.map(rfc3339),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OutboxList {
    pub deliveries: Vec<OutboxView>,
}

/// The platform messages, newest first.
#[utoipa::path(
    operation_id = "list_outbox",
    tag = "platforms",
    params(OutboxQuery),
    responses(
        (status = 200, description = "The rows, newest first", body = OutboxList),
        (status = 400, description = "`invalid_status`: not a status of the outbox; `invalid_query`: `limit` out of range", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/outbox")]
pub async fn list(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    query: web::Query<OutboxQuery>,
) -> Result<HttpResponse, ApiError> {
    let status = match query.status.as_deref() {
        None => None,
        Some(s) => Some(OutboxStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_status",
                format!(
                    "status {:?} is not one of pending, sending, sent, failed, unknown",
                    crate::error::truncated(s, 32)
                ),
            )
        })?),
    };
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("limit must be between 1 and {MAX_LIMIT}"),
        ));
    }
    let owner = (!who.is_operator()).then_some(who.0.id.as_str());
    let rows = state
        .gateway
        .store()
        .list_outbox(status, owner, limit)
        .await?;
    Ok(HttpResponse::Ok().json(OutboxList {
        deliveries: rows.into_iter().map(OutboxView::from).collect(),
    }))
}

/// Sends an `unknown` (or `failed`) platform message again. A message left `unknown` by a crash
/// may already be in the chat: resending it may show it twice, which is why it is a person's
/// call.
#[utoipa::path(
    operation_id = "resend_outbox",
    tag = "platforms",
    params(("id" = uuid::Uuid, Path, description = "The row's id")),
    responses(
        (status = 202, description = "The row, `pending` again: it is sent shortly", body = OutboxView),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such row, or one of someone else's session", body = ErrorBody),
        (status = 409, description = "`not_resendable`: the row is not `unknown` or `failed`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/outbox/{id}/resend")]
pub async fn resend(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<OutboxRowId>>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner().into_inner().0.to_string();
    let not_found = || ApiError::not_found(format!("outbox row {id}"));
    let store = state.gateway.store();
    let row = store.get_outbox(&id).await?.ok_or_else(not_found)?;
    if !who.is_operator() {
        // Someone else's row must look exactly like a missing one.
        let session = row
            .session_id
            .as_deref()
            .and_then(|s| s.parse().ok())
            .ok_or_else(not_found)?;
        state
            .gateway
            .authorize(&who.0, session)
            .await
            .map_err(|e| match e {
                turnkey_actors::GatewayError::NotFound(_) => not_found(),
                other => ApiError::from(other),
            })?;
    }
    let row = store.resend_outbox(&id).await.map_err(|e| match e {
        StoreError::WrongState(_) => ApiError::new(
            StatusCode::CONFLICT,
            "not_resendable",
            format!(
                "outbox row {id} is {}; only an unknown or failed row is sent again",
                row.status.as_str()
            ),
        ),
        other => ApiError::from(other),
    })?;
    tracing::info!(row = %id, by = %who.0.id, "outbox row sent again on request");
    state.gateway.wake_outbox();
    Ok(HttpResponse::Accepted().json(OutboxView::from(row)))
}
