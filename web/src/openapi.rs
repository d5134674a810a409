//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of every route the server mounts, generated
//! from the handlers' `#[utoipa::path]` annotations and the `ToSchema` types they answer with.
//! The routes are declared once: each handler's actix attribute names its method and path, and
//! one registration ([`serve`], through `utoipa-actix-web`) both mounts the handlers and collects
//! this document, so the two cannot drift apart.
//!
//! Types of the lower crates (the receipt, an event, the status enums) are described in
//! `openapi/mirrors.rs` rather than teaching storage and actors about HTTP documents; the enums'
//! values come from the real types (an exhaustive `match`), and unit tests compare the mirrors
//! with what the real values serialize to. The e2e test validates the served document with
//! `openapi-spec-validator` and requests every documented operation of the running binary.
pub mod mirrors;

use crate::error::ErrorBody;
use crate::routes::{self, ui};
use actix_web::{get, App, HttpResponse};
use std::sync::OnceLock;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_actix_web::{service_config::ServiceConfig, AppExt};

/// The name of the bearer scheme the operations' `security` refers to.
pub const BEARER: &str = "bearer";

/// The frame of the document: its info, tags, security scheme and the schemas only parameters
/// name; [`document`] adds every route to it.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "turnkey",
        version = env!("CARGO_PKG_VERSION"),
        description = "A durable AI-agent gateway: no input is lost, no tool side effect runs \
                       twice, a crash never corrupts a session. Generated from the handlers; \
                       docs/api.md describes the same interface in prose.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    // Schemas only parameters refer to (the document collects the bodies' on its own).
    components(schemas(ErrorBody, ui::UiFileName)),
    modifiers(&BearerScheme),
    tags(
        (name = "ui", description = "The web UI's page and files"),
        (name = "health", description = "Liveness, readiness, metrics"),
        (name = "meta", description = "This document"),
        (name = "tokens", description = "API tokens (operator only)"),
        (name = "providers", description = "Model providers: the configured ones, and those connected at run time (operator only)"),
        (name = "sessions", description = "Sessions and their transcripts"),
        (name = "submissions", description = "Inputs: idempotent submissions, admissions, retries, interrupts"),
        (name = "events", description = "A session's event log, as JSON pages or SSE"),
        (name = "tools", description = "A person's answers: approvals, tool runs a crash left unknown, checkpoint restore"),
        (name = "schedules", description = "Scheduled inputs: a session's text admitted whenever a cron expression (UTC) falls due"),
        (name = "memory", description = "The caller's memory and user profile: entries, changes, the review's writes waiting for a person"),
        (name = "skills", description = "Skills shared by all principals: the operator's folders and stored ones; agents' proposals"),
        (name = "openai", description = "The OpenAI-compatible endpoint (errors in OpenAI's shape)"),
        (name = "websocket", description = "JSON-RPC 2.0 over a WebSocket"),
        (name = "platforms", description = "Chat platforms: the outbox of messages to Telegram, Slack and the generic webhook"),
        (name = "webhooks", description = "Chat platforms in: verified by each platform's own signature, not a bearer token"),
    ),
)]
pub struct ApiDoc;

/// Adds the bearer scheme: the operator token or an API token (`POST /v1/tokens`).
struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        let mut http = Http::new(HttpAuthScheme::Bearer);
        http.description =
            Some("The operator token, or an API token made with `POST /v1/tokens`".into());
        components.add_security_scheme(BEARER, SecurityScheme::Http(http));
    }
}

/// Every route the server serves: the route modules' ([`routes::configure`]) and this
/// document's. `startup` mounts [`routes::refusals`] over [`document`]'s paths, then them.
pub fn serve(cfg: &mut ServiceConfig) {
    cfg.configure(routes::configure).service(openapi_json);
}

/// The document, built once from the same registration the server mounts ([`serve`]).
pub fn document() -> &'static utoipa::openapi::OpenApi {
    static DOC: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    DOC.get_or_init(|| {
        App::new()
            .into_utoipa_app()
            .openapi(ApiDoc::openapi())
            .configure(serve)
            .split_for_parts()
            .1
    })
}

/// This document. It describes public shapes only, so it needs no token.
#[utoipa::path(
    operation_id = "openapi_document",
    tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 document of this server", body = Object)),
)]
#[get("/v1/openapi.json")]
pub async fn openapi_json() -> HttpResponse {
    HttpResponse::Ok().json(document())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::sessions;
    use std::collections::BTreeSet;
    use utoipa::openapi::{RefOr, Schema};

    /// Every (method, path) the document lists.
    fn documented() -> BTreeSet<(String, String)> {
        const METHODS: [&str; 8] = [
            "get", "put", "post", "delete", "options", "head", "patch", "trace",
        ];
        let doc = serde_json::to_value(document()).unwrap_or_default();
        let mut out = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for (key, _) in item.as_object().into_iter().flatten() {
                if METHODS.contains(&key.as_str()) {
                    out.insert((key.to_uppercase(), path.clone()));
                }
            }
        }
        out
    }

    #[test]
    fn the_document_lists_every_route_once_with_its_method() {
        let documented = documented();
        for route in [
            ("POST", "/v1/sessions/{id}/submissions"),
            ("GET", "/v1/sessions/{id}/events"),
            ("POST", "/v1/chat/completions"),
            ("GET", "/v1/openapi.json"),
            ("GET", "/v1/ws"),
            ("POST", "/webhooks/telegram"),
            ("DELETE", "/v1/memory/{entry_id}"),
        ] {
            let route = (route.0.to_owned(), route.1.to_owned());
            assert!(documented.contains(&route), "{route:?} is missing");
        }
        assert!(documented.len() >= 56, "routes were lost: {documented:?}");
    }

    /// Every `$ref` in `v`.
    fn references<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
        match v {
            serde_json::Value::Object(o) => {
                for (k, v) in o {
                    match (k.as_str(), v.as_str()) {
                        ("$ref", Some(r)) => out.push(r),
                        _ => references(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| references(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_resolves() {
        let doc = serde_json::to_value(document()).unwrap_or_default();
        let mut refs = Vec::new();
        references(&doc, &mut refs);
        assert!(!refs.is_empty());
        for r in refs {
            let pointer = r.strip_prefix('#').unwrap_or(r);
            assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
        }
    }

    #[test]
    fn operation_ids_are_given_and_unique() {
        let doc = serde_json::to_value(document()).unwrap_or_default();
        let mut seen = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for (m, op) in item.as_object().into_iter().flatten() {
                let id = op["operationId"].as_str().unwrap_or_default();
                assert!(!id.is_empty(), "{m} {path} has no operationId");
                assert!(
                    seen.insert(id.to_owned()),
                    "{m} {path}: operationId {id} again"
                );
            }
        }
    }

    #[test]
    fn every_bearer_operation_names_the_documented_scheme() {
        let doc = serde_json::to_value(document()).unwrap_or_default();
        assert_eq!(
            doc["components"]["securitySchemes"][BEARER]["scheme"],
            "bearer"
        );
        assert_eq!(doc["info"]["title"], "turnkey");
        assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for (m, op) in item.as_object().into_iter().flatten() {
                let secured = op["security"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|r| r.get(BEARER).is_some()));
                // The health routes, this document and the WebSocket (token in its first
                // message) take no bearer header; everything else under /v1 does.
                let public =
                    !path.starts_with("/v1/") || path == "/v1/openapi.json" || path == "/v1/ws";
                assert_eq!(secured, !public, "{m} {path}: security {}", op["security"]);
            }
        }
    }

    #[test]
    fn the_patch_schema_lists_the_fields_the_handler_takes() {
        let RefOr::T(Schema::Object(o)) =
            <sessions::SessionPatch as utoipa::PartialSchema>::schema()
        else {
            panic!("SessionPatch is not an object schema");
        };
        let props: BTreeSet<&str> = o.properties.keys().map(String::as_str).collect();
        assert_eq!(props, sessions::PATCH_FIELDS.into_iter().collect());
    }
}
