//! Where a completion runs: the session a request names or is keyed to (see the module
//! documentation of `openai`), and the model its turn runs on and its answer names.
use super::wire::{ChatRequest, OpenAiError};
use super::SESSION_HEADER;
use crate::auth::AuthPrincipal;
use crate::routes::parse_id;
use crate::state::AppState;
use actix_web::HttpRequest;
use turnkey_actors::{NewSessionRequest, SeedMessage};
use turnkey_storage::{MessageRole, Session, SessionId};

/// Session keys of this door: by the request's `user`, and by its `Idempotency-Key`.
const DOOR_USER: &str = "openai.user";
const DOOR_REQUEST: &str = "openai.request";
/// The `model` an answer reports when no provider's model is known.
const OWNED_BY: &str = "turnkey";

/// The session the request names in [`SESSION_HEADER`], if it names one.
pub(crate) fn named_session(req: &HttpRequest) -> Result<Option<SessionId>, OpenAiError> {
    let Some(v) = req.headers().get(SESSION_HEADER) else {
        return Ok(None);
    };
    let raw = v
        .to_str()
        .map_err(|_| OpenAiError::invalid("invalid_id", "X-Turnkey-Session is not a UUID", None))?;
    Ok(Some(parse_id(raw.trim(), "session")?))
}

/// A request that names no session (`X-Turnkey-Session`) and no `user`: a stateless client's,
/// whose earlier messages say which conversation it continues (`conversation`).
pub(super) fn is_stateless(req: &HttpRequest, body: &ChatRequest) -> bool {
    !req.headers().contains_key(SESSION_HEADER)
        && body.user.as_deref().is_none_or(|u| u.trim().is_empty())
}

/// The earlier messages of a request: its user and assistant messages before the last user
/// message and the user messages right before it (with no answer between, they are one input
/// with it: their texts are returned second, to go before the last one's). Images in earlier
/// messages are not kept; tool messages and system messages are not history.
pub(super) fn earlier(body: &ChatRequest) -> Result<(Vec<SeedMessage>, Vec<String>), OpenAiError> {
    let mut said = Vec::new();
    let n = body.messages.len().saturating_sub(1);
    for (i, m) in body.messages.iter().enumerate().take(n) {
        let role = match m.role.as_str() {
            "user" => MessageRole::User,
            "assistant" => MessageRole::Assistant,
            _ => continue,
        };
        let (text, _images) = m.text_and_images(i)?;
        if !text.trim().is_empty() {
            said.push(SeedMessage { role, text });
        }
    }
    let mut lead = Vec::new();
    while said.last().is_some_and(|m| m.role == MessageRole::User) {
        lead.extend(said.pop().map(|m| m.text));
    }
    lead.reverse();
    Ok((said, lead))
}

/// The session of a request (see the module's documentation); `earlier` is a stateless
/// request's history ([`earlier`]), empty otherwise.
pub(super) async fn resolve_session(
    state: &AppState,
    who: &AuthPrincipal,
    req: &HttpRequest,
    body: &ChatRequest,
    key: Option<&str>,
    earlier: &[SeedMessage],
) -> Result<Session, OpenAiError> {
    if let Some(id) = named_session(req)? {
        // Any id of a rotated lineage names the lineage, keyed on its root (SPEC R6.4).
        return Ok(state
            .gateway
            .authorize_lineage(&who.0, id)
            .await
            .map_err(crate::error::ApiError::from)?);
    }
    let chat = super::conversation::chat_hint(req);
    if let Some(s) = super::conversation::find(state, &who.0, earlier, chat.as_deref()).await? {
        return Ok(s);
    }
    let new = NewSessionRequest {
        title: None,
        system_message: system_text(body)?,
        model: None,
        platform: "api".into(),
        chat_key: None,
        history: earlier.to_vec(),
    };
    let keyed = match (body.user.as_deref().map(str::trim), key) {
        (Some(user), _) if !user.is_empty() => Some((DOOR_USER, user)),
        (_, Some(k)) => Some((DOOR_REQUEST, k)),
        _ => None,
    };
    let session = match keyed {
        Some((door, k)) => {
            let k = turnkey_actors::limits::text_field(
                if door == DOOR_USER {
                    "user"
                } else {
                    "Idempotency-Key"
                },
                k,
                turnkey_actors::limits::MAX_SESSION_KEY_CHARS,
            )
            .map_err(crate::error::ApiError::from)?;
            state
                .gateway
                .keyed_session(&who.0, door, &k, new)
                .await
                .map_err(crate::error::ApiError::from)?
                .0
        }
        None => state
            .gateway
            .create_session(&who.0, new)
            .await
            .map_err(crate::error::ApiError::from)?,
    };
    Ok(session)
}

/// The request's system (or developer) messages, joined: the system message of a session this
/// request creates. An existing session keeps its own.
fn system_text(body: &ChatRequest) -> Result<Option<String>, OpenAiError> {
    let mut parts = Vec::new();
    for (i, m) in body.messages.iter().enumerate() {
        if matches!(m.role.as_str(), "system" | "developer") {
            let t = m.text(i)?;
            if !t.trim().is_empty() {
                parts.push(t);
            }
        }
    }
    Ok((!parts.is_empty()).then(|| parts.join("\n\n")))
}

/// The model a completion runs on and names.
pub(crate) struct ChosenModel {
    /// A configured provider's model other than the session's: this turn's model.
    pub(crate) override_for_turn: Option<String>,
    /// The `model` of the answer.
    pub(crate) reported: String,
}

/// Any `model` is accepted. One a configured provider serves (`GET /v1/models`) runs this
/// turn; any other name (`"turnkey"`, an SDK default) leaves the session's model in use.
pub(crate) fn chosen_model(
    state: &AppState,
    session: &Session,
    asked: Option<&str>,
) -> ChosenModel {
    let in_use = state.gateway.model_in_use(session);
    let models = state.gateway.models();
    let configured = asked.filter(|m| models.iter().any(|known| known == m));
    match configured {
        Some(m) if Some(m) != in_use.as_deref() => ChosenModel {
            override_for_turn: Some(m.to_owned()),
            reported: m.to_owned(),
        },
        _ => ChosenModel {
            override_for_turn: None,
            reported: in_use.unwrap_or_else(|| asked.unwrap_or(OWNED_BY).to_owned()),
        },
    }
}
