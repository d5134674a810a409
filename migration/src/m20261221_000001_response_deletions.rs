//! Responses deleted through `DELETE /v1/responses/{id}` (the Responses API): a response is an
//! admission, which stays (its session keeps its messages); this row only makes the response
//! id answer 404 from then on, on every replica. Deleting the session deletes its rows.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(ResponseDeletions::Table)
                .col(string(ResponseDeletions::AdmissionId).primary_key())
                .col(string(ResponseDeletions::SessionId))
                .col(big_integer(ResponseDeletions::DeletedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_response_deletions_session")
                .table(ResponseDeletions::Table)
                .col(ResponseDeletions::SessionId)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(ResponseDeletions::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum ResponseDeletions {
    Table,
    AdmissionId,
    SessionId,
    DeletedAt,
}
