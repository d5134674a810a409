//! In-place compression (SPEC R6.4): a transcript row that compression took out of the wire copy
//! keeps its text and gets the epoch that took it out (`compressed_epoch`); the summary that
//! replaces those rows is a row of its own (`summary_epoch`), sent right after the row with index
//! `summary_after_idx`. The session counts its compressions (`compression_epoch`) and remembers
//! when the last one committed (`compressed_at`), which tells a later pressure estimate whether
//! the provider's last reported prompt size still describes the transcript.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per ALTER TABLE.
        for col in [
            integer_null(Messages::CompressedEpoch),
            integer_null(Messages::SummaryEpoch),
            big_integer_null(Messages::SummaryAfterIdx),
        ] {
            m.alter_table(
                Table::alter()
                    .table(Messages::Table)
                    .add_column(col)
                    .to_owned(),
            )
            .await?;
        }
        for col in [
            integer(Sessions::CompressionEpoch).default(0).to_owned(),
            big_integer_null(Sessions::CompressedAt),
        ] {
            m.alter_table(
                Table::alter()
                    .table(Sessions::Table)
                    .add_column(col)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for col in [
            Messages::CompressedEpoch,
            Messages::SummaryEpoch,
            Messages::SummaryAfterIdx,
        ] {
            m.alter_table(
                Table::alter()
                    .table(Messages::Table)
                    .drop_column(col)
                    .to_owned(),
            )
            .await?;
        }
        for col in [Sessions::CompressionEpoch, Sessions::CompressedAt] {
            m.alter_table(
                Table::alter()
                    .table(Sessions::Table)
                    .drop_column(col)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Messages {
    Table,
    CompressedEpoch,
    SummaryEpoch,
    SummaryAfterIdx,
}

#[derive(DeriveIden)]
enum Sessions {
    Table,
    CompressionEpoch,
    CompressedAt,
}
