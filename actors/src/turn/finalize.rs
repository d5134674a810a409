//! Finalize (SPEC R10): the model stopping is not the turn ending. Recover an answer from the
//! stream if the last response was empty, close the transcript tail, record usage and cost,
//! assemble the result, and commit all of it with the terminal receipt in one transaction.
use super::TurnFailure;
use crate::delivery::DeliveryActor;
use crate::deps::Record;
use crate::stages::{timed, Stage};
use actix::Addr;
use serde_json::{json, Value};
use turnkey_providers::{estimate_tokens, Usage};
use turnkey_storage::*;

/// What the loop (`run::drive`) ended with: the final text or the failure, and the usage of
/// every model call it made.
#[derive(Default)]
pub struct Outcome {
    pub final_text: Option<String>,
    /// How the final text ended (`stop_reason`).
    pub stop: super::AnswerStop,
    pub failure: Option<TurnFailure>,
    pub usage: Usage,
    pub usage_rows: Vec<NewUsage>,
}

impl Outcome {
    /// A turn that ended with `failure` before its loop ran.
    pub fn failed(failure: TurnFailure) -> Self {
        Self {
            failure: Some(failure),
            ..Self::default()
        }
    }
}

/// How a turn left off, as finalize needs it.
pub struct Closing {
    pub fence: Fence,
    pub session_id: SessionId,
    pub admission_id: AdmissionId,
    pub turn_id: TurnId,
    /// What the loop ended with.
    pub outcome: Outcome,
    /// Text already streamed to clients during the turn.
    pub streamed: String,
    /// The stream's last delta, not committed yet: it commits first in the turn's end.
    pub held_delta: Option<String>,
    /// The session row the turn read (the lineage root) has no platform chat: there is no
    /// one to send a reply to. False when it is not known (the turn failed before reading it).
    pub no_chat: bool,
    /// Which attempt at the turn this was (SPEC R13.9): recorded in the outcome.
    pub attempt: i32,
    /// When the turn was told to stop, if it was (ms since the epoch).
    pub stopped_at: Option<i64>,
}

pub fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
    })
}

/// Commits the turn's end. When nothing is queued behind it, the same commit gives the
/// session's lease up; answers whether it did (the drain then has nothing left to release).
pub async fn finalize(record: Record<'_>, delivery: &Addr<DeliveryActor>, mut c: Closing) -> bool {
    match c.outcome.failure {
        Some(TurnFailure::Stopped(super::StopReason::LeaseLost)) => {
            // Another process may own the session: every write would be fenced out anyway,
            // and the new holder settles this admission.
            tracing::warn!(turn = %c.turn_id, "lease lost; turn ends without writing");
            return false;
        }
        Some(TurnFailure::Parked | TurnFailure::Stopped(super::StopReason::Shutdown))
            if may_hand_back(record.store, &c).await =>
        {
            tracing::info!(turn = %c.turn_id, "stopped by the shutdown; turn handed back to resume");
            return hand_back(record, &c).await;
        }
        // A parked round where another call of the batch was cut short by the grace: a side
        // effect may have been under way, so the turn settles as interrupted.
        Some(TurnFailure::Parked) => {
            c.outcome.failure = Some(TurnFailure::Stopped(super::StopReason::Shutdown));
        }
        _ => {}
    }
    // A fold from +0.0: `sum()` of no f64 is -0.0, which would render as "-0.0".
    let cost = c
        .outcome
        .usage_rows
        .iter()
        .fold(0.0_f64, |acc, u| acc + u.cost_usd);
    let (final_text, result, failure) = verdict(&c);

    // A grace-call summary (SPEC R7.3) is delivered although the turn failed.
    let delivers = failure.as_ref().is_none_or(|f| f.delivers_answer());
    let delivered = final_text.as_ref().filter(|_| delivers);
    // How the delivered answer ended: a cut-off or repeated answer is still the answer (R10.2).
    let stop_reason = delivered.map(|_| c.outcome.stop.code());

    let mut messages = Vec::new();
    let mut events = Vec::new();
    let ids = (c.session_id, c.turn_id, c.admission_id);
    if let Some(text) = c.held_delta.clone() {
        events.push(super::request::delta_event(ids, text));
    }
    let message_id = MessageId::new();
    let mut close_tail = None;
    if let Some(text) = delivered {
        // R10.3: a delivered final answer always has an assistant row.
        messages.push(assistant_row(message_id, text, &c));
        events.push(event(
            ids,
            EventKind::MessageComplete,
            json!({
                "message_id": message_id,
                "text": text,
                "stop_reason": stop_reason,
                "usage": usage_json(&c.outcome.usage),
                "cost": cost,
            }),
        ));
    } else if let Some(f) = failure.as_ref().filter(|f| !f.is_context_pressure()) {
        // The tail closure commits its events before `events`: a held delta goes out on its
        // own first, so that clients see it before the turn's close (a failure, so rare).
        if !events.is_empty() {
            let publish = crate::delivery::Publish {
                fence: Some(c.fence.clone()),
                event: events.remove(0),
            };
            super::request::deliver(delivery, publish, c.turn_id).await;
        }
        // R10.5: close an open user or tool tail so the next input is not merged with this
        // one; keep what the user already saw. Context-pressure failures must not grow. The
        // store reads the tail back in the closing transaction and decides what is open.
        close_tail = Some(TailClosure {
            closed_as: if result == TurnResult::Interrupted {
                ClosedAs::Interrupted
            } else {
                ClosedAs::Failed
            },
            reason: f.code(),
            message: f.message(),
            partial: Some(c.streamed.clone()),
        });
    }
    let (outcome, finished) = receipts(&c, result, delivered, stop_reason, failure.as_ref(), cost);
    events.push(event(ids, EventKind::TurnFinished, finished));

    let reply = chat_reply(&c, result, delivered, failure.as_ref());
    let end = TurnEnd {
        admission_id: c.admission_id,
        turn_id: c.turn_id,
        messages,
        close_tail,
        usage: c.outcome.usage_rows.clone(),
        outcome,
        events,
        reply,
    };
    commit(record, &c, &end).await
}

/// Commits the turn's end; then, and only then, its events go out to every subscriber (SSE,
/// WebSocket, platform drafts; platform replies leave through the outbox sender). Answers
/// whether the commit released the lease.
async fn commit(record: Record<'_>, c: &Closing, end: &TurnEnd) -> bool {
    let committed = record.store.commit_turn_end_and_release(&c.fence, end);
    match timed(Stage::Finalize, committed).await {
        Ok((committed, released)) => {
            let _delivery = tracing::info_span!("delivery", events = committed.len()).entered();
            committed.into_iter().for_each(|e| record.hub.publish(e));
            released
        }
        // The receipt stays `started`; once this process releases the lease, recovery marks it
        // `unknown` rather than inventing an outcome.
        Err(e) => {
            tracing::error!(turn = %c.turn_id, error = %e, "turn end not committed");
            false
        }
    }
}

/// The answer (R10.2: an empty final response after streamed text is recovered from the
/// stream), how the turn ended, and why it did not complete.
fn verdict(c: &Closing) -> (Option<String>, TurnResult, Option<TurnFailure>) {
    let final_text = c
        .outcome
        .final_text
        .clone()
        .filter(|t| !t.trim().is_empty())
        .or_else(|| {
            (c.outcome.failure.is_none() && !c.streamed.trim().is_empty())
                .then(|| c.streamed.clone())
        });
    let (result, failure) = match (&final_text, &c.outcome.failure) {
        (Some(_), None) => (TurnResult::Completed, None),
        (_, Some(f @ TurnFailure::Stopped(_))) => (TurnResult::Interrupted, Some(f.clone())),
        (_, Some(f)) => (TurnResult::Failed, Some(f.clone())),
        (None, None) => (TurnResult::Failed, Some(TurnFailure::EmptyResponse)),
    };
    (final_text, result, failure)
}

/// The admission's outcome and `turn.finished`'s data.
fn receipts(
    c: &Closing,
    result: TurnResult,
    delivered: Option<&String>,
    stop_reason: Option<&str>,
    failure: Option<&TurnFailure>,
    cost: f64,
) -> (Value, Value) {
    let outcome = json!({
        "result": result,
        "final_response": delivered,
        "stop_reason": stop_reason,
        "failure_reason": failure.map(|f| f.code()),
        "failure_message": failure.map(|f| f.message()),
        "usage": usage_json(&c.outcome.usage),
        "cost": cost,
        "attempts": c.attempt,
    });
    let usage = usage_json(&c.outcome.usage);
    let mut finished = json!({"result": result, "usage": usage, "cost": cost});
    if let Some(stop) = stop_reason {
        finished["stop_reason"] = json!(stop);
    }
    if let Some(f) = failure {
        finished["failure_reason"] = json!(f.code());
        finished["failure_message"] = json!(f.message());
    }
    (outcome, finished)
}

/// What a platform chat gets: the answer, or a line saying how the turn ended (SPEC R1.3).
fn chat_reply(
    c: &Closing,
    result: TurnResult,
    delivered: Option<&String>,
    failure: Option<&TurnFailure>,
) -> Option<String> {
    match (delivered, failure) {
        _ if c.no_chat => None,
        (Some(text), _) => Some(text.clone()),
        (None, Some(f)) if result == TurnResult::Interrupted => {
            Some(format!("⏹ Stopped ({}).", f.code()))
        }
        (None, Some(f)) => Some(format!("⚠️ This turn failed: {}", f.message())),
        (None, None) => None,
    }
}

/// A turn stopped by a graceful shutdown, in its model call or parked in its tool round, is
/// handed back rather than settled `interrupted` (SPEC R13.9) when that is safe: no tool of it
/// was running when the stop came (one still `started`, or one whose result came after the
/// stop, cut short: a side effect may have been under way, so it settles as interrupted). A
/// hand-back is no crash: it does not count against `[agent] max_resumes`.
async fn may_hand_back(store: &Store, c: &Closing) -> bool {
    let stop = c.stopped_at.unwrap_or(i64::MAX);
    // A call `unknown` since an earlier cut waits for a person's decision: parking it is what
    // keeps that question open across the restart (R13.1), not a cut of this stop.
    let cut_short = |r: &ToolRun| match r.status {
        ToolRunStatus::Started => true,
        ToolRunStatus::Unknown => false,
        _ => r.started_at.is_some() && r.finished_at.is_none_or(|f| f >= stop),
    };
    match store.tool_runs_of_turn(c.turn_id).await {
        Ok(runs) => !runs.iter().any(cut_short),
        Err(e) => {
            tracing::error!(turn = %c.turn_id, error = %e, "cannot read the turn's tool runs");
            false
        }
    }
}

/// Gives the turn back unsettled, with the lease, for the next owner to resume: answers
/// whether the lease was released here (else it expires, and recovery finds the turn then).
async fn hand_back(record: Record<'_>, c: &Closing) -> bool {
    let reason = ResumeReason::Shutdown;
    match record
        .store
        .hand_back(&c.fence, c.admission_id, reason)
        .await
    {
        Ok(events) => {
            events.into_iter().for_each(|e| record.hub.publish(e));
            true
        }
        Err(e) => {
            tracing::error!(turn = %c.turn_id, error = %e, "turn not handed back");
            false
        }
    }
}

fn assistant_row(id: MessageId, text: &str, c: &Closing) -> NewMessage {
    NewMessage {
        id,
        role: Some(MessageRole::Assistant),
        content: Some(text.to_owned()),
        turn_id: Some(c.turn_id),
        admission_id: Some(c.admission_id),
        token_estimate: i64::try_from(estimate_tokens(text)).unwrap_or(i64::MAX),
        ..Default::default()
    }
}

fn event(ids: (SessionId, TurnId, AdmissionId), kind: EventKind, data: Value) -> NewEvent {
    NewEvent {
        session_id: ids.0,
        kind,
        turn_id: Some(ids.1),
        admission_id: Some(ids.2),
        data,
    }
}
