//! Memory writes that wait for a person (API.md `write_approval`): a review's edit is stored
//! as it was asked (action, text, the `old_text` that picks the entry), and applied only when
//! a person approves it, against the store as it is then; so an approval can still be refused
//! (the store filled up, the entry is gone) and the write stays pending until decided.
use super::memory::{edit_in, Author, ChangedBy, MemoryEdit, MemoryTarget, MemoryWrite};
use super::{Result, Store, StoreError, WriteTx};
use crate::entity::memory_pending;
use crate::ids::{now_ms, parse_id, MemoryPendingId, SessionId};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder};

/// A memory edit with its own strings: what a review asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedEdit {
    pub target: MemoryTarget,
    /// `add`, `replace` or `remove`.
    pub action: String,
    pub text: Option<String>,
    pub old_text: Option<String>,
}

impl StagedEdit {
    /// The edit it asks for; `None` when its fields do not make one.
    pub fn edit(&self) -> Option<MemoryEdit<'_>> {
        let text = self.text.as_deref();
        let old_text = self.old_text.as_deref();
        Some(match (self.action.as_str(), text, old_text) {
            ("add", Some(text), _) => MemoryEdit::Add { text },
            ("replace", Some(text), Some(old_text)) => MemoryEdit::Replace { old_text, text },
            ("remove", _, Some(old_text)) => MemoryEdit::Remove { old_text },
            _ => return None,
        })
    }
}

/// A write waiting for a person.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingMemory {
    pub id: MemoryPendingId,
    pub edit: StagedEdit,
    pub session_id: Option<SessionId>,
    pub created_at: i64,
}

/// How a decision on a pending write ended.
#[derive(Clone, Debug, PartialEq)]
pub enum PendingDecided {
    /// Approved and written.
    Applied(MemoryWrite),
    /// Approved, but the store refused it as it is now (full, no match, ambiguous): still
    /// pending.
    Refused(MemoryWrite, MemoryTarget),
    Denied,
    /// Decided before, as this.
    AlreadyDecided(String),
}

impl Store {
    /// `scope`'s writes waiting for a person, oldest first.
    pub async fn pending_memory(&self, scope: &str) -> Result<Vec<PendingMemory>> {
        memory_pending::Entity::find()
            .filter(memory_pending::Column::Scope.eq(scope))
            .filter(memory_pending::Column::Status.eq("pending"))
            .order_by_asc(memory_pending::Column::CreatedAt)
            .order_by_asc(memory_pending::Column::Id)
            .all(self.reader())
            .await?
            .into_iter()
            .map(pending_of)
            .collect()
    }

    /// Approves (writes it, bounded by `limit` of its target, as the review in its session) or
    /// denies `scope`'s pending write `id`. Someone else's is not found.
    pub async fn decide_pending_memory(
        &self,
        scope: &str,
        id: MemoryPendingId,
        approve: bool,
        limit: impl Fn(MemoryTarget) -> usize,
    ) -> Result<PendingDecided> {
        let tx = self.write_tx().await?;
        let row = memory_pending::Entity::find_by_id(id.to_string())
            .filter(memory_pending::Column::Scope.eq(scope))
            .one(&tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("pending memory write {id}")))?;
        if row.status != "pending" {
            tx.rollback().await?;
            return Ok(PendingDecided::AlreadyDecided(row.status));
        }
        let pending = pending_of(row)?;
        let decided = if approve {
            let edit = pending.edit.edit().ok_or_else(|| {
                StoreError::Corrupt(format!("pending memory write {id} is not an edit"))
            })?;
            let author = Author {
                by: ChangedBy::Review,
                session: pending.session_id,
            };
            let target = pending.edit.target;
            let written = edit_in(&tx, scope, target, edit, limit(target), &author).await?;
            if !matches!(written, MemoryWrite::Done { .. }) {
                tx.rollback().await?;
                return Ok(PendingDecided::Refused(written, target));
            }
            PendingDecided::Applied(written)
        } else {
            PendingDecided::Denied
        };
        let status = if approve { "approved" } else { "denied" };
        let res = memory_pending::Entity::update_many()
            .col_expr(memory_pending::Column::Status, Expr::value(status))
            .col_expr(memory_pending::Column::DecidedAt, Expr::value(now_ms()))
            .filter(memory_pending::Column::Id.eq(id.to_string()))
            .filter(memory_pending::Column::Status.eq("pending"))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            return Err(StoreError::WrongState(format!("pending memory write {id}")));
        }
        tx.commit().await?;
        Ok(decided)
    }
}

/// Stores `edit` of `scope` as waiting for a person, inside `tx`.
pub(crate) async fn stage_in(
    tx: &WriteTx,
    scope: &str,
    edit: &StagedEdit,
    session: Option<SessionId>,
) -> Result<MemoryPendingId> {
    let id = MemoryPendingId::new();
    memory_pending::Entity::insert(memory_pending::ActiveModel {
        id: Set(id.to_string()),
        scope: Set(scope.to_owned()),
        target: Set(edit.target.as_str().to_owned()),
        action: Set(edit.action.clone()),
        text: Set(edit.text.clone()),
        old_text: Set(edit.old_text.clone()),
        session_id: Set(session.map(|s| s.to_string())),
        status: Set("pending".to_owned()),
        created_at: Set(now_ms()),
        decided_at: Set(None),
    })
    .exec_without_returning(tx)
    .await?;
    Ok(id)
}

fn pending_of(m: memory_pending::Model) -> Result<PendingMemory> {
    Ok(PendingMemory {
        id: parse_id(&m.id, "pending memory id")?,
        edit: StagedEdit {
            target: MemoryTarget::parse(&m.target)
                .ok_or_else(|| StoreError::Corrupt(format!("memory target {:?}", m.target)))?,
            action: m.action,
            text: m.text,
            old_text: m.old_text,
        },
        session_id: m
            .session_id
            .as_deref()
            .map(|s| parse_id(s, "session id"))
            .transpose()?,
        created_at: m.created_at,
    })
}
