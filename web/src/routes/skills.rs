//! Skills (API.md "Memory and skills"): every principal lists and reads them (they are in
//! every session's prompt); only the operator stores, deletes and decides the proposals that
//! agents make. A skill installed as a folder under `[skills] dir` is the operator's file:
//! read-only here (`409 dir_skill`).
use super::id::Id;
use super::memory::{decision, Decided, DecisionBody};
use crate::auth::AuthPrincipal;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use actix_web::{delete, get, post, put};
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use turnkey_actors::skills::catalog::{Skill, SkillText};
use turnkey_storage::{rfc3339, SessionId, SkillProposal, SkillProposalId};
use utoipa::ToSchema;

/// A skill as listed.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkillView {
    pub name: String,
    pub description: String,
    /// `dir` (a folder under `[skills] dir`) or `api` (stored through the API).
    #[schema(example = "api")]
    pub source: &'static str,
    pub updated_at: String,
    /// How often `skill_view` loaded it.
    pub uses: i64,
    pub last_used_at: Option<String>,
}

impl From<Skill> for SkillView {
    fn from(s: Skill) -> Self {
        Self {
            name: s.name,
            description: s.description,
            source: s.source.as_str(),
            updated_at: rfc3339(s.updated_at),
            uses: s.uses,
            last_used_at: s.last_used_at.map(rfc3339),
        }
    }
}

/// One skill with its SKILL.md.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkillBody {
    #[serde(flatten)]
    pub skill: SkillView,
    /// The whole SKILL.md.
    pub content: String,
    /// Files beside it, relative to its folder (folders only).
    pub files: Vec<String>,
}

impl From<SkillText> for SkillBody {
    fn from(t: SkillText) -> Self {
        Self {
            skill: t.skill.into(),
            content: t.content,
            files: t.files,
        }
    }
}

/// `GET /v1/skills`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkillList {
    /// By name.
    pub skills: Vec<SkillView>,
}

/// The body of `PUT /v1/skills/{name}`.
#[derive(Debug, Deserialize, ToSchema)]
#[allow(dead_code)] // the schema; read field by field
pub struct SkillContent {
    /// A SKILL.md: YAML front matter with `name` (the path's) and `description`, then the body.
    content: String,
}

/// A change an agent proposed.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProposalView {
    #[schema(value_type = uuid::Uuid)]
    pub id: SkillProposalId,
    /// `create`, `patch` or `delete`.
    pub action: String,
    pub name: String,
    pub description: Option<String>,
    /// The SKILL.md a create makes.
    pub content: Option<String>,
    /// The text a patch replaces, and with what.
    pub old: Option<String>,
    pub new: Option<String>,
    #[schema(value_type = Option<uuid::Uuid>)]
    pub session_id: Option<SessionId>,
    pub created_at: String,
}

impl From<SkillProposal> for ProposalView {
    fn from(p: SkillProposal) -> Self {
        let q = p.proposal;
        Self {
            id: p.id,
            action: q.action,
            name: q.name,
            description: q.description,
            content: q.content,
            old: q.old,
            new: q.new,
            session_id: q.session_id,
            created_at: rfc3339(p.created_at),
        }
    }
}

/// `GET /v1/skills/proposals`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProposalList {
    /// Those waiting for a decision, oldest first.
    pub proposals: Vec<ProposalView>,
}

/// Every skill: the operator's folders and the stored ones, with their uses.
#[utoipa::path(
    operation_id = "list_skills",
    tag = "skills",
    responses(
        (status = 200, description = "The skills", body = SkillList),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/skills")]
pub async fn list(
    state: web::Data<AppState>,
    _who: AuthPrincipal,
) -> Result<HttpResponse, ApiError> {
    let skills = state.gateway.skills().await?;
    Ok(HttpResponse::Ok().json(SkillList {
        skills: skills.into_iter().map(SkillView::from).collect(),
    }))
}

/// One skill with its SKILL.md.
#[utoipa::path(
    operation_id = "get_skill",
    tag = "skills",
    params(("name" = String, Path, description = "The skill's name")),
    responses(
        (status = 200, description = "The skill", body = SkillBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/skills/{name}")]
pub async fn get(
    state: web::Data<AppState>,
    _who: AuthPrincipal,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let skill = state.gateway.skill(&name).await?;
    Ok(HttpResponse::Ok().json(SkillBody::from(skill)))
}

/// Stores a skill (the operator): created, or replaced whole.
#[utoipa::path(
    operation_id = "put_skill",
    tag = "skills",
    params(("name" = String, Path, description = "The skill's name: 1 to 64 of a-z, 0-9, '-', '_', '.'")),
    request_body = SkillContent,
    responses(
        (status = 200, description = "The skill as stored", body = SkillBody),
        (status = 400, description = "`invalid_skill` (the name, the front matter, the size), `invalid_field`, `invalid_json`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`forbidden`: only the operator", body = ErrorBody),
        (status = 409, description = "`dir_skill`: installed as a folder", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[put("/v1/skills/{name}")]
pub async fn put(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    name: web::Path<String>,
    body: web::Json<Map<String, Value>>,
) -> Result<HttpResponse, ApiError> {
    who.operator_only("change skills")?;
    if let Some(k) = body.keys().find(|k| k.as_str() != "content") {
        return Err(ApiError::bad_request(
            "invalid_field",
            format!("{k} is not accepted; the body is {{\"content\": \"<SKILL.md>\"}}"),
        ));
    }
    let content = body
        .get("content")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("invalid_skill", "content is required: a SKILL.md"))?;
    let skill = state.gateway.put_skill(&name, content).await?;
    state
        .gateway
        .audit(&who.0.id, "skill.put", &name, serde_json::json!({}))
        .await;
    Ok(HttpResponse::Ok().json(SkillBody::from(skill)))
}

/// Deletes a stored skill (the operator).
#[utoipa::path(
    operation_id = "delete_skill",
    tag = "skills",
    params(("name" = String, Path, description = "The skill's name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`forbidden`: only the operator", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`dir_skill`: installed as a folder", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[delete("/v1/skills/{name}")]
pub async fn delete(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    who.operator_only("change skills")?;
    state.gateway.delete_skill(&name).await?;
    state
        .gateway
        .audit(&who.0.id, "skill.deleted", &name, serde_json::json!({}))
        .await;
    Ok(HttpResponse::NoContent().finish())
}

/// The skill changes agents proposed that wait for a decision.
#[utoipa::path(
    operation_id = "list_skill_proposals",
    tag = "skills",
    responses(
        (status = 200, description = "The proposals", body = ProposalList),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[get("/v1/skills/proposals")]
pub async fn proposals(
    state: web::Data<AppState>,
    _who: AuthPrincipal,
) -> Result<HttpResponse, ApiError> {
    let proposals = state.gateway.skill_proposals().await?;
    Ok(HttpResponse::Ok().json(ProposalList {
        proposals: proposals.into_iter().map(ProposalView::from).collect(),
    }))
}

/// Approves (the change is made now, against the skills as they are) or denies a proposal
/// (the operator).
#[utoipa::path(
    operation_id = "decide_skill_proposal",
    tag = "skills",
    params(("id" = uuid::Uuid, Path, description = "The proposal's id")),
    request_body = DecisionBody,
    responses(
        (status = 200, description = "Decided", body = Decided),
        (status = 400, description = "`invalid_id`, `invalid_decision`, `invalid_json`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`forbidden`: only the operator", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`already_decided`; `dir_skill`, `skill_exists`, `stale_proposal`, `not_found`: it cannot apply to the skills as they are now", body = ErrorBody),
        (status = 503, description = "`store_unavailable`", body = ErrorBody),
    ),
    security(("bearer" = [])),
)]
#[post("/v1/skills/proposals/{id}")]
pub async fn decide(
    state: web::Data<AppState>,
    who: AuthPrincipal,
    path: web::Path<Id<SkillProposalId>>,
    body: web::Json<Map<String, Value>>,
) -> Result<HttpResponse, ApiError> {
    who.operator_only("decide skill proposals")?;
    let approve = decision(&body)?;
    let id = path.into_inner().into_inner();
    let status = state.gateway.decide_skill_proposal(id, approve).await?;
    state
        .gateway
        .audit(
            &who.0.id,
            "skill.proposal_decided",
            &id.to_string(),
            serde_json::json!({"decision": status}),
        )
        .await;
    Ok(HttpResponse::Ok().json(Decided { id: id.0, status }))
}
