//! Scheduled jobs (SPEC R1.5): one row per schedule, made through the API or from a
//! `[[schedules]]` table of the configuration. `last_due_at` is the last due time handled
//! (admitted, or skipped as missed); the scheduler advances it with a compare-and-set only
//! after the admission is durable, so a restart knows what it missed and two replicas never
//! both move it.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(Schedules::Table)
                .col(string(Schedules::Id).primary_key())
                .col(string(Schedules::SessionId))
                // The session's owner: whose input a firing is, and who may see the schedule.
                .col(string(Schedules::Owner))
                .col(string(Schedules::Cron))
                .col(text(Schedules::Text))
                .col(string(Schedules::Missed))
                .col(string(Schedules::Source))
                .col(big_integer(Schedules::CreatedAt))
                .col(big_integer_null(Schedules::LastDueAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_schedules_owner")
                .table(Schedules::Table)
                .col(Schedules::Owner)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(Schedules::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Schedules {
    Table,
    Id,
    SessionId,
    Owner,
    Cron,
    Text,
    Missed,
    Source,
    CreatedAt,
    LastDueAt,
}
