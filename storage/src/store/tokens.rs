//! Principals and bearer tokens (SPEC R13.8). Tokens are stored only as SHA-256 hashes; one may
//! expire and be read-only, is revoked once, and says when it was last used. Creating and
//! revoking one is audited in the same commit.
use super::audit::{insert_audit, NewAudit};
use super::{Result, Store};
use crate::entity::{api_token, principal};
use crate::ids::now_ms;
use crate::model::Principal;
use sea_orm::sea_query::{Condition, Expr};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};

pub fn hash_token(raw: &str) -> String {
    hex::encode(Sha256::digest(raw.as_bytes()))
}

/// A stored API token, never its secret.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ApiToken {
    pub id: String,
    pub principal_id: String,
    pub name: Option<String>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub last_used_at: Option<i64>,
    pub read_only: bool,
    pub revoked_at: Option<i64>,
}

impl From<api_token::Model> for ApiToken {
    fn from(m: api_token::Model) -> Self {
        Self {
            id: m.id,
            principal_id: m.principal_id,
            name: m.label,
            created_at: m.created_at,
            expires_at: m.expires_at,
            last_used_at: m.last_used_at,
            read_only: m.read_only,
            revoked_at: m.revoked_at,
        }
    }
}

/// A token to store: its secret is hashed here.
#[derive(Clone, Debug)]
pub struct NewToken<'a> {
    pub principal_id: &'a str,
    pub raw: &'a str,
    pub name: Option<String>,
    pub expires_at: Option<i64>,
    pub read_only: bool,
    /// Who creates it (the audit log's principal).
    pub by: &'a str,
}

/// What a live token grants: its principal, and whether it may only read.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenGrant {
    pub principal: Principal,
    pub token_id: String,
    pub read_only: bool,
    pub expires_at: Option<i64>,
    pub last_used_at: Option<i64>,
}

/// `last_used_at` is written at most this often per token: an exact time for every request
/// would be a write on every read.
pub const LAST_USED_GRAIN_MS: i64 = 60_000;

fn live(now: i64) -> Condition {
    Condition::all()
        .add(api_token::Column::RevokedAt.is_null())
        .add(
            Condition::any()
                .add(api_token::Column::ExpiresAt.is_null())
                .add(api_token::Column::ExpiresAt.gt(now)),
        )
}

impl Store {
    /// Creates the principal if it does not exist yet.
    pub async fn ensure_principal(&self, id: &str, name: &str, kind: &str) -> Result<Principal> {
        if let Some(p) = principal::Entity::find_by_id(id.to_owned())
            .one(self.reader())
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
            .one(self.reader())
            .await?
            .map(|p| Principal {
                id: p.id,
                name: p.name,
                kind: p.kind,
            }))
    }

    /// Stores the hash of `new.raw` as a token of `new.principal_id`, audited
    /// (`token.created`) in the same commit. Answers the stored token.
    pub async fn create_token(&self, new: NewToken<'_>) -> Result<ApiToken> {
        let id = uuid::Uuid::now_v7().to_string();
        let row = api_token::Model {
            id: id.clone(),
            principal_id: new.principal_id.to_owned(),
            token_hash: hash_token(new.raw),
            label: new.name.clone(),
            created_at: now_ms(),
            revoked_at: None,
            expires_at: new.expires_at,
            last_used_at: None,
            read_only: new.read_only,
        };
        let tx = self.write_tx().await?;
        api_token::Entity::insert(api_token::ActiveModel::from(row.clone()))
            .exec_without_returning(&tx)
            .await?;
        insert_audit(
            &tx,
            &NewAudit {
                principal: new.by.to_owned(),
                action: "token.created".into(),
                target: id,
                detail: json!({
                    "name": new.name,
                    "principal_id": new.principal_id,
                    "expires_at": new.expires_at,
                    "read_only": new.read_only,
                }),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(row.into())
    }

    /// What a raw bearer token grants, if it is live: not revoked, not expired.
    pub async fn principal_for_token(&self, raw: &str) -> Result<Option<TokenGrant>> {
        let Some(tok) = api_token::Entity::find()
            .filter(api_token::Column::TokenHash.eq(hash_token(raw)))
            .filter(live(now_ms()))
            .one(self.reader())
            .await?
        else {
            return Ok(None);
        };
        Ok(principal::Entity::find_by_id(tok.principal_id.clone())
            .one(self.reader())
            .await?
            .map(|p| TokenGrant {
                principal: Principal {
                    id: p.id,
                    name: p.name,
                    kind: p.kind,
                },
                token_id: tok.id,
                read_only: tok.read_only,
                expires_at: tok.expires_at,
                last_used_at: tok.last_used_at,
            }))
    }

    /// Whether token `id` is still live (an open stream asks again now and then).
    pub async fn token_is_live(&self, id: &str) -> Result<bool> {
        Ok(api_token::Entity::find_by_id(id.to_owned())
            .filter(live(now_ms()))
            .one(self.reader())
            .await?
            .is_some())
    }

    /// The tokens not revoked, oldest first (expired ones too: they say when they expired).
    pub async fn list_tokens(&self) -> Result<Vec<ApiToken>> {
        Ok(api_token::Entity::find()
            .filter(api_token::Column::RevokedAt.is_null())
            .order_by_asc(api_token::Column::CreatedAt)
            .all(self.reader())
            .await?
            .into_iter()
            .map(ApiToken::from)
            .collect())
    }

    /// Revokes token `id` once (a compare-and-set on `revoked_at`), audited (`token.revoked`,
    /// by `by`) in the same commit. `false` when there is no such live-or-expired token.
    pub async fn revoke_token(&self, id: &str, by: &str) -> Result<bool> {
        let tx = self.write_tx().await?;
        let res = api_token::Entity::update_many()
            .col_expr(api_token::Column::RevokedAt, Expr::value(now_ms()))
            .filter(api_token::Column::Id.eq(id))
            .filter(api_token::Column::RevokedAt.is_null())
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
                action: "token.revoked".into(),
                target: id.to_owned(),
                detail: json!({}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Notes that token `id` was used at `at`, unless that was noted less than
    /// [`LAST_USED_GRAIN_MS`] before (then nothing is written).
    pub async fn touch_token(&self, id: &str, at: i64) -> Result<()> {
        api_token::Entity::update_many()
            .col_expr(api_token::Column::LastUsedAt, Expr::value(at))
            .filter(api_token::Column::Id.eq(id))
            .filter(
                Condition::any()
                    .add(api_token::Column::LastUsedAt.is_null())
                    .add(api_token::Column::LastUsedAt.lt(at - LAST_USED_GRAIN_MS)),
            )
            .exec(self.writer())
            .await?;
        Ok(())
    }
}
