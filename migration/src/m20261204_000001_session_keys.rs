//! Sessions a door finds by a key of its own (the OpenAI-compatible endpoint's `user` field):
//! one row per (principal, door, key), so two concurrent first calls for the same key end in
//! one session. The primary key is the uniqueness; the session row is created in the same
//! transaction as its key row, so a session never exists half-keyed.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(SessionKeys::Table)
                .col(string(SessionKeys::Principal))
                .col(string(SessionKeys::Door))
                .col(string(SessionKeys::Key))
                .col(string(SessionKeys::SessionId))
                .col(big_integer(SessionKeys::CreatedAt))
                .primary_key(
                    Index::create()
                        .col(SessionKeys::Principal)
                        .col(SessionKeys::Door)
                        .col(SessionKeys::Key),
                )
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(SessionKeys::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum SessionKeys {
    Table,
    Principal,
    Door,
    Key,
    SessionId,
    CreatedAt,
}
