//! `Admissions`: every input enters here (SPEC R1, R2). It authorizes from the principal and
//! the session's owner, normalizes the payload, admits it durably and idempotently, then tells
//! the session's actor to drain. A plain service, called directly by each door: it orders
//! nothing (admissions of one session are ordered by the store's commit, `Store::admit`).
//!
//! One thing it keeps where it was: the drain it wakes after the commit runs on the arbiter
//! the gateway started on (`home`), where session actors are started and turns run, not on the
//! thread of the door that called (an HTTP worker, a platform poller).
use crate::busy_policy::pinned_policy;
use crate::config::BusyPolicy;
use crate::deps::Deps;
use crate::error::GatewayError;
use crate::input::{Receipt, Submission};
use crate::limits;
use crate::session::registry::SessionRegistry;
use crate::session::Interrupt;
use crate::stages::{timed, Stage};
use crate::turn::StopReason;
use actix::{Arbiter, ArbiterHandle};
use dashmap::DashMap;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use turnkey_storage::{Admission, NewAdmission, Principal, Session, SessionId, Store};

/// The admission service, shared by every door (cheap to clone).
#[derive(Clone)]
pub struct Admissions {
    deps: Arc<Deps>,
    registry: SessionRegistry,
    owners: Owners,
    /// The gateway's arbiter: the session actors an admission wakes are started there.
    home: ArbiterHandle,
}

impl Admissions {
    /// The service, at home on the current arbiter (call it where the gateway starts).
    pub fn new(deps: Arc<Deps>, registry: SessionRegistry) -> Self {
        Self {
            deps,
            registry,
            owners: Owners::default(),
            home: Arbiter::current(),
        }
    }

    /// Admits one input from a door.
    pub async fn submit(
        &self,
        principal: Principal,
        session: SessionId,
        submission: Submission,
    ) -> Result<Receipt, GatewayError> {
        let deps = &self.deps;
        // Any id of a rotated lineage admits into the lineage's one queue (SPEC R6.4).
        let session = self
            .owners
            .authorize(&deps.store, &principal, session)
            .await?;
        // Input that could only fail is refused rather than queued.
        if deps.providers.is_empty() {
            return Err(GatewayError::NoProvider);
        }
        let mut payload = normalize(&principal, &submission)?;
        // Masked before it is stored (SPEC R13.8); the digest is of the masked text, so a
        // retry with the same text is still the same request.
        if let Some(text) = payload["text"].as_str() {
            if let std::borrow::Cow::Owned(masked) = deps.redactor.redact(text) {
                payload["text"] = serde_json::Value::String(masked);
            }
        }
        // A person's message names a session that has no title yet; the gateway's own
        // inputs (reports, schedules) do not.
        let title = (submission.surface != crate::input::INTERNAL_SURFACE)
            .then(|| crate::input::title_of(payload["text"].as_str().unwrap_or_default()))
            .flatten();
        let request_id = submission.request_id.as_deref();
        check_limits(deps, &principal, session, &submission.surface, request_id).await?;
        let new = NewAdmission {
            session_id: session,
            request_id: submission
                .request_id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
            payload_digest: digest(&payload),
            payload,
            principal: principal.id.clone(),
            surface: submission.surface.clone(),
            retry_of: None,
            title,
        };
        self.admit(new).await
    }

    /// Admits an `unknown` admission again, as a new admission linked to it. Idempotent:
    /// asking twice yields the same new admission.
    pub async fn retry_unknown(&self, unknown: Admission) -> Result<Receipt, GatewayError> {
        let a = unknown;
        // What the server understood the first time, byte for byte; only the link is new.
        let new = NewAdmission {
            session_id: a.session_id,
            request_id: format!("{RETRY_REQUEST_PREFIX}{}", a.id),
            payload_digest: a.payload_digest,
            payload: a.payload,
            principal: a.principal,
            surface: a.surface,
            retry_of: Some(a.id),
            title: None,
        };
        self.admit(new).await
    }

    /// Makes `new` durable (or finds the earlier admission of its request id), announces it,
    /// and wakes the session's drain at home; answers once the drain was told.
    async fn admit(&self, new: NewAdmission) -> Result<Receipt, GatewayError> {
        let deps = &self.deps;
        let admitted = timed(Stage::Admit, deps.store.admit(new)).await?;
        admitted
            .events
            .into_iter()
            .for_each(|e| deps.hub.publish(e));
        crate::kill_point!("admission.after_commit");
        let a = admitted.admission;
        if !admitted.duplicate {
            // The session's own policy as the admission's commit read it with the session's
            // row.
            let policy = pinned_policy(&a.payload).unwrap_or_else(|| {
                BusyPolicy::effective(
                    admitted.busy_policy.as_deref(),
                    deps.config.agent.busy_policy,
                )
            });
            let (deps, registry) = (deps.clone(), self.registry.clone());
            let (session, seq) = (a.session_id, a.seq);
            let (told, woken) = tokio::sync::oneshot::channel();
            let sent = self.home.spawn(async move {
                wake(&deps, &registry, session, seq, policy);
                if told.send(()).is_err() {
                    tracing::debug!(%session, "the admission's caller left before its drain");
                }
            });
            if !sent || woken.await.is_err() {
                // The gateway's arbiter is stopping: the admission is durable, and the next
                // process (or the recovery sweep) drains it.
                tracing::warn!(%session, "admitted while the gateway stops; drain not woken");
            }
        }
        Ok(Receipt {
            admission_id: a.id,
            session_id: a.session_id,
            seq: a.seq,
            status: a.status,
            duplicate: admitted.duplicate,
            retry_of: a.retry_of,
        })
    }
}

/// After an admission to `session` committed: interrupts the running turn when the busy
/// policy says so, and wakes the session's drain. `steer` needs nothing here: the running turn
/// takes queued input at its next model boundary (`turn::steer`); what it does not take runs
/// as its own turn.
fn wake(
    deps: &Arc<Deps>,
    registry: &SessionRegistry,
    session: SessionId,
    seq: i64,
    policy: BusyPolicy,
) {
    if policy == BusyPolicy::Interrupt {
        const SUPERSEDED: &str = "superseded by a newer message";
        if let Some(addr) = registry.get(session) {
            addr.do_send(Interrupt {
                reason: StopReason::Interrupted(SUPERSEDED.into()),
            });
        }
        // The running turn may be another replica's (SPEC R13.6): pass it on, off the
        // admission's path.
        let deps = deps.clone();
        actix::spawn(async move {
            let forwarded =
                crate::remote_interrupt::forward(&deps, session, SUPERSEDED.into(), Some(seq));
            if let Err(e) = forwarded.await {
                tracing::warn!(%session, error = %e, "busy policy interrupt not passed on");
            }
        });
    }
    registry.drain_admitted(session);
}

/// How many sessions' owners the admission service keeps; past it, it starts again empty.
const OWNERS_KEPT: usize = 65_536;

/// The owner and the lineage root of the sessions this service admitted into: the two facts
/// authorization needs, and two that never change while the session exists (its owner is
/// set when it is created, and so is a rotated segment's root). With them, a submission to a
/// session seen before reads no session row: the admission's own statement finds the row,
/// or reports it gone (a deleted session is then refused as before), and answers the
/// session's busy policy. A principal is checked against the owner on every submission.
#[derive(Clone, Default)]
struct Owners(Arc<DashMap<SessionId, (String, SessionId)>>);

impl Owners {
    /// The lineage `principal` may admit into through `session` (SPEC R6.4), or `NotFound`
    /// for a missing session and, alike, for someone else's (API.md "Auth").
    async fn authorize(
        &self,
        store: &Store,
        principal: &Principal,
        session: SessionId,
    ) -> Result<SessionId, GatewayError> {
        let known = self.0.get(&session).map(|e| e.value().clone());
        let (owner, lineage) = match known {
            Some(facts) => facts,
            None => {
                let row = authorize(store, principal, session).await?;
                let facts = (row.owner.clone(), row.lineage());
                if self.0.len() >= OWNERS_KEPT {
                    self.0.clear();
                }
                self.0.insert(session, facts.clone());
                facts
            }
        };
        if principal.kind == "operator" || owner == principal.id {
            Ok(lineage)
        } else {
            Err(GatewayError::NotFound(format!("session {session}")))
        }
    }
}

/// The principal's limits (`[limits]`, SPEC R13.8), checked before anything is admitted. The
/// operator and the gateway's own internal inputs are exempt, and so is a request id already
/// admitted (its retry answers the earlier receipt; looked up only when a limit would refuse).
/// Each count is one indexed read, made only when its limit is set.
async fn check_limits(
    deps: &Deps,
    principal: &Principal,
    session: SessionId,
    surface: &str,
    request_id: Option<&str>,
) -> Result<(), GatewayError> {
    let limits = &deps.config.limits;
    if !limits.any() || principal.kind == "operator" || surface == crate::input::INTERNAL_SURFACE {
        return Ok(());
    }
    let Some(refusal) = over_limit(deps, principal).await? else {
        return Ok(());
    };
    if let Some(rid) = request_id {
        if deps
            .store
            .find_admission_by_request(session, rid)
            .await?
            .is_some()
        {
            return Ok(());
        }
    }
    Err(refusal)
}

/// The limits a model call outside any session is held to (a `direct/` model of the OpenAI
/// endpoint): the same as an input's, the operator exempt.
pub(crate) async fn check_direct_limits(
    deps: &Deps,
    principal: &Principal,
) -> Result<(), GatewayError> {
    if !deps.config.limits.any() || principal.kind == "operator" {
        return Ok(());
    }
    match over_limit(deps, principal).await? {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}

/// The refusal of the first limit `principal` is at, if any.
async fn over_limit(
    deps: &Deps,
    principal: &Principal,
) -> Result<Option<GatewayError>, GatewayError> {
    let limits = &deps.config.limits;
    let now = turnkey_storage::now_ms();
    let who = &principal.id;
    if limits.turns_per_minute > 0 {
        const MINUTE_MS: i64 = 60_000;
        let (n, oldest) = deps.store.admitted_since(who, now - MINUTE_MS).await?;
        if n >= u64::from(limits.turns_per_minute) {
            let free_at = oldest.unwrap_or(now) + MINUTE_MS;
            return Ok(Some(GatewayError::Limited {
                code: "rate_limited",
                message: format!(
                    "at most {} inputs a minute (limits.turns_per_minute); try again shortly",
                    limits.turns_per_minute
                ),
                retry_after_s: seconds_until(now, free_at),
            }));
        }
    }
    if limits.concurrent_turns > 0 {
        let running = deps.store.running_turns_of(who).await?;
        if running >= u64::from(limits.concurrent_turns) {
            return Ok(Some(GatewayError::Limited {
                code: "rate_limited",
                message: format!(
                    "{running} turns already run at once, the most allowed                      (limits.concurrent_turns); try again when one has ended"
                ),
                retry_after_s: 5,
            }));
        }
    }
    if limits.tokens_per_day > 0 {
        let used = deps
            .store
            .tokens_on_day(who, turnkey_storage::day_of(now))
            .await?;
        if u64::try_from(used).unwrap_or(0) >= limits.tokens_per_day {
            return Ok(Some(GatewayError::Limited {
                code: "quota_exceeded",
                message: format!(
                    "{used} model tokens used today, the daily quota is {}                      (limits.tokens_per_day); it resets at 00:00 UTC",
                    limits.tokens_per_day
                ),
                retry_after_s: seconds_until(now, turnkey_storage::next_day_at(now)),
            }));
        }
    }
    Ok(None)
}

/// Whole seconds from `now` to `at` (ms), at least 1.
fn seconds_until(now: i64, at: i64) -> u64 {
    u64::try_from((at - now + 999) / 1000).unwrap_or(1).max(1)
}

/// Request id of the admission that retries an unknown one: one retry per unknown admission.
pub const RETRY_REQUEST_PREFIX: &str = "retry-of:";

/// The session, if `principal` may act on it. Someone else's session is reported exactly like
/// a missing one, so its existence is not revealed (API.md "Auth").
pub async fn authorize(
    store: &Store,
    principal: &Principal,
    session: SessionId,
) -> Result<Session, GatewayError> {
    let found = store.get_session(session).await?;
    match found {
        Some(s) if principal.kind == "operator" || s.owner == principal.id => Ok(s),
        _ => Err(GatewayError::NotFound(format!("session {session}"))),
    }
}

/// The principal that owns sessions as `owner`, for an input the gateway admits on the owner's
/// behalf (a schedule's due time, a report): a stored principal (the operator, an API token's),
/// or a platform chat, which is its own principal and is not stored (its id is the chat's key).
pub async fn principal_of_owner(store: &Store, owner: &str) -> Result<Principal, GatewayError> {
    if let Some(p) = store.get_principal(owner).await? {
        return Ok(p);
    }
    match crate::platforms::chat::ChatTarget::parse(owner) {
        Some(_) => Ok(Principal {
            id: owner.to_owned(),
            name: owner.to_owned(),
            kind: "platform".into(),
        }),
        None => Err(GatewayError::NotFound(format!(
            "principal {owner} (the session's owner)"
        ))),
    }
}

/// What the queue holds: the server's understanding of the input (SPEC R2.2), never the raw
/// body. The author comes from the authenticated principal, not from the payload. Every field
/// is checked against its documented limit (`limits`) first.
pub fn normalize(principal: &Principal, s: &Submission) -> Result<Value, GatewayError> {
    let text = limits::sanitize_text(&s.text);
    if text.trim().is_empty() && s.attachments.is_empty() {
        return Err(GatewayError::InvalidInput {
            code: "empty_input",
            message: "text must not be empty".into(),
        });
    }
    if text.chars().count() > limits::MAX_TEXT_CHARS {
        return Err(GatewayError::InvalidInput {
            code: "input_too_large",
            message: format!("text is longer than {} characters", limits::MAX_TEXT_CHARS),
        });
    }
    limits::attachments(&s.attachments)?;
    if let Some(d) = &s.display {
        limits::display(d)?;
    }
    if let Some(m) = &s.model {
        limits::model(m)?;
    }
    if let Some(id) = &s.request_id {
        limits::request_id(id)?;
    }
    crate::input::check_turn_fields(s)?;
    let mut payload = json!({
        "text": text,
        "attachments": s.attachments,
        "display": s.display,
        "model_override": s.model,
        "author": principal.id,
        "surface": s.surface,
    });
    if let Some(p) = s.busy_policy {
        payload["busy_policy"] = json!(p.as_str());
    }
    // The turn-only fields, present only when given: an older input's payload reads the same.
    if let Some(i) = &s.instructions {
        payload["instructions"] = json!(limits::sanitize_text(i));
    }
    if let Some(n) = s.max_output_tokens {
        payload["max_output_tokens"] = json!(n);
    }
    if let Some(d) = &s.door {
        payload["door"] = d.clone();
    }
    Ok(payload)
}

/// The idempotency digest covers what the input means, not who relayed it or how.
fn digest(payload: &Value) -> String {
    let mut meaning = json!({
        "text": payload["text"],
        "attachments": payload["attachments"],
        "display": payload["display"],
        "model_override": payload["model_override"],
    });
    // Added only when present, so the digest of an input without them is what it was.
    for key in ["instructions", "max_output_tokens", "door"] {
        if let Some(v) = payload.get(key) {
            meaning[key] = v.clone();
        }
    }
    hex::encode(Sha256::digest(meaning.to_string().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operator() -> Principal {
        Principal {
            id: "operator".into(),
            name: "operator".into(),
            kind: "operator".into(),
        }
    }

    #[test]
    fn r2_2_author_comes_from_the_principal() {
        let p = normalize(
            &operator(),
            &Submission {
                text: "hi".into(),
                surface: "api".into(),
                ..Default::default()
            },
        )
        .expect("valid");
        assert_eq!(p["author"], "operator");
        assert_eq!(p["text"], "hi");
    }

    #[test]
    fn r2_2_control_characters_are_stripped() {
        assert_eq!(limits::sanitize_text("a\u{0}b\u{7}c\nd"), "abc\nd");
    }

    #[test]
    fn r2_2_empty_input_is_refused() {
        let e = normalize(&operator(), &Submission::default()).expect_err("empty");
        assert_eq!(e.code(), "empty_input");
    }

    #[test]
    fn r2_3_digest_ignores_the_relay_but_not_the_text() {
        let a = normalize(
            &operator(),
            &Submission {
                text: "x".into(),
                surface: "api".into(),
                ..Default::default()
            },
        )
        .expect("valid");
        let b = normalize(
            &operator(),
            &Submission {
                text: "x".into(),
                surface: "ws".into(),
                ..Default::default()
            },
        )
        .expect("valid");
        let c = normalize(
            &operator(),
            &Submission {
                text: "y".into(),
                surface: "api".into(),
                ..Default::default()
            },
        )
        .expect("valid");
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&c));
    }
}
