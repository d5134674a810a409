//! The HTTP routes of API.md, one module per resource, and the small request-parsing rules they
//! share: ids parsed once at the edge, privileged body fields refused, JSON errors for misses.
pub mod admissions;
pub mod audit;
pub mod events;
pub mod files;
pub mod health;
pub mod id;
pub mod memory;
pub mod metrics;
pub mod openai;
pub mod outbox;
pub mod providers;
pub mod responses;
pub mod schedules;
pub mod sessions;
pub mod skills;
pub mod submissions;
pub mod tokens;
pub mod tools;
pub mod ui;
pub mod webhooks;
pub mod work;
pub mod ws;

use crate::error::{not_an_id, ApiError};
use actix_web::dev::ResourceDef;
use actix_web::http::{Method, StatusCode};
use actix_web::{guard, web, HttpRequest, HttpResponse, ResponseError};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::str::FromStr;
use utoipa::openapi::path::Paths;
use utoipa_actix_web::service_config::ServiceConfig;

/// Every route of the route modules, in matching order (a fixed path before the `{…}` one that
/// would take it). Each handler says its method and path once, in its actix attribute, under
/// its `#[utoipa::path]`; registering it here both mounts it and adds it to the OpenAPI
/// document (`crate::openapi`, which adds its own route; `startup` mounts [`refusals`] first).
pub fn configure(cfg: &mut ServiceConfig) {
    cfg.service(ui::index)
        .service(ui::asset)
        .service(health::healthz)
        .service(health::readyz)
        .service(metrics::metrics)
        .service(sessions::create)
        .service(sessions::list)
        .service(sessions::get)
        .service(sessions::update)
        .service(sessions::delete)
        .service(sessions::messages)
        .service(work::subagents)
        .service(work::processes)
        .service(submissions::submit)
        .service(submissions::interrupt)
        .service(events::events)
        .service(tools::decide_approval)
        .service(tools::decide_tool_run)
        .service(tools::restore)
        .service(admissions::get)
        .service(admissions::retry)
        .service(tokens::create)
        .service(tokens::list)
        .service(tokens::revoke)
        .service(audit::list)
        .service(providers::list)
        .service(providers::connect)
        .service(providers::remove)
        .service(files::upload)
        .service(files::get)
        .service(schedules::create)
        .service(schedules::list)
        .service(schedules::delete)
        .service(memory::get)
        .service(memory::add)
        .service(memory::changes)
        .service(memory::pending)
        .service(memory::decide_pending)
        .service(memory::edit)
        .service(memory::delete)
        .service(skills::list)
        .service(skills::proposals)
        .service(skills::decide)
        .service(skills::get)
        .service(skills::put)
        .service(skills::delete)
        .service(outbox::list)
        .service(outbox::resend)
        .service(ws::connect)
        .service(openai::chat_completions)
        .service(openai::models)
        .service(responses::create)
        .service(responses::input_items)
        .service(responses::cancel)
        .service(responses::get)
        .service(responses::delete)
        .service(webhooks::telegram::webhook)
        .service(webhooks::slack::events)
        .service(webhooks::slack::interactive)
        .service(webhooks::generic::webhook);
}

/// Mounted before every route: a request whose path a documented route takes, with a method
/// none of that path's handlers serves, answers 405 (in OpenAI's error shape on the paths of
/// operations tagged `openai`). The path that takes it is the first in `paths` (mounting
/// order) that matches, as when each path was one resource: `DELETE /v1/memory/changes` is
/// refused by `/v1/memory/changes`, not passed on to `/v1/memory/{entry_id}`.
pub fn refusals(cfg: &mut web::ServiceConfig, paths: &Paths) {
    let mut earlier: Vec<ResourceDef> = Vec::new();
    for (path, item) in &paths.paths {
        let operations = [
            (Method::GET, &item.get),
            (Method::PUT, &item.put),
            (Method::POST, &item.post),
            (Method::DELETE, &item.delete),
            (Method::PATCH, &item.patch),
        ];
        let served: Vec<Method> = operations
            .iter()
            .filter(|(_, op)| op.is_some())
            .map(|(m, _)| m.clone())
            .collect();
        let openai = operations
            .iter()
            .filter_map(|(_, op)| op.as_ref())
            .any(|op| {
                op.tags
                    .as_ref()
                    .is_some_and(|tags| tags.iter().any(|t| t == "openai"))
            });
        let before = earlier.clone();
        let taken_here = guard::fn_guard(move |ctx| {
            let path = ctx.head().uri.path();
            !served.contains(&ctx.head().method) && !before.iter().any(|d| d.is_match(path))
        });
        let refuse = if openai {
            web::to(openai::method_not_allowed)
        } else {
            web::to(method_not_allowed)
        };
        cfg.service(
            web::resource(path.as_str())
                .guard(taken_here)
                .default_service(refuse),
        );
        earlier.push(ResourceDef::new(path.as_str()));
    }
}

pub async fn not_found(req: HttpRequest) -> HttpResponse {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no route for {} {}", req.method(), req.path()),
    )
    .error_response()
}

async fn method_not_allowed(req: HttpRequest) -> HttpResponse {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}", req.method(), req.path()),
    )
    .error_response()
}

/// Parses an id a body or a WebSocket call names (ids in the path are `id::Id`). One that is not
/// a UUID is malformed (400 `invalid_id`); a well-formed id of something missing or someone
/// else's is answered 404 by the handler.
pub fn parse_id<T: FromStr>(raw: &str, what: &str) -> Result<T, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::bad_request("invalid_id", not_an_id(what, raw)))
}

/// Body fields that might look like they grant rights. They never do (SPEC R2.1): rights come
/// from the bearer token alone, so a body naming one is refused rather than silently obeyed.
const PRIVILEGED_FIELDS: &[&str] = &[
    "owner",
    "owner_id",
    "operator",
    "principal",
    "principal_id",
    "user_id",
    "is_operator",
    "admin",
    "role",
    "kind",
];

/// Refuses privileged fields among the ones a body carried beyond its known fields.
pub fn reject_privileged_fields(extra: &Map<String, Value>) -> Result<(), ApiError> {
    match extra
        .keys()
        .find(|k| PRIVILEGED_FIELDS.contains(&k.as_str()))
    {
        Some(k) => Err(ApiError::bad_request(
            "forbidden_field",
            format!("the field {k:?} is not accepted: rights come only from the bearer token"),
        )),
        None => Ok(()),
    }
}

/// A JSON body that may be absent: an empty body is `T::default()`. The size limit and error
/// shapes match the `Json` extractor's.
pub async fn read_optional_json<T: DeserializeOwned + Default>(
    payload: web::Payload,
    limit: usize,
) -> Result<T, ApiError> {
    let body = read_body(payload, limit).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&body).map_err(ApiError::invalid_json)
}

/// The whole body, at most `limit` bytes (`payload_too_large` beyond).
pub async fn read_body(mut payload: web::Payload, limit: usize) -> Result<web::BytesMut, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| match e {
            actix_web::error::PayloadError::Overflow => ApiError::payload_too_large(limit),
            other => ApiError::bad_request(
                "invalid_body",
                format!("the body could not be read: {other}"),
            ),
        })?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::payload_too_large(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
