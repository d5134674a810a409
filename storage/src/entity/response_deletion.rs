//! `response_deletions`: a Responses API response deleted through `DELETE /v1/responses/{id}`;
//! its admission stays, the response id answers 404.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "response_deletions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub admission_id: String,
    pub session_id: String,
    pub deleted_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
