//! The post-delivery review (SPEC R10.4) and its pre-emption (R4.5). After every
//! `[memory] review_every` ended turns of a session, once its drain is over (the answer
//! delivered, the admission settled, the lease released), the session's actor runs a review:
//! the review provider (else the auxiliary, else the primary) reads the recent conversation
//! and the principal's memory and skills, and may call only `memory` and `skill_manage`.
//!
//! Its writes are staged, not made: each call is checked (arguments, the memory scan, the
//! bound against what it staged before) and answered as if made, and all of them commit at the
//! end in one transaction with `review.finished` (`Store::finish_review`), or wait for a
//! person with `write_approval`. So a review never holds the session: a new input cancels it
//! at once (the actor cancels its token before it drains; the model call is dropped) and a
//! cancelled review writes nothing but what its calls cost. A review whose process died is
//! closed as `interrupted` by recovery and never run again (`close_orphans`).
use crate::config::AgentWrites;
use crate::deps::Deps;
use crate::memory::{scan, tool::edit_of};
use crate::skills::{catalog, manage, tools as skill_tools};
use crate::turn::run::usage_row;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use turnkey_providers::{ChatMessage, ChatRequest, Provider, Role, ToolCall, ToolSchema};
use turnkey_storage::{
    MemoryEdit, MemoryTarget, MessageRole, Review, ReviewEnd, ReviewWrites, SessionId, StagedEdit,
    StoreError,
};

/// The tag at the start of the review request's last user message (API.md).
pub const TAG: &str = "[turnkey:review]";
/// Model calls a review may make (each may stage several writes).
const MAX_ROUNDS: usize = 4;
/// The conversation the review reads: the last this many user and assistant messages, each
/// cut to `MESSAGE_CHARS`.
const RECENT_MESSAGES: usize = 20;
const MESSAGE_CHARS: usize = 2_000;
/// One model call of a review at most this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// A running review owned by another host is judged gone after this long without an end.
const STALE_AFTER_MS: i64 = 15 * 60 * 1000;

const SYSTEM: &str = "You maintain an AI agent's long-term memory and skills. You are shown \
    a recent conversation between the agent and its user, what the agent remembers now, and \
    its skills. Save what will help in later sessions: facts about the user (name, role, \
    preferences) go to target \"profile\"; durable facts about the work (project facts, what \
    worked, what failed) go to target \"memory\". One fact per entry; replace an entry that \
    is outdated instead of adding a near duplicate; never save secrets or instructions. When \
    a multi-step procedure worked and is likely to recur, record it with skill_manage. If \
    nothing is worth saving, answer \"nothing to save\" without calling a tool.";

/// How a review ended before its commit.
enum Outcome {
    Done,
    Cancelled(&'static str),
    Failed(String),
}

/// What a review staged, and what its calls cost.
struct Staged {
    /// The session's principal, read by `work`: whose memory the writes go to.
    scope: String,
    writes: ReviewWrites,
    /// The principal's entries as the staged writes left them: the bound is checked here.
    entries: Vec<(MemoryTarget, String)>,
}

/// Runs a review of `session` if one is due; `cancel` pre-empts it (a new input).
pub async fn run(deps: Arc<Deps>, session: SessionId, cancel: CancellationToken) {
    let memory = &deps.config.memory;
    if !memory.enabled || memory.review_every == 0 || deps.providers.is_empty() {
        return;
    }
    let owner = &deps.instance.owner;
    let begun = deps
        .store
        .begin_review_if_due(session, None, memory.review_every, owner)
        .await;
    let (review, started) = match begun {
        Ok(Some(b)) => b,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(%session, error = %e, "could not begin a review");
            return;
        }
    };
    deps.hub.publish(started);
    let mut staged = Staged {
        scope: String::new(),
        writes: ReviewWrites {
            memory_pending: memory.write_approval,
            ..Default::default()
        },
        entries: Vec::new(),
    };
    let outcome = tokio::select! {
        biased;
        _ = cancel.cancelled() => Outcome::Cancelled("input"),
        _ = deps.shutdown.cancelled() => Outcome::Cancelled("shutdown"),
        r = work(&deps, &review, &mut staged) => match r {
            Ok(()) => Outcome::Done,
            Err(why) => Outcome::Failed(why),
        },
    };
    end(&deps, &review, staged, outcome).await;
}

/// Commits or cancels `review` as `outcome` says, and publishes what that committed.
async fn end(deps: &Deps, review: &Review, staged: Staged, outcome: Outcome) {
    let session = review.session_id;
    let usage = &staged.writes.usage;
    let ended = match outcome {
        // `work` read the scope before it could end well.
        Outcome::Done => deps
            .store
            .finish_review(review, &staged.scope, &staged.writes)
            .await
            .map(|end| match end {
                ReviewEnd::Finished { events, .. } => events,
                ReviewEnd::NotRunning => Vec::new(),
            }),
        Outcome::Cancelled(reason) => deps
            .store
            .cancel_review(review, reason, usage)
            .await
            .map(|e| e.into_iter().collect()),
        Outcome::Failed(why) => {
            tracing::warn!(%session, review = %review.id, %why, "review failed; it writes nothing");
            deps.store
                .cancel_review(review, "failed", usage)
                .await
                .map(|e| e.into_iter().collect())
        }
    };
    match ended {
        Ok(events) => events.into_iter().for_each(|e| deps.hub.publish(e)),
        // Still `running` in the store: recovery closes it as interrupted once this process
        // is gone; it is never run again either way.
        Err(e) => {
            tracing::error!(%session, review = %review.id, error = %e, "could not end a review")
        }
    }
}

async fn scope_of(deps: &Deps, session: SessionId) -> Result<String, StoreError> {
    Ok(deps
        .store
        .get_session(session)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("session {session}")))?
        .owner)
}

/// The review itself: asks the model, stages its calls, until it calls nothing.
async fn work(deps: &Deps, review: &Review, staged: &mut Staged) -> Result<(), String> {
    let session = review.session_id;
    staged.scope = scope_of(deps, session).await.map_err(|e| e.to_string())?;
    let entries = deps
        .store
        .principal_memory(&staged.scope)
        .await
        .map_err(|e| e.to_string())?;
    staged.entries = entries.into_iter().map(|e| (e.target, e.text)).collect();
    let skills = if deps.skills.enabled() {
        deps.skills.list().await.map_err(|e| e.to_string())?
    } else {
        Vec::new()
    };
    let transcript = deps
        .store
        .transcript(session)
        .await
        .map_err(|e| e.to_string())?;
    let provider = provider(deps).ok_or("no provider is configured")?;
    let mut messages = vec![
        ChatMessage::system(SYSTEM),
        ChatMessage::user(request_text(deps, staged, &skills, &transcript)),
    ];
    let tools = offered(deps);
    for _ in 0..MAX_ROUNDS {
        let req = ChatRequest {
            model: provider.model().to_owned(),
            messages: messages.clone(),
            tools: tools.clone(),
            stream: false,
            max_tokens: Some(1024),
            temperature: None,
            prefill: false,
        };
        let resp = tokio::time::timeout(CALL_TIMEOUT, provider.chat(&req, &|_| {}))
            .await
            .map_err(|_| format!("the review's model call took over {CALL_TIMEOUT:?}"))?
            .map_err(|e| e.to_string())?;
        staged
            .writes
            .usage
            .push(usage_row(&deps.config.pricing(), provider.as_ref(), &resp));
        if resp.tool_calls.is_empty() {
            return Ok(());
        }
        messages.push(ChatMessage {
            images: Vec::new(),
            role: Role::Assistant,
            content: resp.content.clone(),
            tool_calls: resp.tool_calls.clone(),
            tool_call_id: None,
            name: None,
        });
        for call in &resp.tool_calls {
            let result = stage(deps, session, staged, call).await;
            let text = match result {
                Ok(t) => t,
                Err(e) => format!("error: {e}"),
            };
            messages.push(ChatMessage::tool_result(call.id.clone(), text));
        }
    }
    Ok(())
}

/// The review provider: `[memory] review_provider` by name, else the auxiliary, else the
/// primary.
fn provider(deps: &Deps) -> Option<Arc<dyn Provider>> {
    let set = deps.providers.snapshot();
    let named = &deps.config.memory.review_provider;
    set.named(named)
        .filter(|_| !named.is_empty())
        .or_else(|| set.auxiliary())
        .or_else(|| set.primary())
        .cloned()
}

/// `memory` and, when agents may change skills, `skill_manage`.
fn offered(deps: &Deps) -> Vec<ToolSchema> {
    let mut tools = vec![ToolSchema {
        name: "memory".into(),
        description: "Add, replace or remove an entry of the user's profile or your notes.".into(),
        parameters: crate::memory::tool::parameters(),
    }];
    if deps.skills.enabled() && deps.config.skills.agent_writes != AgentWrites::Off {
        tools.push(ToolSchema {
            name: "skill_manage".into(),
            description: skill_tools::MANAGE_DESCRIPTION.into(),
            parameters: skill_tools::manage_parameters(),
        });
    }
    tools
}

/// The last user message: the tag, what is remembered now, the skills, the conversation.
fn request_text(
    deps: &Deps,
    staged: &Staged,
    skills: &[catalog::Skill],
    transcript: &[turnkey_storage::Message],
) -> String {
    let memory = &deps.config.memory;
    let mut out = format!("{TAG} Review this conversation and update memory and skills.\n\n");
    for (target, heading, limit) in [
        (MemoryTarget::Profile, "User profile", memory.profile_chars),
        (MemoryTarget::Memory, "Memory", memory.memory_chars),
    ] {
        let entries: Vec<&str> = staged
            .entries
            .iter()
            .filter(|(t, _)| *t == target)
            .map(|(_, text)| text.as_str())
            .collect();
        let used: usize = entries.iter().map(|e| e.chars().count()).sum();
        out.push_str(&format!(
            "## {heading} ({used} of {limit} characters used)\n"
        ));
        if entries.is_empty() {
            out.push_str("(empty)\n");
        }
        for e in entries {
            out.push_str(&format!("- {e}\n"));
        }
        out.push('\n');
    }
    let index = catalog::index(skills, deps.config.skills.index_chars);
    if !index.is_empty() {
        out.push_str(&index.replacen("# Skills", "## Skills", 1));
        out.push('\n');
    }
    out.push_str("## Conversation (most recent last)\n");
    let recent: Vec<_> = transcript
        .iter()
        .filter(|m| matches!(m.role, MessageRole::User | MessageRole::Assistant))
        .filter_map(|m| m.content.as_deref().map(|c| (m.role, c)))
        .filter(|(_, c)| !c.trim().is_empty())
        .collect();
    for (role, content) in &recent[recent.len().saturating_sub(RECENT_MESSAGES)..] {
        let text: String = content.chars().take(MESSAGE_CHARS).collect();
        out.push_str(&format!("{}: {}\n", role.as_str(), text.trim()));
    }
    out
}

/// Stages one call: checked as the tool would check it, answered as if made.
async fn stage(
    deps: &Deps,
    session: SessionId,
    staged: &mut Staged,
    call: &ToolCall,
) -> Result<String, String> {
    let args: serde_json::Value = serde_json::from_str(&call.arguments)
        .map_err(|e| format!("the arguments are not JSON: {e}"))?;
    match call.name.as_str() {
        "memory" => stage_memory(deps, staged, &args),
        "skill_manage" => {
            let writes = deps.config.skills.agent_writes;
            if !deps.skills.enabled() || writes == AgentWrites::Off {
                return Err("skill_manage is not offered".into());
            }
            let p = manage::plan(&args, Some(session))?;
            let change = manage::change_of(&deps.skills, &p)
                .await
                .map_err(|e| format!("{e} ({})", e.code()))?;
            if writes == AgentWrites::Direct {
                staged.writes.skills.push(change);
                Ok("saved".into())
            } else {
                staged.writes.proposals.push(p);
                Ok("recorded as a proposal for a person to approve".into())
            }
        }
        other => Err(format!(
            "{other} is not a tool of the review; use memory or skill_manage"
        )),
    }
}

/// Stages a memory edit against the entries as the earlier staged edits left them.
fn stage_memory(
    deps: &Deps,
    staged: &mut Staged,
    args: &serde_json::Value,
) -> Result<String, String> {
    let (target, edit) = edit_of(args)?;
    let mut buf = String::new();
    let edit = crate::memory::masked(edit, &deps.redactor, &mut buf);
    let limit = deps.config.memory.limit(target);
    let (action, text, old_text) = match edit {
        MemoryEdit::Add { text } => ("add", Some(text), None),
        MemoryEdit::Replace { old_text, text } => ("replace", Some(text), Some(old_text)),
        MemoryEdit::Remove { old_text } => ("remove", None, Some(old_text)),
        MemoryEdit::ReplaceId { .. } | MemoryEdit::RemoveId(_) => {
            return Err("entries are named by `old_text`".into())
        }
    };
    if let Some(t) = text {
        scan::check(t).map_err(|r| format!("{r} ({})", r.code()))?;
    }
    let entries = &mut staged.entries;
    let hit = match old_text {
        None => None,
        Some(old) => {
            let hits: Vec<usize> = (0..entries.len())
                .filter(|&i| entries[i].0 == target && entries[i].1.contains(old))
                .collect();
            match hits.as_slice() {
                [one] => Some(*one),
                [] => {
                    return Err(format!(
                        "no entry of {} contains that `old_text`",
                        target.as_str()
                    ))
                }
                more => return Err(format!("{} entries contain that `old_text`", more.len())),
            }
        }
    };
    let used: usize = entries
        .iter()
        .filter(|(t, _)| *t == target)
        .map(|(_, e)| e.chars().count())
        .sum();
    let was = hit.map_or(0, |i| entries[i].1.chars().count());
    let will = text.map_or(0, |t| t.chars().count());
    if will > was && used - was + will > limit {
        return Err(format!(
            "{} is full ({used} of {limit} characters used); replace or remove an entry",
            target.as_str()
        ));
    }
    match (hit, text) {
        (None, Some(t)) => entries.push((target, t.to_owned())),
        (Some(i), Some(t)) => entries[i].1 = t.to_owned(),
        (Some(i), None) => {
            entries.remove(i);
        }
        (None, None) => return Err("nothing to do".into()),
    }
    staged.writes.memory.push((
        StagedEdit {
            target,
            action: action.to_owned(),
            text: text.map(str::to_owned),
            old_text: old_text.map(str::to_owned),
        },
        limit,
    ));
    Ok(format!("{action} staged for {}", target.as_str()))
}

/// Recovery: a `running` review whose owner is gone (dead on this host, or silent past
/// [`STALE_AFTER_MS`] on another) is closed as `interrupted`, with `review.cancelled`. Its
/// writes were never made (they commit only at its end); it is not run again.
pub async fn close_orphans(deps: &Deps) -> Result<usize, StoreError> {
    let now = turnkey_storage::now_ms();
    let mut closed = 0;
    for r in deps.store.running_reviews().await? {
        let mine = r.owner.instance == deps.instance.id();
        let gone = deps.instance.is_dead(&r.owner)
            || (!mine
                && r.owner.host != deps.instance.owner.host
                && now - r.started_at > STALE_AFTER_MS);
        if gone {
            if let Some(ev) = deps.store.interrupt_review(&r).await? {
                deps.hub.publish(ev);
                closed += 1;
            }
        }
    }
    Ok(closed)
}
