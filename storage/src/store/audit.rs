//! The audit log (SPEC R13.8): who created or revoked a token, decided an approval or an
//! `unknown` tool run, changed memory or skills, deleted a session. Metadata only: never a
//! prompt, an answer or a tool's arguments. Written in the commit of the change it records
//! where the store makes that change; pruned after `security.audit_retention_days`.
use super::{Result, Store, WriteTx};
use crate::entity::audit_entry;
use crate::ids::now_ms;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use serde::Serialize;

/// An entry to record.
#[derive(Clone, Debug)]
pub struct NewAudit {
    pub principal: String,
    pub action: String,
    pub target: String,
    pub detail: serde_json::Value,
}

/// A recorded entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditEntry {
    pub id: String,
    pub at: i64,
    pub principal: String,
    pub action: String,
    pub target: String,
    pub detail: serde_json::Value,
}

pub(in crate::store) async fn insert_audit(db: &WriteTx, new: &NewAudit) -> Result<()> {
    audit_entry::Entity::insert(audit_entry::ActiveModel {
        id: Set(uuid::Uuid::now_v7().to_string()),
        at: Set(now_ms()),
        principal: Set(new.principal.clone()),
        action: Set(new.action.clone()),
        target: Set(new.target.clone()),
        detail: Set(new.detail.to_string()),
    })
    .exec_without_returning(db)
    .await?;
    Ok(())
}

impl Store {
    /// Records one entry on its own (for a change the store does not make in one commit).
    pub async fn record_audit(&self, new: &NewAudit) -> Result<()> {
        let tx = self.write_tx().await?;
        insert_audit(&tx, new).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Entries at or after `since` (ms), oldest first, at most `limit`.
    pub async fn audit_entries(&self, since: i64, limit: u64) -> Result<Vec<AuditEntry>> {
        audit_entry::Entity::find()
            .filter(audit_entry::Column::At.gte(since))
            .order_by_asc(audit_entry::Column::At)
            .order_by_asc(audit_entry::Column::Id)
            .limit(limit)
            .all(self.reader())
            .await?
            .into_iter()
            .map(|m| {
                Ok(AuditEntry {
                    detail: serde_json::from_str(&m.detail).map_err(|e| {
                        super::StoreError::Corrupt(format!("audit entry {}: {e}", m.id))
                    })?,
                    id: m.id,
                    at: m.at,
                    principal: m.principal,
                    action: m.action,
                    target: m.target,
                })
            })
            .collect()
    }

    /// Deletes the entries older than `before` (ms); answers how many.
    pub async fn prune_audit(&self, before: i64) -> Result<u64> {
        Ok(audit_entry::Entity::delete_many()
            .filter(audit_entry::Column::At.lt(before))
            .exec(self.writer())
            .await?
            .rows_affected)
    }
}
