//! Providers connected at run time (API.md `POST /v1/providers`, the web UI's "Connect a
//! model"): they follow the configured `[[providers]]` in the fallback chain and apply without a
//! restart. The API key is stored sealed (AES-256-GCM under a key in the data directory), never
//! in clear.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(ConnectedProviders::Table)
                .col(string(ConnectedProviders::Name).primary_key())
                // `openai` or `anthropic`.
                .col(string(ConnectedProviders::Kind))
                .col(string(ConnectedProviders::BaseUrl))
                .col(string(ConnectedProviders::Model))
                // base64 of nonce ‖ ciphertext ‖ tag; null when the server needs no key.
                .col(text_null(ConnectedProviders::ApiKeySealed))
                .col(big_integer_null(ConnectedProviders::ContextWindow))
                .col(boolean_null(ConnectedProviders::Vision))
                .col(big_integer(ConnectedProviders::CreatedAt))
                // Who connected it (a principal id).
                .col(string(ConnectedProviders::CreatedBy))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(ConnectedProviders::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum ConnectedProviders {
    Table,
    Name,
    Kind,
    BaseUrl,
    Model,
    ApiKeySealed,
    ContextWindow,
    Vision,
    CreatedAt,
    CreatedBy,
}
