//! What a principal's limits are counted against (SPEC R13.8; `[limits]`), in the database so
//! that every replica counts the same: the inputs it had admitted lately (by the
//! `(principal, created_at)` index), its running turns, and its model tokens of the day, a
//! counter per principal and UTC day that the commit recording a turn's usage adds to.
use super::{Result, Store, WriteTx};
use crate::entity::{admission, principal_usage, session};
use crate::model::NewUsage;
use crate::status::AdmissionStatus;
use sea_orm::sea_query::{Alias, Expr, Func, InsertStatement, OnConflict, Query};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect,
};

const DAY_MS: i64 = 24 * 3600 * 1000;

/// The UTC day (days since the epoch) of `ms`.
pub fn day_of(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
}

/// When the UTC day after `ms` begins (ms).
pub fn next_day_at(ms: i64) -> i64 {
    (day_of(ms) + 1) * DAY_MS
}

impl Store {
    /// Inputs `principal` had admitted at or after `since` (ms) through a door (the gateway's
    /// own internal inputs, reports and schedules, are not counted), and the `created_at` of
    /// the oldest of them (when the count goes down next).
    pub async fn admitted_since(&self, principal: &str, since: i64) -> Result<(u64, Option<i64>)> {
        // One statement: the count and the oldest together.
        // Read by name: the store's own SQLite rows are keyed by column name, not position.
        #[derive(sea_orm::FromQueryResult)]
        struct Counted {
            n: i64,
            oldest: Option<i64>,
        }
        let row: Option<Counted> = admission::Entity::find()
            .select_only()
            .column_as(admission::Column::Id.count(), "n")
            .column_as(admission::Column::CreatedAt.min(), "oldest")
            .filter(admission::Column::Principal.eq(principal))
            .filter(admission::Column::CreatedAt.gte(since))
            .filter(admission::Column::Surface.ne("internal"))
            .into_model::<Counted>()
            .one(self.reader())
            .await?;
        let (n, oldest) = row.map_or((0, None), |r| (r.n, r.oldest));
        Ok((u64::try_from(n).unwrap_or(0), oldest))
    }

    /// How many turns of `principal`'s admissions run now (on any replica).
    pub async fn running_turns_of(&self, principal: &str) -> Result<u64> {
        Ok(admission::Entity::find()
            .filter(admission::Column::Principal.eq(principal))
            .filter(admission::Column::Status.eq(AdmissionStatus::Started.as_str()))
            .count(self.reader())
            .await?)
    }

    /// Model tokens (input and output) spent by `principal`'s sessions on UTC day `day`: the
    /// sum of the day's shards.
    pub async fn tokens_on_day(&self, principal: &str, day: i64) -> Result<i64> {
        // Read by name: the store's own SQLite rows are keyed by column name, not position.
        #[derive(sea_orm::FromQueryResult)]
        struct Total {
            tokens: Option<i64>,
        }
        let total: Option<Total> = principal_usage::Entity::find()
            .select_only()
            // PostgreSQL sums a BIGINT as NUMERIC: cast back, on both backends alike.
            .column_as(
                Expr::from(Func::cast_as(
                    Func::sum(Expr::col(principal_usage::Column::Tokens)),
                    Alias::new("BIGINT"),
                )),
                "tokens",
            )
            .filter(principal_usage::Column::Principal.eq(principal))
            .filter(principal_usage::Column::Day.eq(day))
            .into_model::<Total>()
            .one(self.reader())
            .await?;
        Ok(total.and_then(|t| t.tokens).unwrap_or(0))
    }
}

/// Rows a principal's daily token count is split over. Sessions of one principal that end
/// turns at once add to different rows (but for collisions of the session's shard); a read
/// sums at most this many rows.
pub(crate) const USAGE_SHARDS: i64 = 16;

/// The counter row of `session_id` among a day's [`USAGE_SHARDS`]: any stable spread will do
/// (reads sum them all), FNV-1a of the id here.
pub(in crate::store) fn usage_shard(session_id: &str) -> i64 {
    let hash = session_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    i64::try_from(hash % USAGE_SHARDS.unsigned_abs()).unwrap_or(0)
}

impl Store {
    /// Adds `tokens` that `principal` spent outside any session (a call to a `direct/` model
    /// of the OpenAI-compatible endpoint) to its counter of the day, so `[limits]
    /// tokens_per_day` counts them like a turn's.
    pub async fn add_direct_usage(&self, principal: &str, tokens: i64) -> Result<()> {
        if tokens <= 0 {
            return Ok(());
        }
        let mut insert = counter_insert();
        insert
            .values([
                principal.into(),
                day_of(crate::ids::now_ms()).into(),
                usage_shard(principal).into(),
                tokens.into(),
            ])
            .map_err(|e| super::StoreError::Corrupt(format!("the usage counter's insert: {e}")))?
            .on_conflict(counter_added());
        self.writer().execute(&insert).await?;
        Ok(())
    }
}

/// Adds `calls`' tokens to the day's counter of the owner of session `session_id` (the
/// session's shard of it). Every transaction that counts usage does this last, just before its
/// commit: on PostgreSQL the row's lock is held from this statement to the commit, so taken
/// earlier it made each turn end of a principal wait for the whole of the one before (see
/// docs/benchmarks.md, 2026-12-07). Last is also the one lock order: every other row first.
pub(in crate::store) async fn add_principal_usage(
    tx: &WriteTx,
    session_id: &str,
    calls: &[NewUsage],
    now: i64,
) -> Result<()> {
    let tokens: i64 = calls
        .iter()
        .map(|u| u.input_tokens.saturating_add(u.output_tokens))
        .sum();
    if tokens == 0 {
        return Ok(());
    }
    // One statement: the owner is read by the insert itself (`INSERT … SELECT`), so a turn's
    // end pays no extra round trip for the counter.
    let mut insert = counter_insert();
    insert
        .select_from(
            Query::select()
                .column(session::Column::Owner)
                .expr(Expr::val(day_of(now)))
                .expr(Expr::val(usage_shard(session_id)))
                .expr(Expr::val(tokens))
                .from(session::Entity)
                .and_where(session::Column::Id.eq(session_id))
                .to_owned(),
        )
        .map_err(|e| super::StoreError::Corrupt(format!("the usage counter's insert: {e}")))?
        .on_conflict(counter_added());
    tx.execute(&insert).await?;
    Ok(())
}

/// An insert into a principal's day counter (principal, day, shard, tokens); its rows follow.
fn counter_insert() -> InsertStatement {
    let mut insert = Query::insert();
    insert.into_table(principal_usage::Entity).columns([
        principal_usage::Column::Principal,
        principal_usage::Column::Day,
        principal_usage::Column::Shard,
        principal_usage::Column::Tokens,
    ]);
    insert
}

/// A counter row that exists already gets the tokens added.
fn counter_added() -> OnConflict {
    OnConflict::columns([
        principal_usage::Column::Principal,
        principal_usage::Column::Day,
        principal_usage::Column::Shard,
    ])
    .value(
        principal_usage::Column::Tokens,
        Expr::cust("principal_usage_shards.tokens + excluded.tokens"),
    )
    .to_owned()
}
