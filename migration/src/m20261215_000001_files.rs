//! Files (SPEC R2.2; API.md "Attachments"): what people upload or attach, stored in the
//! database so that every replica serves every file (replicas share one database, not one
//! disk), keyed by content: a principal's second upload of the same bytes is the same file.
//! A transcript row names its attachments (`messages.attachments`, JSON references, never the
//! bytes): the admission's payload and the user row carry the same references.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(Files::Table)
                .col(string(Files::Id).primary_key())
                // The owner: only they can read it or attach it.
                .col(string(Files::Principal))
                // Hex SHA-256 of the bytes.
                .col(string(Files::Sha256))
                .col(string(Files::Name))
                // Sniffed from the bytes, not taken from the client.
                .col(string(Files::ContentType))
                .col(big_integer(Files::Bytes))
                .col(blob(Files::Data))
                .col(big_integer(Files::CreatedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_files_principal_sha256")
                .table(Files::Table)
                .col(Files::Principal)
                .col(Files::Sha256)
                .unique()
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Messages::Table)
                .add_column(text_null(Messages::Attachments))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Messages::Table)
                .drop_column(Messages::Attachments)
                .to_owned(),
        )
        .await?;
        m.drop_table(Table::drop().table(Files::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Files {
    Table,
    Id,
    Principal,
    Sha256,
    Name,
    ContentType,
    Bytes,
    Data,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Messages {
    Table,
    Attachments,
}
