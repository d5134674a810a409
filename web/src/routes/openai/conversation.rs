//! Stateless clients: the `llm` CLI, Open WebUI and most chat front-ends resend the whole
//! conversation with every request and name no session. Such a request continues the caller's
//! session whose transcript is exactly the request's earlier messages, else it starts a new
//! session with them as its history; nothing already answered runs again.
//!
//! A conversation is found by the client's id of its chat when it sends one (Open WebUI's
//! `X-OpenWebUI-Chat-Id`), else by the texts of its user messages (keys per principal in
//! `session_keys`, doors `openai.chat` and `openai.conversation`, written when an input is
//! admitted), and taken only after the check: the session's transcript, read as a client sees it (each user message,
//! then the final answer of its turn), must equal the request's earlier messages. A collision,
//! a conversation edited on the client, a turn that failed or has not answered yet: all start a
//! new session instead.
use crate::error::ApiError;
use crate::state::AppState;
use sha2::{Digest, Sha256};
use turnkey_actors::limits::sanitize_text;
use turnkey_actors::SeedMessage;
use turnkey_storage::{Message, MessageRole, Principal, Session, SessionId};

/// The `session_keys` door of conversations.
const DOOR: &str = "openai.conversation";
/// The `session_keys` door of a client's own chat ids (Open WebUI's `X-OpenWebUI-Chat-Id`).
const DOOR_CHAT: &str = "openai.chat";
/// The header a client names its chat with (Open WebUI, when it forwards user info).
pub(crate) const CHAT_HEADER: &str = "X-OpenWebUI-Chat-Id";

/// The client's id of its chat, if the request names one: a hint that keeps two chats that
/// began alike apart. It only ever picks a session whose transcript passes the same check.
pub(crate) fn chat_hint(req: &actix_web::HttpRequest) -> Option<String> {
    let v = req.headers().get(CHAT_HEADER)?.to_str().ok()?.trim();
    (!v.is_empty() && v.chars().count() <= turnkey_actors::limits::MAX_SESSION_KEY_CHARS)
        .then(|| v.to_owned())
}

fn norm(text: &str) -> String {
    sanitize_text(text).trim().to_owned()
}

/// The key of a conversation whose user messages are `users`.
fn key<'a>(users: impl Iterator<Item = &'a str>) -> String {
    let mut h = Sha256::new();
    for t in users {
        h.update(norm(t).as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// `earlier` as the transcript holds it: user messages with no answer between are one input
/// (their texts joined by a blank line), each text normalized.
fn merged(earlier: &[SeedMessage]) -> Vec<(MessageRole, String)> {
    let mut out: Vec<(MessageRole, String)> = Vec::new();
    for m in earlier {
        let text = norm(&m.text);
        match out.last_mut() {
            Some((MessageRole::User, last)) if m.role == MessageRole::User => {
                *last = norm(&format!("{last}\n\n{text}"));
            }
            _ => out.push((m.role, text)),
        }
    }
    out
}

fn user_texts(said: &[(MessageRole, String)]) -> impl Iterator<Item = &str> {
    said.iter()
        .filter(|(role, _)| *role == MessageRole::User)
        .map(|(_, t)| t.as_str())
}

/// The transcript as a client saw it: each user message, then the last answer before the
/// next one (rows that call tools, tool results and summaries are the server's own).
fn as_said(rows: &[Message]) -> Vec<(MessageRole, String)> {
    let mut out: Vec<(MessageRole, String)> = Vec::new();
    for r in rows {
        let text = r.content.as_deref().unwrap_or_default();
        match r.role {
            MessageRole::User => out.push((MessageRole::User, norm(text))),
            MessageRole::Assistant if r.tool_calls.is_none() && !text.trim().is_empty() => {
                match out.last_mut() {
                    Some((MessageRole::Assistant, last)) => *last = norm(text),
                    _ => out.push((MessageRole::Assistant, norm(text))),
                }
            }
            _ => {}
        }
    }
    out
}

/// The caller's session whose transcript is `earlier` (see the module documentation): the
/// one its chat id names, else the one its user messages name, if the check passes.
pub(crate) async fn find(
    state: &AppState,
    who: &Principal,
    earlier: &[SeedMessage],
    chat: Option<&str>,
) -> Result<Option<Session>, ApiError> {
    if earlier.is_empty() {
        return Ok(None);
    }
    let asked = merged(earlier);
    let by_text = key(user_texts(&asked));
    let keys = chat
        .map(|c| (DOOR_CHAT, c.to_owned()))
        .into_iter()
        .chain(std::iter::once((DOOR, by_text)));
    for (door, k) in keys {
        if let Some(s) = checked(state, who, door, &k, &asked).await? {
            return Ok(Some(s));
        }
    }
    Ok(None)
}

/// The session `door`/`k` names, if it is still the caller's and its transcript is `asked`.
async fn checked(
    state: &AppState,
    who: &Principal,
    door: &str,
    k: &str,
    asked: &[(MessageRole, String)],
) -> Result<Option<Session>, ApiError> {
    let store = state.gateway.store();
    let Some(found) = store.find_keyed_session(&who.id, door, k).await? else {
        return Ok(None);
    };
    let session = match state.gateway.authorize_lineage(who, found.id).await {
        Ok(s) => s,
        // Deleted since, or no longer the caller's: a new session.
        Err(turnkey_actors::GatewayError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let said = as_said(&store.lineage_messages(session.lineage()).await?);
    Ok((said == asked).then_some(session))
}

/// Remembers that the conversation `earlier` + `last` (the text admitted) goes on in
/// `session`.
pub(crate) async fn remember(
    state: &AppState,
    who: &Principal,
    session: SessionId,
    earlier: &[SeedMessage],
    last: &str,
    chat: Option<&str>,
) -> Result<(), ApiError> {
    let said = merged(earlier);
    let k = key(user_texts(&said).chain(std::iter::once(last)));
    let store = state.gateway.store();
    store
        .remember_session_key(&who.id, DOOR, &k, session)
        .await?;
    if let Some(c) = chat {
        store
            .remember_session_key(&who.id, DOOR_CHAT, c, session)
            .await?;
    }
    Ok(())
}

/// [`remember`], a failure logged: the input is admitted already, and a conversation not
/// remembered only means its next request starts a new session with the history it sends.
pub(crate) async fn note(
    state: &AppState,
    who: &Principal,
    session: SessionId,
    earlier: &[SeedMessage],
    last: &str,
    chat: Option<&str>,
) {
    if let Err(e) = remember(state, who, session, earlier, last, chat).await {
        tracing::warn!(%session, error = %e, "the conversation's key was not stored; its next request starts a new session");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(role: MessageRole, text: &str, tools: bool) -> Message {
        Message {
            id: Default::default(),
            session_id: Default::default(),
            idx: 0,
            role,
            content: Some(text.into()),
            api_content: None,
            tool_calls: tools.then(|| serde_json::json!([])),
            tool_call_id: None,
            name: None,
            turn_id: None,
            admission_id: None,
            display: None,
            token_estimate: 0,
            created_at: 0,
            compressed_epoch: None,
            summary_epoch: None,
            summary_after_idx: None,
            attachments: None,
        }
    }

    #[test]
    fn a_transcript_reads_as_the_client_saw_it() {
        use MessageRole::*;
        let rows = [
            row(User, "run ls ", false),
            row(Assistant, "Let me look.", true),
            row(Tool, "a b", false),
            row(Assistant, "There are a and b.", false),
            row(User, "thanks", false),
        ];
        assert_eq!(
            as_said(&rows),
            vec![
                (User, "run ls".to_owned()),
                (Assistant, "There are a and b.".to_owned()),
                (User, "thanks".to_owned()),
            ]
        );
    }

    #[test]
    fn the_key_is_the_user_texts_in_order() {
        assert_eq!(key(["a", "b"].into_iter()), key([" a", "b\n"].into_iter()));
        assert_ne!(key(["a", "b"].into_iter()), key(["b", "a"].into_iter()));
        assert_ne!(key(["ab"].into_iter()), key(["a", "b"].into_iter()));
    }
}
