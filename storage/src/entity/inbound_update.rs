//! `inbound_updates`: every platform update admitted or acted on, by the platform's own id
//! (Telegram `update_id`, Slack `<channel>:<ts>` of the message or `action:<trigger_id>` of a
//! button press, generic `message_id`), with the session it went to.
//! A redelivery finds its row and reaches the same session under the same request id.
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "inbound_updates")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub platform: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub external_id: String,
    pub chat_key: String,
    pub session_id: String,
    /// What handling the update produced when that must not be produced twice (JSON), e.g. the
    /// session `/new` created.
    pub result: Option<String>,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
