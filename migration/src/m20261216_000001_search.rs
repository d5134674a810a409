//! Full-text search over transcripts (`GET /v1/sessions?q=`, issue 26). SQLite: an FTS5 index
//! of `messages.content` kept by triggers (external content: the text is stored once, in
//! `messages`), filled from the rows already there. PostgreSQL: a GIN index on the `simple`
//! `tsvector` of the content, which the search's `@@` uses. The `simple` configuration and
//! FTS5's default tokenizer both match words in any language without stemming.
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

const SQLITE_UP: [&str; 5] = [
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='rowid')",
    "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN \
       INSERT INTO messages_fts(rowid, content) VALUES (new.rowid, new.content); END",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN \
       INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.rowid, old.content); END",
    "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN \
       INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.rowid, old.content); \
       INSERT INTO messages_fts(rowid, content) VALUES (new.rowid, new.content); END",
    "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
];

const SQLITE_DOWN: [&str; 4] = [
    "DROP TRIGGER IF EXISTS messages_fts_update",
    "DROP TRIGGER IF EXISTS messages_fts_delete",
    "DROP TRIGGER IF EXISTS messages_fts_insert",
    "DROP TABLE IF EXISTS messages_fts",
];

const POSTGRES_UP: &str = "CREATE INDEX IF NOT EXISTS idx_messages_content_fts ON messages \
     USING GIN (to_tsvector('simple', coalesce(content, '')))";
const POSTGRES_DOWN: &str = "DROP INDEX IF EXISTS idx_messages_content_fts";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let db = m.get_connection();
        match m.get_database_backend() {
            DbBackend::Sqlite => {
                for sql in SQLITE_UP {
                    db.execute_unprepared(sql).await?;
                }
            }
            DbBackend::Postgres => {
                db.execute_unprepared(POSTGRES_UP).await?;
            }
            other => {
                return Err(DbErr::Migration(format!(
                    "full-text search is built for SQLite and PostgreSQL, not {other:?}"
                )))
            }
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let db = m.get_connection();
        match m.get_database_backend() {
            DbBackend::Sqlite => {
                for sql in SQLITE_DOWN {
                    db.execute_unprepared(sql).await?;
                }
            }
            _ => {
                db.execute_unprepared(POSTGRES_DOWN).await?;
            }
        }
        Ok(())
    }
}
