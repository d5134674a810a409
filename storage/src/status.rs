//! The status machines: admissions (SPEC R2.4: `queued → started → terminal`, `started →
//! unknown`; `unknown` is neither queued nor terminal), tool runs (R9, R13.1) and approvals.
use serde::{Deserialize, Serialize};

/// Implements `as_str` / `parse` for a status enum from one table of (variant, text).
macro_rules! text_enum {
    ($name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $name {
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }

            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($text => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdmissionStatus {
    Queued,
    Started,
    Unknown,
    Terminal,
}

text_enum!(AdmissionStatus {
    Queued => "queued",
    Started => "started",
    Unknown => "unknown",
    Terminal => "terminal",
});

impl AdmissionStatus {
    /// The one place that says which transitions exist. Every store update of the status is a
    /// compare-and-set from a state this function allows.
    pub fn can_become(self, next: Self) -> bool {
        matches!(
            (self, next),
            (Self::Queued, Self::Started)
                | (Self::Started, Self::Terminal)
                | (Self::Started, Self::Unknown)
                // A queued input that is cancelled before it runs is settled without starting.
                | (Self::Queued, Self::Terminal)
        )
    }
}

/// How a settled turn ended (`outcome.result` of a terminal admission).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnResult {
    Completed,
    Failed,
    Interrupted,
    Cancelled,
}

/// The life of one tool call (SPEC R9.2, R13.1): `planned` is written with the assistant
/// tool-call row, `started` is committed before the side effect, `finished` with the result
/// row. A `started` run found without a result after a crash is `unknown` until a person
/// decides: retry (→ `started` again) or skip (→ `finished`, skipped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolRunStatus {
    Planned,
    Started,
    Finished,
    Unknown,
}

text_enum!(ToolRunStatus {
    Planned => "planned",
    Started => "started",
    Finished => "finished",
    Unknown => "unknown",
});

impl ToolRunStatus {
    /// The one place that says which transitions exist.
    pub fn can_become(self, next: Self) -> bool {
        use ToolRunStatus::*;
        matches!(
            (self, next),
            (Planned, Started)
                // Denied, skipped, refused before it ran: settled without starting.
                | (Planned, Finished)
                | (Started, Finished)
                | (Started, Unknown)
                | (Unknown, Started)
                | (Unknown, Finished)
        )
    }
}

/// How a `finished` tool run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutcome {
    Ok,
    Error,
    Skipped,
    Denied,
}

text_enum!(ToolOutcome {
    Ok => "ok",
    Error => "error",
    Skipped => "skipped",
    Denied => "denied",
});

/// A person's answer to a tool run left `unknown` by a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolRunDecision {
    Retry,
    Skip,
}

text_enum!(ToolRunDecision {
    Retry => "retry",
    Skip => "skip",
});

/// A durable approval request (SPEC R9.7, R13.2). Only `pending` changes, once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    /// Nobody answered before `expires_at`: a denial.
    TimedOut,
}

text_enum!(ApprovalStatus {
    Pending => "pending",
    Approved => "approved",
    Denied => "denied",
    TimedOut => "timed_out",
});

/// What a person answers to an approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    Approve,
    Deny,
}

text_enum!(ApprovalDecision {
    Approve => "approve",
    Deny => "deny",
});

/// A platform message in `delivery_outbox` (SPEC R13.5). `pending → sending → sent`; a send
/// that cannot succeed is `failed`; a row that was `sending` when its instance died is `unknown`:
/// it may or may not have reached the platform, so it is not sent again blindly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxStatus {
    Pending,
    Sending,
    Sent,
    Failed,
    Unknown,
}

text_enum!(OutboxStatus {
    Pending => "pending",
    Sending => "sending",
    Sent => "sent",
    Failed => "failed",
    Unknown => "unknown",
});

#[cfg(test)]
mod tests {
    use super::AdmissionStatus::*;

    #[test]
    fn r2_4_queued_becomes_started() {
        assert!(Queued.can_become(Started));
    }

    #[test]
    fn r2_4_started_becomes_terminal_or_unknown() {
        assert!(Started.can_become(Terminal));
        assert!(Started.can_become(Unknown));
    }

    #[test]
    fn r2_4_unknown_is_never_requeued_nor_settled() {
        assert!(!Unknown.can_become(Queued));
        assert!(!Unknown.can_become(Started));
        assert!(!Unknown.can_become(Terminal));
    }

    #[test]
    fn r2_4_terminal_is_read_only() {
        for s in [Queued, Started, Unknown, Terminal] {
            assert!(!Terminal.can_become(s));
        }
    }

    #[test]
    fn r2_4_no_backwards_or_self_transitions() {
        assert!(!Started.can_become(Queued));
        for s in [Queued, Started, Unknown, Terminal] {
            assert!(!s.can_become(s));
        }
    }

    #[test]
    fn r13_1_tool_runs_move_forward_only() {
        use super::ToolRunStatus::*;
        assert!(Planned.can_become(Started));
        assert!(Started.can_become(Finished));
        assert!(Started.can_become(Unknown));
        assert!(Unknown.can_become(Started), "retry");
        assert!(Unknown.can_become(Finished), "skip");
        assert!(!Finished.can_become(Started));
        assert!(
            !Planned.can_become(Unknown),
            "a run never started is not unknown"
        );
        assert!(!Started.can_become(Planned));
        for s in [Planned, Started, Finished, Unknown] {
            assert_eq!(super::ToolRunStatus::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn status_round_trips_through_text() {
        for s in [Queued, Started, Unknown, Terminal] {
            assert_eq!(super::AdmissionStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(super::AdmissionStatus::parse("done"), None);
    }
}
