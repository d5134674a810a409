//! Skills stored through the API, their uses and the changes agents propose (SPEC R5.2; API.md
//! "Memory and skills"). The operator's `SKILL.md` folders stay files, read by the actors; the
//! store holds what every replica must see the same: API skills, how often each skill (of
//! either kind) was used, and proposals with their decision. A decision and the change it
//! approves commit together, once: a proposal decided twice answers how it was decided.
use super::{Result, Store, StoreError, WriteTx};
use crate::entity::{skill, skill_proposal, skill_use};
use crate::ids::{now_ms, parse_id, SessionId, SkillProposalId};
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder};

/// A skill stored through the API: its whole SKILL.md and what its front matter says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSkill {
    pub name: String,
    pub description: String,
    pub content: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// How often a skill was loaded, and when last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillUse {
    pub name: String,
    pub uses: i64,
    pub last_used_at: i64,
}

/// A skill change an agent asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSkillProposal {
    /// `create`, `patch` or `delete`.
    pub action: String,
    pub name: String,
    pub description: Option<String>,
    pub content: Option<String>,
    pub old: Option<String>,
    pub new: Option<String>,
    pub session_id: Option<SessionId>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillProposal {
    pub id: SkillProposalId,
    pub proposal: NewSkillProposal,
    /// `pending`, `approved` or `denied`.
    pub status: String,
    pub created_at: i64,
    pub decided_at: Option<i64>,
}

/// What an approval does to the stored skills.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkillChange {
    Put {
        name: String,
        description: String,
        content: String,
    },
    Delete {
        name: String,
    },
}

/// How a decision ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProposalDecided {
    Decided,
    /// Decided before, as this.
    AlreadyDecided(String),
}

impl Store {
    /// Every skill stored through the API, by name.
    pub async fn stored_skills(&self) -> Result<Vec<StoredSkill>> {
        Ok(skill::Entity::find()
            .order_by_asc(skill::Column::Name)
            .all(self.reader())
            .await?
            .into_iter()
            .map(skill_of)
            .collect())
    }

    pub async fn stored_skill(&self, name: &str) -> Result<Option<StoredSkill>> {
        Ok(skill::Entity::find_by_id(name.to_owned())
            .one(self.reader())
            .await?
            .map(skill_of))
    }

    /// Creates or replaces the API skill `name`.
    pub async fn put_skill(
        &self,
        name: &str,
        description: &str,
        content: &str,
    ) -> Result<StoredSkill> {
        let tx = self.write_tx().await?;
        let skill = put_in(&tx, name, description, content).await?;
        tx.commit().await?;
        Ok(skill)
    }

    /// Deletes the API skill `name`; false when there was none.
    pub async fn delete_skill(&self, name: &str) -> Result<bool> {
        let tx = self.write_tx().await?;
        let gone = delete_in(&tx, name).await?;
        tx.commit().await?;
        Ok(gone)
    }

    /// The uses of every skill that was used.
    pub async fn skill_uses(&self) -> Result<Vec<SkillUse>> {
        Ok(skill_use::Entity::find()
            .all(self.reader())
            .await?
            .into_iter()
            .map(|m| SkillUse {
                name: m.name,
                uses: m.uses,
                last_used_at: m.last_used_at,
            })
            .collect())
    }

    /// Counts one use of `name`, now.
    pub async fn record_skill_use(&self, name: &str) -> Result<()> {
        let tx = self.write_tx().await?;
        let now = now_ms();
        skill_use::Entity::insert(skill_use::ActiveModel {
            name: Set(name.to_owned()),
            uses: Set(1),
            last_used_at: Set(now),
        })
        .on_conflict(
            OnConflict::column(skill_use::Column::Name)
                .value(
                    skill_use::Column::Uses,
                    Expr::col((skill_use::Entity, skill_use::Column::Uses)).add(1),
                )
                .value(skill_use::Column::LastUsedAt, Expr::value(now))
                .to_owned(),
        )
        .exec_without_returning(&tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records a proposal for a person to decide.
    pub async fn propose_skill(&self, p: &NewSkillProposal) -> Result<SkillProposal> {
        let tx = self.write_tx().await?;
        let made = propose_in(&tx, p).await?;
        tx.commit().await?;
        Ok(made)
    }

    /// Proposals still waiting for a decision, oldest first.
    pub async fn pending_skill_proposals(&self) -> Result<Vec<SkillProposal>> {
        skill_proposal::Entity::find()
            .filter(skill_proposal::Column::Status.eq("pending"))
            .order_by_asc(skill_proposal::Column::CreatedAt)
            .order_by_asc(skill_proposal::Column::Id)
            .all(self.reader())
            .await?
            .into_iter()
            .map(proposal_of)
            .collect()
    }

    pub async fn skill_proposal(&self, id: SkillProposalId) -> Result<SkillProposal> {
        let row = skill_proposal::Entity::find_by_id(id.to_string())
            .one(self.reader())
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("skill proposal {id}")))?;
        proposal_of(row)
    }

    /// Decides proposal `id`: approved with the change it makes (committed with the
    /// decision), or denied (`change` none).
    pub async fn decide_skill_proposal(
        &self,
        id: SkillProposalId,
        approve: bool,
        change: Option<&SkillChange>,
    ) -> Result<ProposalDecided> {
        let tx = self.write_tx().await?;
        let status = if approve { "approved" } else { "denied" };
        let res = skill_proposal::Entity::update_many()
            .col_expr(skill_proposal::Column::Status, Expr::value(status))
            .col_expr(skill_proposal::Column::DecidedAt, Expr::value(now_ms()))
            .filter(skill_proposal::Column::Id.eq(id.to_string()))
            .filter(skill_proposal::Column::Status.eq("pending"))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            tx.rollback().await?;
            let was = self.skill_proposal(id).await?;
            return Ok(ProposalDecided::AlreadyDecided(was.status));
        }
        match change {
            Some(c) if approve => apply_in(&tx, c).await?,
            _ => {}
        }
        tx.commit().await?;
        Ok(ProposalDecided::Decided)
    }
}

/// Applies `change` inside `tx`.
pub(crate) async fn apply_in(tx: &WriteTx, change: &SkillChange) -> Result<()> {
    match change {
        SkillChange::Put {
            name,
            description,
            content,
        } => {
            put_in(tx, name, description, content).await?;
        }
        SkillChange::Delete { name } => {
            delete_in(tx, name).await?;
        }
    }
    Ok(())
}

async fn put_in(tx: &WriteTx, name: &str, description: &str, content: &str) -> Result<StoredSkill> {
    let now = now_ms();
    let created_at = skill::Entity::find_by_id(name.to_owned())
        .one(tx)
        .await?
        .map_or(now, |s| s.created_at);
    skill::Entity::insert(skill::ActiveModel {
        name: Set(name.to_owned()),
        description: Set(description.to_owned()),
        content: Set(content.to_owned()),
        created_at: Set(created_at),
        updated_at: Set(now),
    })
    .on_conflict(
        OnConflict::column(skill::Column::Name)
            .update_columns([
                skill::Column::Description,
                skill::Column::Content,
                skill::Column::UpdatedAt,
            ])
            .to_owned(),
    )
    .exec_without_returning(tx)
    .await?;
    Ok(StoredSkill {
        name: name.to_owned(),
        description: description.to_owned(),
        content: content.to_owned(),
        created_at,
        updated_at: now,
    })
}

async fn delete_in(tx: &WriteTx, name: &str) -> Result<bool> {
    let res = skill::Entity::delete_by_id(name.to_owned())
        .exec(tx)
        .await?;
    Ok(res.rows_affected == 1)
}

/// Records `p` as pending inside `tx`.
pub(crate) async fn propose_in(tx: &WriteTx, p: &NewSkillProposal) -> Result<SkillProposal> {
    let id = SkillProposalId::new();
    let now = now_ms();
    skill_proposal::Entity::insert(skill_proposal::ActiveModel {
        id: Set(id.to_string()),
        action: Set(p.action.clone()),
        name: Set(p.name.clone()),
        description: Set(p.description.clone()),
        content: Set(p.content.clone()),
        old: Set(p.old.clone()),
        new: Set(p.new.clone()),
        session_id: Set(p.session_id.map(|s| s.to_string())),
        status: Set("pending".to_owned()),
        created_at: Set(now),
        decided_at: Set(None),
    })
    .exec_without_returning(tx)
    .await?;
    Ok(SkillProposal {
        id,
        proposal: p.clone(),
        status: "pending".to_owned(),
        created_at: now,
        decided_at: None,
    })
}

fn skill_of(m: skill::Model) -> StoredSkill {
    StoredSkill {
        name: m.name,
        description: m.description,
        content: m.content,
        created_at: m.created_at,
        updated_at: m.updated_at,
    }
}

fn proposal_of(m: skill_proposal::Model) -> Result<SkillProposal> {
    Ok(SkillProposal {
        id: parse_id(&m.id, "skill proposal id")?,
        proposal: NewSkillProposal {
            action: m.action,
            name: m.name,
            description: m.description,
            content: m.content,
            old: m.old,
            new: m.new,
            session_id: m
                .session_id
                .as_deref()
                .map(|s| parse_id(s, "session id"))
                .transpose()?,
        },
        status: m.status,
        created_at: m.created_at,
        decided_at: m.decided_at,
    })
}
