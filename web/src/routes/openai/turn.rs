//! Following one admission's turn through the session's event log: its text deltas, then how
//! it ended (the authoritative `message.complete` text, `turn.finished` or `turn.unknown`).
//! Read from the store by seq like every other reader, so a reply is the same whether the turn
//! is running, long finished (an idempotent replay), or run by another process.
use crate::error::ApiError;
use crate::follow::EventFollower;
use crate::state::AppState;
use actix_web::web;
use serde_json::Value;
use std::collections::VecDeque;
use turnkey_storage::{AdmissionId, Event, EventKind, Seq, SessionId, TurnId};

/// What the turn did next.
#[derive(Debug)]
pub enum TurnNews {
    /// Text the model streamed (`message.delta`).
    Delta(String),
    /// The turn ended.
    Ended(TurnEnd),
}

/// How a turn ended.
#[derive(Debug, Default)]
pub struct TurnEnd {
    /// `completed`, `failed`, `interrupted`, or `unknown` (the process running it died).
    pub result: String,
    /// The final answer (`message.complete`), when the turn delivered one.
    pub text: Option<String>,
    pub failure_reason: Option<String>,
    pub failure_message: Option<String>,
    /// How the answer ended: `stop`, `truncated` (still cut off by the output limit after
    /// the continuations) or `repeated`; `None` without an answer, or from an older build.
    pub stop_reason: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl TurnEnd {
    pub fn completed(&self) -> bool {
        self.result == "completed"
    }

    /// The OpenAI `finish_reason` of the answer: `length` for an answer the output limit cut
    /// off, or the iteration budget's summary of a turn that did not complete; else `stop`.
    pub fn finish_reason(&self) -> &'static str {
        if !self.completed() || self.stop_reason.as_deref() == Some("truncated") {
            "length"
        } else {
            "stop"
        }
    }
}

/// Watches the events of the turn that answers one admission.
pub struct TurnWatch {
    follower: EventFollower,
    /// The admission whose turn answers: the input's own, or the one whose turn carried it
    /// (busy policy `steer`, `agent.coalesce_ms`).
    admission: AdmissionId,
    turn: Option<TurnId>,
    final_text: Option<String>,
    news: VecDeque<TurnNews>,
    ended: bool,
    /// Text of the current attempt has been streamed.
    streamed: bool,
}

/// Streamed after the text of an attempt that was cut and resumed by itself.
pub const RESUMED_MARK: &str = "\n\n[cut off: the server stopped mid-answer; the turn resumed by \
                                itself and answers again]\n\n";

impl TurnWatch {
    /// Starts reading at the admission's first event (its `admission.queued`).
    pub async fn start(
        state: web::Data<AppState>,
        session: SessionId,
        admission: AdmissionId,
    ) -> Result<Self, ApiError> {
        let first = state
            .gateway
            .store()
            .first_event_of_admission(session, admission)
            .await?;
        let since = first.map_or(Seq(0), |s| Seq(s.0.saturating_sub(1)));
        Ok(Self {
            follower: EventFollower::start(state, session, since),
            admission,
            turn: None,
            final_text: None,
            news: VecDeque::new(),
            ended: false,
            streamed: false,
        })
    }

    /// The next thing the turn did; `None` after its end, or when the server stops first.
    /// Cancel-safe (see [`EventFollower::next`]).
    pub async fn next(&mut self) -> Option<TurnNews> {
        loop {
            if let Some(n) = self.news.pop_front() {
                return Some(n);
            }
            if self.ended {
                return None;
            }
            let batch = self.follower.next().await?;
            for ev in &batch {
                self.take(ev);
                if self.ended {
                    break;
                }
            }
        }
    }

    fn ours(&self, ev: &Event) -> bool {
        self.turn.is_some() && ev.turn_id == self.turn
    }

    fn take(&mut self, ev: &Event) {
        match ev.kind {
            EventKind::AdmissionCarried if ev.admission_id == Some(self.admission) => {
                // Another admission's turn carries this input: its answer is ours.
                if let Some((carrier, turn)) = carried_by(ev) {
                    self.admission = carrier;
                    self.turn = Some(turn);
                }
            }
            EventKind::TurnStarted if ev.admission_id == Some(self.admission) => {
                self.turn = ev.turn_id;
            }
            EventKind::MessageDelta if self.ours(ev) => {
                if let Some(t) = ev.data["text"].as_str().filter(|t| !t.is_empty()) {
                    self.streamed = true;
                    self.news.push_back(TurnNews::Delta(t.to_owned()));
                }
            }
            // A stream cannot take back what it sent: the cut attempt's text stays, marked as
            // cut, and the resumed attempt's answer follows it (SPEC R13.9).
            EventKind::TurnResumed if self.ours(ev) && std::mem::take(&mut self.streamed) => {
                self.news
                    .push_back(TurnNews::Delta(RESUMED_MARK.to_owned()));
            }
            EventKind::MessageComplete if self.ours(ev) => {
                self.final_text = ev.data["text"].as_str().map(str::to_owned);
            }
            EventKind::TurnFinished if self.ours(ev) => {
                let d = &ev.data;
                let answer = self.final_text.take();
                self.end(TurnEnd {
                    result: text(d, "result").unwrap_or_else(|| "failed".into()),
                    text: answer,
                    failure_reason: text(d, "failure_reason"),
                    failure_message: text(d, "failure_message"),
                    stop_reason: text(d, "stop_reason"),
                    input_tokens: d["usage"]["input_tokens"].as_u64().unwrap_or(0),
                    output_tokens: d["usage"]["output_tokens"].as_u64().unwrap_or(0),
                });
            }
            EventKind::TurnUnknown if ev.admission_id == Some(self.admission) => {
                let d = &ev.data;
                self.end(TurnEnd {
                    result: "unknown".into(),
                    text: None,
                    failure_reason: text(d, "reason").or_else(|| Some("unknown".into())),
                    failure_message: text(d, "failure_message"),
                    ..TurnEnd::default()
                });
            }
            _ => {}
        }
    }

    fn end(&mut self, end: TurnEnd) {
        self.news.push_back(TurnNews::Ended(end));
        self.ended = true;
    }
}

/// The admission whose turn carries the input of an `admission.carried` event, and that turn
/// (busy policy `steer`, `agent.coalesce_ms`): its answer is the input's.
pub(crate) fn carried_by(ev: &Event) -> Option<(AdmissionId, TurnId)> {
    let carrier = ev.data["carried_by"].as_str()?.parse().ok()?;
    let turn = ev.data["turn_id"].as_str()?.parse().ok()?;
    Some((carrier, turn))
}

fn text(v: &Value, key: &str) -> Option<String> {
    v[key].as_str().map(str::to_owned)
}
