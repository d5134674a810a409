//! Resumes bounded by crashes, not attempts (SPEC R13.9): `session_admissions.crash_resumes`
//! counts how often a turn was resumed after its owner died mid-turn. `[agent] max_resumes`
//! bounds it (a turn that kills its process must not loop); a hand-back at a graceful shutdown
//! resumes the turn too (`attempt` counts every attempt) but is no crash and does not count.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(SessionAdmissions::Table)
                .add_column(integer(SessionAdmissions::CrashResumes).default(0))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(SessionAdmissions::Table)
                .drop_column(SessionAdmissions::CrashResumes)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden)]
enum SessionAdmissions {
    Table,
    CrashResumes,
}
