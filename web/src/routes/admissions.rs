//! Admission receipts: `GET /v1/admissions/{admission_id}`, visible to whoever may see the
//! admission's session (others get 404, as for the session itself), and the retry of an
//! `unknown` one.
use super::id::Id;
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::openapi::mirrors::{AdmissionStatusName, ReceiptSchema};
use crate::state::AppState;
use actix_web::{get, post};
use actix_web::{web, HttpResponse};
use serde::Serialize;
use serde_json::Value;
use turnkey_storage::{AdmissionId, AdmissionStatus, SessionId};
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Admission)]
pub struct AdmissionView {
    #[schema(value_type = uuid::Uuid)]
    pub admission_id: AdmissionId,
    #[schema(value_type = uuid::Uuid)]
    pub session_id: SessionId,
    /// The input's place in the session's queue.
    pub seq: i64,
    /// Where the input came from: `user` (any door), or an internal input: `schedule`,
    /// `subagent` (a child's report), `process` (a background process's exit).
    #[schema(example = "user")]
    pub source: &'static str,
    #[schema(value_type = AdmissionStatusName)]
    pub status: AdmissionStatus,
    /// Attempts at its turn so far: 1, and one more each time it resumed by itself after a
    /// crash or a shutdown (SPEC R13.9); 0 while it is queued.
    pub attempt: i32,
    /// How many of those resumes followed a crash; `[agent] max_resumes` bounds them (a
    /// hand-back at a graceful shutdown does not count).
    pub crash_resumes: i32,
    /// `null` until the turn ends; for `terminal` `{result, final_response, stop_reason,
    /// failure_reason, failure_message, usage, cost, attempts}`, `stop_reason` `stop`,
    /// `truncated` or `repeated` when there is an answer (or `{result: "steered" |
    /// "coalesced", turn_id, carried_by}`), for `unknown` `{reason, failure_reason,
    /// failure_message, partial_answer, attempts}`.
    #[schema(value_type = Option<Object>)]
    pub outcome: Option<Value>,
    /// The `unknown` admission this one runs again.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<uuid::Uuid>)]
    pub retry_of: Option<AdmissionId>,
    /// The admission that runs this `unknown` one again, once someone asked for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<uuid::Uuid>)]
    pub retried_by: Option<AdmissionId>,
}

/// An admission: where an input is (`queued` → `started` → `terminal`, or `unknown` after a
/// crash) and how its turn ended.
#[utoipa::path(
    operation_id = "get_admission",
    tag = "submissions",
    params(("admission_id" = uuid::Uuid, Path, description = "The admission's id")),
    responses(
        (status = 200, description = "The admission", body = AdmissionView),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such admission, or someone else's", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/admissions/{admission_id}")]
pub async fn get(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<AdmissionId>>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner().into_inner();
    let not_found = || ApiError::not_found(format!("admission {id}"));
    let admission = state
        .gateway
        .store()
        .get_admission(id)
        .await?
        .ok_or_else(not_found)?;
    // Someone else's admission must look exactly like a missing one.
    state
        .gateway
        .authorize(&who.0, admission.session_id)
        .await
        .map_err(|e| match e {
            turnkey_actors::GatewayError::NotFound(_) => not_found(),
            other => ApiError::from(other),
        })?;
    let retried_by = match admission.status {
        AdmissionStatus::Unknown => state.gateway.store().retry_of(admission.id).await?,
        _ => None,
    };
    Ok(HttpResponse::Ok().json(AdmissionView {
        admission_id: admission.id,
        session_id: admission.session_id,
        seq: admission.seq,
        source: admission.source(),
        status: admission.status,
        attempt: if admission.status == AdmissionStatus::Queued {
            0
        } else {
            admission.attempt
        },
        crash_resumes: admission.crash_resumes,
        outcome: admission.outcome,
        retry_of: admission.retry_of,
        retried_by: retried_by.map(|a| a.id),
    }))
}

/// `POST /v1/admissions/{id}/retry`: runs an `unknown` admission again as a new admission
/// linked to it (202), the same receipt again on a repeat (200, `duplicate: true`), 409
/// `not_unknown` for any other status.
#[utoipa::path(
    operation_id = "retry_admission",
    tag = "submissions",
    params(("admission_id" = uuid::Uuid, Path, description = "The `unknown` admission's id")),
    responses(
        (status = 202, description = "The receipt of a new admission linked to the `unknown` one (`retry_of`)", body = ReceiptSchema),
        (status = 200, description = "The same call again: the same receipt, `duplicate: true`", body = ReceiptSchema),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such admission, or someone else's", body = ErrorBody),
        (status = 409, description = "`not_unknown`: the admission is not `unknown`", body = ErrorBody),
        (status = 503, description = "`no_provider`, `shutting_down` (with `Retry-After`), `store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/admissions/{admission_id}/retry")]
pub async fn retry(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<AdmissionId>>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner().into_inner();
    let receipt = state.gateway.retry(&who.0, id).await?;
    let mut res = if receipt.duplicate {
        HttpResponse::Ok()
    } else {
        HttpResponse::Accepted()
    };
    Ok(res.json(receipt))
}
