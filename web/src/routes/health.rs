//! Liveness and readiness: `/healthz` answers while the process lives, `/readyz` only while the
//! store is reachable and migrated and the server is not shutting down, and says what the OS
//! sandbox confines (SPEC R13.7).
use crate::state::AppState;
use actix_web::get;
use actix_web::{web, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

/// The answer of `/healthz` and `/readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthStatus {
    /// `ok` (`/healthz`); `ready`, `unavailable` or `shutting_down` (`/readyz`).
    #[schema(example = "ok")]
    pub status: &'static str,
    /// `/readyz` only: what the OS sandbox confines commands and MCP servers with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxReport>,
}

/// The OS sandbox on this kernel (`tools.sandbox`, SPEC R13.7).
#[derive(Debug, Serialize, ToSchema)]
pub struct SandboxReport {
    /// `auto`, `landlock` or `off`.
    #[schema(example = "auto")]
    pub mode: &'static str,
    /// Every command and MCP server is confined by Landlock to its workspace and temp dir.
    pub enforced: bool,
    /// The kernel's Landlock ABI version; 0 without Landlock.
    pub landlock_abi: u32,
    /// `tools.sandbox_network`.
    pub network_allowed: bool,
    /// Network connections are refused to sandboxed children.
    pub network_denied: bool,
    /// Landlock's TCP rules are in force.
    pub network_rules: bool,
    /// The seccomp filter refusing non-Unix sockets is in force.
    pub seccomp: bool,
    /// Why the sandbox is not (fully) in force.
    pub reason: Option<String>,
    /// One line saying the above, as `doctor` prints it.
    pub summary: String,
}

impl From<&turnkey_tools::SandboxState> for SandboxReport {
    fn from(s: &turnkey_tools::SandboxState) -> Self {
        Self {
            mode: s.mode.as_str(),
            enforced: s.enforced,
            landlock_abi: s.landlock_abi,
            network_allowed: s.network_allowed,
            network_denied: s.network_denied,
            network_rules: s.network_rules,
            seccomp: s.seccomp,
            reason: s.reason.clone(),
            summary: s.summary(),
        }
    }
}

fn status(status: &'static str) -> HealthStatus {
    HealthStatus {
        status,
        sandbox: None,
    }
}

fn readiness(state: &AppState, status: &'static str) -> HealthStatus {
    HealthStatus {
        status,
        sandbox: Some(state.gateway.sandbox().into()),
    }
}

/// Liveness: 200 while the process lives.
#[utoipa::path(
    operation_id = "healthz",
    tag = "health",
    responses((status = 200, description = "The process lives: `{\"status\": \"ok\"}`", body = HealthStatus)),
)]
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(status("ok"))
}

/// Readiness: 200 while the store is reachable and migrated and the server is not stopping.
#[utoipa::path(
    operation_id = "readyz",
    tag = "health",
    responses(
        (status = 200, description = "Ready: `{\"status\": \"ready\", \"sandbox\": {…}}`", body = HealthStatus),
        (status = 503, description = "Not ready: `{\"status\": \"unavailable\"}` (the store does not answer) or `{\"status\": \"shutting_down\"}`, with `sandbox`", body = HealthStatus),
    ),
)]
#[get("/readyz")]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    if state.shutting_down() {
        return HttpResponse::ServiceUnavailable().json(readiness(&state, "shutting_down"));
    }
    if state.gateway.store().is_ready().await {
        HttpResponse::Ok().json(readiness(&state, "ready"))
    } else {
        HttpResponse::ServiceUnavailable().json(readiness(&state, "unavailable"))
    }
}
