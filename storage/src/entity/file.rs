//! `files`: uploaded and attached files, their bytes kept in the database (every replica
//! serves them), one row per principal and content (`sha256`).
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "files")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub principal: String,
    pub sha256: String,
    pub name: String,
    pub content_type: String,
    pub bytes: i64,
    pub data: Vec<u8>,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
