//! Scheduled jobs (SPEC R1.5): `POST /v1/schedules`, `GET /v1/schedules`,
//! `DELETE /v1/schedules/{id}`. A schedule admits its text into its session whenever its cron
//! expression (UTC) falls due; the `SchedulerActor` does the admitting. Like sessions, a
//! principal other than the operator sees and changes only schedules on its own sessions;
//! anyone else's is not found.
use super::id::Id;
use super::{parse_id, reject_privileged_fields};
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use actix_web::{delete, get, post};
use actix_web::{web, HttpResponse};
use serde::Serialize;
use serde_json::{Map, Value};
use std::borrow::Cow;
use turnkey_actors::scheduler::{next_due_at, ScheduleRequest};
use turnkey_storage::{
    now_ms, rfc3339, MissedPolicy, Schedule, ScheduleId, ScheduleSource, SessionId,
};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// The body of `POST /v1/schedules`. The handler reads it as a JSON object so that each field
/// has its own error code; these are the fields it takes.
#[derive(Debug, ToSchema)]
#[allow(dead_code)] // the schema of the body, read field by field by `create`
pub struct CreateSchedule {
    /// The session the input goes to (`400 invalid_id` when not a UUID, `404` when it is
    /// missing or someone else's).
    #[schema(value_type = uuid::Uuid)]
    session_id: String,
    /// A cron expression in UTC: 5 fields (minute hour day-of-month month day-of-week) or 6
    /// with seconds first (`400 invalid_cron` otherwise).
    #[schema(example = "0 8 * * *")]
    cron: String,
    /// The input's text, as a submission's (`400 empty_input`, `input_too_large`).
    text: String,
    /// What due times that passed while no process ran do: `run_once` (default) runs once
    /// for the latest, `skip` runs none (`400 invalid_missed` otherwise).
    #[schema(value_type = Option<MissedName>)]
    missed: Option<String>,
}

/// The fields [`create`] takes (the properties of [`CreateSchedule`]).
pub const CREATE_FIELDS: [&str; 4] = ["session_id", "cron", "text", "missed"];

/// A string-enum schema with these values.
fn string_enum(values: &[&str], description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values.iter().map(|v| Value::from(*v))))
        .description(Some(description))
        .into()
}

/// What a schedule does with due times that passed while no process was running it; the
/// values are `MissedPolicy`'s own.
pub struct MissedName;

impl PartialSchema for MissedName {
    fn schema() -> RefOr<Schema> {
        let values: Vec<&str> = MissedPolicy::NAMES.split(", ").collect();
        string_enum(
            &values,
            "Due times that passed while no process ran the schedule: `run_once` runs once for \
             the latest of them, `skip` runs none and goes on from the next due time.",
        )
    }
}

impl ToSchema for MissedName {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("MissedPolicy")
    }
}

/// Where a schedule comes from; the values are `ScheduleSource`'s own.
pub struct SourceName;

impl SourceName {
    pub const VALUES: [ScheduleSource; 3] = [
        ScheduleSource::Api,
        ScheduleSource::Config,
        ScheduleSource::Agent,
    ];

    #[allow(dead_code)]
    fn exhaustive(s: ScheduleSource) {
        // A new variant must be added to VALUES: this match stops compiling until it is.
        match s {
            ScheduleSource::Api | ScheduleSource::Config | ScheduleSource::Agent => {}
        }
    }
}

impl PartialSchema for SourceName {
    fn schema() -> RefOr<Schema> {
        let values: Vec<&str> = Self::VALUES.iter().map(|s| s.as_str()).collect();
        string_enum(
            &values,
            "`api`: made with `POST /v1/schedules`; `config`: a `[[schedules]]` table of the \
             configuration (removed by removing the table); `agent`: made by the agent's \
             `schedule` tool on its own session.",
        )
    }
}

impl ToSchema for SourceName {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ScheduleSource")
    }
}

/// A schedule as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Schedule)]
pub struct ScheduleView {
    #[schema(value_type = uuid::Uuid)]
    pub id: ScheduleId,
    #[schema(value_type = uuid::Uuid)]
    pub session_id: SessionId,
    /// Empty for a one-shot schedule (`once_at`).
    #[schema(example = "0 8 * * *")]
    pub cron: String,
    /// A one-shot schedule's one due time (UTC), made by the `schedule` tool's `in_s`.
    pub once_at: Option<String>,
    pub text: String,
    #[schema(value_type = MissedName)]
    pub missed: &'static str,
    #[schema(value_type = SourceName)]
    pub source: &'static str,
    /// The next due time still to come (UTC); `null` if none.
    pub next_due_at: Option<String>,
    /// The last due time handled: admitted, or passed over as missed (`missed = "skip"`).
    pub last_due_at: Option<String>,
    pub created_at: String,
}

impl ScheduleView {
    fn new(s: Schedule, now: i64) -> Self {
        Self {
            next_due_at: next_due_at(&s, now).map(rfc3339),
            last_due_at: s.last_due_at.map(rfc3339),
            once_at: s.once_at.map(rfc3339),
            created_at: rfc3339(s.created_at),
            missed: s.missed.as_str(),
            source: s.source.as_str(),
            id: s.id,
            session_id: s.session_id,
            cron: s.cron,
            text: s.text,
        }
    }
}

/// `GET /v1/schedules`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleList {
    /// Oldest first.
    pub schedules: Vec<ScheduleView>,
}

/// The string a field holds, or the field's own error.
fn string_field<'a>(
    body: &'a Map<String, Value>,
    field: &str,
    code: &'static str,
) -> Result<Option<&'a str>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ApiError::bad_request(
            code,
            format!("{field} must be a string; got {other}"),
        )),
    }
}

/// Reads a `POST /v1/schedules` body; each field's problem has its own code.
fn request(body: &Map<String, Value>) -> Result<ScheduleRequest, ApiError> {
    reject_privileged_fields(body)?;
    if let Some(k) = body.keys().find(|k| !CREATE_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!(
                "{k} is not a field of a schedule; the fields are {}",
                CREATE_FIELDS.join(", ")
            ),
        ));
    }
    let session_id = string_field(body, "session_id", "invalid_id")?.ok_or_else(|| {
        ApiError::bad_request("invalid_id", "session_id is required (a session's id)")
    })?;
    let session_id: SessionId = parse_id(session_id, "session")?;
    let cron = string_field(body, "cron", "invalid_cron")?.ok_or_else(|| {
        ApiError::bad_request(
            "invalid_cron",
            "cron is required, e.g. \"0 8 * * *\" (5 fields, or 6 with seconds first)",
        )
    })?;
    let text = string_field(body, "text", "invalid_json")?
        .ok_or_else(|| ApiError::bad_request("empty_input", "text is required"))?;
    let missed = match string_field(body, "missed", "invalid_missed")? {
        None => MissedPolicy::default(),
        Some(m) => MissedPolicy::parse(m).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_missed",
                format!(
                    "missed must be one of {}; got {:?}",
                    MissedPolicy::NAMES,
                    crate::error::truncated(m, 64)
                ),
            )
        })?,
    };
    Ok(ScheduleRequest {
        session_id,
        cron: cron.to_owned(),
        text: text.to_owned(),
        missed,
    })
}

/// Makes a schedule: its text is admitted into the session whenever the cron expression (UTC)
/// falls due, as an input of surface `internal` from the session's owner.
#[utoipa::path(
    operation_id = "create_schedule",
    tag = "schedules",
    request_body = CreateSchedule,
    responses(
        (status = 201, description = "The new schedule", body = ScheduleView),
        (status = 400, description = "`invalid_id` (session_id), `invalid_cron`, `invalid_missed`, `empty_input`, `input_too_large`, `invalid_field` (any other field), `forbidden_field`, `invalid_json`, `invalid_body`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such session, or someone else's", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/schedules")]
pub async fn create(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    body: web::Json<Map<String, Value>>,
) -> Result<HttpResponse, ApiError> {
    let req = request(&body)?;
    let made = state.gateway.create_schedule(&who.0, req).await?;
    Ok(HttpResponse::Created().json(ScheduleView::new(made, now_ms())))
}

/// The caller's schedules (all of them for the operator), oldest first.
#[utoipa::path(
    operation_id = "list_schedules",
    tag = "schedules",
    responses(
        (status = 200, description = "The schedules", body = ScheduleList),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/schedules")]
pub async fn list(
    state: web::Data<AppState>,
    who: AuthPrincipal,
) -> Result<HttpResponse, ApiError> {
    let now = now_ms();
    let schedules = state
        .gateway
        .schedules(&who.0)
        .await?
        .into_iter()
        .map(|s| ScheduleView::new(s, now))
        .collect();
    Ok(HttpResponse::Ok().json(ScheduleList { schedules }))
}

/// Deletes a schedule: it admits nothing more; what it admitted already stays. A schedule
/// from a `[[schedules]]` table is removed by removing the table (`409 config_schedule`).
#[utoipa::path(
    operation_id = "delete_schedule",
    tag = "schedules",
    params(("id" = uuid::Uuid, Path, description = "The schedule's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the bearer token is missing or wrong", body = ErrorBody),
        (status = 404, description = "`not_found`: no such schedule, or someone else's", body = ErrorBody),
        (status = 409, description = "`config_schedule`: the schedule comes from the configuration", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[delete("/v1/schedules/{id}")]
pub async fn delete(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<ScheduleId>>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner().into_inner();
    state.gateway.delete_schedule(&who.0, id).await?;
    Ok(HttpResponse::NoContent().finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn code(body: Value) -> &'static str {
        let Value::Object(map) = body else {
            panic!("an object")
        };
        match request(&map) {
            Ok(r) => panic!("accepted: {r:?}"),
            Err(e) => e.code,
        }
    }

    const SESSION: &str = "0190b5c2-7d4e-7cc0-8a1e-3f1f2b3c4d5e";

    #[test]
    fn r1_5_each_field_has_its_own_code() {
        assert_eq!(
            code(json!({"cron": "0 8 * * *", "text": "hi"})),
            "invalid_id"
        );
        assert_eq!(
            code(json!({"session_id": "abc", "cron": "0 8 * * *", "text": "hi"})),
            "invalid_id"
        );
        assert_eq!(
            code(json!({"session_id": 5, "cron": "0 8 * * *", "text": "hi"})),
            "invalid_id"
        );
        assert_eq!(
            code(json!({"session_id": SESSION, "text": "hi"})),
            "invalid_cron"
        );
        assert_eq!(
            code(json!({"session_id": SESSION, "cron": 8, "text": "hi"})),
            "invalid_cron"
        );
        assert_eq!(
            code(json!({"session_id": SESSION, "cron": "0 8 * * *"})),
            "empty_input"
        );
        assert_eq!(
            code(json!({"session_id": SESSION, "cron": "0 8 * * *", "text": 1})),
            "invalid_json"
        );
        assert_eq!(
            code(
                json!({"session_id": SESSION, "cron": "0 8 * * *", "text": "hi", "missed": "never"})
            ),
            "invalid_missed"
        );
        assert_eq!(
            code(json!({"session_id": SESSION, "cron": "0 8 * * *", "text": "hi", "missed": true})),
            "invalid_missed"
        );
        assert_eq!(
            code(json!({"session_id": SESSION, "cron": "0 8 * * *", "text": "hi", "every": "day"})),
            "invalid_field"
        );
        assert_eq!(
            code(json!({"session_id": SESSION, "cron": "0 8 * * *", "text": "hi", "owner": "x"})),
            "forbidden_field"
        );
    }

    #[test]
    fn r1_5_the_create_schema_lists_the_fields_the_handler_takes() {
        use utoipa::openapi::{RefOr, Schema};
        let RefOr::T(Schema::Object(o)) = <CreateSchedule as PartialSchema>::schema() else {
            panic!("CreateSchedule is not an object schema");
        };
        let props: std::collections::BTreeSet<&str> =
            o.properties.keys().map(String::as_str).collect();
        assert_eq!(props, CREATE_FIELDS.into_iter().collect());
        assert_eq!(o.required, vec!["session_id", "cron", "text"]);
    }

    #[test]
    fn r1_5_the_documented_enums_are_the_stored_ones() {
        use utoipa::openapi::{RefOr, Schema};
        let values = |schema: RefOr<Schema>| -> Vec<String> {
            let RefOr::T(Schema::Object(o)) = schema else {
                panic!("not an object schema");
            };
            o.enum_values
                .unwrap_or_default()
                .iter()
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .collect()
        };
        let missed = values(MissedName::schema());
        assert_eq!(missed, ["run_once", "skip"]);
        for m in &missed {
            assert_eq!(
                MissedPolicy::parse(m).map(MissedPolicy::as_str),
                Some(m.as_str())
            );
        }
        let sources = values(SourceName::schema());
        assert_eq!(sources, ["api", "config", "agent"]);
        for s in &sources {
            assert_eq!(
                ScheduleSource::parse(s).map(ScheduleSource::as_str),
                Some(s.as_str())
            );
        }
    }

    #[test]
    fn r1_5_missed_defaults_to_run_once() {
        let Value::Object(map) = json!({"session_id": SESSION, "cron": "0 8 * * *", "text": "hi"})
        else {
            panic!("an object")
        };
        let r = request(&map).expect("valid");
        assert_eq!(r.missed, MissedPolicy::RunOnce);
        let Value::Object(map) =
            json!({"session_id": SESSION, "cron": "0 8 * * *", "text": "hi", "missed": "skip"})
        else {
            panic!("an object")
        };
        assert_eq!(request(&map).expect("valid").missed, MissedPolicy::Skip);
    }
}
