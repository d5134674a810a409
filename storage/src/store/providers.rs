//! Providers connected at run time (API.md `/v1/providers`): stored with their key sealed by
//! the caller (the store never sees a key in clear), listed by every replica, which rebuilds
//! its fallback chain when the list changes. Connecting and removing one is audited in the
//! same commit.
use super::audit::{insert_audit, NewAudit};
use super::{Result, Store};
use crate::entity::connected_provider;
use crate::ids::now_ms;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, TryInsertResult};
use serde_json::json;

/// A connected provider as stored: the row itself (`api_key_sealed` is the sealed key, if the
/// server needs one; `created_at` is set by [`Store::connect_provider`]).
pub use crate::entity::connected_provider::Model as ConnectedProvider;

impl Store {
    /// The connected providers, in the order they were connected (their order in the chain).
    pub async fn connected_providers(&self) -> Result<Vec<ConnectedProvider>> {
        Ok(connected_provider::Entity::find()
            .order_by_asc(connected_provider::Column::CreatedAt)
            .order_by_asc(connected_provider::Column::Name)
            .all(self.reader())
            .await?)
    }

    /// Stores `p` (its `created_at` set now), audited (`provider.connected`, by
    /// `p.created_by`) in the same commit. `None` when a provider of that name is already
    /// connected (nothing is written).
    pub async fn connect_provider(
        &self,
        p: ConnectedProvider,
    ) -> Result<Option<ConnectedProvider>> {
        let row = ConnectedProvider {
            created_at: now_ms(),
            ..p
        };
        let tx = self.write_tx().await?;
        let inserted =
            connected_provider::Entity::insert(connected_provider::ActiveModel::from(row.clone()))
                .on_conflict_do_nothing_on([connected_provider::Column::Name])
                .exec_without_returning(&tx)
                .await?;
        if !matches!(inserted, TryInsertResult::Inserted(n) if n > 0) {
            tx.rollback().await?;
            return Ok(None);
        }
        insert_audit(
            &tx,
            &NewAudit {
                principal: row.created_by.clone(),
                action: "provider.connected".into(),
                target: row.name.clone(),
                detail: json!({
                    "kind": row.kind,
                    "base_url": row.base_url,
                    "model": row.model,
                    "with_key": row.api_key_sealed.is_some(),
                }),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(Some(row))
    }

    /// Removes connected provider `name`, audited (`provider.removed`, by `by`) in the same
    /// commit. `false` when there is none of that name.
    pub async fn remove_provider(&self, name: &str, by: &str) -> Result<bool> {
        let tx = self.write_tx().await?;
        let res = connected_provider::Entity::delete_many()
            .filter(connected_provider::Column::Name.eq(name))
            .exec(&tx)
            .await?;
        if res.rows_affected != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        insert_audit(
            &tx,
            &NewAudit {
                principal: by.to_owned(),
                action: "provider.removed".into(),
                target: name.to_owned(),
                detail: json!({}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }
}
