//! Liveness and readiness: `/healthz` answers while the process lives, `/readyz` only while the
//! store is reachable and migrated and the server is not shutting down.
use crate::startup::AppState;
use actix_web::{web, HttpResponse};
use serde_json::json;

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    if state.shutting_down() {
        return HttpResponse::ServiceUnavailable().json(json!({"status": "shutting_down"}));
    }
    if state.gateway.store().is_ready().await {
        HttpResponse::Ok().json(json!({"status": "ready"}))
    } else {
        HttpResponse::ServiceUnavailable().json(json!({"status": "unavailable"}))
    }
}
