//! Admission receipts: `GET /v1/admissions/{admission_id}`, visible to whoever may see the
//! admission's session (others get 404, as for the session itself).
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
    Ok(HttpResponse::Ok().json(AdmissionView {
        admission_id: admission.id,
        session_id: admission.session_id,
        seq: admission.seq,
        status: admission.status,
        outcome: admission.outcome,
    }))
}
