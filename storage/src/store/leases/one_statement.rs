//! PostgreSQL: a free lease taken and the session's FIFO head claimed in one statement, one
//! round trip, committed on its own (issue 27).
//!
//! The transaction of [`Store::try_acquire_lease_and_claim`] sends eight messages one after
//! another (`BEGIN`, the lease, the head with its counts, the claim, the session, the user
//! row, the events, `COMMIT`). The user row is made from the head by the caller's code
//! ([`ClaimAs::user_row`]), so the head is read first, from a reader; the rest is one
//! statement of data-modifying CTEs that claims that admission only while it is still the
//! head and still `queued`.
//!
//! The statement's reads (the session's seq, the head, the counts for the `status` event)
//! are of the snapshot taken when it began, before the row locks it may wait for. It locks in
//! the order every fenced write keeps (the lease, the admission, the session), and the
//! session's update is a compare-and-set on the `last_event_seq` the snapshot read: every
//! change to a session's admissions moves that seq in the same commit. When another commit
//! overtook the snapshot the lease and the admission may already be written by then, so the
//! statement calls `turnkey_overtaken` (migration `m20261219_000001_overtaken`), PostgreSQL
//! undoes all of it, and it runs again. Whatever the statement does not handle (the lease
//! held or never taken, nothing queued, a turn still `started`, a rotated transcript) it
//! leaves untouched, and the transaction runs.
//!
//! The claim is a `StatusMove` (`admissions::status`): the status it sets and the status the
//! head must still have (which is also the status the head is the first of) are bound from it,
//! as `AdmissionStatus::can_become` allowed them; the statement names only the statuses its
//! queue counts read.
use super::{ClaimAs, LeaseClaim};
use crate::entity::session;
use crate::ids::*;
use crate::metrics::STORE;
use crate::model::*;
use crate::notify::{Notice, NoticeKind};
use crate::status::AdmissionStatus;
use crate::store::admissions::{first_queued, status_of, StatusMove};
use crate::store::{committed, convert, Result, Store, StoreError, ONE_STATEMENT_ATTEMPTS};
use sea_orm::FromQueryResult;
use serde_json::json;
use std::sync::atomic::Ordering;

/// `$1` session, `$2`–`$4` the owner (instance, pid, host), `$5` turn, `$6` platform, `$7`
/// now, `$8` the lease's expiry, `$9` the head read before, `$10`–`$24` the user row, `$25`
/// notice payloads, `$26` the notice channel, `$27` the status the claimed admission takes and
/// `$28` the status it must still have (`StatusMove::values`).
pub(in crate::store) const TAKE_AND_CLAIM: &str = r#"
WITH snap AS MATERIALIZED (
    SELECT last_event_seq, transcript_id FROM sessions WHERE id = $1
),
counts AS MATERIALIZED (
    SELECT count(*) FILTER (WHERE status = 'queued') AS queued,
           count(*) FILTER (WHERE status = 'started') AS started
    FROM session_admissions
    WHERE session_id = $1 AND status IN ('queued', 'started')
),
head AS MATERIALIZED (
    SELECT id FROM session_admissions
    WHERE session_id = $1 AND status = $28
    ORDER BY seq LIMIT 1
),
ready AS MATERIALIZED (
    SELECT 1 FROM snap, counts c, head h
    WHERE snap.transcript_id IS NULL AND c.started = 0 AND h.id = $9
),
taken AS (
    UPDATE session_turn_leases
    SET holder_instance = $2, holder_pid = $3, host = $4, turn_id = $5, platform = $6,
        acquired_at = $7, expires_at = $8, generation = generation + 1
    WHERE session_id = $1 AND holder_instance IS NULL AND EXISTS (SELECT 1 FROM ready)
    RETURNING generation
),
claimed AS (
    UPDATE session_admissions
    SET status = $27, owner_instance = $2, owner_pid = $3, owner_host = $4,
        turn_id = $5, started_at = $7
    WHERE id = $9 AND session_id = $1 AND status = $28 AND EXISTS (SELECT 1 FROM taken)
    RETURNING id
),
bumped AS (
    UPDATE sessions
    SET last_event_seq = last_event_seq + 2, last_message_idx = last_message_idx + 1,
        updated_at = $7
    WHERE id = $1 AND transcript_id IS NULL
      AND last_event_seq = (SELECT last_event_seq FROM snap)
      AND EXISTS (SELECT 1 FROM claimed)
    RETURNING *
),
written AS (
    INSERT INTO messages
        (id, session_id, idx, role, content, api_content, tool_calls, tool_call_id, name,
         turn_id, admission_id, display, platform_message_id, token_estimate, created_at,
         compressed_epoch, summary_epoch, summary_after_idx, copied_from, attachments)
    SELECT $10, $1, b.last_message_idx, $11, $12, $13, $14, $15, $16,
           $17, $18, $19, $20, $21, $7,
           NULL, $22, $23, NULL, $24
    FROM bumped b
    RETURNING idx
),
announced AS (
    INSERT INTO session_events (session_id, seq, turn_id, admission_id, kind, payload, created_at)
    SELECT $1, b.last_event_seq - 1, $5, $9, 'turn.started',
           json_build_object('turn_id', $5::text, 'admission_id', $9::text)::text, $7
    FROM bumped b
    UNION ALL
    SELECT $1, b.last_event_seq, NULL, NULL, 'status',
           json_build_object('state', 'running', 'queue_depth', c.queued - 1)::text, $7
    FROM bumped b, counts c
    RETURNING seq
),
notified AS (
    SELECT count(pg_notify($26, payload)) AS n
    FROM unnest($25::text[]) AS payload
    WHERE EXISTS (SELECT 1 FROM bumped)
)
SELECT b.*,
       (SELECT generation FROM taken) AS tk_generation,
       c.queued AS tk_queued,
       (SELECT count(*) FROM written) AS tk_written,
       (SELECT count(*) FROM announced) AS tk_announced,
       (SELECT n FROM notified) AS tk_notified,
       CASE WHEN EXISTS (SELECT 1 FROM taken) AND NOT EXISTS (SELECT 1 FROM bumped)
            THEN turnkey_overtaken('a lease taken with its claim')
            ELSE true END AS tk_whole
FROM counts c
LEFT JOIN bumped b ON true
"#;

/// What one run of [`TAKE_AND_CLAIM`] did.
enum Ran {
    Claimed(Fence, Box<Claimed>),
    /// Nothing written: the statement does not handle what it found.
    Untouched,
    /// Another commit overtook the snapshot; PostgreSQL undid the statement.
    Overtaken,
}

impl Store {
    /// [`Store::try_acquire_lease_and_claim`] with a turn to claim, on PostgreSQL, in one
    /// statement after one read. `None` when the statement does not handle what it found, or
    /// kept being overtaken: the caller then runs the transaction.
    pub(super) async fn take_and_claim_in_one_statement(
        &self,
        c: &LeaseClaim,
        how: &ClaimAs,
    ) -> Result<Option<(Fence, Option<Claimed>)>> {
        for _ in 0..ONE_STATEMENT_ATTEMPTS {
            let Some(head) = first_queued(self.reader(), c.session).await? else {
                return Ok(None);
            };
            match self.run_take_and_claim(c, how, head).await? {
                Ran::Claimed(fence, claimed) => return Ok(Some((fence, Some(*claimed)))),
                Ran::Untouched => return Ok(None),
                Ran::Overtaken => {
                    STORE.stale_snapshots.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(None)
    }

    async fn run_take_and_claim(
        &self,
        c: &LeaseClaim,
        how: &ClaimAs,
        head: Admission,
    ) -> Result<Ran> {
        let user = (how.user_row)(&head);
        let role = user
            .role
            .ok_or_else(|| StoreError::Corrupt("message without a role".into()))?;
        let now = now_ms();
        let notice = Notice {
            kind: NoticeKind::Events,
            origin: crate::notify::origin(),
            session: c.session,
            turn: None,
        };
        let payloads = crate::notify::payloads(self.peers(), &[notice]);
        let notified = !payloads.is_empty();
        let claim = StatusMove::checked(AdmissionStatus::Queued, AdmissionStatus::Started)?;
        let mut values = vec![
            c.session.to_string().into(),
            c.owner.instance.to_string().into(),
            c.owner.pid.into(),
            c.owner.host.clone().into(),
            how.turn.to_string().into(),
            c.platform.to_owned().into(),
            now.into(),
            (now + c.ttl_ms).into(),
            head.id.to_string().into(),
            user.id.to_string().into(),
            role.as_str().to_owned().into(),
            user.content.clone().into(),
            user.api_content.clone().into(),
            user.tool_calls.as_ref().map(|v| v.to_string()).into(),
            user.tool_call_id.clone().into(),
            user.name.clone().into(),
            user.turn_id.map(|t| t.to_string()).into(),
            user.admission_id.map(|a| a.to_string()).into(),
            user.display.as_ref().map(|v| v.to_string()).into(),
            user.platform_message_id.clone().into(),
            user.token_estimate.into(),
            user.summary_epoch.into(),
            user.summary_after_idx.into(),
            user.attachments.as_ref().map(|v| v.to_string()).into(),
            payloads.into(),
            crate::notify::CHANNEL.into(),
        ];
        values.extend(claim.values());
        let Some(row) = self
            .one_statement("a lease's claim", TAKE_AND_CLAIM, values)
            .await?
        else {
            return Ok(Ran::Overtaken);
        };
        let Some(generation) = row.try_get::<Option<i64>>("", "tk_generation")? else {
            return Ok(Ran::Untouched);
        };
        let written: i64 = row.try_get("", "tk_written")?;
        let announced: i64 = row.try_get("", "tk_announced")?;
        if (written, announced) != (1, 2) {
            return Err(StoreError::Corrupt(format!(
                "the claim of {} wrote {written} rows and {announced} events, not 1 and 2",
                head.id
            )));
        }
        crate::notify::count(1, notified);
        let queued: i64 = row.try_get("", "tk_queued")?;
        let session = session::Model::from_query_result(&row, "")?;
        let fence = Fence {
            session_id: c.session,
            instance: c.owner.instance,
            generation: LeaseGeneration(generation),
        };
        let started = NewEvent {
            session_id: c.session,
            kind: EventKind::TurnStarted,
            turn_id: Some(how.turn),
            admission_id: Some(head.id),
            data: json!({"turn_id": how.turn, "admission_id": head.id}),
        };
        let status = status_of(c.session, queued - 1, true).0;
        let last = session.last_event_seq;
        let events = vec![
            committed(&started, last - 1, now),
            committed(&status, last, now),
        ];
        Ok(Ran::Claimed(
            fence,
            Box::new(Claimed {
                admission: head,
                events,
                session: convert::session(session)?,
            }),
        ))
    }
}
