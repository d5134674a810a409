//! Every turn asks for its session's last recorded prompt size (`Store::last_prompt_usage`,
//! SPEC R6.1: pressure starts from real usage). Without an index that read scanned and sorted
//! the whole ledger, so a turn's cost grew with every turn of every session before it.
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const NAME: &str = "idx_usage_ledger_session_created";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(
            Index::create()
                .name(NAME)
                .table(UsageLedger::Table)
                .col(UsageLedger::SessionId)
                .col(UsageLedger::CreatedAt)
                .col(UsageLedger::Id)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(
            Index::drop()
                .name(NAME)
                .table(UsageLedger::Table)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden)]
enum UsageLedger {
    Table,
    Id,
    SessionId,
    CreatedAt,
}
