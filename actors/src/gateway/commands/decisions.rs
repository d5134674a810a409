//! `/approve [id]`, `/deny [id]` and the approve/deny buttons: deciding an approval of the
//! chat's session (or of its sub-agents'), found by its id, a prefix of it, or as the only one.
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::platforms::{chat_principal, ChatMessage};
use turnkey_storage::{now_ms, Approval, ApprovalDecision, ApprovalId, SessionId};

/// How many characters of a tool call's arguments `/status` shows.
const ARGS_PREVIEW_CHARS: usize = 120;
/// The shortest approval-id prefix `/approve` and `/deny` take.
const MIN_ID_PREFIX: usize = 4;

/// One pending approval as a line of `/status`, or of the choice between several.
pub(super) fn approval_line(a: &Approval, now: i64) -> String {
    let name = a.request["name"].as_str().unwrap_or("a tool");
    let args = truncated(&a.request["args"].to_string(), ARGS_PREVIEW_CHARS);
    let left = (a.expires_at - now).max(0) / 1000;
    format!(
        "• {id}: {name} {args} ({left} s left) — /approve {id} or /deny {id}",
        id = a.id
    )
}

fn truncated(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

/// `/approve [id]`, `/deny [id]`: without an id, the only pending approval of the chat's
/// session; an id may be a unique prefix of a pending one's.
pub(super) async fn decide_by_command(
    gw: &Gateway,
    msg: &ChatMessage,
    session: SessionId,
    id: Option<String>,
    decision: ApprovalDecision,
) -> Result<String, GatewayError> {
    let verb = decision.as_str();
    if let Some(id) = id.as_deref().and_then(|s| s.parse::<ApprovalId>().ok()) {
        return decide(gw, msg, id, decision).await;
    }
    let pending = pending_with_subagents(gw, session).await?;
    let matching: Vec<&Approval> = match id.as_deref() {
        None => pending.iter().collect(),
        Some(prefix) if prefix.chars().count() < MIN_ID_PREFIX => {
            return Ok(format!(
                "Give at least {MIN_ID_PREFIX} characters of the approval id: /{verb} <id>."
            ))
        }
        Some(prefix) => pending
            .iter()
            .filter(|a| a.id.to_string().starts_with(&prefix.to_ascii_lowercase()))
            .collect(),
    };
    match matching.as_slice() {
        [] if id.is_none() => Ok("Nothing waits for approval.".into()),
        [] => Ok(format!(
            "No pending approval of this chat has the id {}.",
            id.unwrap_or_default()
        )),
        [one] => decide(gw, msg, one.id, decision).await,
        several => {
            let now = now_ms();
            let mut lines = vec![format!(
                "{} approvals are pending; say which: /{verb} <id>",
                several.len()
            )];
            lines.extend(several.iter().map(|a| approval_line(a, now)));
            Ok(lines.join("\n"))
        }
    }
}

/// The pending approvals of `session` and of its running sub-agents (theirs are asked in this
/// chat too, SPEC R1.5), oldest first.
async fn pending_with_subagents(
    gw: &Gateway,
    session: SessionId,
) -> Result<Vec<Approval>, GatewayError> {
    let mut pending = Vec::new();
    // At most `max_children` run per session, to `max_depth`.
    for at in gw.with_subagents(session, true, 32).await? {
        pending.extend(gw.store().pending_approvals(at).await?);
    }
    pending.sort_by_key(|a| a.created_at);
    Ok(pending)
}

/// Decides approval `id` for the chat of `msg`: it must belong to a session of this chat (its
/// owner is the chat), else it is reported missing, like someone else's.
pub(super) async fn decide(
    gw: &Gateway,
    msg: &ChatMessage,
    id: ApprovalId,
    decision: ApprovalDecision,
) -> Result<String, GatewayError> {
    let missing = || format!("No approval {id} in this chat.");
    let Some(approval) = gw.store().get_approval(id).await? else {
        return Ok(missing());
    };
    let principal = chat_principal(msg);
    match gw
        .decide_approval(&principal, approval.session_id, id, decision)
        .await
    {
        Ok(decided) => {
            let name = decided.request["name"].as_str().unwrap_or("the tool call");
            let who = msg.user_name.as_deref().unwrap_or(&msg.user_id);
            Ok(match decision {
                ApprovalDecision::Approve => format!("✅ Approved {name} (by {who})."),
                ApprovalDecision::Deny => format!("🚫 Denied {name} (by {who})."),
            })
        }
        Err(GatewayError::NotFound(_)) => Ok(missing()),
        Err(GatewayError::Conflict { .. }) => {
            Ok(format!("Approval {id} was already decided or has expired."))
        }
        Err(e) => Err(e),
    }
}
