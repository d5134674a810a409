//! The admission status machine (SPEC R2.4): `queued → started → terminal`, `started → unknown`.
//! `unknown` is neither queued (no blind re-run) nor terminal (no invented success).
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdmissionStatus {
    Queued,
    Started,
    Unknown,
    Terminal,
}

impl AdmissionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Started => "started",
            Self::Unknown => "unknown",
            Self::Terminal => "terminal",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => Self::Queued,
            "started" => Self::Started,
            "unknown" => Self::Unknown,
            "terminal" => Self::Terminal,
            _ => return None,
        })
    }

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
    fn status_round_trips_through_text() {
        for s in [Queued, Started, Unknown, Terminal] {
            assert_eq!(super::AdmissionStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(super::AdmissionStatus::parse("done"), None);
    }
}
