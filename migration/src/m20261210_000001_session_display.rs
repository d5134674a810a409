//! A session's own display behaviour (SPEC R3.1): a JSON object of `stream`, `tool_progress`
//! and `interim`, set with `PATCH /v1/sessions/{id}` on the lineage root. Null: the platform's
//! table and `[agent]` decide.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Sessions::Table)
                .add_column(text_null(Sessions::Display))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Sessions::Table)
                .drop_column(Sessions::Display)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Sessions {
    Table,
    Display,
}
