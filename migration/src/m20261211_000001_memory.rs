//! Memory (SPEC R5.2, API.md "Memory and skills"): the agent's notes and what it knows about
//! the user, one store of each per principal (`scope`; a platform chat is its own principal),
//! and every change made to them (who made it: a tool call, a review or the API; the text
//! before and after), so that a person can see and undo what the agent remembered.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(MemoryEntries::Table)
                .col(string(MemoryEntries::Id).primary_key())
                .col(string(MemoryEntries::Scope))
                // `memory` (the agent's notes) or `profile` (the user).
                .col(string(MemoryEntries::Target))
                .col(text(MemoryEntries::Text))
                .col(big_integer(MemoryEntries::CreatedAt))
                .col(big_integer(MemoryEntries::UpdatedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_memory_entries_scope_target")
                .table(MemoryEntries::Table)
                .col(MemoryEntries::Scope)
                .col(MemoryEntries::Target)
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(MemoryChanges::Table)
                .col(string(MemoryChanges::Id).primary_key())
                .col(string(MemoryChanges::Scope))
                .col(string(MemoryChanges::Target))
                .col(string(MemoryChanges::EntryId))
                // `add`, `replace` or `remove`.
                .col(string(MemoryChanges::Action))
                // `tool`, `review` or `api`.
                .col(string(MemoryChanges::ChangedBy))
                .col(string_null(MemoryChanges::SessionId))
                .col(text_null(MemoryChanges::Before))
                .col(text_null(MemoryChanges::After))
                .col(big_integer(MemoryChanges::At))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_memory_changes_scope_at")
                .table(MemoryChanges::Table)
                .col(MemoryChanges::Scope)
                .col(MemoryChanges::At)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(MemoryChanges::Table).to_owned())
            .await?;
        m.drop_table(Table::drop().table(MemoryEntries::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum MemoryEntries {
    Table,
    Id,
    Scope,
    Target,
    Text,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum MemoryChanges {
    Table,
    Id,
    Scope,
    Target,
    EntryId,
    Action,
    ChangedBy,
    SessionId,
    Before,
    After,
    At,
}
