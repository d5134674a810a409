//! The caller's memory (API.md "Memory and skills"): `GET /v1/memory` (both stores, how full
//! each is), `POST /v1/memory` (an entry, scanned and bounded like the `memory` tool's
//! writes), `PATCH` and `DELETE /v1/memory/{entry_id}`, `GET /v1/memory/changes` (who changed
//! what, to see and undo it) and the review's writes waiting for a person
//! (`/v1/memory/pending`). Someone else's entry or pending write is not found.
use super::id::Id;
use super::reject_privileged_fields;
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use actix_web::{delete, get, patch, post};
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use turnkey_actors::gateway::memory::StoreView;
use turnkey_storage::{
    rfc3339, MemoryChange, MemoryEdit, MemoryEntry, MemoryEntryId, MemoryPendingId, MemoryTarget,
    PendingMemory, SessionId,
};
use utoipa::ToSchema;

/// One entry.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntryView {
    #[schema(value_type = uuid::Uuid)]
    pub id: MemoryEntryId,
    /// `memory` (the agent's notes) or `profile` (what it knows about the user).
    #[schema(example = "profile")]
    pub target: &'static str,
    pub text: String,
    pub created_at: String,
    pub updated_at: String,
}

impl From<MemoryEntry> for EntryView {
    fn from(e: MemoryEntry) -> Self {
        Self {
            id: e.id,
            target: e.target.as_str(),
            text: e.text,
            created_at: rfc3339(e.created_at),
            updated_at: rfc3339(e.updated_at),
        }
    }
}

/// One store: its entries (oldest first) and how full it is, in characters.
#[derive(Debug, Serialize, ToSchema)]
pub struct StoreBody {
    pub entries: Vec<EntryView>,
    pub chars: usize,
    pub limit: usize,
}

impl From<StoreView> for StoreBody {
    fn from(s: StoreView) -> Self {
        Self {
            entries: s.entries.into_iter().map(EntryView::from).collect(),
            chars: s.chars,
            limit: s.limit,
        }
    }
}

/// `GET /v1/memory`.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryBody {
    pub memory: StoreBody,
    pub profile: StoreBody,
}

/// The body of `POST /v1/memory`.
#[derive(Debug, Deserialize, ToSchema)]
#[allow(dead_code)] // the schema; read field by field
pub struct NewEntry {
    /// `memory` or `profile`.
    target: String,
    text: String,
}

/// The body of `PATCH /v1/memory/{entry_id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[allow(dead_code)] // the schema; read field by field
pub struct EntryText {
    text: String,
}

/// One recorded change.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeView {
    #[schema(value_type = uuid::Uuid)]
    pub id: turnkey_storage::MemoryChangeId,
    pub target: &'static str,
    #[schema(value_type = uuid::Uuid)]
    pub entry_id: MemoryEntryId,
    /// `add`, `replace` or `remove`.
    pub action: String,
    /// `tool`, `review` or `api`.
    pub by: &'static str,
    /// The session whose tool call or review made it.
    #[schema(value_type = Option<uuid::Uuid>)]
    pub session_id: Option<SessionId>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub at: String,
}

impl From<MemoryChange> for ChangeView {
    fn from(c: MemoryChange) -> Self {
        Self {
            id: c.id,
            target: c.target.as_str(),
            entry_id: c.entry_id,
            action: c.action,
            by: c.by.as_str(),
            session_id: c.session_id,
            before: c.before,
            after: c.after,
            at: rfc3339(c.at),
        }
    }
}

/// `GET /v1/memory/changes`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeList {
    /// Newest first, at most 200.
    pub changes: Vec<ChangeView>,
}

/// A review's write waiting for a person.
#[derive(Debug, Serialize, ToSchema)]
pub struct PendingView {
    #[schema(value_type = uuid::Uuid)]
    pub id: MemoryPendingId,
    pub target: &'static str,
    /// `add`, `replace` or `remove`.
    pub action: String,
    pub text: Option<String>,
    /// A piece of text only the entry to change contains.
    pub old_text: Option<String>,
    #[schema(value_type = Option<uuid::Uuid>)]
    pub session_id: Option<SessionId>,
    pub created_at: String,
}

impl From<PendingMemory> for PendingView {
    fn from(p: PendingMemory) -> Self {
        Self {
            id: p.id,
            target: p.edit.target.as_str(),
            action: p.edit.action,
            text: p.edit.text,
            old_text: p.edit.old_text,
            session_id: p.session_id,
            created_at: rfc3339(p.created_at),
        }
    }
}

/// `GET /v1/memory/pending`.
#[derive(Debug, Serialize, ToSchema)]
pub struct PendingList {
    /// Oldest first.
    pub pending: Vec<PendingView>,
}

/// The body of a decision on a pending write or a skill proposal.
#[derive(Debug, Deserialize, ToSchema)]
#[allow(dead_code)] // the schema; read field by field
pub struct DecisionBody {
    /// `approve` or `deny`.
    decision: String,
}

/// What a decision left.
#[derive(Debug, Serialize, ToSchema)]
pub struct Decided {
    #[schema(value_type = uuid::Uuid)]
    pub id: uuid::Uuid,
    /// `approved` or `denied`.
    pub status: &'static str,
}

/// A string field of a body, required, with its own error code.
fn text_field<'a>(body: &'a Map<String, Value>, field: &str) -> Result<&'a str, ApiError> {
    match body.get(field) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(ApiError::bad_request(
            if field == "text" {
                "empty_input"
            } else {
                "invalid_field"
            },
            format!("{field} is required"),
        )),
        Some(other) => Err(ApiError::bad_request(
            "invalid_field",
            format!("{field} must be a string; got {other}"),
        )),
    }
}

/// Refuses fields other than `allowed` (privileged ones as `forbidden_field`).
fn only_fields(body: &Map<String, Value>, allowed: &[&str]) -> Result<(), ApiError> {
    reject_privileged_fields(body)?;
    match body.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(ApiError::bad_request(
            "invalid_field",
            format!(
                "{k} is not accepted here; the fields are {}",
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// `approve` or `deny` from a decision body.
pub fn decision(body: &Map<String, Value>) -> Result<bool, ApiError> {
    only_fields(body, &["decision"])?;
    match body.get("decision").and_then(Value::as_str) {
        Some("approve") => Ok(true),
        Some("deny") => Ok(false),
        _ => Err(ApiError::bad_request(
            "invalid_decision",
            "decision must be \"approve\" or \"deny\"",
        )),
    }
}

/// The caller's memory and user profile, with how full each is.
#[utoipa::path(
    operation_id = "get_memory",
    tag = "memory",
    responses(
        (status = 200, description = "Both stores", body = MemoryBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/memory")]
pub async fn get(state: web::Data<AppState>, who: AuthPrincipal) -> Result<HttpResponse, ApiError> {
    let [memory, profile] = state.gateway.memory(&who.0).await?;
    Ok(HttpResponse::Ok().json(MemoryBody {
        memory: memory.into(),
        profile: profile.into(),
    }))
}

/// Adds an entry to the caller's memory or profile: scanned like the `memory` tool's writes
/// and bounded by the store's limit; recorded as made by the API.
#[utoipa::path(
    operation_id = "add_memory",
    tag = "memory",
    request_body = NewEntry,
    responses(
        (status = 201, description = "The new entry", body = EntryView),
        (status = 400, description = "`invalid_target`, `empty_input`, `invalid_field`, `forbidden_field`, `invalid_json`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 422, description = "`memory_full` (says how full), `memory_instruction`, `memory_invisible_text`, `memory_secret`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/memory")]
pub async fn add(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    body: web::Json<Map<String, Value>>,
) -> Result<HttpResponse, ApiError> {
    only_fields(&body, &["target", "text"])?;
    let target = match body.get("target").and_then(Value::as_str) {
        Some(t) => MemoryTarget::parse(t),
        None => None,
    }
    .ok_or_else(|| {
        ApiError::bad_request("invalid_target", "target must be \"memory\" or \"profile\"")
    })?;
    let text = text_field(&body, "text")?;
    let entry = state
        .gateway
        .write_memory(&who.0, target, MemoryEdit::Add { text })
        .await?;
    Ok(HttpResponse::Created().json(EntryView::from(entry)))
}

/// Changes the text of one of the caller's entries (scanned and bounded like an add).
#[utoipa::path(
    operation_id = "edit_memory",
    tag = "memory",
    params(("entry_id" = uuid::Uuid, Path, description = "The entry's id")),
    request_body = EntryText,
    responses(
        (status = 200, description = "The entry as it is now", body = EntryView),
        (status = 400, description = "`invalid_id`, `empty_input`, `invalid_field`, `invalid_json`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such entry, or someone else's", body = ErrorBody),
        (status = 422, description = "`memory_full`, `memory_instruction`, `memory_invisible_text`, `memory_secret`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[patch("/v1/memory/{entry_id}")]
pub async fn edit(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<MemoryEntryId>>,
    body: web::Json<Map<String, Value>>,
) -> Result<HttpResponse, ApiError> {
    only_fields(&body, &["text"])?;
    let text = text_field(&body, "text")?;
    let id = path.into_inner().into_inner();
    let target = state.gateway.memory_entry_target(&who.0, id).await?;
    let entry = state
        .gateway
        .write_memory(&who.0, target, MemoryEdit::ReplaceId { id, text })
        .await?;
    Ok(HttpResponse::Ok().json(EntryView::from(entry)))
}

/// Deletes one of the caller's entries.
#[utoipa::path(
    operation_id = "delete_memory",
    tag = "memory",
    params(("entry_id" = uuid::Uuid, Path, description = "The entry's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such entry, or someone else's", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[delete("/v1/memory/{entry_id}")]
pub async fn delete(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<MemoryEntryId>>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner().into_inner();
    let target = state.gateway.memory_entry_target(&who.0, id).await?;
    state
        .gateway
        .write_memory(&who.0, target, MemoryEdit::RemoveId(id))
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Who changed the caller's memory and how: the text before and after, newest first.
#[utoipa::path(
    operation_id = "memory_changes",
    tag = "memory",
    responses(
        (status = 200, description = "The changes", body = ChangeList),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/memory/changes")]
pub async fn changes(
    state: web::Data<AppState>,
    who: AuthPrincipal,
) -> Result<HttpResponse, ApiError> {
    let changes = state.gateway.memory_changes(&who.0, 200).await?;
    Ok(HttpResponse::Ok().json(ChangeList {
        changes: changes.into_iter().map(ChangeView::from).collect(),
    }))
}

/// The review's writes to the caller's memory that wait for a person (`write_approval`).
#[utoipa::path(
    operation_id = "memory_pending",
    tag = "memory",
    responses(
        (status = 200, description = "The writes waiting", body = PendingList),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/memory/pending")]
pub async fn pending(
    state: web::Data<AppState>,
    who: AuthPrincipal,
) -> Result<HttpResponse, ApiError> {
    let pending = state.gateway.pending_memory(&who.0).await?;
    Ok(HttpResponse::Ok().json(PendingList {
        pending: pending.into_iter().map(PendingView::from).collect(),
    }))
}

/// Approves (writes it now, against the store as it is) or denies a pending write.
#[utoipa::path(
    operation_id = "decide_memory_pending",
    tag = "memory",
    params(("id" = uuid::Uuid, Path, description = "The pending write's id")),
    request_body = DecisionBody,
    responses(
        (status = 200, description = "Decided", body = Decided),
        (status = 400, description = "`invalid_id`, `invalid_decision`, `invalid_json`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such write, or someone else's", body = ErrorBody),
        (status = 409, description = "`already_decided`", body = ErrorBody),
        (status = 422, description = "`memory_full`, `no_match`, `ambiguous`: the store refuses it as it is now; it stays pending", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/memory/pending/{id}")]
pub async fn decide_pending(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<MemoryPendingId>>,
    body: web::Json<Map<String, Value>>,
) -> Result<HttpResponse, ApiError> {
    let approve = decision(&body)?;
    let id = path.into_inner().into_inner();
    let status = state
        .gateway
        .decide_pending_memory(&who.0, id, approve)
        .await?;
    Ok(HttpResponse::Ok().json(Decided { id: id.0, status }))
}
