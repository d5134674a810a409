//! The commands on the chat's session: `/new`, `/stop`, `/queue <text>`, `/retry`,
//! `/model [name]` and `/status`.
use super::decisions::approval_line;
use super::{command_key, notice, Handled};
use crate::config::BusyPolicy;
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::input::{NewSessionRequest, Receipt};
use crate::platforms::{chat_principal, chat_submission, ChatMessage};
use turnkey_storage::{now_ms, Principal, SessionId};

/// `/new`: the chat moves to a fresh session, made and recorded with the update at once, so a
/// redelivered `/new` answers the session the first one made.
pub(super) async fn new_session(gw: &Gateway, msg: &ChatMessage) -> Result<Handled, GatewayError> {
    let platform = msg.chat.platform();
    let chat_key = msg.chat.key();
    let new = gw
        .new_session(
            &chat_principal(msg),
            NewSessionRequest {
                platform: platform.into(),
                chat_key: Some(chat_key.clone()),
                history: Vec::new(),
                ..Default::default()
            },
        )
        .await?;
    let inbound = gw
        .store()
        .renew_chat_session(platform, &msg.external_id, &chat_key, new)
        .await?;
    let answer = format!(
        "🆕 New conversation (session {}). Earlier messages are not part of it.",
        inbound.session_id
    );
    // The key keeps a redelivery from writing it twice.
    let key = command_key(msg);
    gw.store()
        .enqueue_outbox(&notice(msg, Some(inbound.session_id), key, &answer))
        .await?;
    gw.wake_outbox();
    Ok(Handled::Command {
        name: "new",
        answer,
        duplicate: !inbound.first,
        receipt: None,
    })
}

pub(super) async fn stop(
    gw: &Gateway,
    principal: &Principal,
    session: SessionId,
) -> Result<String, GatewayError> {
    let done = gw
        .interrupt(
            principal,
            session,
            Some("stopped from the chat (/stop)".into()),
        )
        .await?;
    if done.interrupted {
        return Ok("⏹ Stopping the running turn.".into());
    }
    let asked_elsewhere = done
        .forwarded
        .is_some_and(|f| f.status == turnkey_storage::InterruptStatus::Pending);
    Ok(if asked_elsewhere {
        "⏹ The turn runs on another replica of the gateway; it was asked to stop.".into()
    } else if gw.session_state(session).await?.running {
        "A turn is starting or ending; nothing was stopped. Try again.".into()
    } else {
        "Nothing is running.".into()
    })
}

/// `/model [name]`: what the chat's session runs on and what it could, or a switch.
pub(super) async fn model(
    gw: &Gateway,
    session: SessionId,
    name: Option<String>,
) -> Result<String, GatewayError> {
    let row = gw
        .store()
        .get_session(session)
        .await?
        .ok_or_else(|| GatewayError::NotFound(format!("session {session}")))?;
    let Some(name) = name else {
        let in_use = gw.model_in_use(&row);
        let models = gw.models();
        if models.is_empty() {
            return Ok("No model is configured yet.".into());
        }
        let list: Vec<String> = models
            .iter()
            .map(|m| {
                if Some(m) == in_use.as_ref() {
                    format!("• {m} (in use)")
                } else {
                    format!("• {m}")
                }
            })
            .collect();
        return Ok(format!(
            "Models:\n{}\nSwitch with /model <name> (/model default: the first one).",
            list.join("\n")
        ));
    };
    let chosen = (!name.eq_ignore_ascii_case("default")).then_some(name);
    match gw.set_model(&row, chosen).await {
        Ok(now) => Ok(format!(
            "🔁 The next turn runs on {}.",
            gw.model_in_use(&now).unwrap_or_else(|| "no model".into())
        )),
        Err(GatewayError::InvalidInput { message, .. }) => Ok(format!("⚠️ {message}")),
        Err(e) => Err(e),
    }
}

pub(super) async fn status(gw: &Gateway, session: SessionId) -> Result<String, GatewayError> {
    let state = gw.session_state(session).await?;
    let (approvals, runs) = gw.open_questions(session).await?;
    let now = now_ms();
    let mut lines = vec![format!(
        "Session {session}: {}, {} queued.",
        if state.running { "running" } else { "idle" },
        state.queue_depth
    )];
    for a in gw.store().started_admissions(Some(session)).await? {
        let since = a
            .started_at
            .map(|t| format!(" for {} s", (now - t).max(0) / 1000))
            .unwrap_or_default();
        lines.push(format!(
            "Running: input #{} (admission {}){since}.",
            a.seq, a.id
        ));
    }
    if approvals.is_empty() {
        lines.push("No approval is pending.".into());
    } else {
        lines.push("Waiting for approval:".into());
        lines.extend(approvals.iter().map(|a| approval_line(a, now)));
    }
    for r in runs {
        lines.push(format!(
            "Tool call {} ({}) may or may not have run before a crash; decide with \
             POST /v1/sessions/{session}/tool_runs/{} (retry or skip).",
            r.call_id, r.tool, r.call_id
        ));
    }
    Ok(lines.join("\n"))
}

pub(super) async fn queue(
    gw: &Gateway,
    msg: &ChatMessage,
    principal: &Principal,
    session: SessionId,
    text: String,
) -> Result<(String, Option<Receipt>), GatewayError> {
    if text.is_empty() {
        return Ok((
            "Usage: /queue <text> — runs the text after the running turn.".into(),
            None,
        ));
    }
    let queued = ChatMessage {
        text,
        ..msg.clone()
    };
    let submitted = gw
        .submit(
            principal,
            session,
            chat_submission(&queued, Some(BusyPolicy::Queue)),
        )
        .await;
    match submitted {
        Ok(receipt) => {
            let ahead = gw.session_state(session).await?;
            let answer = if ahead.running || ahead.queue_depth > 1 {
                "⏳ Queued: it runs after the running turn and the inputs before it."
            } else {
                "⏳ Queued: it runs now."
            };
            Ok((answer.into(), Some(receipt)))
        }
        Err(GatewayError::InvalidInput { message, .. }) => {
            Ok((format!("⚠️ Not queued: {message}"), None))
        }
        Err(e) => Err(e),
    }
}

pub(super) async fn retry(
    gw: &Gateway,
    principal: &Principal,
    session: SessionId,
) -> Result<(String, Option<Receipt>), GatewayError> {
    let Some(unknown) = gw.store().last_unknown_admission(session).await? else {
        return Ok((
            "Nothing to retry: no turn of this conversation was cut off.".into(),
            None,
        ));
    };
    let receipt = gw.retry(principal, unknown.id).await?;
    let answer = if receipt.duplicate {
        "🔁 That turn was already run again."
    } else {
        "🔁 Running the cut-off turn again."
    };
    Ok((answer.into(), Some(receipt)))
}
