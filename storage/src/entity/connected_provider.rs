//! `connected_providers`: providers connected at run time, their keys sealed.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "connected_providers")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub name: String,
    pub kind: String,
    pub base_url: String,
    pub model: String,
    pub api_key_sealed: Option<String>,
    pub context_window: Option<i64>,
    pub vision: Option<bool>,
    pub created_at: i64,
    pub created_by: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
