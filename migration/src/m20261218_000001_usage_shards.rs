//! A principal's daily token counter split over shards (SPEC R13.8): `principal_usage_shards`,
//! keyed by `(principal, day, shard)`, the shard chosen by the session, replaces
//! `principal_usage`. Every turn end of a principal
//! added to one row, and on PostgreSQL that row's lock is held to the commit, so the turn ends
//! of all of a principal's sessions ran one after another (docs/benchmarks.md). The day's total
//! is the sum of its shards. Existing counts move to shard 0. (No table is renamed: SQLite
//! checks a rename's new name against the schema its connection last read, and the
//! migrations' statements may run on different pooled connections.)
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(PrincipalUsageShards::Table)
                .col(string(PrincipalUsageShards::Principal))
                // Days since the epoch, UTC.
                .col(big_integer(PrincipalUsageShards::Day))
                .col(big_integer(PrincipalUsageShards::Shard))
                .col(big_integer(PrincipalUsageShards::Tokens))
                .primary_key(
                    Index::create()
                        .col(PrincipalUsageShards::Principal)
                        .col(PrincipalUsageShards::Day)
                        .col(PrincipalUsageShards::Shard),
                )
                .to_owned(),
        )
        .await?;
        let copy = Query::insert()
            .into_table(PrincipalUsageShards::Table)
            .columns([
                PrincipalUsageShards::Principal,
                PrincipalUsageShards::Day,
                PrincipalUsageShards::Shard,
                PrincipalUsageShards::Tokens,
            ])
            .select_from(
                Query::select()
                    .column(PrincipalUsage::Principal)
                    .column(PrincipalUsage::Day)
                    .expr(Expr::val(0i64))
                    .column(PrincipalUsage::Tokens)
                    .from(PrincipalUsage::Table)
                    .to_owned(),
            )
            .map_err(|e| DbErr::Migration(e.to_string()))?
            .to_owned();
        m.exec_stmt(copy).await?;
        m.drop_table(Table::drop().table(PrincipalUsage::Table).to_owned())
            .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(PrincipalUsage::Table)
                .col(string(PrincipalUsage::Principal))
                .col(big_integer(PrincipalUsage::Day))
                .col(big_integer(PrincipalUsage::Tokens))
                .primary_key(
                    Index::create()
                        .col(PrincipalUsage::Principal)
                        .col(PrincipalUsage::Day),
                )
                .to_owned(),
        )
        .await?;
        let fold = Query::insert()
            .into_table(PrincipalUsage::Table)
            .columns([
                PrincipalUsage::Principal,
                PrincipalUsage::Day,
                PrincipalUsage::Tokens,
            ])
            .select_from(
                Query::select()
                    .column(PrincipalUsageShards::Principal)
                    .column(PrincipalUsageShards::Day)
                    .expr(Expr::col(PrincipalUsageShards::Tokens).sum())
                    .from(PrincipalUsageShards::Table)
                    .group_by_columns([PrincipalUsageShards::Principal, PrincipalUsageShards::Day])
                    .to_owned(),
            )
            .map_err(|e| DbErr::Migration(e.to_string()))?
            .to_owned();
        m.exec_stmt(fold).await?;
        m.drop_table(Table::drop().table(PrincipalUsageShards::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum PrincipalUsage {
    Table,
    Principal,
    Day,
    Tokens,
}

#[derive(DeriveIden)]
enum PrincipalUsageShards {
    Table,
    Principal,
    Day,
    Shard,
    Tokens,
}
