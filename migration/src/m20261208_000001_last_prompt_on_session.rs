//! The provider's prompt size for a session's last recorded call (SPEC R6.1: a turn's first
//! pressure measurement starts from it) is kept on the session row, written by the turn end
//! that records the call. A turn reads its session row anyway, so it no longer queries the
//! usage ledger for it. Rows of existing sessions are filled from the ledger.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per ALTER TABLE.
        for col in [
            big_integer_null(Sessions::LastPromptTokens),
            big_integer_null(Sessions::LastPromptAt),
        ] {
            m.alter_table(
                Table::alter()
                    .table(Sessions::Table)
                    .add_column(col)
                    .to_owned(),
            )
            .await?;
        }
        // The last call is the newest row, the greatest (time-ordered) id among equals.
        m.get_connection()
            .execute_unprepared(
                "UPDATE sessions SET \
                 last_prompt_tokens = (SELECT u.input_tokens FROM usage_ledger u \
                   WHERE u.session_id = sessions.id \
                   ORDER BY u.created_at DESC, u.id DESC LIMIT 1), \
                 last_prompt_at = (SELECT u.created_at FROM usage_ledger u \
                   WHERE u.session_id = sessions.id \
                   ORDER BY u.created_at DESC, u.id DESC LIMIT 1)",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for col in [Sessions::LastPromptTokens, Sessions::LastPromptAt] {
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
enum Sessions {
    Table,
    LastPromptTokens,
    LastPromptAt,
}
