//! The `status` event (`{state, queue_depth}`) and the queue counts it is made of, the FIFO
//! head with its counts in one statement, and `StatusMove`, the one check every change of an
//! admission's status passes: `move_status` (the ORM's update) and the PostgreSQL
//! one-statement writes (`leases::one_statement`, `turn_end::one_statement`) alike.
//!
//! The rule: a write that changes an admission's status names no status of its own. It takes
//! a `StatusMove` (`from → to`), which exists only when `AdmissionStatus::can_become` allows
//! it, and sets `to` only on a row that is still `from` (a compare-and-set). The one-statement
//! writes bind the two as parameters (`StatusMove::values`); their queue counts (`queued`,
//! `started`) are reads, not moves, and name what they count.
use crate::entity::admission;
use crate::ids::*;
use crate::model::*;
use crate::status::AdmissionStatus;
use crate::store::{convert, insert_event, Result, StoreError, WriteTx};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, UpdateMany,
};
use serde_json::json;

/// Appends the `status` event (`{state, queue_depth}`, API.md) that follows every change of a
/// session's queue or running state, read inside the transaction that made the change.
pub(in crate::store) async fn insert_status_event(
    db: &WriteTx,
    session: SessionId,
) -> Result<Event> {
    insert_event(db, &status_event(db, session).await?.0).await
}

/// The session's `status` event as its admissions stand in `db` now: `running` while one is
/// started, and how many are queued (one grouped count); and whether it is idle (neither).
///
/// On PostgreSQL the session's row is locked first, so that the count sees every admission
/// committed before this transaction's events take their seqs: an admission locks that row
/// before it writes, and a count read before the lock could miss one that then commits
/// first, giving the `status` after its `admission.queued` a queue one short. (The lock
/// comes after the lease's and the admission's, the order every fenced write keeps.)
pub(in crate::store) async fn status_event<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
) -> Result<(NewEvent, bool)> {
    if db.get_database_backend() == sea_orm::DbBackend::Postgres {
        crate::entity::session::Entity::find_by_id(session.to_string())
            .select_only()
            .column(crate::entity::session::Column::Id)
            .lock_exclusive()
            .into_tuple::<String>()
            .one(db)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("session {session}")))?;
    }
    let (queued, started) = queue_counts(db, session).await?;
    Ok(status_of(session, queued, started > 0))
}

/// How many of the session's admissions are queued and how many started, in one grouped
/// count.
pub(in crate::store) async fn queue_counts<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
) -> Result<(i64, i64)> {
    #[derive(sea_orm::FromQueryResult)]
    struct Counted {
        status: String,
        n: i64,
    }
    let counts = admission::Entity::find()
        .select_only()
        .column(admission::Column::Status)
        .column_as(admission::Column::Id.count(), "n")
        .filter(admission::Column::SessionId.eq(session.to_string()))
        .filter(admission::Column::Status.is_in([
            AdmissionStatus::Queued.as_str(),
            AdmissionStatus::Started.as_str(),
        ]))
        .group_by(admission::Column::Status)
        .into_model::<Counted>()
        .all(db)
        .await?;
    let of = |status: AdmissionStatus| {
        counts
            .iter()
            .find(|c| c.status == status.as_str())
            .map_or(0, |c| c.n)
    };
    Ok((of(AdmissionStatus::Queued), of(AdmissionStatus::Started)))
}

/// The `status` event (`{state, queue_depth}`, API.md) for these counts, and whether the
/// session is idle (nothing queued, nothing running).
pub(in crate::store) fn status_of(
    session: SessionId,
    queue_depth: i64,
    running: bool,
) -> (NewEvent, bool) {
    let event = NewEvent {
        session_id: session,
        kind: EventKind::Status,
        turn_id: None,
        admission_id: None,
        data: json!({
            "state": if running { "running" } else { "idle" },
            "queue_depth": queue_depth,
        }),
    };
    (event, !running && queue_depth == 0)
}

/// The session's FIFO head (its first `queued` admission) with the numbers of its `queued`
/// and `started` admissions, in one statement: `None` when nothing is queued.
pub(in crate::store) async fn head_and_counts<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
) -> Result<Option<(Admission, i64, i64)>> {
    use sea_orm::sea_query::{Query, SubQueryStatement};
    use sea_orm::{FromQueryResult, QueryTrait};
    let count_of = |status: AdmissionStatus| {
        let counted = Query::select()
            .expr(Expr::col(admission::Column::Id).count())
            .from(admission::Entity)
            .and_where(Expr::col(admission::Column::SessionId).eq(session.to_string()))
            .and_where(Expr::col(admission::Column::Status).eq(status.as_str()))
            .to_owned();
        Expr::from(SubQueryStatement::from(counted))
    };
    let head = admission::Entity::find()
        .filter(admission::Column::SessionId.eq(session.to_string()))
        .filter(admission::Column::Status.eq(AdmissionStatus::Queued.as_str()))
        .order_by_asc(admission::Column::Seq)
        .limit(1)
        .expr_as(count_of(AdmissionStatus::Queued), "queued_n")
        .expr_as(count_of(AdmissionStatus::Started), "started_n")
        .into_query();
    let Some(row) = db.query_one(&head).await? else {
        return Ok(None);
    };
    let admission = convert::admission(admission::Model::from_query_result(&row, "")?)?;
    let queued: i64 = row.try_get("", "queued_n")?;
    let started: i64 = row.try_get("", "started_n")?;
    Ok(Some((admission, queued, started)))
}

/// A change of an admission's status that the status machine allows (SPEC R2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::store) struct StatusMove {
    pub from: AdmissionStatus,
    pub to: AdmissionStatus,
}

impl StatusMove {
    /// `from → to`, if `AdmissionStatus::can_become` allows it; a move it does not know is
    /// refused before any SQL runs.
    pub fn checked(from: AdmissionStatus, to: AdmissionStatus) -> Result<Self> {
        if from.can_become(to) {
            Ok(Self { from, to })
        } else {
            Err(StoreError::WrongState(format!(
                "an admission does not go from {} to {}",
                from.as_str(),
                to.as_str()
            )))
        }
    }

    /// The move's statuses as a one-statement write binds them: the status it sets, then the
    /// status the row must still have.
    pub fn values(self) -> [sea_orm::Value; 2] {
        [self.to.as_str().into(), self.from.as_str().into()]
    }
}

/// The one update that moves an admission's status (SPEC R2.4): a compare-and-set from `from`
/// to `to`, a `StatusMove`. The caller adds which row and what else the move sets, and reads
/// `rows_affected` (0: the admission was no longer `from`).
pub(in crate::store) fn move_status(
    from: AdmissionStatus,
    to: AdmissionStatus,
) -> Result<UpdateMany<admission::Entity>> {
    let StatusMove { from, to } = StatusMove::checked(from, to)?;
    Ok(admission::Entity::update_many()
        .col_expr(admission::Column::Status, Expr::value(to.as_str()))
        .filter(admission::Column::Status.eq(from.as_str())))
}

#[cfg(test)]
mod tests {
    use super::move_status;
    use crate::status::AdmissionStatus::{self, *};
    use sea_orm::{DbBackend, QueryTrait};

    /// The SQL of a move, or the refusal.
    fn sql(from: AdmissionStatus, to: AdmissionStatus) -> Option<String> {
        move_status(from, to)
            .ok()
            .map(|q| q.build(DbBackend::Sqlite).to_string())
    }

    fn moves_from_to(from: AdmissionStatus, to: AdmissionStatus) {
        let q = sql(from, to).unwrap_or_else(|| panic!("{from:?} → {to:?} refused"));
        let (set, filter) = q.split_once(" WHERE ").expect("a filtered update");
        assert!(
            set.ends_with(&format!(r#"SET "status" = '{}'"#, to.as_str())),
            "{q}"
        );
        assert_eq!(
            filter,
            format!(r#""session_admissions"."status" = '{}'"#, from.as_str()),
            "{q}"
        );
    }

    #[test]
    fn r2_4_queued_becomes_started_when_its_turn_claims_it() {
        moves_from_to(Queued, Started);
    }

    #[test]
    fn r2_4_started_becomes_terminal_when_its_turn_ends() {
        moves_from_to(Started, Terminal);
    }

    #[test]
    fn r2_4_started_becomes_unknown_when_its_owner_is_gone() {
        moves_from_to(Started, Unknown);
    }

    #[test]
    fn r2_4_queued_becomes_terminal_when_a_running_turn_carries_it() {
        moves_from_to(Queued, Terminal);
    }

    #[test]
    fn r2_4_every_other_move_is_refused_before_any_sql() {
        let all = [Queued, Started, Unknown, Terminal];
        let allowed = [
            (Queued, Started),
            (Started, Terminal),
            (Started, Unknown),
            (Queued, Terminal),
        ];
        for from in all {
            for to in all {
                assert_eq!(
                    sql(from, to).is_some(),
                    allowed.contains(&(from, to)),
                    "{from:?} → {to:?}"
                );
            }
        }
    }
}
