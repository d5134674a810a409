//! A typed line: the answer to the approval question on screen, a slash command (`/help`,
//! `/retry`, `/model`, `/attach`, `/quit`), or a message to send.
use super::{fatal_if_refused, Conversation, Step};
use crate::chat::api::CallError;
use crate::chat::terminal::Input;
use crate::chat::ChatError;
use std::io::Write;
use tokio::signal::unix::Signal;

const HELP: &[&str] = &[
    "Type a message and press Enter to send it. While a turn runs, Ctrl-C interrupts it.",
    "Ctrl-C at the prompt, Ctrl-D or /quit leaves (the session stays on the server).",
    "/retry  runs again the last input whose outcome is unknown (the server stopped during it)",
    "/model [NAME]  shows the models, or runs the next turns on NAME",
    "/attach PATH   uploads a file; it goes with your next message",
    "/help   shows this",
];

impl<W: Write> Conversation<W> {
    pub(super) async fn input(
        &mut self,
        input: Input,
        sigint: &mut Signal,
    ) -> Result<Step, ChatError> {
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
}
