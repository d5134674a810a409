//! Where a turn's time goes: a latency histogram per stage of the turn's lifecycle (admit,
//! lease, claim, context, provider, finalize, delivery), the whole turn and its queue wait,
//! and the counters an operator watches (unknown turns, provider errors by class; lease
//! takeovers are the store's, `turnkey_storage::metrics`). `/metrics` renders them; [`timed`] is how code records a stage.
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use turnkey_storage::metrics::{header, Histogram};

/// A stage of a turn, in the order the turn goes through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Admission: validate, commit the input durably, answer 202.
    Admit,
    /// Taking the session's lease; when a drain starts, with the claim of the FIFO head in
    /// the same commit.
    Lease,
    /// `queued → started` with `turn.started`, for the inputs a drain claims after its first.
    Claim,
    /// Reading the session and transcript, writing the user row.
    Context,
    /// One model call, from request to the end of its stream.
    Provider,
    /// The turn-end commit.
    Finalize,
    /// One group commit of streamed events (deltas, tool events).
    Delivery,
}

impl Stage {
    pub const ALL: [Stage; 7] = [
        Stage::Admit,
        Stage::Lease,
        Stage::Claim,
        Stage::Context,
        Stage::Provider,
        Stage::Finalize,
        Stage::Delivery,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Admit => "admit",
            Stage::Lease => "lease",
            Stage::Claim => "claim",
            Stage::Context => "context",
            Stage::Provider => "provider",
            Stage::Finalize => "finalize",
            Stage::Delivery => "delivery",
        }
    }
}

pub struct TurnMetrics {
    stages: [Histogram; 7],
    /// From the admission's commit to the turn-end commit.
    pub turn: Histogram,
    /// From the admission's commit to its claim.
    pub queue_wait: Histogram,
    /// Events per delivery group commit.
    pub delivery_batch: Histogram,
    pub unknown_turns: AtomicU64,
    provider_errors: Mutex<BTreeMap<&'static str, u64>>,
}

pub static TURNS: TurnMetrics = TurnMetrics {
    stages: [const { Histogram::latency() }; 7],
    turn: Histogram::latency(),
    queue_wait: Histogram::latency(),
    delivery_batch: Histogram::size(),
    unknown_turns: AtomicU64::new(0),
    provider_errors: Mutex::new(BTreeMap::new()),
};

impl TurnMetrics {
    pub fn stage(&self, stage: Stage) -> &Histogram {
        &self.stages[stage as usize]
    }

    /// Counts a failed model call by its error's stable code (`rate_limited`, …).
    pub fn provider_error(&self, code: &'static str) {
        // Plain counters survive a panic elsewhere while the lock was held.
        let mut map = self
            .provider_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *map.entry(code).or_insert(0) += 1;
    }

    pub fn render(&self, out: &mut String) {
        let name = "turnkey_turn_stage_seconds";
        header(out, name, "histogram", "Time a turn spent in each stage.");
        for s in Stage::ALL {
            self.stage(s)
                .render(out, name, &format!("stage=\"{}\"", s.as_str()));
        }
        for (name, help, h) in [
            (
                "turnkey_turn_seconds",
                "Turn latency: admission committed to turn end committed.",
                &self.turn,
            ),
            (
                "turnkey_turn_queue_wait_seconds",
                "Admission committed to claimed.",
                &self.queue_wait,
            ),
            (
                "turnkey_delivery_batch_events",
                "Events per delivery group commit.",
                &self.delivery_batch,
            ),
        ] {
            header(out, name, "histogram", help);
            h.render(out, name, "");
        }
        let name = "turnkey_unknown_turns_total";
        header(
            out,
            name,
            "counter",
            "Turns marked unknown: their owner stopped before they ended.",
        );
        out.push_str(&format!(
            "{name} {}\n",
            self.unknown_turns.load(Ordering::Relaxed)
        ));
        let name = "turnkey_provider_errors_total";
        header(out, name, "counter", "Failed model calls by error class.");
        let map = self
            .provider_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (class, n) in map.iter() {
            out.push_str(&format!("{name}{{class=\"{class}\"}} {n}\n"));
        }
    }
}

/// Runs `fut` and records how long it took as `stage`.
pub async fn timed<F: Future>(stage: Stage, fut: F) -> F::Output {
    let t0 = Instant::now();
    let out = fut.await;
    TURNS.stage(stage).observe_duration(t0.elapsed());
    out
}

/// Seconds from `since_ms` (epoch milliseconds, as the store records times) to now.
pub fn seconds_since(since_ms: i64) -> f64 {
    (turnkey_storage::now_ms() - since_ms).max(0) as f64 / 1000.0
}
