//! Tenancy (SPEC R13.8; API.md "Tenancy and security"): a token may expire and be read-only,
//! and says when it was last used; the audit log records who did what to whom (metadata only,
//! never prompts or arguments); per-principal limits are counted in the database, so every
//! replica counts the same: admissions by principal and time (turns per minute, running
//! turns), and model tokens per principal and UTC day, added in the commit that records a
//! turn's usage.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite alters one thing at a time.
        for col in [
            big_integer_null(ApiTokens::ExpiresAt),
            big_integer_null(ApiTokens::LastUsedAt),
            boolean(ApiTokens::ReadOnly).default(false).to_owned(),
        ] {
            m.alter_table(
                Table::alter()
                    .table(ApiTokens::Table)
                    .add_column(col)
                    .to_owned(),
            )
            .await?;
        }
        m.create_table(
            Table::create()
                .table(AuditLog::Table)
                .col(string(AuditLog::Id).primary_key())
                .col(big_integer(AuditLog::At))
                // Who: a principal id (the operator, a token's, a chat's).
                .col(string(AuditLog::Principal))
                // What: `token.created`, `token.revoked`, `approval.decided`, …
                .col(string(AuditLog::Action))
                // To what: the id it acted on.
                .col(string(AuditLog::Target))
                // Metadata as JSON (a decision, a name); never a prompt or tool arguments.
                .col(text(AuditLog::Detail))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_audit_log_at")
                .table(AuditLog::Table)
                .col(AuditLog::At)
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_admissions_principal_created")
                .table(SessionAdmissions::Table)
                .col(SessionAdmissions::Principal)
                .col(SessionAdmissions::CreatedAt)
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(PrincipalUsage::Table)
                .col(string(PrincipalUsage::Principal))
                // Days since the epoch, UTC.
                .col(big_integer(PrincipalUsage::Day))
                // Input and output tokens of every model call of its sessions that day.
                .col(big_integer(PrincipalUsage::Tokens))
                .primary_key(
                    Index::create()
                        .col(PrincipalUsage::Principal)
                        .col(PrincipalUsage::Day),
                )
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(PrincipalUsage::Table).to_owned())
            .await?;
        m.drop_index(
            Index::drop()
                .name("idx_admissions_principal_created")
                .table(SessionAdmissions::Table)
                .to_owned(),
        )
        .await?;
        m.drop_table(Table::drop().table(AuditLog::Table).to_owned())
            .await?;
        for col in [
            ApiTokens::ReadOnly,
            ApiTokens::LastUsedAt,
            ApiTokens::ExpiresAt,
        ] {
            m.alter_table(
                Table::alter()
                    .table(ApiTokens::Table)
                    .drop_column(col)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum ApiTokens {
    Table,
    ExpiresAt,
    LastUsedAt,
    ReadOnly,
}

#[derive(DeriveIden)]
enum AuditLog {
    Table,
    Id,
    At,
    Principal,
    Action,
    Target,
    Detail,
}

#[derive(DeriveIden)]
enum SessionAdmissions {
    Table,
    Principal,
    CreatedAt,
}

#[derive(DeriveIden)]
enum PrincipalUsage {
    Table,
    Principal,
    Day,
    Tokens,
}
