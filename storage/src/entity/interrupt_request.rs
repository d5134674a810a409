//! `interrupt_requests`: an interrupt asked on one replica for a turn another replica runs.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "interrupt_requests")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub session_id: String,
    pub turn_id: String,
    pub target_instance: String,
    pub origin_instance: String,
    pub reason: String,
    pub status: String,
    pub created_at: i64,
    pub settled_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
