//! Work that outlives the turn (SPEC R1.5, R13.10; API.md "Sub-agents, background processes and
//! agent schedules"): one row per delegated task (its child session, and whether its report
//! was admitted into the parent), one row per background process (what identifies it across a
//! restart of the gateway: pid, the kernel's start time of that pid and the boot id; where its
//! log and exit code go; whether its exit was reported), and the due time of a one-shot
//! schedule.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(SubagentTasks::Table)
                .col(string(SubagentTasks::Id).primary_key())
                .col(string(SubagentTasks::ParentSessionId))
                .col(string(SubagentTasks::ChildSessionId).unique_key())
                .col(string(SubagentTasks::Owner))
                .col(text(SubagentTasks::Goal))
                .col(text_null(SubagentTasks::Context))
                // 1 for a child of a top-level session.
                .col(big_integer(SubagentTasks::Depth))
                // `running`, then `completed`, `failed`, `interrupted` or `unknown`.
                .col(string(SubagentTasks::Status))
                // The report's text as admitted into the parent.
                .col(text_null(SubagentTasks::Result))
                .col(big_integer(SubagentTasks::CreatedAt))
                // Set with the status, in the commit that records the report as admitted.
                .col(big_integer_null(SubagentTasks::ReportedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_subagent_tasks_parent")
                .table(SubagentTasks::Table)
                .col(SubagentTasks::ParentSessionId)
                .col(SubagentTasks::CreatedAt)
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_subagent_tasks_reported")
                .table(SubagentTasks::Table)
                .col(SubagentTasks::ReportedAt)
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(BackgroundProcesses::Table)
                .col(string(BackgroundProcesses::Id).primary_key())
                .col(string(BackgroundProcesses::SessionId))
                .col(string(BackgroundProcesses::Owner))
                .col(text(BackgroundProcesses::Command))
                // The folder holding `log` and `exit` (written by the wrapper when it ends).
                .col(text(BackgroundProcesses::Dir))
                .col(big_integer_null(BackgroundProcesses::Pid))
                // `/proc/<pid>/stat` field 22: with the boot id, names this process and no
                // later one that reuses the pid.
                .col(big_integer_null(BackgroundProcesses::PidStart))
                .col(string(BackgroundProcesses::BootId))
                // The gateway process watching it.
                .col(string(BackgroundProcesses::WatcherInstance))
                .col(big_integer(BackgroundProcesses::WatcherPid))
                .col(string(BackgroundProcesses::WatcherHost))
                // `running`, then `exited`, `killed` or `unknown`.
                .col(string(BackgroundProcesses::Status))
                .col(big_integer_null(BackgroundProcesses::ExitCode))
                .col(text_null(BackgroundProcesses::Tail))
                .col(big_integer(BackgroundProcesses::StartedAt))
                .col(big_integer_null(BackgroundProcesses::EndedAt))
                .col(big_integer_null(BackgroundProcesses::ReportedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_background_processes_session")
                .table(BackgroundProcesses::Table)
                .col(BackgroundProcesses::SessionId)
                .col(BackgroundProcesses::StartedAt)
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_background_processes_reported")
                .table(BackgroundProcesses::Table)
                .col(BackgroundProcesses::ReportedAt)
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Schedules::Table)
                .add_column(big_integer_null(Schedules::OnceAt))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Schedules::Table)
                .drop_column(Schedules::OnceAt)
                .to_owned(),
        )
        .await?;
        m.drop_table(Table::drop().table(BackgroundProcesses::Table).to_owned())
            .await?;
        m.drop_table(Table::drop().table(SubagentTasks::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum SubagentTasks {
    Table,
    Id,
    ParentSessionId,
    ChildSessionId,
    Owner,
    Goal,
    Context,
    Depth,
    Status,
    Result,
    CreatedAt,
    ReportedAt,
}

#[derive(DeriveIden)]
enum BackgroundProcesses {
    Table,
    Id,
    SessionId,
    Owner,
    Command,
    Dir,
    Pid,
    PidStart,
    BootId,
    WatcherInstance,
    WatcherPid,
    WatcherHost,
    Status,
    ExitCode,
    Tail,
    StartedAt,
    EndedAt,
    ReportedAt,
}

#[derive(DeriveIden)]
enum Schedules {
    Table,
    OnceAt,
}
