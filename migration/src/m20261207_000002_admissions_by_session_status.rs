//! A drain looks for its session's next `queued` admission, and for `started` ones, several
//! times a turn (`next_queued`, `started_admissions`, the lease commit's claim of the head).
//! With only `(status, session_id)` and `(session_id, seq)` to choose from, SQLite walked the
//! session's admissions in seq order and filtered on status: every turn cost more than the
//! last. `(session_id, status, seq)` answers each of these reads in order, at once.
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const NAME: &str = "idx_admissions_session_status_seq";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(
            Index::create()
                .name(NAME)
                .table(SessionAdmissions::Table)
                .col(SessionAdmissions::SessionId)
                .col(SessionAdmissions::Status)
                .col(SessionAdmissions::Seq)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(
            Index::drop()
                .name(NAME)
                .table(SessionAdmissions::Table)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden)]
enum SessionAdmissions {
    Table,
    SessionId,
    Status,
    Seq,
}
