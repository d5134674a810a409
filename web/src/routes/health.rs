//! Liveness and readiness: `/healthz` answers while the process lives, `/readyz` only while the
//! store is reachable and migrated and the server is not shutting down.
use crate::startup::AppState;
use actix_web::{web, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

/// The answer of `/healthz` and `/readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthStatus {
    /// `ok` (`/healthz`); `ready`, `unavailable` or `shutting_down` (`/readyz`).
    #[schema(example = "ok")]
    pub status: &'static str,
}

fn status(status: &'static str) -> HealthStatus {
    HealthStatus { status }
}

/// Liveness: 200 while the process lives.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "health",
    responses((status = 200, description = "The process lives: `{\"status\": \"ok\"}`", body = HealthStatus)),
)]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(status("ok"))
}

/// Readiness: 200 while the store is reachable and migrated and the server is not stopping.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "health",
    responses(
        (status = 200, description = "Ready: `{\"status\": \"ready\"}`", body = HealthStatus),
        (status = 503, description = "Not ready: `{\"status\": \"unavailable\"}` (the store does not answer) or `{\"status\": \"shutting_down\"}`", body = HealthStatus),
    ),
)]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    if state.shutting_down() {
        return HttpResponse::ServiceUnavailable().json(status("shutting_down"));
    }
    if state.gateway.store().is_ready().await {
        HttpResponse::Ok().json(status("ready"))
    } else {
        HttpResponse::ServiceUnavailable().json(status("unavailable"))
    }
}
