//! Durable tool runs and approvals as the tool round uses them (SPEC R9, R13.1, R13.2):
//! `tool_runs` learns its admission, its place in the call list, how it finished and the
//! human decision on an `unknown` run; both tables get the indexes their readbacks use.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per ALTER TABLE.
        for col in [
            string_null(ToolRuns::AdmissionId),
            big_integer(ToolRuns::Idx).default(0).to_owned(),
            string_null(ToolRuns::Outcome),
            string_null(ToolRuns::Decision),
            string_null(ToolRuns::DecidedBy),
        ] {
            m.alter_table(
                Table::alter()
                    .table(ToolRuns::Table)
                    .add_column(col)
                    .to_owned(),
            )
            .await?;
        }
        m.create_index(
            Index::create()
                .name("ix_tool_runs_session_status")
                .table(ToolRuns::Table)
                .col(ToolRuns::SessionId)
                .col(ToolRuns::Status)
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("uq_approvals_turn_call")
                .table(Approvals::Table)
                .col(Approvals::TurnId)
                .col(Approvals::CallId)
                .unique()
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ix_approvals_session_status")
                .table(Approvals::Table)
                .col(Approvals::SessionId)
                .col(Approvals::Status)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for (name, table) in [
            ("ix_approvals_session_status", Approvals::Table.into_iden()),
            ("uq_approvals_turn_call", Approvals::Table.into_iden()),
            ("ix_tool_runs_session_status", ToolRuns::Table.into_iden()),
        ] {
            m.drop_index(Index::drop().name(name).table(table).to_owned())
                .await?;
        }
        for col in [
            ToolRuns::DecidedBy,
            ToolRuns::Decision,
            ToolRuns::Outcome,
            ToolRuns::Idx,
            ToolRuns::AdmissionId,
        ] {
            m.alter_table(
                Table::alter()
                    .table(ToolRuns::Table)
                    .drop_column(col)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum ToolRuns {
    Table,
    SessionId,
    Status,
    AdmissionId,
    Idx,
    Outcome,
    Decision,
    DecidedBy,
}

#[derive(DeriveIden)]
enum Approvals {
    Table,
    SessionId,
    TurnId,
    CallId,
    Status,
}
