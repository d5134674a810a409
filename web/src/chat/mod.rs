//! `turnkey chat`: a terminal client of a running turnkey server (SPEC R1.2). It is a thin
//! proxy: it builds no agent, runs no tool and writes no store; everything goes through the
//! public HTTP API (docs/api.md): a session is created or resumed, each typed line is a
//! submission under its own `Idempotency-Key`, the session's events are followed over SSE and
//! shown as they come, approvals are asked as y/n questions, Ctrl-C interrupts a running turn.
//!
//! - `options`: flags and the token (`--token`, `$TURNKEY_TOKEN`, `./data/operator.token`)
//! - `api`: the HTTP calls
//! - `sse`: the event stream: frame parser and the reconnecting follower
//! - `render`: how events, the transcript and questions look
//! - `terminal`: stdin lines and the screen
//! - `conversation`: the loop tying them together
//!
//! What the loop knows comes from events only: it holds the admissions of the lines it sent
//! (`admission.carried` replaces one by the admission that carried it), and the prompt waits while
//! one has not ended or a turn not its own runs. All output is written by the loop's task, so
//! nothing interleaves. It imports nothing of the gateway (events are `{seq, kind, …, data}` with
//! `kind` a string, so later kinds pass through) and runs on a current-thread tokio runtime.
mod api;
mod conversation;
mod options;
mod render;
mod sse;
mod terminal;

pub use options::{TokenSource, TOKEN_ENV, TOKEN_FILE};

use api::{CallError, Client};
use conversation::Conversation;
use options::Options;
use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;
use terminal::Screen;
use tokio::signal::unix::{signal, SignalKind};

/// Transcript rows shown when a session is resumed.
const RESUME_ROWS: usize = 20;
/// Events buffered between the follower and the conversation.
const FEED_BUFFER: usize = 256;

/// Why `turnkey chat` stopped early; decides the exit code.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// Bad flags, or no usable token: exit 2.
    #[error("turnkey chat: {0}")]
    Usage(String),
    /// Anything else: the server cannot be reached, refused the token, lost the session: exit 1.
    #[error("turnkey chat: {0}")]
    Failed(String),
}

impl From<std::io::Error> for ChatError {
    fn from(e: std::io::Error) -> Self {
        Self::Failed(format!("terminal: {e}"))
    }
}

/// Runs `turnkey chat` to its end: Ok when the person left (Ctrl-D, Ctrl-C at the prompt,
/// `/quit`, the end of piped input).
pub fn run(url: &str, session: Option<&str>, token: Option<&str>) -> Result<(), ChatError> {
    let options = Options::resolve(
        url,
        session,
        token,
        std::env::var(TOKEN_ENV).ok(),
        Path::new(TOKEN_FILE),
    )?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ChatError::Failed(format!("cannot start the runtime: {e}")))?;
    let outcome = runtime.block_on(chat(options));
    // Bounded: a connection still closing must not keep the terminal waiting.
    runtime.shutdown_timeout(Duration::from_secs(1));
    outcome
}

async fn chat(options: Options) -> Result<(), ChatError> {
    let client = Client::new(&options.base_url, &options.token).map_err(ChatError::Failed)?;
    let mut screen = Screen::new(std::io::stdout());
    let start = match options.session {
        None => {
            let view = client
                .create_session()
                .await
                .map_err(|e| refused(e, &options))?;
            screen.line(&format!("session {}", view.id))?;
            screen.line(&format!(
                "(resume it later with: turnkey chat --session {})",
                view.id
            ))?;
            Joined {
                session: view.id,
                since: view.last_event_seq,
                approvals: Vec::new(),
                running: false,
            }
        }
        Some(id) => resume(&client, &mut screen, &id.to_string(), &options).await?,
    };
    // Installed only now, so that Ctrl-C while connecting still ends the program at once.
    let sigint = signal(SignalKind::interrupt())?;
    let (feed_tx, feed_rx) = tokio::sync::mpsc::channel(FEED_BUFFER);
    let follower = tokio::spawn(sse::follow(
        client.clone(),
        start.session.clone(),
        start.since,
        feed_tx,
    ));
    let inputs = terminal::spawn_stdin()?;
    let conversation = Conversation::new(
        client,
        screen,
        conversation::Start {
            session: start.session,
            approvals: start.approvals,
            running: start.running,
            interactive: std::io::stdin().is_terminal(),
        },
    );
    let outcome = conversation.run(inputs, feed_rx, sigint).await;
    follower.abort();
    outcome
}

/// The session the conversation joins, as the server showed it.
struct Joined {
    session: String,
    /// Events after this seq are followed.
    since: i64,
    approvals: Vec<api::PendingApproval>,
    running: bool,
}

/// `--session`: shows the recent transcript and what waits for an answer, then follows the
/// events after the session's `last_event_seq`.
async fn resume<W: std::io::Write>(
    client: &Client,
    screen: &mut Screen<W>,
    id: &str,
    options: &Options,
) -> Result<Joined, ChatError> {
    let view = client.session(id).await.map_err(|e| refused(e, options))?;
    let messages = client.messages(id).await.map_err(|e| refused(e, options))?;
    screen.line(&format!("session {id} ({} messages)", messages.len()))?;
    for line in render::transcript(&messages, RESUME_ROWS) {
        screen.line(&line)?;
    }
    for run in &view.unknown_tool_runs {
        screen.line(&format!(
            "[tool run {} {} may or may not have run; the turn waits: answer with \
             POST /v1/sessions/{id}/tool_runs/{} and {{\"decision\":\"retry\"}} or \
             {{\"decision\":\"skip\"}}]",
            run["name"].as_str().unwrap_or("?"),
            render::compact(&run["args"], 200),
            run["call_id"].as_str().unwrap_or("?"),
        ))?;
    }
    let running = view.state == "running";
    if running {
        screen.line("[a turn is running; its output follows]")?;
    }
    Ok(Joined {
        session: view.id,
        since: view.last_event_seq,
        approvals: view.pending_approvals,
        running,
    })
}

/// The first calls decide whether the server can be used at all.
fn refused(e: CallError, options: &Options) -> ChatError {
    let what = match &e {
        CallError::Unreachable(why) => format!(
            "cannot reach {}: {why}; is `turnkey serve` running there?",
            options.base_url
        ),
        CallError::Status { status: 401, .. } => format!(
            "the server at {} refused the token from {} ({e}); the token comes from --token, \
             else ${TOKEN_ENV}, else ./{TOKEN_FILE}",
            options.base_url, options.token_source
        ),
        CallError::Status { status: 404, .. } => match options.session {
            Some(id) => format!(
                "no session {id} on {} for this token ({e})",
                options.base_url
            ),
            None => format!("{} does not serve the turnkey API ({e})", options.base_url),
        },
        other => format!("{}: {other}", options.base_url),
    };
    ChatError::Failed(what)
}
