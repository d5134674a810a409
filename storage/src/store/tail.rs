//! Closing an open transcript tail (SPEC R10.3, R10.5, R2.4). A turn that ends without a final
//! answer (failed, interrupted, or of unknown outcome) leaves no tool call without a result and
//! no user or tool row without an assistant row after it: otherwise the next input would be
//! merged with it on the wire. The tail is read back inside the caller's transaction, so what
//! is closed is what is durable, not what a process remembered.
//!
//! Two steps: every tool call of the turn without a result gets one (`outcome unknown: … may or
//! may not have run` for an unknown turn, `no result: the turn ended …` otherwise); then, unless
//! the turn already ends with an assistant row without calls, an assistant *boundary* row is
//! added. Its `content` is what the user already saw (the streamed text, read back from the
//! committed `message.delta` events of the turn's last model call), or a marker when nothing was
//! streamed; its `api_content`, what the model is sent from now on, is that text followed by
//! `[cut off: …]`, or `[no answer: …]` alone; its `display` says `{boundary: true, closed_as,
//! failure_reason, partial}`. So after a crash mid-answer the next request reads `user "tell me a
//! story"`, `assistant "Once upon a time [cut off: …]"`, `user "the next input"`: never
//! `user, user`, and never an invented reply. A context overflow is the one exception (SPEC R10.5:
//! it must not grow the transcript).
use super::log::insert_message;
use super::{convert, insert_event, Result};
use crate::entity::{approval, event, message, tool_run};
use crate::ids::*;
use crate::model::*;
use crate::status::{ApprovalStatus, ToolOutcome, ToolRunStatus};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use serde_json::json;
use std::collections::HashSet;

/// Closes the tail of `turn` as `closure` says; returns the events of the questions it closed
/// (pending approvals of the turn, now moot).
pub(super) async fn close_tail(
    db: &super::WriteTx,
    session: SessionId,
    turn: TurnId,
    admission: AdmissionId,
    closure: &TailClosure,
) -> Result<Vec<Event>> {
    let rows = turn_rows(db, session, turn).await?;
    close_rows(db, session, &rows, turn, admission, closure).await
}

/// Inserts what closes `rows` (see [`closing_rows`]) and settles what the turn left waiting:
/// calls still `planned` are `finished` as skipped (their closing result says they did not
/// run), and pending approvals are denied. A call that was `started` or is `unknown` stays as
/// it is: it may have run, and the store does not pretend otherwise.
pub(super) async fn close_rows(
    db: &super::WriteTx,
    session: SessionId,
    rows: &[Message],
    turn: TurnId,
    admission: AdmissionId,
    closure: &TailClosure,
) -> Result<Vec<Event>> {
    let added = closing_rows(rows, turn, admission, closure);
    for m in &added {
        insert_message(db, session, m).await?;
    }
    let now = now_ms();
    tool_run::Entity::update_many()
        .col_expr(
            tool_run::Column::Status,
            Expr::value(ToolRunStatus::Finished.as_str()),
        )
        .col_expr(
            tool_run::Column::Outcome,
            Expr::value(ToolOutcome::Skipped.as_str()),
        )
        .col_expr(tool_run::Column::FinishedAt, Expr::value(now))
        .filter(tool_run::Column::TurnId.eq(turn.to_string()))
        .filter(tool_run::Column::Status.eq(ToolRunStatus::Planned.as_str()))
        .exec(db)
        .await?;
    let pending = approval::Entity::find()
        .filter(approval::Column::TurnId.eq(turn.to_string()))
        .filter(approval::Column::Status.eq(ApprovalStatus::Pending.as_str()))
        .all(db)
        .await?;
    let mut events = Vec::with_capacity(pending.len());
    for a in pending {
        approval::Entity::update_many()
            .col_expr(
                approval::Column::Status,
                Expr::value(ApprovalStatus::Denied.as_str()),
            )
            .col_expr(approval::Column::DecidedBy, Expr::value("the turn ended"))
            .col_expr(approval::Column::DecidedAt, Expr::value(now))
            .filter(approval::Column::Id.eq(a.id.clone()))
            .exec(db)
            .await?;
        let ev = NewEvent {
            session_id: session,
            kind: EventKind::ApprovalResolved,
            turn_id: Some(turn),
            admission_id: Some(admission),
            data: json!({
                "approval_id": a.id,
                "call_id": a.call_id,
                "decision": "deny",
                "reason": "the turn ended before anyone answered",
            }),
        };
        events.push(insert_event(db, &ev).await?);
    }
    Ok(events)
}

/// One turn's rows in the live transcript of `session`'s lineage, in order.
pub(super) async fn turn_rows<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
    turn: TurnId,
) -> Result<Vec<Message>> {
    message::Entity::find()
        .filter(
            message::Column::SessionId.in_subquery(super::canonical::canonical_subquery(session)),
        )
        .filter(message::Column::TurnId.eq(turn.to_string()))
        .order_by_asc(message::Column::Idx)
        .all(db)
        .await?
        .into_iter()
        .map(convert::message)
        .collect()
}

/// The text a dead turn already streamed to clients after its last transcript row: the
/// committed `message.delta` events of the model call it was in. (Deltas of earlier calls
/// became the content of that call's assistant row, which was written after them; deltas of an
/// attempt cut before the turn resumed were superseded by the resumed attempt.)
pub(super) async fn streamed_after_last_row<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
    turn: TurnId,
    rows: &[Message],
) -> Result<Option<String>> {
    let after = rows
        .iter()
        .rev()
        .find(|m| m.role == MessageRole::Assistant)
        .map_or(i64::MIN, |m| m.created_at);
    // A resumed turn (SPEC R13.9) started its answer again: what the cut attempt streamed
    // before `turn.resumed` was superseded, and is not part of what the user was last shown.
    let resumed = event::Entity::find()
        .select_only()
        .column(event::Column::Seq)
        .filter(event::Column::SessionId.eq(session.to_string()))
        .filter(event::Column::TurnId.eq(turn.to_string()))
        .filter(event::Column::Kind.eq(EventKind::TurnResumed.as_str()))
        .order_by_desc(event::Column::Seq)
        .into_tuple::<i64>()
        .one(db)
        .await?
        .unwrap_or(i64::MIN);
    let deltas = event::Entity::find()
        .filter(event::Column::SessionId.eq(session.to_string()))
        .filter(event::Column::TurnId.eq(turn.to_string()))
        .filter(event::Column::Kind.eq(EventKind::MessageDelta.as_str()))
        .filter(event::Column::CreatedAt.gt(after))
        .filter(event::Column::Seq.gt(resumed))
        .order_by_asc(event::Column::Seq)
        .all(db)
        .await?;
    let mut text = String::new();
    for d in deltas {
        let ev = convert::event(d)?;
        text.push_str(ev.data["text"].as_str().unwrap_or_default());
    }
    Ok((!text.trim().is_empty()).then_some(text))
}

/// What closes `rows` (one turn's transcript rows, in order): a result for every tool call
/// that has none, then an assistant boundary unless the turn already ends with an assistant
/// row without calls. A turn with no rows (it died before its user row) has nothing open.
pub fn closing_rows(
    rows: &[Message],
    turn: TurnId,
    admission: AdmissionId,
    closure: &TailClosure,
) -> Vec<NewMessage> {
    let Some(last) = rows.last() else {
        return Vec::new();
    };
    let answered: HashSet<&str> = rows
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    let display = json!({
        "boundary": true,
        "closed_as": closure.closed_as,
        "failure_reason": closure.reason,
    });
    let mut out: Vec<NewMessage> = rows
        .iter()
        .filter(|m| m.role == MessageRole::Assistant)
        .flat_map(tool_calls_of)
        .filter(|(id, _)| !answered.contains(id.as_str()))
        .map(|(id, name)| {
            let text = missing_result_text(closure);
            NewMessage {
                id: MessageId::new(),
                role: Some(MessageRole::Tool),
                content: Some(json!({ "error": text }).to_string()),
                tool_call_id: Some(id),
                name: Some(name),
                turn_id: Some(turn),
                admission_id: Some(admission),
                display: Some(display.clone()),
                token_estimate: estimate(&text),
                ..Default::default()
            }
        })
        .collect();
    let ends_answered =
        out.is_empty() && last.role == MessageRole::Assistant && tool_calls_of(last).is_empty();
    if !ends_answered && last.role != MessageRole::System {
        let (content, api_content) = boundary_texts(closure);
        let mut display = display;
        display["partial"] = json!(partial(closure).is_some());
        out.push(NewMessage {
            id: MessageId::new(),
            role: Some(MessageRole::Assistant),
            token_estimate: estimate(&api_content),
            content: Some(content),
            api_content: Some(api_content),
            turn_id: Some(turn),
            admission_id: Some(admission),
            display: Some(display),
            ..Default::default()
        });
    }
    out
}

/// `(call id, tool name)` of each call an assistant row makes.
fn tool_calls_of(m: &Message) -> Vec<(String, String)> {
    let Some(calls) = m.tool_calls.as_ref().and_then(|v| v.as_array()) else {
        return Vec::new();
    };
    calls
        .iter()
        .filter_map(|c| {
            let id = c.get("id")?.as_str()?.to_owned();
            let name = c.get("name").and_then(|n| n.as_str()).unwrap_or_default();
            Some((id, name.to_owned()))
        })
        .collect()
}

fn partial(c: &TailClosure) -> Option<&str> {
    c.partial.as_deref().filter(|p| !p.trim().is_empty())
}

/// Why the turn has no answer, in words the model and the user both read.
fn note(c: &TailClosure) -> String {
    match c.closed_as {
        ClosedAs::Unknown => format!(
            "the gateway stopped before this turn finished, so its outcome is unknown ({})",
            c.message
        ),
        ClosedAs::Interrupted => format!("the turn was interrupted ({})", c.message),
        ClosedAs::Failed => format!("the turn failed ({})", c.message),
    }
}

/// `(content, api_content)` of the boundary row. The user keeps what they already saw; the
/// model sees that text marked as cut off, or an explicit "no answer", never an invented one.
fn boundary_texts(c: &TailClosure) -> (String, String) {
    let note = note(c);
    match partial(c) {
        Some(p) => (p.to_owned(), format!("{p}\n\n[cut off: {note}]")),
        None => {
            let text = format!("[no answer: {note}]");
            (text.clone(), text)
        }
    }
}

fn missing_result_text(c: &TailClosure) -> String {
    match c.closed_as {
        ClosedAs::Unknown => format!(
            "outcome unknown: the gateway stopped before this call's result was recorded; it may \
             or may not have run ({})",
            c.message
        ),
        ClosedAs::Interrupted | ClosedAs::Failed => format!(
            "no result: the turn ended before this call's result was recorded ({})",
            c.message
        ),
    }
}

/// The same rough estimate the providers crate makes: about four bytes a token.
fn estimate(text: &str) -> i64 {
    i64::try_from(text.len().div_ceil(4)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(role: MessageRole, turn: TurnId, tool_calls: Option<serde_json::Value>) -> Message {
        Message {
            id: MessageId::new(),
            session_id: SessionId::new(),
            idx: 0,
            role,
            content: Some("x".into()),
            api_content: None,
            tool_calls,
            tool_call_id: None,
            name: None,
            turn_id: Some(turn),
            admission_id: None,
            display: None,
            token_estimate: 1,
            created_at: 0,
            compressed_epoch: None,
            summary_epoch: None,
            summary_after_idx: None,
            attachments: None,
        }
    }

    fn closure(closed_as: ClosedAs, partial: Option<&str>) -> TailClosure {
        TailClosure {
            closed_as,
            reason: "owner_died".into(),
            message: "owner process died".into(),
            partial: partial.map(str::to_owned),
        }
    }

    #[test]
    fn r10_5_an_unanswered_user_row_gets_a_boundary() {
        let turn = TurnId::new();
        let rows = [row(MessageRole::User, turn, None)];
        let out = closing_rows(
            &rows,
            turn,
            AdmissionId::new(),
            &closure(ClosedAs::Unknown, None),
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].role, Some(MessageRole::Assistant));
        let api = out[0].api_content.clone().unwrap_or_default();
        assert!(
            api.starts_with("[no answer:") && api.contains("unknown"),
            "{api}"
        );
    }

    #[test]
    fn r2_4_streamed_text_is_kept_and_marked_cut_off() {
        let turn = TurnId::new();
        let rows = [row(MessageRole::User, turn, None)];
        let c = closure(ClosedAs::Unknown, Some("Half of the ans"));
        let out = closing_rows(&rows, turn, AdmissionId::new(), &c);
        assert_eq!(out[0].content.as_deref(), Some("Half of the ans"));
        let api = out[0].api_content.clone().unwrap_or_default();
        assert!(api.starts_with("Half of the ans\n\n[cut off:"), "{api}");
        assert_eq!(out[0].display.as_ref().unwrap()["partial"], true);
    }

    #[test]
    fn r10_3_open_tool_calls_get_results_then_a_boundary() {
        let turn = TurnId::new();
        let calls = json!([{"id": "a", "name": "t", "arguments": "{}"},
                           {"id": "b", "name": "t", "arguments": "{}"}]);
        let mut answered = row(MessageRole::Tool, turn, None);
        answered.tool_call_id = Some("a".into());
        let rows = [
            row(MessageRole::User, turn, None),
            row(MessageRole::Assistant, turn, Some(calls)),
            answered,
        ];
        let out = closing_rows(
            &rows,
            turn,
            AdmissionId::new(),
            &closure(ClosedAs::Interrupted, None),
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].role, Some(MessageRole::Tool));
        assert_eq!(out[0].tool_call_id.as_deref(), Some("b"));
        assert_eq!(out[1].role, Some(MessageRole::Assistant));
    }

    #[test]
    fn r10_3_a_closed_tail_or_an_empty_turn_gets_nothing() {
        let turn = TurnId::new();
        let rows = [
            row(MessageRole::User, turn, None),
            row(MessageRole::Assistant, turn, None),
        ];
        let c = closure(ClosedAs::Failed, None);
        assert!(closing_rows(&rows, turn, AdmissionId::new(), &c).is_empty());
        assert!(closing_rows(&[], turn, AdmissionId::new(), &c).is_empty());
    }
}
