//! Chat commands that bypass the queue (SPEC R1.4), the same on every platform: `/stop`,
//! `/new`, `/queue <text>`, `/status`, `/approve [id]`, `/deny [id]`, `/retry`, `/model [name]`
//! (and `/help`, `/start`). Telegram's `/cmd@BotName` form is accepted. Any other text, including an unknown
//! `/word`, is a message for the agent.
//!
//! Each command is handled once per platform update: the update is recorded in
//! `inbound_updates` first (`Gateway::chat_inbound`), the command acts, and its answer (an
//! outbox `notice` keyed `cmd:<platform>:<external_id>`) commits together with the update's
//! `result`. A redelivery finds the result and does nothing again; a crash before that commit
//! leaves no result, so the redelivery acts again (every action but `/stop` is idempotent under
//! its own key, and `/stop` only stops what runs). `/new` is recorded by
//! `Store::renew_chat_session`, which makes the new session and the record in one transaction.
//!
//! Approve/deny buttons (Telegram `callback_query`, Slack `block_actions`) go through [`button`]
//! under the same rules.
mod decisions;
mod session;

use super::Gateway;
use crate::error::GatewayError;
use crate::input::Receipt;
use crate::platforms::{chat_principal, ChatAdmission, ChatMessage};
use decisions::{decide, decide_by_command};
use serde_json::json;
use session::{model, new_session, queue, retry, status, stop};
use turnkey_storage::{now_ms, ApprovalDecision, ApprovalId, NewOutbox, SessionId};

/// A chat command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Interrupt the running turn at once.
    Stop,
    /// Move the chat to a fresh session.
    New,
    /// Admit the text with busy policy `queue` (it waits for the running turn, whatever the
    /// session's policy). Empty: answered with the usage.
    Queue(String),
    /// State, queue depth, running turn, pending approvals.
    Status,
    /// Approve the pending approval with this id (or id prefix), or the only one.
    Approve(Option<String>),
    Deny(Option<String>),
    /// Run the chat's last `unknown` turn again.
    Retry,
    /// Without a name: the model in use and the others; with one: switch to it from the next
    /// turn (`default`: back to the primary provider's).
    Model(Option<String>),
    Help,
}

impl Command {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::New => "new",
            Self::Queue(_) => "queue",
            Self::Status => "status",
            Self::Approve(_) => "approve",
            Self::Deny(_) => "deny",
            Self::Retry => "retry",
            Self::Model(_) => "model",
            Self::Help => "help",
        }
    }

    /// The command `text` is, if it is one: `/name`, `/name@BotName`, then arguments after
    /// white space. Names are matched without regard to case.
    pub fn parse(text: &str) -> Option<Self> {
        let rest = text.trim_start().strip_prefix('/')?;
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '@')
            .unwrap_or(rest.len());
        let (name, mut rest) = rest.split_at(end);
        if let Some(addressed) = rest.strip_prefix('@') {
            // `/cmd@BotName args`: the bot's name runs to the first white space.
            let bot_end = addressed
                .find(char::is_whitespace)
                .unwrap_or(addressed.len());
            if bot_end == 0 {
                return None;
            }
            rest = &addressed[bot_end..];
        }
        let args = rest.trim();
        let first_arg = || args.split_whitespace().next().map(str::to_owned);
        Some(match name.to_ascii_lowercase().as_str() {
            "stop" => Self::Stop,
            "new" => Self::New,
            "queue" => Self::Queue(args.to_owned()),
            "status" => Self::Status,
            "approve" => Self::Approve(first_arg()),
            "deny" => Self::Deny(first_arg()),
            "retry" => Self::Retry,
            "model" | "models" => Self::Model(first_arg()),
            "help" | "start" => Self::Help,
            _ => return None,
        })
    }
}

/// What became of a chat update.
#[derive(Clone, Debug)]
pub enum Handled {
    /// A message admitted for the agent (or found admitted before: `duplicate`).
    Admitted(Receipt),
    /// The sender is not in `allowed_users` (told so once).
    Refused,
    /// A command, answered in the chat.
    Command {
        name: &'static str,
        answer: String,
        /// A redelivery of a command already handled: nothing was done again.
        duplicate: bool,
        /// The admission `/queue` or `/retry` made.
        receipt: Option<Receipt>,
    },
    /// Input the gateway refuses (empty, too long, a request id reused with other text):
    /// nothing admitted. The chat is told why, except for a reused id.
    Rejected { code: &'static str, message: String },
}

/// Handles a message of a chat: a command, or input for the agent.
pub async fn handle(gw: &Gateway, msg: &ChatMessage) -> Result<Handled, GatewayError> {
    let Some(command) = Command::parse(&msg.text) else {
        return message(gw, msg).await;
    };
    if !gw.chat_allows(msg).await? {
        return Ok(Handled::Refused);
    }
    if command == Command::New {
        return new_session(gw, msg).await;
    }
    let name = command.name();
    let inbound = gw.chat_inbound(msg).await?;
    if let Some(done) = &inbound.result {
        return Ok(Handled::Command {
            name,
            answer: done["answer"].as_str().unwrap_or_default().to_owned(),
            duplicate: true,
            receipt: None,
        });
    }
    let session = inbound.session_id;
    let principal = chat_principal(msg);
    let (answer, receipt) = match command {
        Command::Stop => (stop(gw, &principal, session).await?, None),
        Command::Status => (status(gw, session).await?, None),
        Command::Queue(text) => queue(gw, msg, &principal, session, text).await?,
        Command::Approve(id) => (
            decide_by_command(gw, msg, session, id, ApprovalDecision::Approve).await?,
            None,
        ),
        Command::Deny(id) => (
            decide_by_command(gw, msg, session, id, ApprovalDecision::Deny).await?,
            None,
        ),
        Command::Retry => retry(gw, &principal, session).await?,
        Command::Model(name) => (model(gw, session, name).await?, None),
        Command::Help | Command::New => (help(), None),
    };
    complete(gw, msg, session, name, &answer).await?;
    Ok(Handled::Command {
        name,
        answer,
        duplicate: false,
        receipt,
    })
}

/// The answer of an approve/deny button.
#[derive(Clone, Debug)]
pub struct ButtonAnswer {
    /// What the person who pressed it is shown (Telegram's callback answer) and the chat is
    /// told (the notice).
    pub text: String,
    /// A redelivery of a press already handled.
    pub duplicate: bool,
    /// The presser is not in `allowed_users`: nothing was decided.
    pub refused: bool,
}

/// An approve/deny button pressed in a chat (`msg.text` is the button's data, `approval` the
/// approval id it carries). Only an allowed user decides, and only an approval of a session of
/// this chat; the decision reaches the turn waiting on it (`Gateway::decide_approval`).
pub async fn button(
    gw: &Gateway,
    msg: &ChatMessage,
    approval: &str,
    decision: ApprovalDecision,
) -> Result<ButtonAnswer, GatewayError> {
    if !gw.chat_allows(msg).await? {
        return Ok(ButtonAnswer {
            text: "You are not allowed to decide approvals here.".into(),
            duplicate: false,
            refused: true,
        });
    }
    let inbound = gw.chat_inbound(msg).await?;
    if let Some(done) = &inbound.result {
        return Ok(ButtonAnswer {
            text: done["answer"].as_str().unwrap_or_default().to_owned(),
            duplicate: true,
            refused: false,
        });
    }
    let text = match approval.parse::<ApprovalId>() {
        Ok(id) => decide(gw, msg, id, decision).await?,
        Err(_) => format!("{approval:?} is not an approval id."),
    };
    complete(gw, msg, inbound.session_id, "button", &text).await?;
    Ok(ButtonAnswer {
        text,
        duplicate: false,
        refused: false,
    })
}

/// A plain message: admitted for the agent.
async fn message(gw: &Gateway, msg: &ChatMessage) -> Result<Handled, GatewayError> {
    match gw.chat_submit(msg).await {
        Ok(ChatAdmission::Admitted(receipt)) => Ok(Handled::Admitted(receipt)),
        Ok(ChatAdmission::Refused) => Ok(Handled::Refused),
        Err(e) => rejected(gw, msg, e).await,
    }
}

/// Input the gateway refused: the chat is told why (a platform would retry an error forever).
async fn rejected(
    gw: &Gateway,
    msg: &ChatMessage,
    e: GatewayError,
) -> Result<Handled, GatewayError> {
    match e {
        GatewayError::InvalidInput { code, message } => {
            gw.store()
                .enqueue_outbox(&notice(
                    msg,
                    None,
                    format!("invalid:{}:{}", msg.chat.platform(), msg.external_id),
                    &format!("⚠️ Not sent to the agent: {message}"),
                ))
                .await?;
            gw.wake_outbox();
            Ok(Handled::Rejected { code, message })
        }
        GatewayError::Limited {
            code,
            message,
            retry_after_s,
        } => {
            // Told once per window (a minute, or the day for the quota): a chat that goes on
            // writing is not answered each time.
            let window_s: i64 = if code == "quota_exceeded" { 86_400 } else { 60 };
            let window = now_ms() / 1000 / window_s;
            gw.store()
                .enqueue_outbox(&notice(
                    msg,
                    None,
                    format!("limit:{}:{code}:{window}", msg.chat.key()),
                    &format!("⏳ Not sent to the agent: {message} (in about {retry_after_s} s)."),
                ))
                .await?;
            gw.wake_outbox();
            Ok(Handled::Rejected { code, message })
        }
        e @ GatewayError::IdempotencyConflict(_) => Ok(Handled::Rejected {
            code: "idempotency_conflict",
            message: e.to_string(),
        }),
        other => Err(other),
    }
}

fn help() -> String {
    "Commands: /stop (stop the running turn), /new (start a new conversation), \
     /queue <text> (run after the running turn), /status, /approve [id], /deny [id], \
     /retry (run again a turn a crash cut off), /model [name] (show or switch the model). \
     Anything else goes to the agent."
        .into()
}

/// The outbox key of a command's answer: one answer per update, however often it comes.
fn command_key(msg: &ChatMessage) -> String {
    format!("cmd:{}:{}", msg.chat.platform(), msg.external_id)
}

fn notice(msg: &ChatMessage, session: Option<SessionId>, key: String, text: &str) -> NewOutbox {
    let mut payload = json!({ "text": text });
    if let Some(id) = &msg.message_id {
        payload["reply_to"] = json!(id);
    }
    NewOutbox {
        platform: msg.chat.platform().into(),
        chat_key: msg.chat.key(),
        session_id: session,
        turn_id: None,
        idempotency_key: key,
        kind: "notice".into(),
        payload,
    }
}

/// Records the command as done and writes its answer, in one transaction.
async fn complete(
    gw: &Gateway,
    msg: &ChatMessage,
    session: SessionId,
    name: &str,
    answer: &str,
) -> Result<(), GatewayError> {
    gw.store()
        .complete_command(
            msg.chat.platform(),
            &msg.external_id,
            &json!({ "command": name, "answer": answer }),
            &notice(msg, Some(session), command_key(msg), answer),
        )
        .await?;
    gw.wake_outbox();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Command;

    #[test]
    fn r1_4_commands_parse_with_and_without_the_bot_name() {
        assert_eq!(Command::parse("/stop"), Some(Command::Stop));
        assert_eq!(Command::parse("  /STOP  "), Some(Command::Stop));
        assert_eq!(Command::parse("/stop@turnkey_bot"), Some(Command::Stop));
        assert_eq!(Command::parse("/new@TurnkeyBot please"), Some(Command::New));
        assert_eq!(Command::parse("/status"), Some(Command::Status));
        assert_eq!(Command::parse("/retry"), Some(Command::Retry));
        assert_eq!(Command::parse("/model"), Some(Command::Model(None)));
        assert_eq!(
            Command::parse("/model@TurnkeyBot  big-model "),
            Some(Command::Model(Some("big-model".into())))
        );
        assert_eq!(Command::parse("/start"), Some(Command::Help));
        assert_eq!(
            Command::parse("/queue  then  do this\nand that "),
            Some(Command::Queue("then  do this\nand that".into()))
        );
        assert_eq!(
            Command::parse("/queue@bot later"),
            Some(Command::Queue("later".into()))
        );
        assert_eq!(
            Command::parse("/queue"),
            Some(Command::Queue(String::new()))
        );
        assert_eq!(Command::parse("/approve"), Some(Command::Approve(None)));
        assert_eq!(
            Command::parse("/approve 0190abcd extra"),
            Some(Command::Approve(Some("0190abcd".into())))
        );
        assert_eq!(
            Command::parse("/deny@bot 0190"),
            Some(Command::Deny(Some("0190".into())))
        );
    }

    #[test]
    fn r1_4_other_text_is_a_message() {
        for text in [
            "stop",
            "hello /stop",
            "/etc/hosts is where?",
            "/unknown command",
            "/stop@",
            "/",
            "",
            "//stop",
        ] {
            assert_eq!(Command::parse(text), None, "{text:?}");
        }
    }
}
