//! Admission receipts: `GET /v1/admissions/{admission_id}`, visible to whoever may see the
//! admission's session (others get 404, as for the session itself), and the retry of an
//! `unknown` one.
use super::parse_id;
use crate::auth::AuthPrincipal;
use crate::error::ApiError;
use crate::startup::AppState;
use actix_web::{web, HttpResponse};
use serde::Serialize;
use serde_json::Value;
use turnkey_storage::{AdmissionId, AdmissionStatus, SessionId};

#[derive(Debug, Serialize)]
pub struct AdmissionView {
    pub admission_id: AdmissionId,
    pub session_id: SessionId,
    pub seq: i64,
    pub status: AdmissionStatus,
    pub outcome: Option<Value>,
    /// The `unknown` admission this one runs again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<AdmissionId>,
    /// The admission that runs this `unknown` one again, once someone asked for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retried_by: Option<AdmissionId>,
}

pub async fn get(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id: AdmissionId = parse_id(&path, "admission")?;
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
        status: admission.status,
        outcome: admission.outcome,
        retry_of: admission.retry_of,
        retried_by: retried_by.map(|a| a.id),
    }))
}

/// `POST /v1/admissions/{id}/retry`: runs an `unknown` admission again as a new admission
/// linked to it (202), the same receipt again on a repeat (200, `duplicate: true`), 409
/// `not_unknown` for any other status.
pub async fn retry(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id: AdmissionId = parse_id(&path, "admission")?;
    let receipt = state.gateway.retry(&who.0, id).await?;
    let mut res = if receipt.duplicate {
        HttpResponse::Ok()
    } else {
        HttpResponse::Accepted()
    };
    Ok(res.json(receipt))
}
