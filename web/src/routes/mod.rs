//! The HTTP routes of API.md, one module per resource, and the small request-parsing rules they
//! share: ids parsed once at the edge, privileged body fields refused, JSON errors for misses.
pub mod admissions;
pub mod events;
pub mod health;
pub mod metrics;
pub mod openai;
pub mod sessions;
pub mod submissions;
pub mod tokens;
pub mod tools;
pub mod ui;
pub mod ws;

use crate::error::ApiError;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::str::FromStr;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/").route(web::get().to(ui::index)))
        .service(resource("/ui/{file}").route(web::get().to(ui::asset)))
        .service(resource("/healthz").route(web::get().to(health::healthz)))
        .service(resource("/readyz").route(web::get().to(health::readyz)))
        .service(resource("/metrics").route(web::get().to(metrics::metrics)))
        .service(
            web::scope("/v1")
                .service(
                    resource("/sessions")
                        .route(web::post().to(sessions::create))
                        .route(web::get().to(sessions::list)),
                )
                .service(
                    resource("/sessions/{id}")
                        .route(web::get().to(sessions::get))
                        .route(web::patch().to(sessions::update)),
                )
                .service(
                    resource("/sessions/{id}/messages").route(web::get().to(sessions::messages)),
                )
                .service(
                    resource("/sessions/{id}/submissions")
                        .route(web::post().to(submissions::submit)),
                )
                .service(
                    resource("/sessions/{id}/interrupt")
                        .route(web::post().to(submissions::interrupt)),
                )
                .service(resource("/sessions/{id}/events").route(web::get().to(events::events)))
                .service(
                    resource("/sessions/{id}/approvals/{approval_id}")
                        .route(web::post().to(tools::decide_approval)),
                )
                .service(
                    resource("/sessions/{id}/tool_runs/{call_id}")
                        .route(web::post().to(tools::decide_tool_run)),
                )
                .service(
                    resource("/sessions/{id}/checkpoints/{turn_id}/restore")
                        .route(web::post().to(tools::restore)),
                )
                .service(
                    resource("/admissions/{admission_id}").route(web::get().to(admissions::get)),
                )
                .service(
                    resource("/admissions/{admission_id}/retry")
                        .route(web::post().to(admissions::retry)),
                )
                .service(resource("/tokens").route(web::post().to(tokens::create)))
                .service(resource("/ws").route(web::get().to(ws::connect)))
                .service(
                    web::resource("/chat/completions")
                        .route(web::post().to(openai::chat_completions))
                        .default_service(web::to(openai::method_not_allowed)),
                )
                .service(
                    web::resource("/models")
                        .route(web::get().to(openai::models))
                        .default_service(web::to(openai::method_not_allowed)),
                ),
        );
}

/// A resource whose other methods answer 405 in the API's error shape.
fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(method_not_allowed))
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

/// Parses an id from the path. One that is not a UUID is malformed (400 `invalid_id`); a
/// well-formed id of something missing or someone else's is answered 404 by the handler.
pub fn parse_id<T: FromStr>(raw: &str, what: &str) -> Result<T, ApiError> {
    raw.parse().map_err(|_| {
        ApiError::bad_request(
            "invalid_id",
            format!("the {what} id {:?} is not a UUID", truncated(raw, 64)),
        )
    })
}

/// At most `max` characters of `s`, for echoing client input in an error message.
pub fn truncated(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
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
