//! The turn: one admission carried from prepared context to a closed, persisted tail. One file
//! per phase, in lifecycle order: `context` and `prompt` (SPEC R5), `preflight` (R6), which
//! assembles each call's request through `wire` (R5.4), `request`, the call (R8), `normalize`
//! (R7.2), `tool_round` (R9), `transcript` (the history a session actor keeps), `finalize`
//! (R10), and `run`, the loop that drives them (R7) and hands finalize its `Outcome`.
pub mod attached;
pub mod context;
pub mod echo;
pub mod fallback;
pub mod finalize;
pub mod grace;
pub mod normalize;
pub mod preflight;
pub mod prompt;
pub mod request;
pub mod run;
pub mod steer;
pub mod tool_round;
pub mod transcript;
pub mod wire;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Why a turn was told to stop before it finished by itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    Interrupted(String),
    /// Another process may own the session now: write nothing more.
    LeaseLost,
    TimedOut,
    /// The liveness watchdog saw no provider or tool activity for too long (SPEC R4.3).
    Inactive,
    /// The process is stopping (SIGTERM/SIGINT) and the shutdown grace ran out.
    Shutdown,
}

impl StopReason {
    pub fn code(&self) -> &str {
        match self {
            Self::Interrupted(_) => "interrupted",
            Self::LeaseLost => "lease_lost",
            Self::TimedOut => "turn_timeout",
            Self::Inactive => "turn_inactive",
            Self::Shutdown => "shutdown",
        }
    }
}

/// The running turn's stop signal, shared between the turn, its session actor (interrupts) and
/// the lease refresher (loss). The first reason given wins.
#[derive(Clone)]
pub struct TurnControl {
    stop: CancellationToken,
    lease_lost: CancellationToken,
    reason: Arc<Mutex<Option<StopReason>>>,
    /// Last sign of life (ms since the epoch): a streamed chunk, a response, a tool result.
    activity: Arc<AtomicI64>,
    /// When the first stop was asked for (ms since the epoch), 0 before.
    stopped_at: Arc<AtomicI64>,
}

impl TurnControl {
    pub fn new(lease_lost: CancellationToken) -> Self {
        Self {
            stop: CancellationToken::new(),
            lease_lost,
            reason: Arc::new(Mutex::new(None)),
            activity: Arc::new(AtomicI64::new(turnkey_storage::now_ms())),
            stopped_at: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Records a sign of life for the liveness watchdog.
    pub fn touch(&self) {
        self.activity
            .store(turnkey_storage::now_ms(), Ordering::Relaxed);
    }

    /// Milliseconds since the last sign of life.
    pub fn idle_ms(&self) -> i64 {
        turnkey_storage::now_ms() - self.activity.load(Ordering::Relaxed)
    }

    pub fn interrupt(&self, reason: StopReason) {
        if let Ok(mut r) = self.reason.lock() {
            r.get_or_insert(reason);
        }
        let now = turnkey_storage::now_ms();
        let _first = self
            .stopped_at
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        self.stop.cancel();
    }

    /// When the turn was first told to stop (ms since the epoch), if it was.
    pub fn stopped_at(&self) -> Option<i64> {
        Some(self.stopped_at.load(Ordering::Relaxed)).filter(|t| *t > 0)
    }

    /// Resolves once the turn must stop.
    pub async fn stopped(&self) {
        tokio::select! {
            _ = self.stop.cancelled() => {}
            _ = self.lease_lost.cancelled() => {}
        }
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        if self.lease_lost.is_cancelled() {
            return Some(StopReason::LeaseLost);
        }
        if self.stop.is_cancelled() {
            return self.reason.lock().ok().and_then(|r| r.clone());
        }
        None
    }
}

/// How a final text answer ended (SPEC R7.2, R10.2), recorded as `stop_reason` in the
/// admission's outcome, `message.complete` and `turn.finished`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AnswerStop {
    /// The model finished its answer.
    #[default]
    Stop,
    /// Still cut off by the output limit after the allowed continuations: the text so far.
    Truncated,
    /// The same text as the model's previous answer in this turn, again after one recovery
    /// call: the repeat guard stopped the loop with it.
    Repeated,
}

impl AnswerStop {
    pub fn code(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Truncated => "truncated",
            Self::Repeated => "repeated",
        }
    }
}

/// Why a turn ended without a final answer (SPEC R7.2); each has a stable code.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnFailure {
    Stopped(StopReason),
    /// A write the turn depends on failed: nothing runs from memory after that.
    PersistenceFailed(String),
    Provider {
        code: String,
        message: String,
    },
    /// The request cannot fit the window and compression could not make it fit.
    ContextOverflow(String),
    /// The request does not fit and compression failed or timed out (SPEC R7.2): nothing was
    /// lost; the next input tries again after the cooldown.
    CompressionFailed(String),
    NoProvider,
    MaxIterations,
    /// The iteration budget ran out (SPEC R7.3); a grace call without tools may still have
    /// written a summary of where the work stopped, which is delivered as the final response.
    BudgetExhausted,
    /// The model answered with nothing, again after one recovery call (SPEC R7.2). (A
    /// repeated or still truncated answer is an answer: see `AnswerStop`.)
    EmptyResponse,
    /// The process is stopping while the turn waits in its tool round (for a person, or for
    /// calls not started yet): it is left `started` for the next process to resume (SPEC
    /// R13.1, R13.2), so a pending approval outlives a deploy. Nothing is written.
    Parked,
    /// The same tool call was made `times` times in one turn (SPEC R9.6, R7.2).
    GuardHalt {
        tool: String,
        times: u32,
    },
}

impl TurnFailure {
    pub fn code(&self) -> String {
        match self {
            Self::Stopped(r) => r.code().to_owned(),
            Self::PersistenceFailed(_) => "session_persistence_failed".into(),
            Self::Provider { code, .. } => code.clone(),
            Self::ContextOverflow(_) => "context_overflow".into(),
            Self::CompressionFailed(_) => "compression_failed".into(),
            Self::NoProvider => "no_provider_configured".into(),
            Self::MaxIterations => "max_iterations".into(),
            Self::BudgetExhausted => "budget_exhausted".into(),
            Self::EmptyResponse => "empty_response".into(),
            Self::GuardHalt { .. } => "tool_guard_halt".into(),
            Self::Parked => "parked".into(),
        }
    }

    pub fn message(&self) -> String {
        match self {
            Self::Stopped(StopReason::Interrupted(why)) => format!("interrupted: {why}"),
            Self::Stopped(StopReason::Shutdown) => {
                "the server shut down before the turn finished".into()
            }
            Self::Stopped(r) => r.code().to_owned(),
            Self::PersistenceFailed(m) | Self::ContextOverflow(m) => m.clone(),
            Self::CompressionFailed(m) => format!(
                "the request does not fit the context window and compression failed: {m}; \
                 nothing was lost, send again to retry"
            ),
            Self::Provider { message, .. } => message.clone(),
            Self::NoProvider => "no provider is configured".into(),
            Self::MaxIterations => "the turn reached its iteration limit".into(),
            Self::BudgetExhausted => "the turn spent its iteration budget; the final response \
                 summarizes where the work stopped"
                .into(),
            Self::EmptyResponse => "the model returned an empty response".into(),
            Self::Parked => "the server stopped while the turn waited in its tool round; the next \
                 process resumes it"
                .into(),
            Self::GuardHalt { tool, times } => format!(
                "stopped: {tool} was called {times} times with the same arguments in this \
                 turn, so the turn was halted instead of repeating it again"
            ),
        }
    }

    /// A failure that still delivers the text it ended with as the final response (the grace
    /// call's summary, SPEC R7.3).
    pub fn delivers_answer(&self) -> bool {
        matches!(self, Self::BudgetExhausted)
    }

    /// A failure whose cause is context pressure must not grow the transcript (SPEC R10.5).
    pub fn is_context_pressure(&self) -> bool {
        matches!(self, Self::ContextOverflow(_) | Self::CompressionFailed(_))
    }
}
