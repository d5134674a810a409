//! `GET /v1/audit` (the operator; SPEC R13.8): who created or revoked a token, decided an
//! approval or an `unknown` tool run, changed memory or skills, deleted a session. Metadata
//! only. Entries are kept `security.audit_retention_days`.
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use actix_web::get;
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use turnkey_storage::{rfc3339, AuditEntry};
use utoipa::{IntoParams, ToSchema};

const DEFAULT_LIMIT: u64 = 100;
const MAX_LIMIT: u64 = 1000;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Entries at or after this time: RFC 3339, or milliseconds since the epoch. Default: all.
    pub since: Option<String>,
    /// At most this many entries, oldest first (1–1000, default 100).
    pub limit: Option<u64>,
}

/// One audit entry.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditView {
    pub id: String,
    /// RFC 3339.
    pub at: String,
    /// Who: `operator`, a token's principal id, a chat's (`telegram:…`).
    pub principal: String,
    /// `token.created`, `token.revoked`, `approval.decided`, `tool_run.decided`,
    /// `memory.added`, `memory.replaced`, `memory.removed`, `memory.pending_decided`,
    /// `skill.put`, `skill.deleted`, `skill.proposal_decided`, `session.deleted`.
    pub action: String,
    /// The id acted on.
    pub target: String,
    #[schema(value_type = Object)]
    pub detail: Value,
}

impl From<AuditEntry> for AuditView {
    fn from(e: AuditEntry) -> Self {
        Self {
            id: e.id,
            at: rfc3339(e.at),
            principal: e.principal,
            action: e.action,
            target: e.target,
            detail: e.detail,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditList {
    pub entries: Vec<AuditView>,
}

fn since_ms(s: &str) -> Result<i64, ApiError> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| {
            ApiError::bad_request(
                "invalid_query",
                "since must be an RFC 3339 time or milliseconds since the epoch",
            )
        })
}

/// The audit log, oldest first (the operator).
#[utoipa::path(
    operation_id = "list_audit",
    tag = "tokens",
    params(AuditQuery),
    responses(
        (status = 200, description = "The entries", body = AuditList),
        (status = 400, description = "`invalid_query`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`forbidden`: only the operator reads the audit log", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/audit")]
pub async fn list(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    query: web::Query<AuditQuery>,
) -> Result<HttpResponse, ApiError> {
    who.operator_only("read the audit log")?;
    let since = query
        .since
        .as_deref()
        .map(since_ms)
        .transpose()?
        .unwrap_or(0);
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("limit must be 1 to {MAX_LIMIT}"),
        ));
    }
    let entries = state.gateway.audit_entries(since, limit).await?;
    Ok(HttpResponse::Ok().json(AuditList {
        entries: entries.into_iter().map(AuditView::from).collect(),
    }))
}
