//! The outbox sender's full owner (SPEC R13.5): besides the instance id (added by
//! m20261205_000001), the pid and host token of the process that marked a row `sending`, so a
//! row left `sending` by a process that died on this host is judged at once (like a lease or an
//! admission: `actors/src/instance.rs`), and one of another host by its age.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per ALTER TABLE.
        for mut col in [
            big_integer_null(DeliveryOutbox::OwnerPid),
            string_null(DeliveryOutbox::OwnerHost),
        ] {
            m.alter_table(
                Table::alter()
                    .table(DeliveryOutbox::Table)
                    .add_column(&mut col)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for col in [DeliveryOutbox::OwnerHost, DeliveryOutbox::OwnerPid] {
            m.alter_table(
                Table::alter()
                    .table(DeliveryOutbox::Table)
                    .drop_column(col)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum DeliveryOutbox {
    Table,
    OwnerPid,
    OwnerHost,
}
