//! The live rows of a transcript found without visiting the rows compression took out (SPEC
//! R6.4 keeps them, marked with their `compressed_epoch`): an index on
//! `(session_id, compressed_epoch, idx)`. A reader that re-reads a session's live transcript
//! after a compression (`Store::live_transcript_after`) went through `uq_messages_session_idx`
//! and looked up every row the session ever had to test its epoch, so a turn's cost grew with
//! the session's age: the soak at 441 turns/s went from 2.05 to 2.51 ms of CPU a turn in ten
//! minutes, `sqlite3BtreeTableMoveto` 17.5 % of the server's samples by the sixth.
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(
            Index::create()
                .name("idx_messages_live")
                .table(Messages::Table)
                .col(Messages::SessionId)
                .col(Messages::CompressedEpoch)
                .col(Messages::Idx)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(
            Index::drop()
                .name("idx_messages_live")
                .table(Messages::Table)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Messages {
    Table,
    SessionId,
    CompressedEpoch,
    Idx,
}
