//! Wire assembly (SPEC R5.4, R8.1): the request one model call sends, built from the
//! transcript (never the other way). Entered from one place, the preflight gate
//! (`preflight::pass`), which measures what this builds and hands the loop a request to send.
use super::context::TurnContext;
use crate::deps::Models;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use turnkey_providers::{ChatMessage, ChatRequest, Provider, Role, ToolCall};
use turnkey_storage::{Message, MessageRole};

/// The wire copy (SPEC R5.4): the stored system prompt (and after it the input's own
/// `instructions`, for this turn only), then each row as it was sent
/// (`api_content` when recorded), stripped of bookkeeping fields. Tool results follow their
/// call in call order (they are stored in the order they finished), and a call without a
/// result row, or a result without its call, is repaired rather than sent broken (R6.3).
///
/// A user row's attachments (SPEC R8.1, only the wire copy changes) go on as
/// `turn::attached` shows them: image parts when `vision`, notes and text otherwise.
pub fn messages(ctx: &TurnContext, vision: bool) -> Vec<ChatMessage> {
    let rows = ctx.live_rows();
    let mut out = Vec::with_capacity(rows.len() + 1);
    out.push(ChatMessage::system(match ctx.instructions() {
        Some(i) => format!("{}\n\n{i}", ctx.system_prompt),
        None => ctx.system_prompt.clone(),
    }));
    let mut summary_at = None;
    let mut i = 0;
    while i < rows.len() {
        let m = rows[i];
        i += 1;
        match m.role {
            // A result is sent right after its call (below), never on its own.
            MessageRole::Tool => continue,
            MessageRole::Assistant if m.tool_calls.is_some() => {
                let call = wire_row(m);
                let mut results: HashMap<&str, &Message> = HashMap::new();
                while let Some(r) = rows.get(i).filter(|r| r.role == MessageRole::Tool) {
                    if let Some(id) = r.tool_call_id.as_deref() {
                        results.insert(id, r);
                    }
                    i += 1;
                }
                let ordered: Vec<ChatMessage> = call
                    .tool_calls
                    .iter()
                    .map(|c| match results.get(c.id.as_str()) {
                        Some(r) => wire_row(r),
                        None => ChatMessage {
                            images: Vec::new(),
                            role: Role::Tool,
                            content: Some(
                                json!({"error": "no result was recorded for this call"})
                                    .to_string(),
                            ),
                            tool_calls: Vec::new(),
                            tool_call_id: Some(c.id.clone()),
                            name: Some(c.name.clone()),
                        },
                    })
                    .collect();
                out.push(call);
                out.extend(ordered);
            }
            _ if m.summary_epoch.is_some() => {
                summary_at = Some(out.len());
                out.push(wire_row(m));
            }
            MessageRole::User if m.attachments.is_some() => {
                out.push(super::attached::with_attachments(
                    wire_row(m),
                    m,
                    ctx,
                    vision,
                ));
            }
            _ => out.push(wire_row(m)),
        }
    }
    if let Some(at) = summary_at {
        place_summary(&mut out, at);
    }
    out
}

/// A compression summary is stored as a system row; on the wire it takes the role that keeps
/// user and assistant turns alternating with its neighbours (SPEC R6.3). When neither role
/// can (a user message before it, an assistant message after it), it joins the user message.
fn place_summary(out: &mut Vec<ChatMessage>, at: usize) {
    let role_at = |i: usize| out.get(i).map(|m| m.role);
    let prev = at
        .checked_sub(1)
        .and_then(role_at)
        .filter(|r| *r != Role::System);
    let next = role_at(at + 1);
    let clashes = |r: Role| prev == Some(r) || next == Some(r);
    if !clashes(Role::User) {
        out[at].role = Role::User;
    } else if !clashes(Role::Assistant) {
        out[at].role = Role::Assistant;
    } else {
        // One neighbour is a user message and the other an assistant one: join the user's.
        let summary = out.remove(at).content.unwrap_or_default();
        let (user, before) = if prev == Some(Role::User) {
            (at - 1, false)
        } else {
            (at, true)
        };
        let user = &mut out[user];
        user.content = Some(match user.content.take() {
            Some(c) if !c.is_empty() && before => format!("{summary}\n\n{c}"),
            Some(c) if !c.is_empty() => format!("{c}\n\n{summary}"),
            _ => summary,
        });
    }
}

fn wire_row(m: &Message) -> ChatMessage {
    let role = match m.role {
        MessageRole::System => Role::System,
        MessageRole::User => Role::User,
        MessageRole::Assistant => Role::Assistant,
        MessageRole::Tool => Role::Tool,
    };
    let tool_calls: Vec<ToolCall> = m
        .tool_calls
        .as_ref()
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    ChatMessage {
        images: Vec::new(),
        role,
        content: m.api_content.clone().or_else(|| m.content.clone()),
        tool_calls,
        tool_call_id: m.tool_call_id.clone(),
        name: m.name.clone(),
    }
}

/// The tool schemas offered to this turn's model: the always-on ones and the index of the
/// rest (`toolbox::index`), but for a sub-agent's session without the ones children do not get
/// (SPEC R1.5).
fn offered(models: Models<'_>, ctx: &TurnContext) -> Vec<turnkey_providers::ToolSchema> {
    if !crate::delegation::is_child(&ctx.session) {
        return models.tool_schemas.to_vec();
    }
    models
        .tool_offer
        .schemas_without(crate::delegation::withheld(models.config))
}

/// The model a request to `provider` names: the chosen one (the session's or the input's) on
/// the provider serving it; the provider's own on any other one the chain falls back to. A
/// chosen name no provider serves goes as given to the primary only (the name of another model
/// of the same server).
pub fn model_for(models: Models<'_>, ctx: &TurnContext, provider: &dyn Provider) -> String {
    let own = provider.model();
    match ctx.model_override.as_deref() {
        None => own.to_owned(),
        Some(m) if m == own => own.to_owned(),
        Some(m) => {
            let served = models.set.serving(m).is_some();
            let primary = models
                .set
                .primary()
                .is_some_and(|p| std::ptr::addr_eq(Arc::as_ptr(p), provider));
            if !served && primary {
                m.to_owned()
            } else {
                own.to_owned()
            }
        }
    }
}

/// The request for `messages` (the wire copy `messages` built, as preflight let it through),
/// streamed when `agent.streaming` says so. A call of a tool listed behind the `tools` index
/// goes on the wire as the index call the model made: a request names only the tools it
/// offers.
pub fn request(
    models: Models<'_>,
    ctx: &TurnContext,
    provider: &dyn Provider,
    mut messages: Vec<ChatMessage>,
) -> ChatRequest {
    for call in messages.iter_mut().flat_map(|m| m.tool_calls.iter_mut()) {
        if let Some(wired) = models.tool_offer.wrap(call) {
            *call = wired;
        }
    }
    ChatRequest {
        model: model_for(models, ctx, provider),
        messages,
        tools: offered(models, ctx),
        stream: models.config.agent.streaming,
        max_tokens: ctx.max_output_tokens(),
        temperature: None,
        prefill: false,
    }
}
