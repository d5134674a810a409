//! Interrupts across replicas (SPEC R13.6): `POST /v1/sessions/{id}/interrupt` on a replica that
//! does not run the session's turn writes a row here (and a NOTIFY to the lease holder); the
//! replica running the turn interrupts it and settles the row as `done`, or `missed` when the
//! turn had already ended. A pending row also survives a lost notice: the holder sweeps its own.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(InterruptRequests::Table)
                .col(string(InterruptRequests::Id).primary_key())
                .col(string(InterruptRequests::SessionId))
                .col(string(InterruptRequests::TurnId))
                // The lease holder when the request was made: the replica that must act.
                .col(string(InterruptRequests::TargetInstance))
                .col(string(InterruptRequests::OriginInstance))
                .col(text(InterruptRequests::Reason))
                .col(string(InterruptRequests::Status))
                .col(big_integer(InterruptRequests::CreatedAt))
                .col(big_integer_null(InterruptRequests::SettledAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_interrupt_requests_target_status")
                .table(InterruptRequests::Table)
                .col(InterruptRequests::TargetInstance)
                .col(InterruptRequests::Status)
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_interrupt_requests_turn")
                .table(InterruptRequests::Table)
                .col(InterruptRequests::TurnId)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(InterruptRequests::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum InterruptRequests {
    Table,
    Id,
    SessionId,
    TurnId,
    TargetInstance,
    OriginInstance,
    Reason,
    Status,
    CreatedAt,
    SettledAt,
}
