//! Busy policy per session (SPEC R13.4): what a new input does while a turn runs on this
//! session (`queue`, `interrupt` or `steer`). Null means the platform's `agent.busy_policy`.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Sessions::Table)
                .add_column(string_null(Sessions::BusyPolicy))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Sessions::Table)
                .drop_column(Sessions::BusyPolicy)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Sessions {
    Table,
    BusyPolicy,
}
