//! Row → domain conversions. A row that does not parse is reported as `Corrupt`, never guessed.
use super::{Result, StoreError};
use crate::entity::{admission, approval, event, lease, message, session, tool_run};
use crate::ids::*;
use crate::model::*;
use crate::status::{AdmissionStatus, ApprovalStatus, ToolOutcome, ToolRunDecision, ToolRunStatus};

fn json(s: &str, what: &str) -> Result<serde_json::Value> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

fn opt_json(s: Option<&str>, what: &str) -> Result<Option<serde_json::Value>> {
    s.map(|s| json(s, what)).transpose()
}

fn opt_id<T: std::str::FromStr>(s: Option<&str>, what: &'static str) -> Result<Option<T>> {
    s.map(|s| parse_id(s, what)).transpose()
}

fn owner(instance: Option<&str>, pid: Option<i64>, host: Option<&str>) -> Result<Option<Owner>> {
    match (instance, pid, host) {
        (Some(i), Some(pid), Some(host)) => Ok(Some(Owner {
            instance: parse_id(i, "owner instance")?,
            pid,
            host: host.to_owned(),
        })),
        _ => Ok(None),
    }
}

pub(super) fn session(m: session::Model) -> Result<Session> {
    Ok(Session {
        id: parse_id(&m.id, "session id")?,
        parent_session_id: opt_id(m.parent_session_id.as_deref(), "parent session id")?,
        owner: m.owner,
        platform: m.platform,
        chat_key: m.chat_key,
        title: m.title,
        model: m.model,
        system_message: m.system_message,
        system_prompt: m.system_prompt,
        workspace_snapshot: m.workspace_snapshot,
        last_event_seq: Seq(m.last_event_seq),
        usage: UsageTotals {
            input_tokens: m.input_tokens,
            output_tokens: m.output_tokens,
            cache_read_tokens: m.cache_read_tokens,
            cost_usd: m.cost_usd,
        },
        created_at: m.created_at,
        updated_at: m.updated_at,
        compression_epoch: m.compression_epoch,
        compressed_at: m.compressed_at,
        busy_policy: m.busy_policy,
        display: opt_json(m.display.as_deref(), "session display")?,
        root_id: opt_id(m.root_id.as_deref(), "root session id")?,
        transcript_id: opt_id(m.transcript_id.as_deref(), "transcript session id")?,
        last_prompt: m.last_prompt_tokens.zip(m.last_prompt_at).map(
            |(input_tokens, recorded_at)| PromptUsage {
                input_tokens,
                recorded_at,
            },
        ),
    })
}

pub(super) fn admission(m: admission::Model) -> Result<Admission> {
    Ok(Admission {
        id: parse_id(&m.id, "admission id")?,
        session_id: parse_id(&m.session_id, "session id")?,
        seq: m.seq,
        request_id: m.request_id,
        payload_digest: m.payload_digest,
        payload: json(&m.payload_json, "admission payload")?,
        principal: m.principal,
        surface: m.surface,
        status: AdmissionStatus::parse(&m.status)
            .ok_or_else(|| StoreError::Corrupt(format!("admission status {:?}", m.status)))?,
        owner: owner(
            m.owner_instance.as_deref(),
            m.owner_pid,
            m.owner_host.as_deref(),
        )?,
        turn_id: opt_id(m.turn_id.as_deref(), "turn id")?,
        outcome: opt_json(m.outcome.as_deref(), "admission outcome")?,
        created_at: m.created_at,
        started_at: m.started_at,
        finished_at: m.finished_at,
        retry_of: opt_id(m.retry_of.as_deref(), "retried admission id")?,
        attempt: m.attempt,
        crash_resumes: m.crash_resumes,
        handed_back: m
            .handed_back
            .as_deref()
            .map(|r| {
                ResumeReason::parse(r)
                    .ok_or_else(|| StoreError::Corrupt(format!("hand-back reason {r:?}")))
            })
            .transpose()?,
    })
}

pub(super) fn event(m: event::Model) -> Result<Event> {
    Ok(Event {
        session_id: parse_id(&m.session_id, "session id")?,
        seq: Seq(m.seq),
        kind: EventKind::parse(&m.kind)
            .ok_or_else(|| StoreError::Corrupt(format!("event kind {:?}", m.kind)))?,
        turn_id: opt_id(m.turn_id.as_deref(), "turn id")?,
        admission_id: opt_id(m.admission_id.as_deref(), "admission id")?,
        created_at: rfc3339(m.created_at),
        data: json(&m.payload, "event payload")?,
    })
}

pub(super) fn message(m: message::Model) -> Result<Message> {
    Ok(Message {
        id: parse_id(&m.id, "message id")?,
        session_id: parse_id(&m.session_id, "session id")?,
        idx: m.idx,
        role: MessageRole::parse(&m.role)
            .ok_or_else(|| StoreError::Corrupt(format!("message role {:?}", m.role)))?,
        content: m.content,
        api_content: m.api_content,
        tool_calls: opt_json(m.tool_calls.as_deref(), "tool calls")?,
        tool_call_id: m.tool_call_id,
        name: m.name,
        turn_id: opt_id(m.turn_id.as_deref(), "turn id")?,
        admission_id: opt_id(m.admission_id.as_deref(), "admission id")?,
        display: opt_json(m.display.as_deref(), "display")?,
        token_estimate: m.token_estimate,
        created_at: m.created_at,
        compressed_epoch: m.compressed_epoch,
        summary_epoch: m.summary_epoch,
        summary_after_idx: m.summary_after_idx,
        attachments: opt_json(m.attachments.as_deref(), "attachments")?,
    })
}

pub(super) fn lease(m: lease::Model) -> Result<Lease> {
    Ok(Lease {
        session_id: parse_id(&m.session_id, "session id")?,
        holder: owner(
            m.holder_instance.as_deref(),
            m.holder_pid,
            m.host.as_deref(),
        )?,
        turn_id: opt_id(m.turn_id.as_deref(), "turn id")?,
        platform: m.platform,
        generation: LeaseGeneration(m.generation),
        acquired_at: m.acquired_at,
        expires_at: m.expires_at,
    })
}

fn parse_text<T>(s: &str, parse: fn(&str) -> Option<T>, what: &str) -> Result<T> {
    parse(s).ok_or_else(|| StoreError::Corrupt(format!("{what} {s:?}")))
}

pub(super) fn tool_run(m: tool_run::Model) -> Result<ToolRun> {
    Ok(ToolRun {
        call_id: m.call_id,
        session_id: parse_id(&m.session_id, "session id")?,
        turn_id: parse_id(&m.turn_id, "turn id")?,
        admission_id: opt_id(m.admission_id.as_deref(), "admission id")?,
        tool: m.tool,
        args: m.args,
        idx: m.idx,
        status: parse_text(&m.status, ToolRunStatus::parse, "tool run status")?,
        outcome: m
            .outcome
            .as_deref()
            .map(|o| parse_text(o, ToolOutcome::parse, "tool outcome"))
            .transpose()?,
        decision: m
            .decision
            .as_deref()
            .map(|d| parse_text(d, ToolRunDecision::parse, "tool run decision"))
            .transpose()?,
        created_at: m.created_at,
        started_at: m.started_at,
        finished_at: m.finished_at,
    })
}

pub(super) fn approval(m: approval::Model) -> Result<Approval> {
    Ok(Approval {
        id: parse_id(&m.id, "approval id")?,
        session_id: parse_id(&m.session_id, "session id")?,
        turn_id: parse_id(&m.turn_id, "turn id")?,
        call_id: m.call_id,
        request: json(&m.request, "approval request")?,
        status: parse_text(&m.status, ApprovalStatus::parse, "approval status")?,
        decided_by: m.decided_by,
        created_at: m.created_at,
        expires_at: m.expires_at,
        decided_at: m.decided_at,
    })
}

pub(super) fn outbox(m: crate::entity::outbox::Model) -> Result<Outbox> {
    Ok(Outbox {
        payload: json(&m.payload, "outbox payload")?,
        status: parse_text(
            &m.status,
            crate::status::OutboxStatus::parse,
            "outbox status",
        )?,
        id: m.id,
        platform: m.platform,
        chat_key: m.chat_key,
        session_id: m.session_id,
        turn_id: m.turn_id,
        idempotency_key: m.idempotency_key,
        kind: m.kind,
        attempts: m.attempts,
        chunks_sent: m.chunks_sent,
        platform_message_id: m.platform_message_id,
        owner: owner(
            m.owner_instance.as_deref(),
            m.owner_pid,
            m.owner_host.as_deref(),
        )?,
        owner_instance: m.owner_instance,
        last_error: m.last_error,
        created_at: m.created_at,
        next_attempt_at: m.next_attempt_at,
        updated_at: m.updated_at,
        sent_at: m.sent_at,
    })
}
