//! PostgreSQL: a turn's end in one statement, one round trip, committed on its own (issue 27).
//!
//! The transaction of [`Store::commit_turn_end_and_release`] sends twelve messages one after
//! another (`BEGIN`, the fence, the usage rows, the receipt, the session's lock and the queue
//! counts, the session, the turn's rows, the events, the release, the owner's counter,
//! `COMMIT`). Here they are one statement of data-modifying CTEs in the lock order every
//! fenced write keeps: the lease (the fence check, which also gives the lease up when nothing
//! waits behind the turn), the admission, the session, and the owner's counter last. The
//! turn's rows, events and usage go as JSON arrays, each one parameter.
//!
//! As in `admissions::one_statement` and `leases::one_statement`, the reads (the queue counts
//! for the `status` event and for "nothing waits") are of the statement's snapshot, and the
//! session's update is a compare-and-set on the `last_event_seq` that snapshot read. When the
//! lease was locked but the rest did not follow (another commit overtook the snapshot, or the
//! admission was no longer `started`) the statement calls `turnkey_overtaken`, PostgreSQL
//! undoes it all, and it runs again; after [`ONE_STATEMENT_ATTEMPTS`] tries the transaction
//! takes over and says what is wrong. A turn end the statement does not handle (one that
//! closes a tail, a reply to a platform chat, a rotated transcript) or a lost lease writes
//! nothing, and the transaction runs.
//!
//! The admission's move to `terminal` is a `StatusMove` (`admissions::status`): the statuses
//! it sets and requires are bound from it, as `AdmissionStatus::can_become` allowed them; the
//! statement names only the statuses its queue counts read.
use crate::ids::*;
use crate::metrics::STORE;
use crate::model::*;
use crate::notify::{Notice, NoticeKind};
use crate::status::AdmissionStatus;
use crate::store::admissions::StatusMove;
use crate::store::quotas::{day_of, usage_shard};
use crate::store::{committed, Result, Store, StoreError, ONE_STATEMENT_ATTEMPTS};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

/// `$1` session, `$2` the fence's instance, `$3` its generation, `$4` admission, `$5` turn,
/// `$6` outcome, `$7` now, `$8` whether to give the lease up when idle, `$9` whether there is
/// a reply (only a session without a chat is handled here), `$10` the turn's rows, `$11` its
/// events before `status`, `$12` its usage rows (JSON arrays), `$13`–`$16` the usage sums
/// (input, output, cache read, cost), `$17` the last call's prompt size (NULL without
/// calls), `$18` the owner's counter's day, `$19` its shard, `$20` notices of the events,
/// `$21` of the release, `$22` the notice channel, `$23` the status the admission takes and
/// `$24` the status it must still have (`StatusMove::values`).
pub(in crate::store) const TURN_END: &str = r#"
WITH snap AS MATERIALIZED (
    SELECT last_event_seq, transcript_id, chat_key, root_id FROM sessions WHERE id = $1
),
counts AS MATERIALIZED (
    SELECT count(*) FILTER (WHERE status = 'queued') AS queued,
           count(*) FILTER (WHERE status = 'started') AS started
    FROM session_admissions
    WHERE session_id = $1 AND status IN ('queued', 'started')
),
handled AS MATERIALIZED (
    SELECT (c.queued = 0 AND c.started = 1) AS idle
    FROM snap, counts c
    WHERE snap.transcript_id IS NULL
      AND (NOT $9 OR (snap.chat_key IS NULL AND snap.root_id IS NULL))
),
fenced AS (
    UPDATE session_turn_leases
    SET holder_instance = CASE WHEN $8 AND h.idle THEN NULL ELSE holder_instance END,
        holder_pid = CASE WHEN $8 AND h.idle THEN NULL ELSE holder_pid END,
        host = CASE WHEN $8 AND h.idle THEN NULL ELSE host END,
        turn_id = CASE WHEN $8 AND h.idle THEN NULL ELSE turn_id END,
        expires_at = CASE WHEN $8 AND h.idle THEN 0 ELSE expires_at END
    FROM handled h
    WHERE session_id = $1 AND holder_instance = $2 AND generation = $3
    RETURNING holder_instance IS NULL AS released
),
moved AS (
    UPDATE session_admissions
    SET status = $23, outcome = $6, finished_at = $7
    WHERE id = $4 AND session_id = $1 AND status = $24
      AND EXISTS (SELECT 1 FROM fenced)
    RETURNING id
),
bumped AS (
    UPDATE sessions
    SET last_event_seq = last_event_seq + json_array_length($11::json) + 1,
        last_message_idx = last_message_idx + json_array_length($10::json),
        updated_at = $7,
        input_tokens = input_tokens + $13,
        output_tokens = output_tokens + $14,
        cache_read_tokens = cache_read_tokens + $15,
        cost_usd = cost_usd + $16,
        last_prompt_tokens = COALESCE($17, last_prompt_tokens),
        last_prompt_at = CASE WHEN $17 IS NULL THEN last_prompt_at ELSE $7 END
    WHERE id = $1 AND transcript_id IS NULL
      AND last_event_seq = (SELECT last_event_seq FROM snap)
      AND EXISTS (SELECT 1 FROM moved)
    RETURNING last_event_seq, last_message_idx, owner
),
written AS (
    INSERT INTO messages
        (id, session_id, idx, role, content, api_content, tool_calls, tool_call_id, name,
         turn_id, admission_id, display, platform_message_id, token_estimate, created_at,
         compressed_epoch, summary_epoch, summary_after_idx, copied_from, attachments)
    SELECT m.id, $1, b.last_message_idx - json_array_length($10::json) + m.i,
           m.role, m.content, m.api_content, m.tool_calls, m.tool_call_id, m.name,
           m.turn_id, m.admission_id, m.display, m.platform_message_id, m.token_estimate, $7,
           NULL, m.summary_epoch, m.summary_after_idx, NULL, m.attachments
    FROM bumped b,
         json_to_recordset($10::json) AS m(
             i bigint, id text, role text, content text, api_content text, tool_calls text,
             tool_call_id text, name text, turn_id text, admission_id text, display text,
             platform_message_id text, token_estimate bigint, summary_epoch integer,
             summary_after_idx bigint, attachments text)
    RETURNING idx
),
charged AS (
    INSERT INTO usage_ledger
        (id, turn_id, session_id, provider, model, input_tokens, output_tokens,
         cache_read_tokens, cache_write_tokens, cost_usd, created_at)
    SELECT u.id, $5, $1, u.provider, u.model, u.input_tokens, u.output_tokens,
           u.cache_read_tokens, u.cache_write_tokens, u.cost_usd, $7
    FROM bumped,
         json_to_recordset($12::json) AS u(
             id text, provider text, model text, input_tokens bigint, output_tokens bigint,
             cache_read_tokens bigint, cache_write_tokens bigint, cost_usd double precision)
    RETURNING id
),
announced AS (
    INSERT INTO session_events (session_id, seq, turn_id, admission_id, kind, payload, created_at)
    SELECT $1, b.last_event_seq - json_array_length($11::json) - 1 + e.i,
           e.turn_id, e.admission_id, e.kind, e.payload, $7
    FROM bumped b,
         json_to_recordset($11::json) AS e(
             i bigint, turn_id text, admission_id text, kind text, payload text)
    UNION ALL
    SELECT $1, b.last_event_seq, NULL, NULL, 'status',
           json_build_object('state', CASE WHEN c.started > 1 THEN 'running' ELSE 'idle' END,
                             'queue_depth', c.queued)::text,
           $7
    FROM bumped b, counts c
    RETURNING seq
),
counted AS (
    INSERT INTO principal_usage_shards (principal, day, shard, tokens)
    SELECT b.owner, $18, $19, $13 + $14
    FROM bumped b
    WHERE $13 + $14 > 0
    ON CONFLICT (principal, day, shard)
    DO UPDATE SET tokens = principal_usage_shards.tokens + excluded.tokens
    RETURNING 1
),
notified AS (
    SELECT count(pg_notify($22, payload)) AS n
    FROM unnest($20::text[]) AS payload
    WHERE EXISTS (SELECT 1 FROM bumped)
    UNION ALL
    SELECT count(pg_notify($22, payload))
    FROM unnest($21::text[]) AS payload
    WHERE EXISTS (SELECT 1 FROM bumped) AND (SELECT released FROM fenced)
)
SELECT (SELECT released FROM fenced) AS tk_released,
       b.last_event_seq AS tk_last_event,
       c.queued AS tk_queued,
       c.started AS tk_started,
       (SELECT count(*) FROM written) AS tk_written,
       (SELECT count(*) FROM charged) AS tk_charged,
       (SELECT count(*) FROM announced) AS tk_announced,
       (SELECT count(*) FROM counted) AS tk_counted,
       (SELECT sum(n) FROM notified) AS tk_notified,
       CASE WHEN EXISTS (SELECT 1 FROM fenced) AND NOT EXISTS (SELECT 1 FROM bumped)
            THEN turnkey_overtaken('a turn end')
            ELSE true END AS tk_whole
FROM counts c
LEFT JOIN bumped b ON true
"#;

/// What one run of [`TURN_END`] did.
enum Ran {
    Ended(Vec<Event>, bool),
    /// Nothing written: the lease was lost, or the statement does not handle this end.
    Untouched,
    /// PostgreSQL undid the statement: another commit overtook its snapshot, or the admission
    /// was no longer `started`.
    Undone,
}

impl Store {
    /// [`Store::commit_turn_end_and_release`] (or without the release) in one statement on
    /// PostgreSQL; `None` when the statement does not handle `end` or did not go through: the
    /// caller then runs the transaction, which says what is wrong if anything is.
    pub(super) async fn turn_end_in_one_statement(
        &self,
        fence: &Fence,
        end: &TurnEnd,
        release_when_idle: bool,
    ) -> Result<Option<(Vec<Event>, bool)>> {
        if end.close_tail.is_some() || end.events.iter().any(|e| e.session_id != fence.session_id) {
            return Ok(None);
        }
        for _ in 0..ONE_STATEMENT_ATTEMPTS {
            match self.run_turn_end(fence, end, release_when_idle).await? {
                Ran::Ended(events, released) => return Ok(Some((events, released))),
                Ran::Untouched => return Ok(None),
                Ran::Undone => {
                    STORE.stale_snapshots.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(None)
    }

    async fn run_turn_end(
        &self,
        fence: &Fence,
        end: &TurnEnd,
        release_when_idle: bool,
    ) -> Result<Ran> {
        let now = now_ms();
        let bound = self.turn_end_values(fence, end, release_when_idle, now)?;
        let Some(row) = self
            .one_statement("a turn end", TURN_END, bound.values)
            .await?
        else {
            return Ok(Ran::Undone);
        };
        let Some(last_event) = row.try_get::<Option<i64>>("", "tk_last_event")? else {
            return Ok(Ran::Untouched);
        };
        let released = row
            .try_get::<Option<bool>>("", "tk_released")?
            .unwrap_or(false);
        let written: i64 = row.try_get("", "tk_written")?;
        let charged: i64 = row.try_get("", "tk_charged")?;
        let announced: i64 = row.try_get("", "tk_announced")?;
        let wanted = (
            end.messages.len() as i64,
            end.usage.len() as i64,
            end.events.len() as i64 + 1,
        );
        if (written, charged, announced) != wanted {
            return Err(StoreError::Corrupt(format!(
                "the end of turn {} wrote {written} rows, {charged} calls and {announced} \
                 events, not {wanted:?}",
                end.turn_id
            )));
        }
        crate::notify::count(1, bound.notified.0);
        if released {
            crate::notify::count(1, bound.notified.1);
        }
        let queued: i64 = row.try_get("", "tk_queued")?;
        let started: i64 = row.try_get("", "tk_started")?;
        let status = crate::store::admissions::status_of(fence.session_id, queued, started > 1).0;
        let first = last_event - end.events.len() as i64;
        let mut events: Vec<Event> = end
            .events
            .iter()
            .zip(first..)
            .map(|(e, seq)| committed(e, seq, now))
            .collect();
        events.push(committed(&status, last_event, now));
        Ok(Ran::Ended(events, released))
    }

    /// [`TURN_END`]'s parameters for `end` at `now`, and whether each notice (the events, the
    /// release) goes to peers.
    fn turn_end_values(
        &self,
        fence: &Fence,
        end: &TurnEnd,
        release_when_idle: bool,
        now: i64,
    ) -> Result<Bound> {
        let sid = fence.session_id.to_string();
        let ended = StatusMove::checked(AdmissionStatus::Started, AdmissionStatus::Terminal)?;
        let rows = end
            .messages
            .iter()
            .zip(1i64..)
            .map(|(m, i)| message_json(m, i))
            .collect::<Result<Vec<_>>>()?;
        let events: Vec<Value> = end.events.iter().zip(1i64..).map(event_json).collect();
        let usage: Vec<Value> = end.usage.iter().map(usage_json).collect();
        let sum = |f: fn(&NewUsage) -> i64| end.usage.iter().map(f).sum::<i64>();
        let cost: f64 = end.usage.iter().map(|u| u.cost_usd).sum();
        let notice = |kind| Notice {
            kind,
            origin: crate::notify::origin(),
            session: fence.session_id,
            turn: None,
        };
        let on_events = crate::notify::payloads(self.peers(), &[notice(NoticeKind::Events)]);
        let on_release = crate::notify::payloads(self.peers(), &[notice(NoticeKind::Released)]);
        let notified = (!on_events.is_empty(), !on_release.is_empty());
        let mut values = vec![
            sid.clone().into(),
            fence.instance.to_string().into(),
            fence.generation.0.into(),
            end.admission_id.to_string().into(),
            end.turn_id.to_string().into(),
            end.outcome.to_string().into(),
            now.into(),
            release_when_idle.into(),
            end.reply.is_some().into(),
            Value::Array(rows).to_string().into(),
            Value::Array(events).to_string().into(),
            Value::Array(usage).to_string().into(),
            sum(|u| u.input_tokens).into(),
            sum(|u| u.output_tokens).into(),
            sum(|u| u.cache_read_tokens).into(),
            cost.into(),
            end.usage.last().map(|u| u.input_tokens).into(),
            day_of(now).into(),
            usage_shard(&sid).into(),
            on_events.into(),
            on_release.into(),
            crate::notify::CHANNEL.into(),
        ];
        values.extend(ended.values());
        Ok(Bound { values, notified })
    }
}

/// [`TURN_END`]'s parameters, and whether each of its notices (events, release) goes out.
struct Bound {
    values: Vec<sea_orm::Value>,
    notified: (bool, bool),
}

/// A turn event as [`TURN_END`] reads it, `i` its place among the turn's events (from 1).
fn event_json((e, i): (&NewEvent, i64)) -> Value {
    json!({
        "i": i,
        "turn_id": e.turn_id.map(|t| t.to_string()),
        "admission_id": e.admission_id.map(|a| a.to_string()),
        "kind": e.kind.as_str(),
        "payload": e.data.to_string(),
    })
}

/// A usage row as [`TURN_END`] reads it, with a new id.
fn usage_json(u: &NewUsage) -> Value {
    json!({
        "id": uuid::Uuid::now_v7().to_string(),
        "provider": u.provider,
        "model": u.model,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "cost_usd": u.cost_usd,
    })
}

/// A turn row as [`TURN_END`] reads it, `i` its place among the turn's rows (from 1).
fn message_json(m: &NewMessage, i: i64) -> Result<Value> {
    let role = m
        .role
        .ok_or_else(|| StoreError::Corrupt("message without a role".into()))?;
    Ok(json!({
        "i": i,
        "id": m.id.to_string(),
        "role": role.as_str(),
        "content": m.content,
        "api_content": m.api_content,
        "tool_calls": m.tool_calls.as_ref().map(|v| v.to_string()),
        "tool_call_id": m.tool_call_id,
        "name": m.name,
        "turn_id": m.turn_id.map(|t| t.to_string()),
        "admission_id": m.admission_id.map(|a| a.to_string()),
        "display": m.display.as_ref().map(|v| v.to_string()),
        "platform_message_id": m.platform_message_id,
        "token_estimate": m.token_estimate,
        "summary_epoch": m.summary_epoch,
        "summary_after_idx": m.summary_after_idx,
        "attachments": m.attachments.as_ref().map(|v| v.to_string()),
    }))
}
