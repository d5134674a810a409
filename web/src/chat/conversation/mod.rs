//! The conversation loop of `turnkey chat`: lines typed become submissions, events become
//! output, approvals become y/n questions, Ctrl-C interrupts the running turn. Everything it
//! knows comes from the API: which turns are ours, whether one runs, what waits for an answer.
mod input;
mod interrupt;
mod submit;

use super::api::{CallError, Client, PendingApproval};
use super::render::{self, Renderer};
use super::sse::{ChatEvent, Feed};
use super::terminal::{Input, Screen};
use super::ChatError;
use interrupt::Interrupting;
use std::collections::VecDeque;
use std::io::Write;
use tokio::signal::unix::Signal;
use tokio::sync::mpsc;
use tokio::time::Instant;

pub const PROMPT: &str = "you> ";

/// Whether the loop goes on.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Continue,
    Exit,
}

/// What woke the loop.
enum Woke {
    CtrlC,
    Feed(Option<Feed>),
    Input(Option<Input>),
    /// The interrupt wait's deadline or its next try came.
    Timer,
}

/// What the conversation starts from, as `main` found it on the server.
pub struct Start {
    pub session: String,
    /// Approvals already waiting (a resumed session).
    pub approvals: Vec<PendingApproval>,
    /// Whether a turn was running when we joined (a resumed session).
    pub running: bool,
    /// Whether stdin is a terminal (then messages about stdin are worth showing).
    pub interactive: bool,
}

pub struct Conversation<W: Write> {
    client: Client,
    session: String,
    screen: Screen<W>,
    renderer: Renderer,
    /// Our admissions whose turn has not ended, oldest first.
    pending: Vec<String>,
    /// The prompt is held while our input is answered.
    hold: bool,
    /// A turn that is not ours runs (another client's, or one running when we joined); its
    /// output shows and the prompt comes back when it ends.
    foreign: bool,
    /// Whether any turn runs now, from `turn.started` to its end.
    running: bool,
    approvals: VecDeque<PendingApproval>,
    /// The question for the first approval is on screen.
    asked: bool,
    /// The approval whose reason was shown last (shown once, before its first question).
    announced: Option<String>,
    interrupting: Option<Interrupting>,
    /// The last admission whose outcome is unknown, for `/retry`.
    last_unknown: Option<String>,
    /// Files uploaded with `/attach` for the next message (their ids).
    attached: Vec<String>,
    stdin_closed: bool,
    interactive: bool,
}

impl<W: Write> Conversation<W> {
    pub fn new(client: Client, screen: Screen<W>, start: Start) -> Self {
        let mut renderer = Renderer::default();
        start
            .approvals
            .iter()
            .for_each(|a| renderer.know_approval(a));
        Self {
            client,
            session: start.session,
            screen,
            renderer,
            pending: Vec::new(),
            attached: Vec::new(),
            hold: false,
            foreign: start.running,
            running: start.running,
            approvals: start.approvals.into(),
            asked: false,
            announced: None,
            interrupting: None,
            last_unknown: None,
            stdin_closed: false,
            interactive: start.interactive,
        }
    }

    /// Runs until the person leaves (Ok) or the server cannot be used any more (Err).
    pub async fn run(
        mut self,
        mut inputs: mpsc::Receiver<Input>,
        mut feed: mpsc::Receiver<Feed>,
        mut sigint: Signal,
    ) -> Result<(), ChatError> {
        let outcome = self.steps(&mut inputs, &mut feed, &mut sigint).await;
        self.screen.finish()?;
        outcome
    }

    async fn steps(
        &mut self,
        inputs: &mut mpsc::Receiver<Input>,
        feed: &mut mpsc::Receiver<Feed>,
        sigint: &mut Signal,
    ) -> Result<(), ChatError> {
        loop {
            if self.refresh()? == Step::Exit {
                return Ok(());
            }
            let deadline = self.interrupting.as_ref().map(|i| {
                if i.signalled {
                    i.deadline
                } else {
                    i.deadline.min(i.next_try)
                }
            });
            let timer = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now));
            let woke = tokio::select! {
                // Events before input: a question must be registered before the line that
                // answers it is read.
                biased;
                _ = sigint.recv() => Woke::CtrlC,
                f = feed.recv() => Woke::Feed(f),
                i = inputs.recv(), if !self.stdin_closed => Woke::Input(i),
                () = timer, if deadline.is_some() => Woke::Timer,
            };
            let step = match woke {
                Woke::CtrlC => self.ctrl_c().await?,
                Woke::Feed(Some(f)) => self.feed(f).await?,
                Woke::Feed(None) => {
                    return Err(ChatError::Failed("the event follower stopped".into()))
                }
                Woke::Input(i) => self.input(i.unwrap_or(Input::Eof), sigint).await?,
                Woke::Timer => self.interrupt_timer().await?,
            };
            if step == Step::Exit {
                return Ok(());
            }
        }
    }

    fn busy(&self) -> bool {
        self.hold || self.foreign
    }

    /// Gives the prompt back.
    fn release(&mut self) {
        self.interrupting = None;
        self.hold = false;
        self.foreign = false;
    }

    /// Puts up the question or the prompt that is due, or ends a conversation whose stdin is
    /// closed once nothing is left to wait for.
    fn refresh(&mut self) -> Result<Step, ChatError> {
        if let Some(approval) = self.approvals.front() {
            if self.stdin_closed {
                self.screen.line(&format!(
                    "[stdin is closed, so the approval cannot be answered here; it stays pending: \
                     answer it with turnkey chat --session {}]",
                    self.session
                ))?;
                return Ok(Step::Exit);
            }
            if !self.asked || !self.screen.prompt_visible() {
                if self.announced.as_deref() != Some(approval.approval_id.as_str()) {
                    if let Some(reason) = render::approval_reason(approval) {
                        self.screen.line(&reason)?;
                    }
                    self.announced = Some(approval.approval_id.clone());
                }
                let question = render::approval_question(approval, chrono::Utc::now());
                self.screen.prompt(&question)?;
                self.asked = true;
            }
            return Ok(Step::Continue);
        }
        if self.busy() {
            return Ok(Step::Continue);
        }
        if self.stdin_closed {
            return Ok(Step::Exit);
        }
        if !self.screen.prompt_visible() {
            self.screen.prompt(PROMPT)?;
        }
        Ok(Step::Continue)
    }

    async fn feed(&mut self, feed: Feed) -> Result<Step, ChatError> {
        match feed {
            Feed::Event(ev) => self.event(&ev).await?,
            Feed::Lost(why) => self
                .screen
                .line(&format!("[connection lost: {why}; reconnecting]"))?,
            Feed::Back => self.screen.line("[reconnected]")?,
            Feed::Notice(what) => self.screen.line(&format!("[{what}]"))?,
            Feed::Fatal(why) => return Err(ChatError::Failed(why)),
        }
        Ok(Step::Continue)
    }

    fn is_ours(&self, admission: Option<&str>) -> bool {
        admission.is_some_and(|a| self.pending.iter().any(|p| p == a))
    }

    async fn event(&mut self, ev: &ChatEvent) -> Result<(), ChatError> {
        let admission = ev
            .admission_id
            .as_deref()
            .or_else(|| ev.data["admission_id"].as_str());
        let ours = self.is_ours(admission);
        match ev.kind.as_str() {
            "turn.started" => {
                self.running = true;
                if ours {
                    self.hold = true;
                    if self.interrupting.as_ref().is_some_and(|i| !i.signalled) {
                        // Ctrl-C came while this input was still queued: it is meant for it.
                        self.send_interrupt(false).await?;
                    }
                } else {
                    self.foreign = true;
                }
            }
            "turn.finished" | "turn.unknown" => {
                self.running = false;
                if let Some(a) = admission {
                    self.pending.retain(|p| p != a);
                }
                if ev.kind == "turn.unknown" {
                    self.last_unknown = admission.map(str::to_owned);
                }
                if self.asked {
                    // Its questions ended with it.
                    self.screen.line("[approval closed: the turn ended]")?;
                }
                self.approvals.clear();
                self.asked = false;
                self.foreign = false;
                if self.interrupting.is_some() || self.pending.is_empty() {
                    self.release();
                }
            }
            "admission.carried" => {
                let carried = ev.data["admission_id"].as_str();
                if !self.is_ours(carried) {
                    return Ok(());
                }
                // Our input joined another admission's turn: that turn's end is ours to wait for.
                let by = ev.data["carried_by"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                self.pending.retain(|p| Some(p.as_str()) != carried);
                if !by.is_empty() && !self.pending.contains(&by) {
                    self.pending.push(by);
                }
            }
            "approval.requested" => {
                match serde_json::from_value::<PendingApproval>(ev.data.clone()) {
                    Ok(a)
                        if !self
                            .approvals
                            .iter()
                            .any(|p| p.approval_id == a.approval_id) =>
                    {
                        self.approvals.push_back(a);
                    }
                    Ok(_) => {}
                    Err(e) => self
                        .screen
                        .line(&format!("[an approval request could not be read: {e}]"))?,
                }
            }
            // Another client's input (the web UI, the API, a platform) or a schedule's:
            // shown at once with its words; our own lines are on screen already.
            "admission.queued" if !ours => {
                if let Some(line) = render::queued_line(&ev.data) {
                    self.screen.line(&line)?;
                }
            }
            "approval.resolved" => {
                let id = ev.data["approval_id"].as_str().unwrap_or_default();
                if self.approvals.front().is_some_and(|a| a.approval_id == id) {
                    self.asked = false;
                }
                self.approvals.retain(|a| a.approval_id != id);
            }
            _ => {}
        }
        for piece in self.renderer.event(ev) {
            self.screen.put(&piece)?;
        }
        Ok(())
    }
}

/// A refused token ends the conversation; any other error is the caller's to show.
fn fatal_if_refused(e: CallError) -> Result<CallError, ChatError> {
    match e.status() {
        Some(401) => Err(ChatError::Failed(format!(
            "the server refused the token ({e})"
        ))),
        _ => Ok(e),
    }
}
