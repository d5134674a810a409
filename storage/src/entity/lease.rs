//! `session_turn_leases`: one fenced lease row per session; the row is never deleted so the
//! generation only ever grows.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "session_turn_leases")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub session_id: String,
    pub holder_instance: Option<String>,
    pub holder_pid: Option<i64>,
    pub host: Option<String>,
    pub turn_id: Option<String>,
    pub platform: Option<String>,
    pub generation: i64,
    pub acquired_at: i64,
    pub expires_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
