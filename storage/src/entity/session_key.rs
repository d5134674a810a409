//! `session_keys`: a door's own key for a session (e.g. the OpenAI endpoint's `user`), unique
//! per principal and door.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "session_keys")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub principal: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub door: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub key: String,
    pub session_id: String,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
