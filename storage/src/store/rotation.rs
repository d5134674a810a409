//! Rotation (SPEC R6.4, `compression.mode = "rotate"`): the compression's swap moves the live
//! transcript into a child session instead of marking rows in place. The child gets copies of
//! the protected head, the new summary and the tail; the root's `transcript_id` points at it,
//! and `session.rotated` plus `compression.completed` are committed with it in one fenced
//! transaction. The parent's rows are not touched: its history stays readable as it was.
//! Admissions, events, the lease and the counters stay keyed on the lineage root, so a client
//! holding any id of the lineage reaches the same queue and replays one gap-free event log.
//!
//! Every turn write goes through `insert_message(root, …)`, whose one update picks the canonical
//! segment (`COALESCE(transcript_id, id)`), so no writer needs to know a rotation happened. At the
//! edge `Session::lineage()` maps any id to its root; `Store::lineage_messages` reads every segment
//! in creation order, copies left out.
use super::compression::IDS_PER_STATEMENT;
use super::log::{insert_message, insert_row};
use super::{check_fence, convert, insert_event, Result, Store, StoreError, WriteTx};
use crate::entity::{message, session};
use crate::ids::*;
use crate::model::*;
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use std::collections::HashMap;

/// One rotation, planned against `base_epoch`.
#[derive(Clone, Debug)]
pub struct Rotation {
    /// The lineage root (the lease's key).
    pub session_id: SessionId,
    pub turn_id: TurnId,
    pub admission_id: AdmissionId,
    pub base_epoch: i32,
    /// The child's id.
    pub child_id: SessionId,
    /// Live rows of the canonical session kept before the summary, in order.
    pub head: Vec<MessageId>,
    /// Live rows kept after the summary, in order.
    pub tail: Vec<MessageId>,
    /// The summary row; its `summary_epoch` and `summary_after_idx` are set here.
    pub summary: NewMessage,
    /// `compression.completed`'s data (`child_session_id` is added here).
    pub event_data: serde_json::Value,
}

/// What the rotation committed.
#[derive(Clone, Debug)]
pub struct RotationDone {
    pub epoch: i32,
    pub child: Session,
    /// The child's rows, in order (the copies and the summary).
    pub rows: Vec<Message>,
    /// `session.rotated` and `compression.completed`, in seq order.
    pub events: Vec<Event>,
}

impl Store {
    /// Commits a rotation for the lease holder. A stale epoch or kept rows that are no longer
    /// live rows of the canonical session refuse it (`WrongState`) and change nothing.
    pub async fn commit_rotation(&self, fence: &Fence, r: &Rotation) -> Result<RotationDone> {
        let root_id = r.session_id.to_string();
        let epoch = r.base_epoch.saturating_add(1);
        let tx = self.write_tx().await?;
        check_fence(&tx, fence).await?;
        let root = session::Entity::find_by_id(root_id.clone())
            .one(&tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("session {root_id}")))?;
        if root.root_id.is_some() {
            tx.rollback().await?;
            return Err(StoreError::WrongState(format!(
                "session {root_id} is not a lineage root"
            )));
        }
        if root.compression_epoch != r.base_epoch {
            tx.rollback().await?;
            return Err(StoreError::WrongState(format!(
                "session {root_id}: compression epoch is no longer {}",
                r.base_epoch
            )));
        }
        let parent = root
            .transcript_id
            .clone()
            .unwrap_or_else(|| root_id.clone());

        // The kept rows, read back: every one must be a live row of the canonical session.
        let wanted: Vec<String> = r
            .head
            .iter()
            .chain(&r.tail)
            .map(|m| m.to_string())
            .collect();
        let found = live_rows(&tx, &parent, &wanted).await?;
        if found.len() != wanted.len() {
            tx.rollback().await?;
            return Err(StoreError::WrongState(format!(
                "session {root_id}: the rotation keeps {} rows but {} are live in {parent}; the \
                 transcript changed under it",
                wanted.len(),
                found.len()
            )));
        }

        let now = now_ms();
        let child_id = r.child_id.to_string();
        session::Entity::insert(child_row(&root, &child_id, &parent, now))
            .exec_without_returning(&tx)
            .await?;
        session::Entity::update_many()
            .col_expr(session::Column::TranscriptId, Expr::value(child_id.clone()))
            .col_expr(session::Column::CompressionEpoch, Expr::value(epoch))
            .col_expr(session::Column::CompressedAt, Expr::value(now))
            .filter(session::Column::Id.eq(root_id.clone()))
            .exec(&tx)
            .await?;

        let rows = write_child(&tx, r, &found, &child_id, epoch).await?;
        let events = announce(&tx, r, &child_id, &parent, epoch).await?;
        let child = session::Entity::find_by_id(child_id.clone())
            .one(&tx)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("session {child_id}")))?;
        tx.commit().await?;
        Ok(RotationDone {
            epoch,
            child: convert::session(child)?,
            rows,
            events,
        })
    }
}

/// The child's rows (the root's transcript now points at it): copies of the kept head, the
/// summary, copies of the kept tail; read back in order.
async fn write_child(
    tx: &WriteTx,
    r: &Rotation,
    found: &HashMap<String, message::Model>,
    child_id: &str,
    epoch: i32,
) -> Result<Vec<Message>> {
    // The root's transcript points at the child now: the inserts below write there.
    copy_rows(tx, r.session_id, &r.head, found).await?;
    let mut summary = r.summary.clone();
    summary.summary_epoch = Some(epoch);
    summary.summary_after_idx = Some(i64::try_from(r.head.len()).unwrap_or(i64::MAX));
    insert_message(tx, r.session_id, &summary).await?;
    copy_rows(tx, r.session_id, &r.tail, found).await?;
    message::Entity::find()
        .filter(message::Column::SessionId.eq(child_id))
        .order_by_asc(message::Column::Idx)
        .all(tx)
        .await?
        .into_iter()
        .map(convert::message)
        .collect::<Result<Vec<_>>>()
}

/// Copies of the kept rows `ids` (read back in `found`), in order, each remembering the row it
/// copies.
async fn copy_rows(
    tx: &WriteTx,
    session: SessionId,
    ids: &[MessageId],
    found: &HashMap<String, message::Model>,
) -> Result<()> {
    for id in ids {
        let row = found
            .get(&id.to_string())
            .ok_or_else(|| StoreError::Corrupt(format!("kept row {id} was not read back")))?;
        insert_row(tx, session, &copy_of(row)?, Some(*id)).await?;
    }
    Ok(())
}

/// The live rows of `transcript` (not compressed) among `ids`, by id, read in chunks.
async fn live_rows(
    tx: &WriteTx,
    transcript: &str,
    ids: &[String],
) -> Result<HashMap<String, message::Model>> {
    let mut found: HashMap<String, message::Model> = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(IDS_PER_STATEMENT) {
        for m in message::Entity::find()
            .filter(message::Column::SessionId.eq(transcript))
            .filter(message::Column::CompressedEpoch.is_null())
            .filter(message::Column::Id.is_in(chunk.iter().cloned()))
            .all(tx)
            .await?
        {
            found.insert(m.id.clone(), m);
        }
    }
    Ok(found)
}

/// The child session's row: the root's prompt, title and model; counters, chat key and busy
/// policy stay on the root, the lineage's one entry.
fn child_row(
    root: &session::Model,
    child_id: &str,
    parent: &str,
    now: i64,
) -> session::ActiveModel {
    session::ActiveModel {
        id: Set(child_id.to_owned()),
        parent_session_id: Set(Some(parent.to_owned())),
        owner: Set(root.owner.clone()),
        platform: Set(root.platform.clone()),
        chat_key: Set(None),
        title: Set(root.title.clone()),
        model: Set(root.model.clone()),
        system_message: Set(root.system_message.clone()),
        system_prompt: Set(root.system_prompt.clone()),
        workspace_snapshot: Set(root.workspace_snapshot.clone()),
        last_event_seq: Set(0),
        last_admission_seq: Set(0),
        last_message_idx: Set(0),
        input_tokens: Set(0),
        output_tokens: Set(0),
        cache_read_tokens: Set(0),
        cost_usd: Set(0.0),
        created_at: Set(now),
        updated_at: Set(now),
        compression_epoch: Set(0),
        compressed_at: Set(None),
        busy_policy: Set(None),
        display: Set(None),
        root_id: Set(Some(root.id.clone())),
        transcript_id: Set(None),
        last_prompt_tokens: Set(None),
        last_prompt_at: Set(None),
    }
}

/// `session.rotated` and `compression.completed` (its data with the epoch and the child).
async fn announce(
    tx: &WriteTx,
    r: &Rotation,
    child_id: &str,
    parent: &str,
    epoch: i32,
) -> Result<Vec<Event>> {
    let rotated = insert_event(
        tx,
        &NewEvent {
            session_id: r.session_id,
            kind: EventKind::SessionRotated,
            turn_id: Some(r.turn_id),
            admission_id: Some(r.admission_id),
            data: serde_json::json!({
                "child_session_id": child_id,
                "parent_session_id": parent,
                "epoch": epoch,
            }),
        },
    )
    .await?;
    let mut data = r.event_data.clone();
    if let Some(obj) = data.as_object_mut() {
        obj.insert("epoch".into(), epoch.into());
        obj.insert("child_session_id".into(), child_id.into());
    }
    let completed = insert_event(
        tx,
        &NewEvent {
            session_id: r.session_id,
            kind: EventKind::CompressionCompleted,
            turn_id: Some(r.turn_id),
            admission_id: Some(r.admission_id),
            data,
        },
    )
    .await?;
    Ok(vec![rotated, completed])
}

/// A kept row as a new row of the child: same content and turn, a new id.
fn copy_of(m: &message::Model) -> Result<NewMessage> {
    let row = convert::message(m.clone())?;
    Ok(NewMessage {
        id: MessageId::new(),
        role: Some(row.role),
        content: row.content,
        api_content: row.api_content,
        tool_calls: row.tool_calls,
        tool_call_id: row.tool_call_id,
        name: row.name,
        turn_id: row.turn_id,
        admission_id: row.admission_id,
        display: row.display,
        platform_message_id: m.platform_message_id.clone(),
        token_estimate: row.token_estimate,
        summary_epoch: None,
        summary_after_idx: None,
        attachments: row.attachments,
    })
}
