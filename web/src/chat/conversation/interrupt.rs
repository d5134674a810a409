//! Ctrl-C while a turn runs: the interrupt is sent, and sent again while no turn of ours has
//! started yet, until the turn settles or the wait runs out.
use super::{fatal_if_refused, Conversation, Step};
use crate::chat::ChatError;
use std::io::Write;
use std::time::Duration;
use tokio::time::Instant;

/// How long Ctrl-C waits for the interrupted turn to settle before the prompt comes back.
pub const SETTLE_WAIT: Duration = Duration::from_secs(10);
/// How often an interrupt that found no running turn is sent again within `SETTLE_WAIT`.
const INTERRUPT_AGAIN: Duration = Duration::from_millis(300);

/// A Ctrl-C waiting for its turn to settle.
pub(super) struct Interrupting {
    pub(super) deadline: Instant,
    /// Whether a running turn was signalled. Until one is, the interrupt is sent again every
    /// `INTERRUPT_AGAIN` within the wait: the input may still be queued, or its turn only just
    /// starting, when Ctrl-C comes.
    pub(super) signalled: bool,
    pub(super) next_try: Instant,
}

impl<W: Write> Conversation<W> {
    pub(super) async fn ctrl_c(&mut self) -> Result<Step, ChatError> {
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

    pub(super) async fn interrupt_timer(&mut self) -> Result<Step, ChatError> {
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
    pub(super) async fn send_interrupt(&mut self, first: bool) -> Result<(), ChatError> {
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
}
