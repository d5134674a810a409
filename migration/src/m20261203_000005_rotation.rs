//! Rotation by compression (SPEC R6.4, `compression.mode = "rotate"`): a compression may move the
//! live transcript into a child session. `root_id` names a child's lineage root (null on a
//! root); `transcript_id` on a root names the session whose rows are the live transcript now
//! (null: the root's own). Admissions, events, the lease and the counters stay on the root, so
//! every id of a lineage reaches the same queue and the same event log. `messages.copied_from`
//! marks a child's copy of a kept row, so the lineage's history lists each message once.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per ALTER TABLE.
        m.alter_table(
            Table::alter()
                .table(Sessions::Table)
                .add_column(string_null(Sessions::RootId))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Sessions::Table)
                .add_column(string_null(Sessions::TranscriptId))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Messages::Table)
                .add_column(string_null(Messages::CopiedFrom))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Messages::Table)
                .drop_column(Messages::CopiedFrom)
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Sessions::Table)
                .drop_column(Sessions::TranscriptId)
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Sessions::Table)
                .drop_column(Sessions::RootId)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Sessions {
    Table,
    RootId,
    TranscriptId,
}

#[derive(DeriveIden)]
enum Messages {
    Table,
    CopiedFrom,
}
