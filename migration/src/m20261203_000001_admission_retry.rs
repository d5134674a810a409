//! `session_admissions.retry_of`: an admission made by `POST /v1/admissions/{id}/retry` names
//! the `unknown` admission it runs again, so the link survives in the store, not only in a log.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(SessionAdmissions::Table)
                .add_column(string_null(SessionAdmissions::RetryOf))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ix_admissions_retry_of")
                .table(SessionAdmissions::Table)
                .col(SessionAdmissions::RetryOf)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(
            Index::drop()
                .name("ix_admissions_retry_of")
                .table(SessionAdmissions::Table)
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(SessionAdmissions::Table)
                .drop_column(SessionAdmissions::RetryOf)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden)]
enum SessionAdmissions {
    Table,
    RetryOf,
}
