//! `GET /metrics` in the Prometheus text format: the process's counters (`crate::metrics`) and
//! what the store, the shutdown and the sandbox say at the time.
use crate::state::AppState;
use actix_web::get;
use actix_web::{web, HttpResponse};

/// The Prometheus text exposition of the process's gauges and counters.
#[utoipa::path(
    operation_id = "metrics",
    tag = "health",
    responses((
        status = 200,
        description = "Prometheus text: `turnkey_up`, `turnkey_ready`, `turnkey_shutting_down`, \
                       `turnkey_uptime_seconds`, `turnkey_event_streams_open`, \
                       `turnkey_sandbox_enforced`, `turnkey_sandbox_landlock_abi`, \
                       `turnkey_sandbox_network_denied`, `turnkey_sandbox_seccomp`, \
                       `turnkey_build_info{version}`, `turnkey_http_requests_total{route,status}`, \
                       `turnkey_outbox_rows{status}`; histograms \
                       `turnkey_turn_stage_seconds{stage}` (admit, lease, claim, context, \
                       provider, finalize, delivery), `turnkey_turn_seconds`, \
                       `turnkey_turn_queue_wait_seconds`, `turnkey_delivery_batch_events`, \
                       `turnkey_store_write_wait_seconds`, `turnkey_store_write_hold_seconds`, \
                       `turnkey_store_commit_seconds`, `turnkey_store_write_handoff_seconds`, \
                       `turnkey_store_statement_seconds`; \
                       counters `turnkey_unknown_turns_total`, \
                       `turnkey_provider_errors_total{class}`, `turnkey_lease_takeovers_total`, \
                       `turnkey_store_statements_total`, \
                       `turnkey_store_write_transactions_total`, \
                       `turnkey_notices_sent_total`, `turnkey_notices_skipped_total`, \
                       `turnkey_store_stale_snapshots_total`; gauges \
                       `turnkey_sqlite_memory_bytes`, `turnkey_sqlite_memory_highwater_bytes`",
        body = String,
        content_type = "text/plain; version=0.0.4; charset=utf-8",
    )),
)]
#[get("/metrics")]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let ready = state.gateway.store().is_ready().await;
    let outbox = match state.gateway.store().count_outbox().await {
        Ok(counts) => Some(counts),
        Err(e) => {
            // The other gauges still say what they know (turnkey_ready says the store is out).
            tracing::warn!(error = %e, "cannot count the outbox for /metrics");
            None
        }
    };
    let body = state.metrics.render(
        ready,
        state.shutting_down(),
        outbox.as_ref(),
        state.gateway.sandbox(),
    );
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(body)
}
