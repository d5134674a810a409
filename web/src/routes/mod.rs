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
use actix_web::http::{Method, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse, ResponseError, Route};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::str::FromStr;

/// The answer shape of a resource's 405 for a method it does not serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// `{"error": {code, message}}`.
    Api,
    /// OpenAI's `{"error": {message, type, param, code}}`.
    OpenAi,
}

/// One mounted path: its handlers by method, and how it refuses any other method.
pub struct Mount {
    pub path: &'static str,
    refusal: Refusal,
    routes: Vec<(Method, Route)>,
}

impl Mount {
    pub fn api(path: &'static str, routes: Vec<(Method, Route)>) -> Self {
        Self {
            path,
            refusal: Refusal::Api,
            routes,
        }
    }

    fn openai(path: &'static str, routes: Vec<(Method, Route)>) -> Self {
        Self {
            path,
            refusal: Refusal::OpenAi,
            routes,
        }
    }

    pub fn methods(&self) -> impl Iterator<Item = &Method> {
        self.routes.iter().map(|(m, _)| m)
    }
}

/// Every route of the route modules, in one table. `startup` adds the OpenAPI document's
/// (`crate::openapi` reads these modules, so it stands above them), mounts the whole with
/// [`configure`] and lists it, so a test can hold the document to what is served.
pub fn table() -> Vec<Mount> {
    use Method as M;
    vec![
        Mount::api("/", vec![(M::GET, web::to(ui::index))]),
        Mount::api("/ui/{file}", vec![(M::GET, web::to(ui::asset))]),
        Mount::api("/healthz", vec![(M::GET, web::to(health::healthz))]),
        Mount::api("/readyz", vec![(M::GET, web::to(health::readyz))]),
        Mount::api("/metrics", vec![(M::GET, web::to(metrics::metrics))]),
        Mount::api(
            "/v1/sessions",
            vec![
                (M::POST, web::to(sessions::create)),
                (M::GET, web::to(sessions::list)),
            ],
        ),
        Mount::api(
            "/v1/sessions/{id}",
            vec![
                (M::GET, web::to(sessions::get)),
                (M::PATCH, web::to(sessions::update)),
                (M::DELETE, web::to(sessions::delete)),
            ],
        ),
        Mount::api(
            "/v1/sessions/{id}/messages",
            vec![(M::GET, web::to(sessions::messages))],
        ),
        Mount::api(
            "/v1/sessions/{id}/subagents",
            vec![(M::GET, web::to(work::subagents))],
        ),
        Mount::api(
            "/v1/sessions/{id}/processes",
            vec![(M::GET, web::to(work::processes))],
        ),
        Mount::api(
            "/v1/sessions/{id}/submissions",
            vec![(M::POST, web::to(submissions::submit))],
        ),
        Mount::api(
            "/v1/sessions/{id}/interrupt",
            vec![(M::POST, web::to(submissions::interrupt))],
        ),
        Mount::api(
            "/v1/sessions/{id}/events",
            vec![(M::GET, web::to(events::events))],
        ),
        Mount::api(
            "/v1/sessions/{id}/approvals/{approval_id}",
            vec![(M::POST, web::to(tools::decide_approval))],
        ),
        Mount::api(
            "/v1/sessions/{id}/tool_runs/{call_id}",
            vec![(M::POST, web::to(tools::decide_tool_run))],
        ),
        Mount::api(
            "/v1/sessions/{id}/checkpoints/{turn_id}/restore",
            vec![(M::POST, web::to(tools::restore))],
        ),
        Mount::api(
            "/v1/admissions/{admission_id}",
            vec![(M::GET, web::to(admissions::get))],
        ),
        Mount::api(
            "/v1/admissions/{admission_id}/retry",
            vec![(M::POST, web::to(admissions::retry))],
        ),
        Mount::api(
            "/v1/tokens",
            vec![
                (M::POST, web::to(tokens::create)),
                (M::GET, web::to(tokens::list)),
            ],
        ),
        Mount::api(
            "/v1/tokens/{id}",
            vec![(M::DELETE, web::to(tokens::revoke))],
        ),
        Mount::api("/v1/audit", vec![(M::GET, web::to(audit::list))]),
        Mount::api(
            "/v1/providers",
            vec![
                (M::GET, web::to(providers::list)),
                (M::POST, web::to(providers::connect)),
            ],
        ),
        Mount::api(
            "/v1/providers/{name}",
            vec![(M::DELETE, web::to(providers::remove))],
        ),
        Mount::api("/v1/files", vec![(M::POST, web::to(files::upload))]),
        Mount::api("/v1/files/{file_id}", vec![(M::GET, web::to(files::get))]),
        Mount::api(
            "/v1/schedules",
            vec![
                (M::POST, web::to(schedules::create)),
                (M::GET, web::to(schedules::list)),
            ],
        ),
        Mount::api(
            "/v1/schedules/{id}",
            vec![(M::DELETE, web::to(schedules::delete))],
        ),
        // The fixed paths before the `{entry_id}` and `{name}` ones that would take them.
        Mount::api(
            "/v1/memory",
            vec![
                (M::GET, web::to(memory::get)),
                (M::POST, web::to(memory::add)),
            ],
        ),
        Mount::api(
            "/v1/memory/changes",
            vec![(M::GET, web::to(memory::changes))],
        ),
        Mount::api(
            "/v1/memory/pending",
            vec![(M::GET, web::to(memory::pending))],
        ),
        Mount::api(
            "/v1/memory/pending/{id}",
            vec![(M::POST, web::to(memory::decide_pending))],
        ),
        Mount::api(
            "/v1/memory/{entry_id}",
            vec![
                (M::PATCH, web::to(memory::edit)),
                (M::DELETE, web::to(memory::delete)),
            ],
        ),
        Mount::api("/v1/skills", vec![(M::GET, web::to(skills::list))]),
        Mount::api(
            "/v1/skills/proposals",
            vec![(M::GET, web::to(skills::proposals))],
        ),
        Mount::api(
            "/v1/skills/proposals/{id}",
            vec![(M::POST, web::to(skills::decide))],
        ),
        Mount::api(
            "/v1/skills/{name}",
            vec![
                (M::GET, web::to(skills::get)),
                (M::PUT, web::to(skills::put)),
                (M::DELETE, web::to(skills::delete)),
            ],
        ),
        Mount::api("/v1/outbox", vec![(M::GET, web::to(outbox::list))]),
        Mount::api(
            "/v1/outbox/{id}/resend",
            vec![(M::POST, web::to(outbox::resend))],
        ),
        Mount::api("/v1/ws", vec![(M::GET, web::to(ws::connect))]),
        Mount::openai(
            "/v1/chat/completions",
            vec![(M::POST, web::to(openai::chat_completions))],
        ),
        Mount::openai("/v1/models", vec![(M::GET, web::to(openai::models))]),
        Mount::api(
            "/webhooks/telegram",
            vec![(M::POST, web::to(webhooks::telegram::webhook))],
        ),
        Mount::api(
            "/webhooks/slack",
            vec![(M::POST, web::to(webhooks::slack::events))],
        ),
        Mount::api(
            "/webhooks/slack/interactive",
            vec![(M::POST, web::to(webhooks::slack::interactive))],
        ),
        Mount::api(
            "/webhooks/generic",
            vec![(M::POST, web::to(webhooks::generic::webhook))],
        ),
    ]
}

/// Mounts `mounts` (the [`table`] and what `startup` adds): each path with its methods; any
/// other method on it answers 405.
pub fn configure(cfg: &mut web::ServiceConfig, mounts: Vec<Mount>) {
    for mount in mounts {
        let mut resource = web::resource(mount.path);
        for (method, route) in mount.routes {
            resource = resource.route(route.method(method));
        }
        cfg.service(match mount.refusal {
            Refusal::Api => resource.default_service(web::to(method_not_allowed)),
            Refusal::OpenAi => resource.default_service(web::to(openai::method_not_allowed)),
        });
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
