//! Principals and bearer tokens. Tokens are stored only as SHA-256 hashes.
use super::{Result, Store};
use crate::entity::{api_token, principal};
use crate::ids::now_ms;
use crate::model::Principal;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter};
use sha2::{Digest, Sha256};

pub fn hash_token(raw: &str) -> String {
    hex::encode(Sha256::digest(raw.as_bytes()))
}

impl Store {
    /// Creates the principal if it does not exist yet.
    pub async fn ensure_principal(&self, id: &str, name: &str, kind: &str) -> Result<Principal> {
        if let Some(p) = principal::Entity::find_by_id(id.to_owned())
            .one(self.connection())
            .await?
        {
            return Ok(Principal {
                id: p.id,
                name: p.name,
                kind: p.kind,
            });
        }
        principal::Entity::insert(principal::ActiveModel {
            id: Set(id.to_owned()),
            name: Set(name.to_owned()),
            kind: Set(kind.to_owned()),
            created_at: Set(now_ms()),
        })
        .on_conflict_do_nothing_on([principal::Column::Id])
        .exec_without_returning(self.writer())
        .await?;
        Ok(Principal {
            id: id.to_owned(),
            name: name.to_owned(),
            kind: kind.to_owned(),
        })
    }

    /// The principal with this id, if there is one.
    pub async fn get_principal(&self, id: &str) -> Result<Option<Principal>> {
        Ok(principal::Entity::find_by_id(id.to_owned())
            .one(self.connection())
            .await?
            .map(|p| Principal {
                id: p.id,
                name: p.name,
                kind: p.kind,
            }))
    }

    /// Stores the hash of `raw` as a token of `principal_id`.
    pub async fn create_token(
        &self,
        principal_id: &str,
        raw: &str,
        label: Option<String>,
    ) -> Result<String> {
        let id = uuid::Uuid::now_v7().to_string();
        api_token::Entity::insert(api_token::ActiveModel {
            id: Set(id.clone()),
            principal_id: Set(principal_id.to_owned()),
            token_hash: Set(hash_token(raw)),
            label: Set(label),
            created_at: Set(now_ms()),
            revoked_at: Set(None),
        })
        .exec_without_returning(self.writer())
        .await?;
        Ok(id)
    }

    /// The principal a raw bearer token belongs to, if it is a live token.
    pub async fn principal_for_token(&self, raw: &str) -> Result<Option<Principal>> {
        let Some(tok) = api_token::Entity::find()
            .filter(api_token::Column::TokenHash.eq(hash_token(raw)))
            .filter(api_token::Column::RevokedAt.is_null())
            .one(self.connection())
            .await?
        else {
            return Ok(None);
        };
        Ok(principal::Entity::find_by_id(tok.principal_id)
            .one(self.connection())
            .await?
            .map(|p| Principal {
                id: p.id,
                name: p.name,
                kind: p.kind,
            }))
    }
}
