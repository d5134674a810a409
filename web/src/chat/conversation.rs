//! The conversation loop of `turnkey chat`: lines typed become submissions, events become
//! output, approvals become y/n questions, Ctrl-C interrupts the running turn. Everything it
//! knows comes from the API: which turns are ours, whether one runs, what waits for an answer.
use super::api::{CallError, Client, PendingApproval};
use super::render::{self, Renderer};
use super::sse::{ChatEvent, Feed};
use super::terminal::{Input, Screen};
use super::ChatError;
use std::collections::VecDeque;
use std::io::Write;
use std::time::Duration;
use tokio::signal::unix::Signal;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long Ctrl-C waits for the interrupted turn to settle before the prompt comes back.
pub const SETTLE_WAIT: Duration = Duration::from_secs(10);
/// How long a submission is re-sent (same `Idempotency-Key`) while the server cannot answer.
pub const SUBMIT_RETRY_FOR: Duration = Duration::from_secs(60);
/// How often an interrupt that found no running turn is sent again within `SETTLE_WAIT`.
const INTERRUPT_AGAIN: Duration = Duration::from_millis(300);
const SUBMIT_BACKOFF_FIRST: Duration = Duration::from_millis(500);
const SUBMIT_BACKOFF_MAX: Duration = Duration::from_secs(5);
pub const PROMPT: &str = "you> ";

const HELP: &[&str] = &[
    "Type a message and press Enter to send it. While a turn runs, Ctrl-C interrupts it.",
    "Ctrl-C at the prompt, Ctrl-D or /quit leaves (the session stays on the server).",
    "/retry  runs again the last input whose outcome is unknown (the server stopped during it)",
    "/model [NAME]  shows the models, or runs the next turns on NAME",
    "/attach PATH   uploads a file; it goes with your next message",
    "/help   shows this",
];

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

/// A Ctrl-C waiting for its turn to settle.
struct Interrupting {
    deadline: Instant,
    /// Whether a running turn was signalled. Until one is, the interrupt is sent again every
    /// `INTERRUPT_AGAIN` within the wait: the input may still be queued, or its turn only just
    /// starting, when Ctrl-C comes.
    signalled: bool,
    next_try: Instant,
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

    async fn ctrl_c(&mut self) -> Result<Step, ChatError> {
        if self.interrupting.is_some() {
            // A second Ctrl-C: stop waiting for the turn to settle.
            self.screen
                .line("[stopped waiting; the turn may still be settling]")?;
            self.release();
            return Ok(Step::Continue);
        }
        if !self.busy() {
            return Ok(Step::Exit);
        }
        let now = Instant::now();
        self.interrupting = Some(Interrupting {
            deadline: now + SETTLE_WAIT,
            signalled: false,
            next_try: now,
        });
        self.send_interrupt(true).await?;
        Ok(Step::Continue)
    }

    async fn interrupt_timer(&mut self) -> Result<Step, ChatError> {
        let Some(wait) = self.interrupting.as_ref() else {
            return Ok(Step::Continue);
        };
        if Instant::now() >= wait.deadline {
            self.screen.line(&format!(
                "[the turn did not settle within {} s; back to the prompt (its output still \
                 shows here)]",
                SETTLE_WAIT.as_secs()
            ))?;
            self.release();
        } else {
            self.send_interrupt(false).await?;
        }
        Ok(Step::Continue)
    }

    /// `POST /v1/sessions/{id}/interrupt` for the wait in `interrupting`; `first` says whether
    /// this is the try Ctrl-C made (later tries are silent unless they signal a turn).
    async fn send_interrupt(&mut self, first: bool) -> Result<(), ChatError> {
        let answer = self.client.interrupt(&self.session).await;
        let Some(wait) = self.interrupting.as_mut() else {
            return Ok(());
        };
        match answer {
            Ok(true) => {
                wait.signalled = true;
                self.screen.line("[interrupting the turn]")?;
            }
            Ok(false) => {
                wait.next_try = Instant::now() + INTERRUPT_AGAIN;
                if first {
                    self.screen.line(&format!(
                        "[no turn of this session runs on this server yet; waiting up to {} s \
                         to interrupt it]",
                        SETTLE_WAIT.as_secs()
                    ))?;
                }
            }
            Err(e) => {
                let e = fatal_if_refused(e)?;
                self.screen
                    .line(&format!("[could not interrupt the turn: {e}]"))?;
                self.release();
            }
        }
        Ok(())
    }

    async fn input(&mut self, input: Input, sigint: &mut Signal) -> Result<Step, ChatError> {
        let line = match input {
            Input::Line(line) => line,
            Input::Eof => {
                self.stdin_closed = true;
                if self.busy() && self.approvals.is_empty() && self.interactive {
                    self.screen.line(
                        "[stdin closed: leaving when this turn ends; Ctrl-C interrupts it]",
                    )?;
                }
                return Ok(Step::Continue);
            }
        };
        self.screen.typed();
        if self.asked {
            return self.answer(&line).await;
        }
        match line.trim() {
            "" => {}
            "/quit" | "/exit" => return Ok(Step::Exit),
            "/help" => {
                for help in HELP {
                    self.screen.line(help)?;
                }
            }
            "/retry" => self.retry().await?,
            cmd if cmd == "/model" || cmd.starts_with("/model ") => {
                self.model(cmd["/model".len()..].trim()).await?
            }
            cmd if cmd == "/attach" || cmd.starts_with("/attach ") => {
                self.attach(cmd["/attach".len()..].trim()).await?
            }
            _ => self.submit(&line, sigint).await?,
        }
        Ok(Step::Continue)
    }

    /// The answer to the approval question on screen.
    async fn answer(&mut self, line: &str) -> Result<Step, ChatError> {
        let approve = match line.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => true,
            "n" | "no" => false,
            _ => {
                self.screen.line("[please answer y or n]")?;
                self.asked = false;
                return Ok(Step::Continue);
            }
        };
        let Some(approval) = self.approvals.pop_front() else {
            return Ok(Step::Continue);
        };
        self.asked = false;
        let decided = self
            .client
            .decide_approval(&self.session, &approval.approval_id, approve)
            .await;
        match decided {
            // `approval.resolved` follows and says what was decided.
            Ok(()) => {}
            Err(CallError::Status { status: 409, .. }) => self
                .screen
                .line("[that approval was already closed: decided elsewhere, or it expired]")?,
            Err(e) => {
                let e = fatal_if_refused(e)?;
                self.screen
                    .line(&format!("[the answer was not sent: {e}; asking again]"))?;
                self.approvals.push_front(approval);
            }
        }
        Ok(Step::Continue)
    }

    /// `/attach PATH`: uploads the file now; its id goes with the next message sent.
    async fn attach(&mut self, path: &str) -> Result<(), ChatError> {
        if path.is_empty() {
            self.screen.line("[usage: /attach PATH]")?;
            return Ok(());
        }
        let path = std::path::Path::new(path);
        let bytes = match tokio::fs::read(path).await {
            Ok(b) => b,
            Err(e) => {
                self.screen
                    .line(&format!("[cannot read {}: {e}]", path.display()))?;
                return Ok(());
            }
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let answer = match self.client.upload(&name, bytes).await {
            Ok(file) => {
                self.attached.push(file.file_id);
                format!(
                    "[attached {} ({}, {} bytes); it goes with your next message]",
                    file.name, file.content_type, file.bytes
                )
            }
            Err(e) => match fatal_if_refused(e)? {
                CallError::Status { message, .. } => format!("[not attached: {message}]"),
                e => format!("[not attached: {e}]"),
            },
        };
        self.screen.line(&answer)?;
        Ok(())
    }

    /// `/model [NAME]`: the models with the session's marked, or a switch from the next turn.
    async fn model(&mut self, name: &str) -> Result<(), ChatError> {
        if name.is_empty() {
            let read = async {
                Ok::<_, CallError>((
                    self.client.models().await?,
                    self.client.session(&self.session).await?,
                ))
            };
            let (models, session) = match read.await {
                Ok(read) => read,
                Err(e) => {
                    let e = fatal_if_refused(e)?;
                    self.screen
                        .line(&format!("[the models could not be read: {e}]"))?;
                    return Ok(());
                }
            };
            if models.is_empty() {
                self.screen.line("[no model is configured on the server]")?;
                return Ok(());
            }
            for m in models {
                let mark = if session.model.as_deref() == Some(m.as_str()) {
                    "* "
                } else {
                    "  "
                };
                self.screen.line(&format!("{mark}{m}"))?;
            }
            self.screen
                .line("[/model NAME runs the next turns on NAME]")?;
            return Ok(());
        }
        let answer = match self.client.set_model(&self.session, name).await {
            Ok(s) => format!(
                "[the next turn runs on {}]",
                s.model.as_deref().unwrap_or(name)
            ),
            Err(e) => match fatal_if_refused(e)? {
                CallError::Status { message, .. } => format!("[not switched: {message}]"),
                e => format!("[not switched: {e}]"),
            },
        };
        self.screen.line(&answer)?;
        Ok(())
    }

    /// `/retry`: runs the last unknown input again (`POST /v1/admissions/{id}/retry`).
    async fn retry(&mut self) -> Result<(), ChatError> {
        let Some(admission) = self.last_unknown.clone() else {
            self.screen
                .line("[nothing to retry: no input of this conversation has an unknown outcome]")?;
            return Ok(());
        };
        match self.client.retry(&admission).await {
            Ok(receipt) => {
                self.last_unknown = None;
                self.accepted(receipt.admission_id);
            }
            Err(e) => {
                let e = fatal_if_refused(e)?;
                self.screen.line(&format!("[retry refused: {e}]"))?;
            }
        }
        Ok(())
    }

    /// Sends one typed line. A new `Idempotency-Key` names it; while the server cannot answer
    /// it is sent again under the same key, so it is admitted once however often it is sent.
    async fn submit(&mut self, text: &str, sigint: &mut Signal) -> Result<(), ChatError> {
        let key = uuid::Uuid::new_v4().to_string();
        let since = Instant::now();
        let mut delay = SUBMIT_BACKOFF_FIRST;
        let mut told = false;
        loop {
            // Ctrl-C also ends a try the server is slow to answer (up to the 30 s call bound).
            let sent = tokio::select! {
                sent = self.client.submit(&self.session, text, &self.attached, &key) => Some(sent),
                _ = sigint.recv() => None,
            };
            let Some(sent) = sent else {
                return self.stopped_sending();
            };
            let e = match sent {
                Ok(receipt) => {
                    if receipt.duplicate {
                        // An earlier try had arrived although its answer was lost.
                        self.screen
                            .line("[sent: the server already had it, so it runs once]")?;
                    } else if told {
                        self.screen.line("[sent]")?;
                    }
                    self.attached.clear();
                    self.accepted(receipt.admission_id);
                    return Ok(());
                }
                Err(e) => fatal_if_refused(e)?,
            };
            if !e.is_transient() {
                self.screen.line(&format!("[not sent: {e}]"))?;
                return Ok(());
            }
            if since.elapsed() >= SUBMIT_RETRY_FOR {
                self.screen.line(&format!(
                    "[not sent within {} s: {e}; it may or may not have arrived: \
                     look with turnkey chat --session {}]",
                    SUBMIT_RETRY_FOR.as_secs(),
                    self.session
                ))?;
                return Ok(());
            }
            if !told {
                told = true;
                self.screen.line(&format!(
                    "[not sent yet: {e}; sending again with the same Idempotency-Key, so it \
                     runs once]"
                ))?;
            }
            let wait = match &e {
                CallError::Status {
                    retry_after: Some(after),
                    ..
                } => (*after).min(SUBMIT_BACKOFF_MAX),
                _ => delay,
            };
            delay = (delay * 2).min(SUBMIT_BACKOFF_MAX);
            let waited = tokio::select! {
                () = tokio::time::sleep(wait) => true,
                _ = sigint.recv() => false,
            };
            if !waited {
                return self.stopped_sending();
            }
        }
    }

    fn stopped_sending(&mut self) -> Result<(), ChatError> {
        self.screen.line(&format!(
            "[stopped sending; the input may or may not have arrived: look with turnkey chat \
             --session {}]",
            self.session
        ))?;
        Ok(())
    }

    fn accepted(&mut self, admission: String) {
        if !self.pending.contains(&admission) {
            self.pending.push(admission);
        }
        self.hold = true;
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
