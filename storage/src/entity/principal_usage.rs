//! `principal_usage_shards`: model tokens per principal and UTC day (SPEC R13.8 quotas), split over
//! shards so that a principal's sessions do not all add to one row; the day's total is the
//! sum of its shards.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "principal_usage_shards")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub principal: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub day: i64,
    /// Which of the day's `USAGE_SHARDS` rows (`store/quotas.rs`): chosen by the session.
    #[sea_orm(primary_key, auto_increment = false)]
    pub shard: i64,
    pub tokens: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
