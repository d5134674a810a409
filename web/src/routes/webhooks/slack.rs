//! `POST /webhooks/slack` (the Events API request URL) and `POST /webhooks/slack/interactive`
//! (Interactivity). Both are verified by Slack's v0 signature over `v0:TS:BODY` with the app's
//! signing secret, the timestamp within five minutes of now. `url_verification` is answered
//! with its challenge. A `message` or `app_mention` event from a person is admitted (or is a
//! command); messages of bots (the app's own included) and subtyped messages (edits, deletes,
//! joins, …) are ignored, so the bot never talks to itself. A message's id for dedupe is
//! `<channel>:<ts>`: Slack's retries (`X-Slack-Retry-Num`) carry the same one, and so does the
//! `app_mention` twin of a `message` event, so either way it is admitted once.
//! Interactivity carries `block_actions` with the approve/deny buttons (`action_id`
//! `turnkey_approve` / `turnkey_deny`, `value` = the approval id). Slash commands registered
//! with `/webhooks/slack` as their Request URL (form-encoded, signed the same way) are handled
//! as the message `/command text`, deduped by their `trigger_id`.
use super::{body, clean, configured, handle, now_s, parse, verify, WebhookAck};
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use actix_web::post;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use turnkey_actors::gateway::commands;
use turnkey_actors::platforms::files::PlatformFile;
use turnkey_actors::platforms::{ChatMessage, ChatTarget};
use turnkey_storage::ApprovalDecision;
use utoipa::ToSchema;

pub const APPROVE_ACTION: &str = "turnkey_approve";
pub const DENY_ACTION: &str = "turnkey_deny";
const NAME_CHARS: usize = 128;
/// Message subtypes that are still a person's new message.
const PERSON_SUBTYPES: [&str; 2] = ["thread_broadcast", "file_share"];

/// The envelope of an Events API request.
#[derive(Debug, Deserialize)]
pub struct Envelope {
    #[serde(rename = "type")]
    pub kind: String,
    pub challenge: Option<String>,
    pub team_id: Option<String>,
    pub event: Option<Event>,
    /// Who the app acts as in this workspace: its bot user is among them.
    #[serde(default)]
    pub authorizations: Vec<Authorization>,
}

#[derive(Debug, Deserialize)]
pub struct Authorization {
    pub user_id: Option<String>,
    #[serde(default)]
    pub is_bot: bool,
}

#[derive(Debug, Deserialize)]
pub struct Event {
    #[serde(rename = "type")]
    pub kind: String,
    pub subtype: Option<String>,
    pub user: Option<String>,
    pub bot_id: Option<String>,
    pub text: Option<String>,
    pub channel: Option<String>,
    pub ts: Option<String>,
    pub thread_ts: Option<String>,
    pub team: Option<String>,
    /// Files shared with the message (`file_share`).
    #[serde(default)]
    pub files: Vec<SlackFile>,
}

/// A file of a message: fetched with the bot token at admission.
#[derive(Debug, Deserialize)]
pub struct SlackFile {
    pub name: Option<String>,
    pub url_private_download: Option<String>,
    pub url_private: Option<String>,
}

/// The answer to `url_verification`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Challenge {
    pub challenge: String,
}

/// Either what the webhook did, or the `url_verification` challenge.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum SlackAnswer {
    Ack(WebhookAck),
    Challenge(Challenge),
}

/// What an Events API request is to this build.
#[derive(Debug)]
pub enum Parsed {
    Challenge(String),
    Message(ChatMessage),
    Ignored(&'static str),
}

/// Reads an Events API request.
pub fn parse_envelope(e: Envelope) -> Parsed {
    match e.kind.as_str() {
        "url_verification" => return Parsed::Challenge(e.challenge.unwrap_or_default()),
        "event_callback" => {}
        _ => return Parsed::Ignored("not an event callback"),
    }
    let Some(ev) = e.event else {
        return Parsed::Ignored("no event");
    };
    if !matches!(ev.kind.as_str(), "message" | "app_mention") {
        return Parsed::Ignored("not a message event");
    }
    if ev.bot_id.is_some() || ev.subtype.as_deref() == Some("bot_message") {
        return Parsed::Ignored("a bot's message");
    }
    if ev
        .subtype
        .as_deref()
        .is_some_and(|s| !PERSON_SUBTYPES.contains(&s))
    {
        return Parsed::Ignored("not a new message (edit, delete, join, …)");
    }
    let bots: Vec<&str> = e
        .authorizations
        .iter()
        .filter(|a| a.is_bot)
        .filter_map(|a| a.user_id.as_deref())
        .collect();
    let Some(user) = ev.user.as_deref().filter(|u| !u.is_empty()) else {
        return Parsed::Ignored("no sender");
    };
    if bots.contains(&user) {
        return Parsed::Ignored("the app's own message");
    }
    let (Some(team), Some(channel), Some(ts)) = (
        e.team_id.or(ev.team).filter(|t| !t.is_empty()),
        ev.channel.filter(|c| !c.is_empty()),
        ev.ts.filter(|t| !t.is_empty()),
    ) else {
        return Parsed::Ignored("no team, channel or ts");
    };
    let text = text_of(ev.text.as_deref().unwrap_or_default(), &bots);
    let files: Vec<PlatformFile> = ev
        .files
        .iter()
        .filter_map(|f| {
            let url = f.url_private_download.clone().or(f.url_private.clone())?;
            Some(PlatformFile::Slack {
                url,
                name: clean(f.name.as_deref(), NAME_CHARS),
            })
        })
        .collect();
    if text.trim().is_empty() && files.is_empty() {
        return Parsed::Ignored("no text and no file");
    }
    Parsed::Message(ChatMessage {
        chat: ChatTarget::Slack {
            team,
            channel: channel.clone(),
            thread_ts: ev.thread_ts.filter(|t| !t.is_empty()),
        },
        external_id: format!("{channel}:{ts}"),
        user_id: user.to_owned(),
        user_name: None,
        text,
        message_id: Some(ts),
        files,
    })
}

/// The text a person wrote: leading mentions of the bot (`<@U123> /stop`) dropped, and Slack's
/// three escapes undone.
fn text_of(raw: &str, bots: &[&str]) -> String {
    let mut rest = raw.trim_start();
    while let Some(after) = rest.strip_prefix("<@") {
        let Some(end) = after.find('>') else { break };
        let id = after[..end].split('|').next().unwrap_or_default();
        if !bots.contains(&id) {
            break;
        }
        rest = after[end + 1..].trim_start();
    }
    rest.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Receives a Slack Events API request.
#[utoipa::path(
    operation_id = "webhook_slack",
    tag = "webhooks",
    params(
        ("X-Slack-Signature" = String, Header, description = "`v0=HEX`: HMAC-SHA256 of `v0:TS:BODY` with `platforms.slack.signing_secret`"),
        ("X-Slack-Request-Timestamp" = String, Header, description = "Unix seconds; within 5 minutes of now"),
        ("X-Slack-Retry-Num" = Option<String>, Header, description = "Set on Slack's retries; a retry is admitted once"),
    ),
    request_body(content = Object, description = "An Events API request (`url_verification` or `event_callback`); or, form-encoded, a slash command (`command=/stop&text=…&team_id&channel_id&user_id&trigger_id`)", content_type = "application/json"),
    responses(
        (status = 200, description = "The `url_verification` challenge, or what became of the event; empty for a slash command (its answer goes to the channel)", body = SlackAnswer),
        (status = 400, description = "`invalid_json`, `invalid_update`, `invalid_form`, `invalid_body`", body = ErrorBody),
        (status = 401, description = "`invalid_signature`: missing, wrong or stale signature; nothing was written", body = ErrorBody),
        (status = 404, description = "`platform_not_configured`: no `[platforms.slack]`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`, `shutting_down`, `no_provider`: Slack retries", body = ErrorBody),
    ),
)]
#[post("/webhooks/slack")]
pub async fn events(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let config = configured(&state, "slack", |p| &p.slack)?;
    let body = body(&state, payload).await?;
    verify::slack(&req, config.signing_secret.expose(), &body, now_s())?;
    if is_form(&req) {
        // A slash command (`/stop` registered with this URL): its answer goes to the channel
        // through the outbox; an empty 200 tells Slack not to post anything itself.
        let command = form::<SlashCommand>(&body, "a slash command (command=…&text=…)")?;
        let Some(msg) = parse_slash_command(command) else {
            return Ok(HttpResponse::Ok().finish());
        };
        commands::handle(&state.gateway, &msg).await?;
        return Ok(HttpResponse::Ok().finish());
    }
    let envelope: Envelope = parse(&body, "Slack Events API request")?;
    match parse_envelope(envelope) {
        Parsed::Challenge(challenge) => {
            Ok(HttpResponse::Ok().json(SlackAnswer::Challenge(Challenge { challenge })))
        }
        Parsed::Message(msg) => handle(&state, &msg).await,
        Parsed::Ignored(why) => Ok(WebhookAck::ignored(why).ok()),
    }
}

fn is_form(req: &HttpRequest) -> bool {
    req.headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

/// A form-encoded body: 400 `invalid_form` when it is not this form.
fn form<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ApiError> {
    std::str::from_utf8(body)
        .ok()
        .and_then(|s| web::Query::<T>::from_query(s).ok())
        .map(web::Query::into_inner)
        .ok_or_else(|| ApiError::bad_request("invalid_form", format!("the body is not {what}")))
}

/// A slash command as Slack posts it (form fields).
#[derive(Debug, Deserialize)]
pub struct SlashCommand {
    pub command: String,
    #[serde(default)]
    pub text: String,
    pub team_id: String,
    pub channel_id: String,
    pub user_id: String,
    pub user_name: Option<String>,
    pub trigger_id: String,
}

/// A slash command is the message `command text`: one of the chat commands, or (a command of
/// the app's own) a message for the agent. `None` without a trigger id to dedupe by.
pub fn parse_slash_command(c: SlashCommand) -> Option<ChatMessage> {
    if c.trigger_id.is_empty() || c.team_id.is_empty() || c.channel_id.is_empty() {
        return None;
    }
    Some(ChatMessage {
        chat: ChatTarget::Slack {
            team: c.team_id,
            channel: c.channel_id,
            thread_ts: None,
        },
        external_id: format!("slash:{}", c.trigger_id),
        user_id: c.user_id,
        user_name: clean(c.user_name.as_deref(), NAME_CHARS),
        text: format!("{} {}", c.command.trim(), c.text.trim())
            .trim()
            .to_owned(),
        message_id: None,
        files: Vec::new(),
    })
}

/// The form field Slack posts interactions in.
#[derive(Debug, Deserialize)]
struct InteractionForm {
    payload: String,
}

/// The part of a `block_actions` payload this build reads.
#[derive(Debug, Deserialize)]
pub struct Interaction {
    #[serde(rename = "type")]
    pub kind: String,
    pub trigger_id: Option<String>,
    pub team: Option<IdName>,
    pub user: Option<IdName>,
    pub channel: Option<IdName>,
    pub message: Option<InteractionMessage>,
    #[serde(default)]
    pub actions: Vec<Action>,
}

#[derive(Debug, Deserialize)]
pub struct IdName {
    pub id: String,
    pub username: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct InteractionMessage {
    pub ts: Option<String>,
    pub thread_ts: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Action {
    pub action_id: String,
    pub value: Option<String>,
    pub action_ts: Option<String>,
}

/// An approve/deny press, or why an interaction is ignored.
#[derive(Debug)]
pub enum Press {
    Button {
        press: Box<ChatMessage>,
        approval: String,
        decision: ApprovalDecision,
    },
    Ignored(&'static str),
}

/// Reads a `block_actions` interaction.
pub fn parse_interaction(i: Interaction) -> Press {
    if i.kind != "block_actions" {
        return Press::Ignored("not block_actions");
    }
    let Some((action, decision)) = i.actions.iter().find_map(|a| match a.action_id.as_str() {
        APPROVE_ACTION => Some((a, ApprovalDecision::Approve)),
        DENY_ACTION => Some((a, ApprovalDecision::Deny)),
        _ => None,
    }) else {
        return Press::Ignored("not a turnkey approval button");
    };
    let (Some(team), Some(user), Some(channel)) = (i.team, i.user, i.channel) else {
        return Press::Ignored("no team, user or channel");
    };
    let approval = action.value.clone().unwrap_or_default();
    // One press is one interaction: Slack's trigger id, else the action's own time.
    let Some(external_id) = i.trigger_id.filter(|t| !t.is_empty()).or_else(|| {
        action
            .action_ts
            .clone()
            .map(|ts| format!("{}:{ts}", user.id))
    }) else {
        return Press::Ignored("no trigger id");
    };
    let message = i.message.unwrap_or(InteractionMessage {
        ts: None,
        thread_ts: None,
    });
    Press::Button {
        press: Box::new(ChatMessage {
            chat: ChatTarget::Slack {
                team: team.id,
                channel: channel.id,
                thread_ts: message.thread_ts.filter(|t| !t.is_empty()),
            },
            external_id: format!("action:{external_id}"),
            user_name: clean(user.username.as_deref(), NAME_CHARS)
                .or_else(|| clean(user.name.as_deref(), NAME_CHARS)),
            user_id: user.id,
            text: format!("{}:{approval}", decision.as_str()),
            message_id: message.ts,
            files: Vec::new(),
        }),
        approval,
        decision,
    }
}

/// Receives a Slack interaction (the approve/deny buttons).
#[utoipa::path(
    operation_id = "webhook_slack_interactive",
    tag = "webhooks",
    params(
        ("X-Slack-Signature" = String, Header, description = "`v0=HEX`, as for /webhooks/slack"),
        ("X-Slack-Request-Timestamp" = String, Header, description = "Unix seconds; within 5 minutes of now"),
    ),
    request_body(content = String, description = "`payload=<JSON>` form-encoded: a `block_actions` interaction", content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "What became of the press (`decided`, `refused`, `ignored`)", body = WebhookAck),
        (status = 400, description = "`invalid_form`, `invalid_json`, `invalid_update`, `invalid_body`", body = ErrorBody),
        (status = 401, description = "`invalid_signature`: missing, wrong or stale signature; nothing was written", body = ErrorBody),
        (status = 404, description = "`platform_not_configured`: no `[platforms.slack]`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`store_unavailable`, `shutting_down`", body = ErrorBody),
    ),
)]
#[post("/webhooks/slack/interactive")]
pub async fn interactive(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let config = configured(&state, "slack", |p| &p.slack)?;
    let body = body(&state, payload).await?;
    verify::slack(&req, config.signing_secret.expose(), &body, now_s())?;
    let form = form::<InteractionForm>(&body, "a form with a payload field (payload=<JSON>)")?;
    let interaction: Interaction = parse(form.payload.as_bytes(), "Slack interaction")?;
    match parse_interaction(interaction) {
        Press::Button {
            press,
            approval,
            decision,
        } => {
            let answer = commands::button(&state.gateway, &press, &approval, decision).await?;
            Ok(WebhookAck {
                outcome: if answer.refused { "refused" } else { "decided" },
                duplicate: answer.duplicate,
                detail: Some(answer.text),
                ..Default::default()
            }
            .ok())
        }
        Press::Ignored(why) => Ok(WebhookAck::ignored(why).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn envelope(v: serde_json::Value) -> Parsed {
        parse_envelope(serde_json::from_value(v).expect("an envelope"))
    }

    fn event(ev: serde_json::Value) -> Parsed {
        envelope(json!({
            "type": "event_callback", "team_id": "T1", "event_id": "Ev1",
            "authorizations": [{"user_id": "UBOT", "is_bot": true}],
            "event": ev,
        }))
    }

    #[test]
    fn r1_3_a_person_s_message_is_admitted_under_channel_and_ts() {
        let Parsed::Message(m) = event(json!({
            "type": "message", "user": "U1", "channel": "C1", "ts": "1700000000.000100",
            "text": "<@UBOT> a &lt;b&gt; &amp; c", "channel_type": "channel"
        })) else {
            panic!("not a message");
        };
        assert_eq!(m.chat.key(), "slack:T1:C1");
        assert_eq!(m.external_id, "C1:1700000000.000100");
        assert_eq!(m.text, "a <b> & c");
        assert_eq!(m.user_id, "U1");
        let Parsed::Message(m) = event(json!({
            "type": "app_mention", "user": "U1", "channel": "C1", "ts": "2.0",
            "thread_ts": "1.0", "text": "<@UBOT> /stop"
        })) else {
            panic!("not a message");
        };
        assert_eq!(m.chat.key(), "slack:T1:C1:1.0");
        assert_eq!(m.text, "/stop");
        // Another user's mention stays.
        let Parsed::Message(m) = event(json!({
            "type": "message", "user": "U1", "channel": "D1", "ts": "3.0", "text": "<@U2> hi"
        })) else {
            panic!("not a message");
        };
        assert_eq!(m.text, "<@U2> hi");
    }

    #[test]
    fn r1_3_bots_edits_and_other_events_are_ignored() {
        for ev in [
            json!({"type": "message", "bot_id": "B1", "channel": "C1", "ts": "1", "text": "x"}),
            json!({"type": "message", "subtype": "bot_message", "channel": "C1", "ts": "1", "text": "x"}),
            json!({"type": "message", "user": "UBOT", "channel": "C1", "ts": "1", "text": "x"}),
            json!({"type": "message", "subtype": "message_changed", "channel": "C1", "ts": "1"}),
            json!({"type": "message", "subtype": "message_deleted", "channel": "C1", "ts": "1"}),
            json!({"type": "message", "subtype": "channel_join", "user": "U1", "channel": "C1", "ts": "1", "text": "joined"}),
            json!({"type": "reaction_added", "user": "U1"}),
            json!({"type": "message", "user": "U1", "channel": "C1", "ts": "1", "text": "  "}),
        ] {
            assert!(matches!(event(ev.clone()), Parsed::Ignored(_)), "{ev}");
        }
        assert!(matches!(
            envelope(json!({"type": "url_verification", "challenge": "abc"})),
            Parsed::Challenge(c) if c == "abc"
        ));
        assert!(matches!(
            envelope(json!({"type": "app_rate_limited"})),
            Parsed::Ignored(_)
        ));
    }

    #[test]
    fn r1_4_a_slash_command_is_its_command_and_text() {
        let c: SlashCommand = web::Query::<SlashCommand>::from_query(
            "token=x&team_id=T1&team_domain=d&channel_id=C1&channel_name=general&user_id=U1\
             &user_name=ada&command=%2Fqueue&text=then+this&api_app_id=A1&trigger_id=13.45.ab\
             &response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2F1",
        )
        .expect("a slash command")
        .into_inner();
        let m = parse_slash_command(c).expect("a message");
        assert_eq!(m.text, "/queue then this");
        assert_eq!(m.chat.key(), "slack:T1:C1");
        assert_eq!(m.external_id, "slash:13.45.ab");
        assert_eq!(m.user_name.as_deref(), Some("ada"));
    }

    #[test]
    fn r1_4_block_actions_carry_the_decision_and_the_approval() {
        let i: Interaction = serde_json::from_value(json!({
            "type": "block_actions", "trigger_id": "13.45.ab",
            "team": {"id": "T1", "domain": "d"},
            "user": {"id": "U1", "username": "ada", "name": "ada"},
            "channel": {"id": "C1", "name": "general"},
            "message": {"ts": "5.0", "thread_ts": "4.0"},
            "actions": [{"action_id": "turnkey_approve", "block_id": "b", "value": "0190", "action_ts": "6.0", "type": "button"}]
        }))
        .expect("an interaction");
        let Press::Button {
            press,
            approval,
            decision,
        } = parse_interaction(i)
        else {
            panic!("not a press");
        };
        assert_eq!(approval, "0190");
        assert_eq!(decision, ApprovalDecision::Approve);
        assert_eq!(press.chat.key(), "slack:T1:C1:4.0");
        assert_eq!(press.external_id, "action:13.45.ab");
        assert_eq!(press.user_name.as_deref(), Some("ada"));
        let other: Interaction = serde_json::from_value(json!({
            "type": "block_actions", "trigger_id": "t",
            "team": {"id": "T1"}, "user": {"id": "U1"}, "channel": {"id": "C1"},
            "actions": [{"action_id": "something_else", "value": "v"}]
        }))
        .expect("an interaction");
        assert!(matches!(parse_interaction(other), Press::Ignored(_)));
    }
}
