//! PostgreSQL: an admission in one statement, one round trip, committed on its own (issue 27).
//!
//! The transaction of [`Store::try_admit`] sends seven messages to the server one after
//! another (`BEGIN`, the session's update, the request-id lookup, the queue counts, the insert,
//! the events, `COMMIT`). Here the same facts are one statement of data-modifying CTEs, run
//! outside a transaction: PostgreSQL commits it alone, whole or not at all.
//!
//! One difference needs a guard. Every part of one statement reads the snapshot taken when it
//! began, and the update of the session's row may first wait for another transaction that
//! holds it (an admission, a claim, a turn end) and then see that transaction's commit, which
//! the lookup and the counts, read at the older snapshot, do not. Every change to a session's
//! admissions moves its row's `last_event_seq` in the same commit (a status change is
//! committed with its event), so the update only goes ahead while that seq is still the one
//! the snapshot read: a compare-and-set. When another commit overtook the snapshot, the
//! update matches no row, nothing is inserted, and the statement runs again with a new
//! snapshot; after [`ONE_STATEMENT_ATTEMPTS`] tries the transaction of [`Store::try_admit`]
//! takes over. The lock order is the transaction's: the session row, then the admission row.
use super::duplicate_of;
use crate::entity::admission;
use crate::ids::*;
use crate::metrics::STORE;
use crate::model::*;
use crate::notify::{Notice, NoticeKind};
use crate::store::{committed, convert, Result, Store, StoreError, ONE_STATEMENT_ATTEMPTS};
use sea_orm::FromQueryResult;
use std::sync::atomic::Ordering;

/// `$1` session, `$2` request id, `$3` new admission id, `$4` payload digest, `$5` payload,
/// `$6` principal, `$7` surface, `$8` retry of, `$9` now, `$10` notice payloads, `$11` the
/// notice channel, `$12` the input as `admission.queued` shows it (`input_of`, a JSON
/// object), `$13` the title an untitled session takes (or NULL).
///
/// `counts` always yields one row (an aggregate without `GROUP BY`), so the final select does
/// too. The events are written in the order and with the data of the transaction's path
/// (`admission.queued`, then `status`), their seqs the two the update took.
pub(in crate::store) const ADMIT: &str = r#"
WITH snap AS MATERIALIZED (
    SELECT last_event_seq FROM sessions WHERE id = $1
),
dup AS MATERIALIZED (
    SELECT * FROM session_admissions WHERE session_id = $1 AND request_id = $2
),
counts AS MATERIALIZED (
    SELECT count(*) FILTER (WHERE status = 'queued') AS queued,
           count(*) FILTER (WHERE status = 'started') AS started
    FROM session_admissions
    WHERE session_id = $1 AND status IN ('queued', 'started')
),
bumped AS (
    UPDATE sessions
    SET last_admission_seq = last_admission_seq + 1,
        last_event_seq = last_event_seq + 2,
        updated_at = $9,
        title = COALESCE(title, $13::text)
    WHERE id = $1
      AND last_event_seq = (SELECT last_event_seq FROM snap)
      AND NOT EXISTS (SELECT 1 FROM dup)
    RETURNING last_admission_seq, last_event_seq, busy_policy
),
admitted AS (
    INSERT INTO session_admissions
        (id, session_id, seq, request_id, payload_digest, payload_json, principal, surface,
         status, created_at, retry_of, attempt)
    SELECT $3, $1, b.last_admission_seq, $2, $4, $5, $6, $7, 'queued', $9, $8, 1
    FROM bumped b
    RETURNING seq
),
announced AS (
    INSERT INTO session_events (session_id, seq, turn_id, admission_id, kind, payload, created_at)
    SELECT $1, b.last_event_seq - 1, NULL, $3, 'admission.queued',
           ($12::jsonb || jsonb_build_object('admission_id', $3::text,
                                             'seq_in_queue', c.queued + c.started + 1))::text,
           $9
    FROM admitted, bumped b, counts c
    UNION ALL
    SELECT $1, b.last_event_seq, NULL, NULL, 'status',
           json_build_object('state', CASE WHEN c.started > 0 THEN 'running' ELSE 'idle' END,
                             'queue_depth', c.queued + 1)::text,
           $9
    FROM admitted, bumped b, counts c
    RETURNING seq
),
notified AS (
    SELECT count(pg_notify($11, payload)) AS n
    FROM unnest($10::text[]) AS payload
    WHERE EXISTS (SELECT 1 FROM admitted)
)
SELECT d.*,
       EXISTS (SELECT 1 FROM snap) AS tk_found,
       b.busy_policy AS tk_busy_policy,
       b.last_admission_seq AS tk_seq,
       b.last_event_seq AS tk_last_event,
       c.queued AS tk_queued,
       c.started AS tk_started,
       (SELECT count(*) FROM announced) AS tk_announced,
       (SELECT n FROM notified) AS tk_notified
FROM counts c
LEFT JOIN dup d ON true
LEFT JOIN bumped b ON true
"#;

/// What one run of [`ADMIT`] found.
enum Ran {
    Admitted(Admitted),
    Duplicate(Admitted),
    /// Another commit to the session overtook the snapshot: nothing was written.
    Overtaken,
}

impl Store {
    /// [`Store::try_admit`] in one statement on PostgreSQL; `None` when the statement kept
    /// being overtaken (the caller then runs the transaction).
    pub(super) async fn admit_in_one_statement(
        &self,
        new: &NewAdmission,
    ) -> Option<Result<Admitted>> {
        for _ in 0..ONE_STATEMENT_ATTEMPTS {
            match self.run_admit(new).await {
                Ok(Ran::Admitted(a) | Ran::Duplicate(a)) => return Some(Ok(a)),
                Ok(Ran::Overtaken) => {
                    STORE.stale_snapshots.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }

    async fn run_admit(&self, new: &NewAdmission) -> Result<Ran> {
        let id = AdmissionId::new();
        let now = now_ms();
        let notices = [NoticeKind::Admitted, NoticeKind::Events].map(|kind| Notice {
            kind,
            origin: crate::notify::origin(),
            session: new.session_id,
            turn: None,
        });
        let payloads = crate::notify::payloads(self.peers(), &notices);
        let notified = !payloads.is_empty();
        let sid = new.session_id.to_string();
        let values = vec![
            sid.clone().into(),
            new.request_id.clone().into(),
            id.to_string().into(),
            new.payload_digest.clone().into(),
            new.payload.to_string().into(),
            new.principal.clone().into(),
            new.surface.clone().into(),
            new.retry_of.map(|r| r.to_string()).into(),
            now.into(),
            payloads.into(),
            crate::notify::CHANNEL.into(),
            super::input_of(new).to_string().into(),
            new.title.clone().into(),
        ];
        let Some(row) = self.one_statement("an admission", ADMIT, values).await? else {
            return Ok(Ran::Overtaken);
        };
        if !row.try_get::<bool>("", "tk_found")? {
            return Err(StoreError::NotFound(format!("session {sid}")));
        }
        if row.try_get::<Option<String>>("", "id")?.is_some() {
            let existing = convert::admission(admission::Model::from_query_result(&row, "")?)?;
            return duplicate_of(existing, new).map(Ran::Duplicate);
        }
        let Some(seq) = row.try_get::<Option<i64>>("", "tk_seq")? else {
            return Ok(Ran::Overtaken);
        };
        let last_event: i64 = row.try_get("", "tk_last_event")?;
        let queued: i64 = row.try_get("", "tk_queued")?;
        let started: i64 = row.try_get("", "tk_started")?;
        let announced: i64 = row.try_get("", "tk_announced")?;
        if announced != 2 {
            // The update and the inserts are one statement: this cannot commit half.
            return Err(StoreError::Corrupt(format!(
                "admission {id} of session {sid} committed {announced} events, not 2"
            )));
        }
        crate::notify::count(notices.len(), notified);
        let events = super::announced(new, id, queued, started);
        Ok(Ran::Admitted(Admitted {
            admission: convert::admission(super::queued_row(new, id, seq, now))?,
            duplicate: false,
            busy_policy: row.try_get("", "tk_busy_policy")?,
            events: vec![
                committed(&events[0], last_event - 1, now),
                committed(&events[1], last_event, now),
            ],
        }))
    }
}
