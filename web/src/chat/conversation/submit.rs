//! Sending a typed line: re-sent under one `Idempotency-Key` while the server cannot answer,
//! so it is admitted once however often it is sent.
use super::{fatal_if_refused, Conversation};
use crate::chat::api::CallError;
use crate::chat::ChatError;
use std::io::Write;
use std::time::Duration;
use tokio::signal::unix::Signal;
use tokio::time::Instant;

/// How long a submission is re-sent (same `Idempotency-Key`) while the server cannot answer.
pub const SUBMIT_RETRY_FOR: Duration = Duration::from_secs(60);
const SUBMIT_BACKOFF_FIRST: Duration = Duration::from_millis(500);
const SUBMIT_BACKOFF_MAX: Duration = Duration::from_secs(5);

impl<W: Write> Conversation<W> {
    /// Sends one typed line. A new `Idempotency-Key` names it; while the server cannot answer
    /// it is sent again under the same key, so it is admitted once however often it is sent.
    pub(super) async fn submit(
        &mut self,
        text: &str,
        sigint: &mut Signal,
    ) -> Result<(), ChatError> {
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

    pub(super) fn accepted(&mut self, admission: String) {
        if !self.pending.contains(&admission) {
            self.pending.push(admission);
        }
        self.hold = true;
    }
}
