//! Busy policy `steer` (SPEC R13.4): input admitted while a turn runs joins that turn at its next
//! model boundary, as a user row of the running turn that the transcript keeps. Each steered
//! admission is settled, in the same fenced transaction as its row, with an outcome pointing at
//! the carrying turn (`{result: "steered", turn_id, carried_by}`). Input the turn does not reach
//! before it ends stays queued and runs as its own turn: nothing is dropped.
use super::context::TurnContext;
use super::TurnFailure;
use crate::busy_policy::{effective_policy, pinned_policy};
use crate::config::BusyPolicy;
use crate::deps::Record;
use crate::limits::sanitize_text;
use turnkey_providers::estimate_tokens;
use turnkey_storage::{Carried, MessageId, MessageRole, NewMessage, StoreError};

/// Takes the inputs queued on the session into the running turn, in order, when its policy is
/// `steer`: the first input pinned to another policy (a chat's `/queue <text>`) stops the
/// taking, so it waits for its own turn and nothing queued behind it overtakes it. `default`
/// is `agent.busy_policy`.
pub async fn absorb(
    record: Record<'_>,
    default: BusyPolicy,
    ctx: &mut TurnContext,
) -> Result<(), TurnFailure> {
    if effective_policy(record.store, default, ctx.session.id).await != BusyPolicy::Steer {
        return Ok(());
    }
    let queued = match record.store.queued_admissions(ctx.session.id).await {
        Ok(q) => q,
        Err(e) => {
            // Nothing is lost: the input stays queued and runs as its own turn.
            tracing::warn!(turn = %ctx.turn_id, error = %e, "cannot read the queue to steer");
            return Ok(());
        }
    };
    let carried = Carried {
        result: "steered",
        turn_id: ctx.turn_id,
        carried_by: ctx.admission.id,
    };
    for a in queued {
        if pinned_policy(&a.payload).is_some_and(|p| p != BusyPolicy::Steer) {
            break;
        }
        let text = sanitize_text(a.payload["text"].as_str().unwrap_or_default());
        let user = NewMessage {
            id: MessageId::new(),
            role: Some(MessageRole::User),
            token_estimate: i64::try_from(estimate_tokens(&text)).unwrap_or(i64::MAX),
            content: Some(text),
            turn_id: Some(ctx.turn_id),
            admission_id: Some(a.id),
            display: a.payload.get("display").filter(|d| d.is_object()).cloned(),
            ..Default::default()
        };
        match record
            .store
            .carry(&ctx.fence, a.id, &carried, Some(&user))
            .await
        {
            Ok((row, events)) => {
                crate::kill_point!("steer.after_carry");
                ctx.turn_rows.extend(row);
                events.into_iter().for_each(|e| record.hub.publish(e));
            }
            // Cancelled or taken meanwhile: not ours to carry.
            Err(StoreError::WrongState(_)) => {}
            Err(e) => return Err(TurnFailure::PersistenceFailed(e.to_string())),
        }
    }
    Ok(())
}
