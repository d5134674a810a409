//! Turn preparation (SPEC R5.1): sanitize, bind the session, reset per-turn state, copy the
//! history (never the caller's list), stage and persist the user message, and take the stored
//! system prompt. The user row is the durable "turn started" fact: it commits with the claim
//! ([`user_row`] built inside that transaction), or here for an input a burst joined.
use super::transcript::TranscriptCache;
use super::TurnFailure;
use crate::config::RuntimeConfig;
use crate::display::Display;
use crate::input::user_row;
use std::sync::Arc;
use turnkey_storage::*;

/// Everything one turn knows; built fresh for every turn so nothing leaks from the last one.
pub struct TurnContext {
    pub session: Session,
    pub admission: Admission,
    pub turn_id: TurnId,
    pub fence: Fence,
    pub system_prompt: String,
    /// Transcript rows as they were before this turn: shared with the session's kept copy
    /// (`turn::transcript`) and copied before this turn changes them; the store keeps the
    /// original.
    pub history: Arc<Vec<Message>>,
    /// Rows this turn has persisted so far, starting with the user message.
    pub turn_rows: Vec<Message>,
    /// Model override from the input, else the session's model.
    pub model_override: Option<String>,
    /// The prompt size the provider reported for this turn's last call, and how many wire
    /// messages that call had (SPEC R6.1: pressure starts from real usage).
    pub last_prompt: Option<LastPrompt>,
    /// How this turn is shown (SPEC R3.1): which events it publishes, never what it stores.
    pub display: Display,
    /// The images of its transcript's attachments read so far, by file id, for a provider
    /// that sees images (`turn::wire::messages`).
    pub images: std::collections::HashMap<String, turnkey_providers::Image>,
    /// The text of its transcript's attached text files read so far (`turn::attached`).
    pub texts: AttachedTexts,
}

/// The text of the attached text files a turn shows its model, read once a turn by
/// `turn::attached::load` (here, beside the context that holds it, so that `attached` stays
/// above `context`).
#[derive(Debug, Default)]
pub struct AttachedTexts {
    /// `tools.inline_text_bytes` when they were read; `None` before (every file is named).
    pub(super) bound: Option<u64>,
    /// By file id.
    pub(super) read: std::collections::HashMap<String, String>,
}

#[derive(Clone, Copy, Debug)]
pub struct LastPrompt {
    pub input_tokens: u64,
    pub wire_len: usize,
}

impl TurnContext {
    /// The input's instructions for this turn only (the Responses API's `instructions`).
    pub fn instructions(&self) -> Option<&str> {
        self.admission.payload["instructions"]
            .as_str()
            .filter(|i| !i.trim().is_empty())
    }

    /// The input's output limit for each model call of this turn; with one, a cut answer is
    /// the answer (no continuations).
    pub fn max_output_tokens(&self) -> Option<u32> {
        self.admission.payload["max_output_tokens"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
    }

    /// How many assistant rows the turn has written: one per model call it made.
    pub fn assistant_rows(&self) -> usize {
        self.turn_rows
            .iter()
            .filter(|m| m.role == MessageRole::Assistant)
            .count()
    }

    /// Which turn a tool-run or approval write belongs to.
    pub fn turn_ref(&self) -> TurnRef {
        TurnRef {
            session_id: self.session.id,
            turn_id: self.turn_id,
            admission_id: self.admission.id,
        }
    }

    /// The rows the model sees, in wire order, system prompt excluded: every row compression
    /// has not taken out, with the newest summary placed right after the row it follows.
    pub fn live_rows(&self) -> Vec<&Message> {
        let all = self.history.iter().chain(&self.turn_rows);
        let summary = all
            .clone()
            .filter(|m| m.summary_epoch.is_some() && m.compressed_epoch.is_none())
            .max_by_key(|m| m.summary_epoch);
        let mut out: Vec<&Message> = Vec::with_capacity(self.history.len() + self.turn_rows.len());
        let mut pending = summary;
        for m in all.filter(|m| m.compressed_epoch.is_none() && m.summary_epoch.is_none()) {
            if let Some(s) = pending {
                if m.idx > s.summary_after_idx.unwrap_or(0) {
                    out.push(s);
                    pending = None;
                }
            }
            out.push(m);
        }
        out.extend(pending);
        out
    }

    /// Applies a committed compression to the rows this turn holds: the replaced rows leave
    /// the wire copy, the summary joins it, and the last real prompt size no longer applies.
    pub fn apply_compaction(&mut self, epoch: i32, compressed: &[MessageId], summary: Message) {
        let gone: std::collections::HashSet<&MessageId> = compressed.iter().collect();
        let history = Arc::make_mut(&mut self.history);
        for m in history.iter_mut().chain(self.turn_rows.iter_mut()) {
            if gone.contains(&m.id) {
                m.compressed_epoch = Some(epoch);
            }
        }
        history.push(summary);
        self.session.compression_epoch = epoch;
        self.last_prompt = None;
    }

    /// Applies a committed rotation: the rows the child copied are replaced by their copies,
    /// the others leave the wire copy (the parent keeps them), and the child's rows of this
    /// turn join the turn rows. The user row stays first (`user_text`), out of the wire copy.
    pub fn apply_rotation(&mut self, epoch: i32, kept: &[MessageId], child_rows: Vec<Message>) {
        let copied: std::collections::HashSet<&MessageId> = kept.iter().collect();
        // The user row stays first even when copied: it leaves only the wire copy.
        let user = self.turn_rows.first().map(|m| m.id);
        let history = Arc::make_mut(&mut self.history);
        history.retain(|m| !copied.contains(&m.id));
        self.turn_rows
            .retain(|m| Some(m.id) == user || !copied.contains(&m.id));
        for m in history.iter_mut().chain(self.turn_rows.iter_mut()) {
            m.compressed_epoch.get_or_insert(epoch);
        }
        let turn = self.turn_id;
        let (mine, earlier): (Vec<Message>, Vec<Message>) = child_rows
            .into_iter()
            .partition(|m| m.turn_id == Some(turn) && m.summary_epoch.is_none());
        history.extend(earlier);
        self.turn_rows.extend(mine);
        self.session.compression_epoch = epoch;
        self.last_prompt = None;
    }

    /// The user message of this turn.
    pub fn user_text(&self) -> &str {
        self.turn_rows
            .first()
            .and_then(|m| m.content.as_deref())
            .unwrap_or_default()
    }
}

pub async fn prepare(
    store: &Store,
    config: &RuntimeConfig,
    transcript: &TranscriptCache,
    fence: &Fence,
    admission: &Admission,
    turn_id: TurnId,
    known: Option<Session>,
) -> Result<TurnContext, TurnFailure> {
    let (session, system_prompt) = session_and_prompt(store, admission, known).await?;
    let loaded = transcript
        .load(store, &session, Some(turn_id))
        .await
        .map_err(|e| TurnFailure::PersistenceFailed(e.to_string()))?;
    tracing::debug!(
        session = %session.id, rows = loaded.history.len(), read = ?loaded.read,
        "transcript loaded"
    );
    // The claim committed the user row when the input was final at claim time; a coalesced
    // input's row is written now, with the joined text.
    let turn_rows = if loaded.own.is_empty() {
        let user = store
            .append_message(fence, &user_row(admission, turn_id))
            .await
            .map_err(|e| TurnFailure::PersistenceFailed(e.to_string()))?;
        vec![user]
    } else {
        loaded.own
    };
    Ok(TurnContext {
        model_override: model_override(admission, &session),
        display: config.display(&session, admission.payload.get("display")),
        session,
        admission: admission.clone(),
        turn_id,
        fence: fence.clone(),
        system_prompt,
        history: loaded.history,
        turn_rows,
        last_prompt: None,
        images: Default::default(),
        texts: Default::default(),
    })
}

/// Rebuilds the context of a turn its owner left unsettled (SPEC R13.1, R13.9): the rows it
/// already persisted are its turn rows, everything before them is history. The user row is
/// normally there already.
pub async fn resume(
    store: &Store,
    config: &RuntimeConfig,
    transcript: &TranscriptCache,
    fence: &Fence,
    admission: &Admission,
    turn_id: TurnId,
) -> Result<TurnContext, TurnFailure> {
    let (session, system_prompt) = session_and_prompt(store, admission, None).await?;
    let all = transcript
        .load(store, &session, None)
        .await
        .map_err(|e| TurnFailure::PersistenceFailed(e.to_string()))?
        .history;
    let (mut turn_rows, history): (Vec<Message>, Vec<Message>) = all
        .iter()
        .cloned()
        .partition(|m| m.turn_id == Some(turn_id));
    // A burst's input cut before its joined row was written: the row is written now, as
    // `prepare` would have.
    if turn_rows.is_empty() {
        let user = store
            .append_message(fence, &user_row(admission, turn_id))
            .await
            .map_err(|e| TurnFailure::PersistenceFailed(e.to_string()))?;
        turn_rows.push(user);
    }
    let history = Arc::new(history);
    Ok(TurnContext {
        model_override: model_override(admission, &session),
        display: config.display(&session, admission.payload.get("display")),
        session,
        admission: admission.clone(),
        turn_id,
        fence: fence.clone(),
        system_prompt,
        history,
        turn_rows,
        last_prompt: None,
        images: Default::default(),
        texts: Default::default(),
    })
}

/// The session row and its stored system prompt (built once at creation, SPEC R5.2): `known`
/// (the row the claim's commit returned) or read now.
async fn session_and_prompt(
    store: &Store,
    admission: &Admission,
    known: Option<Session>,
) -> Result<(Session, String), TurnFailure> {
    let session = match known.filter(|s| s.id == admission.session_id) {
        Some(session) => session,
        None => store
            .get_session(admission.session_id)
            .await
            .map_err(|e| TurnFailure::PersistenceFailed(e.to_string()))?
            .ok_or_else(|| TurnFailure::PersistenceFailed("session row is missing".into()))?,
    };
    let prompt = session.system_prompt.clone().ok_or_else(|| {
        TurnFailure::PersistenceFailed("session has no stored system prompt".into())
    })?;
    Ok((session, prompt))
}

/// The input's model override, else the session's model.
fn model_override(admission: &Admission, session: &Session) -> Option<String> {
    admission.payload["model_override"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| session.model.clone())
}
