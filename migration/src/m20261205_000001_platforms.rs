//! Chat platforms (SPEC R1.3, R13.5). `delivery_outbox` (made by the initial migration) gains
//! what its sender needs: the turn a reply closes, the instance sending a row (a row left
//! `sending` by a dead instance becomes `unknown`), how many chunks of a split reply are out,
//! the last error and when the row last changed. `inbound_updates` remembers every platform
//! update (Telegram `update_id`, Slack `event_id`, generic `message_id`) with the session it was
//! admitted to, so a redelivered update reaches the same session under the same request id and
//! runs once. `chat_sessions` maps a chat (platform + chat + thread) to its current session;
//! `/new` points it at a fresh one.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per ALTER TABLE.
        for mut col in [
            string_null(DeliveryOutbox::TurnId),
            string_null(DeliveryOutbox::OwnerInstance),
            text_null(DeliveryOutbox::LastError),
            big_integer(DeliveryOutbox::UpdatedAt).default(0).to_owned(),
            integer(DeliveryOutbox::ChunksSent).default(0).to_owned(),
        ] {
            m.alter_table(
                Table::alter()
                    .table(DeliveryOutbox::Table)
                    .add_column(&mut col)
                    .to_owned(),
            )
            .await?;
        }
        m.create_index(
            Index::create()
                .name("idx_outbox_status_due")
                .table(DeliveryOutbox::Table)
                .col(DeliveryOutbox::Status)
                .col(DeliveryOutbox::NextAttemptAt)
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_outbox_chat")
                .table(DeliveryOutbox::Table)
                .col(DeliveryOutbox::ChatKey)
                .col(DeliveryOutbox::CreatedAt)
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(InboundUpdates::Table)
                .col(string(InboundUpdates::Platform))
                .col(string(InboundUpdates::ExternalId))
                .col(string(InboundUpdates::ChatKey))
                .col(string(InboundUpdates::SessionId))
                .col(text_null(InboundUpdates::Result))
                .col(big_integer(InboundUpdates::CreatedAt))
                .primary_key(
                    Index::create()
                        .col(InboundUpdates::Platform)
                        .col(InboundUpdates::ExternalId),
                )
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(ChatSessions::Table)
                .col(string(ChatSessions::ChatKey).primary_key())
                .col(string(ChatSessions::Platform))
                .col(string(ChatSessions::SessionId))
                .col(big_integer(ChatSessions::CreatedAt))
                .col(big_integer(ChatSessions::UpdatedAt))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(ChatSessions::Table).to_owned())
            .await?;
        m.drop_table(Table::drop().table(InboundUpdates::Table).to_owned())
            .await?;
        for idx in ["idx_outbox_chat", "idx_outbox_status_due"] {
            m.drop_index(
                Index::drop()
                    .name(idx)
                    .table(DeliveryOutbox::Table)
                    .to_owned(),
            )
            .await?;
        }
        for col in [
            DeliveryOutbox::ChunksSent,
            DeliveryOutbox::UpdatedAt,
            DeliveryOutbox::LastError,
            DeliveryOutbox::OwnerInstance,
            DeliveryOutbox::TurnId,
        ] {
            m.alter_table(
                Table::alter()
                    .table(DeliveryOutbox::Table)
                    .drop_column(col)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum DeliveryOutbox {
    Table,
    ChatKey,
    Status,
    NextAttemptAt,
    CreatedAt,
    TurnId,
    OwnerInstance,
    LastError,
    UpdatedAt,
    ChunksSent,
}

#[derive(DeriveIden)]
enum InboundUpdates {
    Table,
    Platform,
    ExternalId,
    ChatKey,
    SessionId,
    Result,
    CreatedAt,
}

#[derive(DeriveIden)]
enum ChatSessions {
    Table,
    ChatKey,
    Platform,
    SessionId,
    CreatedAt,
    UpdatedAt,
}
