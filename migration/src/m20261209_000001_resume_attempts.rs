//! Safe automatic resume (SPEC R13.9): `session_admissions.attempt` counts the attempts at a
//! turn (1 for the first; a resume after a crash or a shutdown makes it 2, and a turn is
//! resumed by itself at most once), and `handed_back` says why the last owner gave a `started`
//! turn back without settling it (`shutdown`), so the next owner announces the right reason.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per ALTER TABLE.
        for col in [
            integer(SessionAdmissions::Attempt).default(1).to_owned(),
            string_null(SessionAdmissions::HandedBack),
        ] {
            m.alter_table(
                Table::alter()
                    .table(SessionAdmissions::Table)
                    .add_column(col)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for col in [SessionAdmissions::Attempt, SessionAdmissions::HandedBack] {
            m.alter_table(
                Table::alter()
                    .table(SessionAdmissions::Table)
                    .drop_column(col)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum SessionAdmissions {
    Table,
    Attempt,
    HandedBack,
}
