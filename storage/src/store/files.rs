//! Files (SPEC R2.2; API.md "Attachments"): uploads and attachments, kept in the database so
//! that every replica serves every file (replicas share one database, not one disk), one row
//! per principal and content: the same bytes uploaded twice by one principal are one file,
//! which also keeps an inline attachment's retried submission identical to the first.
use super::{Result, Store};
use crate::entity::{admission, file};
use crate::ids::now_ms;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// A stored file, without its bytes (also what a query of the `META` columns reads).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, sea_orm::FromQueryResult)]
pub struct StoredFile {
    #[serde(rename = "file_id")]
    pub id: String,
    #[serde(skip)]
    pub principal: String,
    pub name: String,
    pub content_type: String,
    pub bytes: i64,
    pub sha256: String,
    #[serde(skip)]
    pub created_at: i64,
}

impl StoredFile {
    fn of(m: &file::Model) -> Self {
        Self {
            id: m.id.clone(),
            principal: m.principal.clone(),
            name: m.name.clone(),
            content_type: m.content_type.clone(),
            bytes: m.bytes,
            sha256: m.sha256.clone(),
            created_at: m.created_at,
        }
    }
}

/// The columns of a file without its bytes.
const META: [file::Column; 7] = [
    file::Column::Id,
    file::Column::Principal,
    file::Column::Sha256,
    file::Column::Name,
    file::Column::ContentType,
    file::Column::Bytes,
    file::Column::CreatedAt,
];

impl Store {
    /// Stores `data` as `principal`'s file, or answers the file they already have with these
    /// bytes (its first name and type stay).
    pub async fn put_file(
        &self,
        principal: &str,
        name: &str,
        content_type: &str,
        data: &[u8],
    ) -> Result<StoredFile> {
        let sha256 = hex::encode(Sha256::digest(data));
        if let Some(f) = self.file_by_sha(principal, &sha256).await? {
            return Ok(f);
        }
        let row = file::Model {
            id: uuid::Uuid::now_v7().to_string(),
            principal: principal.to_owned(),
            sha256: sha256.clone(),
            name: name.to_owned(),
            content_type: content_type.to_owned(),
            bytes: i64::try_from(data.len()).unwrap_or(i64::MAX),
            data: data.to_vec(),
            created_at: now_ms(),
        };
        let inserted = file::Entity::insert(file::ActiveModel::from(row.clone()))
            .on_conflict(
                sea_orm::sea_query::OnConflict::columns([
                    file::Column::Principal,
                    file::Column::Sha256,
                ])
                .do_nothing()
                .to_owned(),
            )
            .exec_without_returning(self.writer())
            .await?;
        if inserted == 0 {
            // A racing upload of the same bytes won: its row is the file.
            if let Some(f) = self.file_by_sha(principal, &sha256).await? {
                return Ok(f);
            }
        }
        Ok(StoredFile::of(&row))
    }

    async fn file_by_sha(&self, principal: &str, sha256: &str) -> Result<Option<StoredFile>> {
        Ok(file::Entity::find()
            .select_only()
            .columns(META)
            .filter(file::Column::Principal.eq(principal))
            .filter(file::Column::Sha256.eq(sha256))
            .into_model::<StoredFile>()
            .one(self.reader())
            .await?)
    }

    /// `principal`'s files among `ids`, without their bytes; another's are left out.
    pub async fn files_of(&self, principal: &str, ids: &[String]) -> Result<Vec<StoredFile>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(file::Entity::find()
            .select_only()
            .columns(META)
            .filter(file::Column::Principal.eq(principal))
            .filter(file::Column::Id.is_in(ids.iter().cloned()))
            .into_model::<StoredFile>()
            .all(self.reader())
            .await?)
    }

    /// `principal`'s file `id` with its bytes; None when there is none of theirs.
    pub async fn file_with_data(
        &self,
        principal: &str,
        id: &str,
    ) -> Result<Option<(StoredFile, Vec<u8>)>> {
        Ok(file::Entity::find_by_id(id.to_owned())
            .filter(file::Column::Principal.eq(principal))
            .one(self.reader())
            .await?
            .map(|m| (StoredFile::of(&m), m.data)))
    }

    /// The bytes of files `ids` (named by a session's own rows, so already checked), by id.
    pub async fn file_bytes(&self, ids: &[String]) -> Result<HashMap<String, Vec<u8>>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        Ok(file::Entity::find()
            .filter(file::Column::Id.is_in(ids.iter().cloned()))
            .all(self.reader())
            .await?
            .into_iter()
            .map(|m| (m.id, m.data))
            .collect())
    }

    /// Deletes those of `ids` that no admission of their owner still names (after a
    /// session's deletion: what only it referenced). Answers how many went.
    /// Ids of files stored before `before` (ms), oldest first, at most `limit`: the
    /// candidates of the pruner of uploads never attached.
    pub async fn files_created_before(&self, before: i64, limit: u64) -> Result<Vec<String>> {
        Ok(file::Entity::find()
            .select_only()
            .column(file::Column::Id)
            .filter(file::Column::CreatedAt.lt(before))
            .order_by_asc(file::Column::CreatedAt)
            .limit(limit)
            .into_tuple::<String>()
            .all(self.reader())
            .await?)
    }

    pub async fn delete_unreferenced_files(&self, ids: &[String]) -> Result<u64> {
        let mut gone = 0;
        for id in ids {
            let owner: Option<String> = file::Entity::find_by_id(id.clone())
                .select_only()
                .column(file::Column::Principal)
                .into_tuple()
                .one(self.reader())
                .await?;
            let Some(principal) = owner else { continue };
            let principal = principal.as_str();
            let named = admission::Entity::find()
                .select_only()
                .column(admission::Column::Id)
                .filter(admission::Column::Principal.eq(principal))
                .filter(admission::Column::PayloadJson.contains(id.as_str()))
                .into_tuple::<String>()
                .one(self.reader())
                .await?;
            if named.is_none() {
                gone += file::Entity::delete_many()
                    .filter(file::Column::Id.eq(id.as_str()))
                    .filter(file::Column::Principal.eq(principal))
                    .exec(self.writer())
                    .await?
                    .rows_affected;
            }
        }
        Ok(gone)
    }
}
