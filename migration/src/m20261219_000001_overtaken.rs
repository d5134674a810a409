//! PostgreSQL: `turnkey_overtaken(what)`, which fails the statement that calls it with SQLSTATE
//! `TK409`. A fenced write sent as one statement (`store::leases::one_statement`) reads one
//! snapshot, taken before the row locks it may wait for; when it finds, after writing, that
//! another commit overtook that snapshot, it calls this so that PostgreSQL undoes the whole
//! statement, and the store runs it again. SQLite needs nothing: its writer is one
//! connection, and a transaction there sees every commit before its own.
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        if m.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        m.get_connection()
            .execute_unprepared(
                "CREATE OR REPLACE FUNCTION turnkey_overtaken(what text) RETURNS boolean \
                 LANGUAGE plpgsql VOLATILE AS $$ \
                 BEGIN \
                   RAISE EXCEPTION 'turnkey: % was overtaken by another commit', what \
                     USING ERRCODE = 'TK409'; \
                 END $$",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        if m.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        m.get_connection()
            .execute_unprepared("DROP FUNCTION IF EXISTS turnkey_overtaken(text)")
            .await?;
        Ok(())
    }
}
