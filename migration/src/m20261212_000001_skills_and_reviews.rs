//! Skills and the post-delivery review (SPEC R5.2, R10.4, R4.5; API.md "Memory and skills"):
//! skills stored through the API (the operator's `SKILL.md` folders stay files), how often and
//! when each skill was used, the skill changes an agent proposed for a person to decide, the
//! memory writes a review made that wait for a person (`write_approval`), and one row per
//! review with who runs it, so that a review cut off by a crash is found and closed, never run
//! again blindly.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(Skills::Table)
                .col(string(Skills::Name).primary_key())
                .col(text(Skills::Description))
                // The whole SKILL.md, front matter included.
                .col(text(Skills::Content))
                .col(big_integer(Skills::CreatedAt))
                .col(big_integer(Skills::UpdatedAt))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(SkillUses::Table)
                // A skill's name, from the folder or the API.
                .col(string(SkillUses::Name).primary_key())
                .col(big_integer(SkillUses::Uses))
                .col(big_integer(SkillUses::LastUsedAt))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(SkillProposals::Table)
                .col(string(SkillProposals::Id).primary_key())
                // `create`, `patch` or `delete`.
                .col(string(SkillProposals::Action))
                .col(string(SkillProposals::Name))
                .col(text_null(SkillProposals::Description))
                .col(text_null(SkillProposals::Content))
                .col(text_null(SkillProposals::Old))
                .col(text_null(SkillProposals::New))
                .col(string_null(SkillProposals::SessionId))
                // `pending`, `approved` or `denied`.
                .col(string(SkillProposals::Status))
                .col(big_integer(SkillProposals::CreatedAt))
                .col(big_integer_null(SkillProposals::DecidedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_skill_proposals_status")
                .table(SkillProposals::Table)
                .col(SkillProposals::Status)
                .col(SkillProposals::CreatedAt)
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(MemoryPending::Table)
                .col(string(MemoryPending::Id).primary_key())
                .col(string(MemoryPending::Scope))
                .col(string(MemoryPending::Target))
                // `add`, `replace` or `remove`.
                .col(string(MemoryPending::Action))
                .col(text_null(MemoryPending::Text))
                .col(text_null(MemoryPending::OldText))
                .col(string_null(MemoryPending::SessionId))
                // `pending`, `approved` or `denied`.
                .col(string(MemoryPending::Status))
                .col(big_integer(MemoryPending::CreatedAt))
                .col(big_integer_null(MemoryPending::DecidedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_memory_pending_scope_status")
                .table(MemoryPending::Table)
                .col(MemoryPending::Scope)
                .col(MemoryPending::Status)
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(Reviews::Table)
                .col(string(Reviews::Id).primary_key())
                .col(string(Reviews::SessionId))
                // The turn after which it runs.
                .col(string_null(Reviews::TurnId))
                // How many turns of the session had ended when it began: one review per count.
                .col(big_integer(Reviews::TurnsAt))
                // `running`, `finished`, `cancelled` or `interrupted` (its owner died).
                .col(string(Reviews::Status))
                .col(string(Reviews::OwnerInstance))
                .col(big_integer(Reviews::OwnerPid))
                .col(string(Reviews::OwnerHost))
                .col(big_integer(Reviews::StartedAt))
                .col(big_integer_null(Reviews::EndedAt))
                // How many writes (or proposals) it made.
                .col(big_integer(Reviews::Actions).default(0))
                .col(text_null(Reviews::Reason))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_reviews_session")
                .unique()
                .table(Reviews::Table)
                .col(Reviews::SessionId)
                .col(Reviews::TurnsAt)
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_reviews_status")
                .table(Reviews::Table)
                .col(Reviews::Status)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(Reviews::Table).to_owned())
            .await?;
        m.drop_table(Table::drop().table(MemoryPending::Table).to_owned())
            .await?;
        m.drop_table(Table::drop().table(SkillProposals::Table).to_owned())
            .await?;
        m.drop_table(Table::drop().table(SkillUses::Table).to_owned())
            .await?;
        m.drop_table(Table::drop().table(Skills::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Skills {
    Table,
    Name,
    Description,
    Content,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum SkillUses {
    Table,
    Name,
    Uses,
    LastUsedAt,
}

#[derive(DeriveIden)]
enum SkillProposals {
    Table,
    Id,
    Action,
    Name,
    Description,
    Content,
    Old,
    New,
    SessionId,
    Status,
    CreatedAt,
    DecidedAt,
}

#[derive(DeriveIden)]
enum MemoryPending {
    Table,
    Id,
    Scope,
    Target,
    Action,
    Text,
    OldText,
    SessionId,
    Status,
    CreatedAt,
    DecidedAt,
}

#[derive(DeriveIden)]
enum Reviews {
    Table,
    Id,
    SessionId,
    TurnId,
    TurnsAt,
    Status,
    OwnerInstance,
    OwnerPid,
    OwnerHost,
    StartedAt,
    EndedAt,
    Actions,
    Reason,
}
