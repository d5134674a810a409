//! Reports (SPEC R1.5, R13.10): how work that outlived its turn comes back to its session, as
//! an internal input admitted through the same durable FIFO as a user's (surface `internal`,
//! busy policy `queue`: a report never interrupts or steers a running turn). Its request id
//! is derived from the work's id, so admitting it again (a retry, a sweep, another replica)
//! answers the first admission's receipt instead of a second input.
//!
//! The model sees a report as a clearly marked message from the gateway: a header line naming
//! what reports, the report, and a closing line saying that the user did not write it.
use super::Wired;
use crate::config::BusyPolicy;
use crate::error::GatewayError;
use crate::input::{Receipt, Submission};
use std::path::Path;
use turnkey_storage::SessionId;

/// The surface of every report (and of scheduled inputs).
pub const SURFACE: &str = "internal";
/// The last line of every report.
pub const END: &str = "[end of report: this message comes from the gateway, not from the user]";
/// Characters of a child's answer or a process's output carried in the report itself; a
/// longer answer is written to a file in the workspace and the report names it.
pub const REPORT_CHARS: usize = 6_000;

/// One internal input to admit: a report, or a sub-agent's goal into its child session.
#[derive(Clone, Debug)]
pub struct Report {
    pub session: SessionId,
    /// The session's owner: the report is admitted as this principal.
    pub owner: String,
    /// `subagent:<task_id>` or `process:<process_id>`.
    pub request_id: String,
    pub text: String,
}

/// Admits `report` (or finds it admitted already: then its receipt has `duplicate`).
pub async fn admit(w: &Wired, report: Report) -> Result<Receipt, GatewayError> {
    let principal = crate::admission::principal_of_owner(&w.deps.store, &report.owner).await?;
    let submission = Submission {
        text: report.text,
        request_id: Some(report.request_id),
        surface: SURFACE.into(),
        busy_policy: Some(BusyPolicy::Queue),
        ..Default::default()
    };
    w.admission
        .submit(principal, report.session, submission)
        .await
}

/// `text` within [`REPORT_CHARS`]: a longer one is written whole to
/// `<workspace>/.turnkey/reports/<name>.txt` and the report carries its head, its tail and the
/// path relative to the workspace (which the file tools read). If the file cannot be written, the text is cut and
/// says so.
pub fn bounded(text: &str, workspace: &Path, name: &str) -> String {
    if text.chars().count() <= REPORT_CHARS {
        return text.to_owned();
    }
    let dir = workspace.join(".turnkey").join("reports");
    // Bytes, for the spill: a character is at most 4 of them.
    match turnkey_tools::spill::spill_if_large(text, REPORT_CHARS, &dir, name) {
        // The file tools take paths relative to the workspace.
        Ok(kept) => kept.replace(&format!("{}/", workspace.display()), ""),
        Err(e) => {
            tracing::warn!(error = %e, "cannot write a long report to the workspace; cutting it");
            let cut: String = text.chars().take(REPORT_CHARS).collect();
            format!("{cut}\n[... cut: the rest could not be saved ({e}) ...]")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r1_5_a_long_report_is_saved_in_the_workspace_and_named_relative_to_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(bounded("short", dir.path(), "t"), "short");
        let long = format!("HEAD{}TAIL", "x".repeat(REPORT_CHARS * 2));
        let kept = bounded(&long, dir.path(), "subagent-1");
        assert!(
            kept.starts_with("HEAD") && kept.ends_with("TAIL"),
            "{}",
            &kept[..40]
        );
        assert!(
            kept.contains("full output: .turnkey/reports/subagent-1.txt"),
            "{kept}"
        );
        let saved = std::fs::read_to_string(dir.path().join(".turnkey/reports/subagent-1.txt"))
            .expect("saved");
        assert_eq!(saved, long);
    }
}
