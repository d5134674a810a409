//! The initial schema: every durable fact of DESIGN.md's table list. Times are epoch
//! milliseconds (BIGINT) so that lease and expiry comparisons are plain integer compares on
//! both SQLite and PostgreSQL.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(Sessions::Table)
                .col(string(Sessions::Id).primary_key())
                .col(string_null(Sessions::ParentSessionId))
                .col(string(Sessions::Owner))
                .col(string(Sessions::Platform))
                .col(string_null(Sessions::ChatKey))
                .col(string_null(Sessions::Title))
                .col(string_null(Sessions::Model))
                .col(text_null(Sessions::SystemMessage))
                .col(text_null(Sessions::SystemPrompt))
                .col(text_null(Sessions::WorkspaceSnapshot))
                .col(big_integer(Sessions::LastEventSeq).default(0))
                .col(big_integer(Sessions::LastAdmissionSeq).default(0))
                .col(big_integer(Sessions::LastMessageIdx).default(0))
                .col(big_integer(Sessions::InputTokens).default(0))
                .col(big_integer(Sessions::OutputTokens).default(0))
                .col(big_integer(Sessions::CacheReadTokens).default(0))
                .col(double(Sessions::CostUsd).default(0.0))
                .col(big_integer(Sessions::CreatedAt))
                .col(big_integer(Sessions::UpdatedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_sessions_owner_created")
                .table(Sessions::Table)
                .col(Sessions::Owner)
                .col(Sessions::CreatedAt)
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_sessions_chat_key")
                .table(Sessions::Table)
                .col(Sessions::Platform)
                .col(Sessions::ChatKey)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Messages::Table)
                .col(string(Messages::Id).primary_key())
                .col(string(Messages::SessionId))
                .col(big_integer(Messages::Idx))
                .col(string(Messages::Role))
                .col(text_null(Messages::Content))
                .col(text_null(Messages::ApiContent))
                .col(text_null(Messages::ToolCalls))
                .col(string_null(Messages::ToolCallId))
                .col(string_null(Messages::Name))
                .col(string_null(Messages::TurnId))
                .col(string_null(Messages::AdmissionId))
                .col(text_null(Messages::Display))
                .col(string_null(Messages::PlatformMessageId))
                .col(big_integer(Messages::TokenEstimate).default(0))
                .col(big_integer(Messages::CreatedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("uq_messages_session_idx")
                .table(Messages::Table)
                .col(Messages::SessionId)
                .col(Messages::Idx)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(SessionAdmissions::Table)
                .col(string(SessionAdmissions::Id).primary_key())
                .col(string(SessionAdmissions::SessionId))
                .col(big_integer(SessionAdmissions::Seq))
                .col(string(SessionAdmissions::RequestId))
                .col(string(SessionAdmissions::PayloadDigest))
                .col(text(SessionAdmissions::PayloadJson))
                .col(string(SessionAdmissions::Principal))
                .col(string(SessionAdmissions::Surface))
                .col(string(SessionAdmissions::Status))
                .col(string_null(SessionAdmissions::OwnerInstance))
                .col(big_integer_null(SessionAdmissions::OwnerPid))
                .col(string_null(SessionAdmissions::OwnerHost))
                .col(string_null(SessionAdmissions::TurnId))
                .col(text_null(SessionAdmissions::Outcome))
                .col(big_integer(SessionAdmissions::CreatedAt))
                .col(big_integer_null(SessionAdmissions::StartedAt))
                .col(big_integer_null(SessionAdmissions::FinishedAt))
                .to_owned(),
        )
        .await?;
        for (name, cols) in [
            (
                "uq_admissions_session_request",
                [SessionAdmissions::SessionId, SessionAdmissions::RequestId],
            ),
            (
                "uq_admissions_session_seq",
                [SessionAdmissions::SessionId, SessionAdmissions::Seq],
            ),
        ] {
            m.create_index(
                Index::create()
                    .name(name)
                    .table(SessionAdmissions::Table)
                    .col(cols[0].clone())
                    .col(cols[1].clone())
                    .unique()
                    .to_owned(),
            )
            .await?;
        }
        m.create_index(
            Index::create()
                .name("idx_admissions_status")
                .table(SessionAdmissions::Table)
                .col(SessionAdmissions::Status)
                .col(SessionAdmissions::SessionId)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(SessionTurnLeases::Table)
                .col(string(SessionTurnLeases::SessionId).primary_key())
                .col(string_null(SessionTurnLeases::HolderInstance))
                .col(big_integer_null(SessionTurnLeases::HolderPid))
                .col(string_null(SessionTurnLeases::Host))
                .col(string_null(SessionTurnLeases::TurnId))
                .col(string_null(SessionTurnLeases::Platform))
                .col(big_integer(SessionTurnLeases::Generation))
                .col(big_integer(SessionTurnLeases::AcquiredAt))
                .col(big_integer(SessionTurnLeases::ExpiresAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(SessionEvents::Table)
                .col(string(SessionEvents::SessionId))
                .col(big_integer(SessionEvents::Seq))
                .col(string_null(SessionEvents::TurnId))
                .col(string_null(SessionEvents::AdmissionId))
                .col(string(SessionEvents::Kind))
                .col(text(SessionEvents::Payload))
                .col(big_integer(SessionEvents::CreatedAt))
                .primary_key(
                    Index::create()
                        .col(SessionEvents::SessionId)
                        .col(SessionEvents::Seq),
                )
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(CompressionLocks::Table)
                .col(string(CompressionLocks::SessionId).primary_key())
                .col(string(CompressionLocks::Holder))
                .col(big_integer(CompressionLocks::ExpiresAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(ToolRuns::Table)
                .col(string(ToolRuns::Id).primary_key())
                .col(string(ToolRuns::CallId))
                .col(string(ToolRuns::SessionId))
                .col(string(ToolRuns::TurnId))
                .col(string(ToolRuns::Tool))
                .col(text(ToolRuns::Args))
                .col(string(ToolRuns::Status))
                .col(text_null(ToolRuns::ResultRef))
                .col(big_integer(ToolRuns::CreatedAt))
                .col(big_integer_null(ToolRuns::StartedAt))
                .col(big_integer_null(ToolRuns::FinishedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("uq_tool_runs_turn_call")
                .table(ToolRuns::Table)
                .col(ToolRuns::TurnId)
                .col(ToolRuns::CallId)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(UsageLedger::Table)
                .col(string(UsageLedger::Id).primary_key())
                .col(string(UsageLedger::TurnId))
                .col(string(UsageLedger::SessionId))
                .col(string(UsageLedger::Provider))
                .col(string(UsageLedger::Model))
                .col(big_integer(UsageLedger::InputTokens))
                .col(big_integer(UsageLedger::OutputTokens))
                .col(big_integer(UsageLedger::CacheReadTokens))
                .col(big_integer(UsageLedger::CacheWriteTokens))
                .col(double(UsageLedger::CostUsd))
                .col(big_integer(UsageLedger::CreatedAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Approvals::Table)
                .col(string(Approvals::Id).primary_key())
                .col(string(Approvals::SessionId))
                .col(string(Approvals::TurnId))
                .col(string(Approvals::CallId))
                .col(text(Approvals::Request))
                .col(string(Approvals::Status))
                .col(string_null(Approvals::DecidedBy))
                .col(big_integer(Approvals::CreatedAt))
                .col(big_integer(Approvals::ExpiresAt))
                .col(big_integer_null(Approvals::DecidedAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(DeliveryOutbox::Table)
                .col(string(DeliveryOutbox::Id).primary_key())
                .col(string(DeliveryOutbox::Platform))
                .col(string(DeliveryOutbox::ChatKey))
                .col(string_null(DeliveryOutbox::SessionId))
                .col(string_uniq(DeliveryOutbox::IdempotencyKey))
                .col(string(DeliveryOutbox::Kind))
                .col(text(DeliveryOutbox::Payload))
                .col(string(DeliveryOutbox::Status))
                .col(integer(DeliveryOutbox::Attempts).default(0))
                .col(string_null(DeliveryOutbox::PlatformMessageId))
                .col(big_integer(DeliveryOutbox::CreatedAt))
                .col(big_integer(DeliveryOutbox::NextAttemptAt))
                .col(big_integer_null(DeliveryOutbox::SentAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Principals::Table)
                .col(string(Principals::Id).primary_key())
                .col(string(Principals::Name))
                .col(string(Principals::Kind))
                .col(big_integer(Principals::CreatedAt))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(ApiTokens::Table)
                .col(string(ApiTokens::Id).primary_key())
                .col(string(ApiTokens::PrincipalId))
                .col(string_uniq(ApiTokens::TokenHash))
                .col(string_null(ApiTokens::Label))
                .col(big_integer(ApiTokens::CreatedAt))
                .col(big_integer_null(ApiTokens::RevokedAt))
                .to_owned(),
        )
        .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for t in [
            ApiTokens::Table.into_iden(),
            Principals::Table.into_iden(),
            DeliveryOutbox::Table.into_iden(),
            Approvals::Table.into_iden(),
            UsageLedger::Table.into_iden(),
            ToolRuns::Table.into_iden(),
            CompressionLocks::Table.into_iden(),
            SessionEvents::Table.into_iden(),
            SessionTurnLeases::Table.into_iden(),
            SessionAdmissions::Table.into_iden(),
            Messages::Table.into_iden(),
            Sessions::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(t).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Sessions {
    Table,
    Id,
    ParentSessionId,
    Owner,
    Platform,
    ChatKey,
    Title,
    Model,
    SystemMessage,
    SystemPrompt,
    WorkspaceSnapshot,
    LastEventSeq,
    LastAdmissionSeq,
    LastMessageIdx,
    InputTokens,
    OutputTokens,
    CacheReadTokens,
    CostUsd,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Messages {
    Table,
    Id,
    SessionId,
    Idx,
    Role,
    Content,
    ApiContent,
    ToolCalls,
    ToolCallId,
    Name,
    TurnId,
    AdmissionId,
    Display,
    PlatformMessageId,
    TokenEstimate,
    CreatedAt,
}

#[derive(DeriveIden, Clone)]
enum SessionAdmissions {
    Table,
    Id,
    SessionId,
    Seq,
    RequestId,
    PayloadDigest,
    PayloadJson,
    Principal,
    Surface,
    Status,
    OwnerInstance,
    OwnerPid,
    OwnerHost,
    TurnId,
    Outcome,
    CreatedAt,
    StartedAt,
    FinishedAt,
}

#[derive(DeriveIden)]
enum SessionTurnLeases {
    Table,
    SessionId,
    HolderInstance,
    HolderPid,
    Host,
    TurnId,
    Platform,
    Generation,
    AcquiredAt,
    ExpiresAt,
}

#[derive(DeriveIden)]
enum SessionEvents {
    Table,
    SessionId,
    Seq,
    TurnId,
    AdmissionId,
    Kind,
    Payload,
    CreatedAt,
}

#[derive(DeriveIden)]
enum CompressionLocks {
    Table,
    SessionId,
    Holder,
    ExpiresAt,
}

#[derive(DeriveIden)]
enum ToolRuns {
    Table,
    Id,
    CallId,
    SessionId,
    TurnId,
    Tool,
    Args,
    Status,
    ResultRef,
    CreatedAt,
    StartedAt,
    FinishedAt,
}

#[derive(DeriveIden)]
enum UsageLedger {
    Table,
    Id,
    TurnId,
    SessionId,
    Provider,
    Model,
    InputTokens,
    OutputTokens,
    CacheReadTokens,
    CacheWriteTokens,
    CostUsd,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Approvals {
    Table,
    Id,
    SessionId,
    TurnId,
    CallId,
    Request,
    Status,
    DecidedBy,
    CreatedAt,
    ExpiresAt,
    DecidedAt,
}

#[derive(DeriveIden)]
enum DeliveryOutbox {
    Table,
    Id,
    Platform,
    ChatKey,
    SessionId,
    IdempotencyKey,
    Kind,
    Payload,
    Status,
    Attempts,
    PlatformMessageId,
    CreatedAt,
    NextAttemptAt,
    SentAt,
}

#[derive(DeriveIden)]
enum Principals {
    Table,
    Id,
    Name,
    Kind,
    CreatedAt,
}

#[derive(DeriveIden)]
enum ApiTokens {
    Table,
    Id,
    PrincipalId,
    TokenHash,
    Label,
    CreatedAt,
    RevokedAt,
}
