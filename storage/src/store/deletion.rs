//! Deleting a session (SPEC R13.8; `DELETE /v1/sessions/{id}`): its lineage's rows in every
//! table that holds them go in one transaction, fenced against a running turn, and audited in
//! the same commit. The principal's memory, skills and usage counters stay (they are the
//! principal's, not the session's); memory and skill rows that named the session forget it.
use super::audit::{insert_audit, NewAudit};
use super::{Result, Store, StoreError, WriteTx};
use crate::entity::*;
use crate::ids::*;
use crate::status::AdmissionStatus;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect};
use serde_json::json;

/// What went with a deleted session, for the files kept outside the database.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Deleted {
    /// Every session row deleted (segments of the lineage and sub-agents' sessions included).
    pub sessions: Vec<SessionId>,
    /// Their turns (spilled results and checkpoints are kept per turn).
    pub turns: Vec<TurnId>,
    /// Their background processes (a log and an exit file each).
    pub processes: Vec<ProcessId>,
    /// The files their user rows attached (deleted after, when nothing else names them).
    pub files: Vec<String>,
}

impl Store {
    /// Deletes `sessions` (lineage roots the caller collected: a session and its sub-agents'),
    /// with their rotated segments, in one transaction, audited as done by `by`. Refused
    /// (`WrongState`) while any of them has a turn running; nothing is written then.
    pub async fn delete_sessions(&self, sessions: &[SessionId], by: &str) -> Result<Deleted> {
        let roots: Vec<String> = sessions.iter().map(ToString::to_string).collect();
        let tx = self.write_tx().await?;
        let ids = lineage_ids(&tx, &roots).await?;
        let running = admission::Entity::find()
            .filter(admission::Column::SessionId.is_in(ids.clone()))
            .filter(admission::Column::Status.eq(AdmissionStatus::Started.as_str()))
            .count(&tx)
            .await?;
        if running > 0 {
            tx.rollback().await?;
            return Err(StoreError::WrongState(format!(
                "{running} turn(s) of the session still run"
            )));
        }
        let turns: Vec<Option<String>> = admission::Entity::find()
            .select_only()
            .column(admission::Column::TurnId)
            .filter(admission::Column::SessionId.is_in(ids.clone()))
            .into_tuple()
            .all(&tx)
            .await?;
        let processes: Vec<String> = background_process::Entity::find()
            .select_only()
            .column(background_process::Column::Id)
            .filter(background_process::Column::SessionId.is_in(ids.clone()))
            .into_tuple()
            .all(&tx)
            .await?;
        let files = attached_files(&tx, &ids).await?;
        delete_rows(&tx, &ids).await?;
        insert_audit(
            &tx,
            &NewAudit {
                principal: by.to_owned(),
                action: "session.deleted".into(),
                target: roots.first().cloned().unwrap_or_default(),
                detail: json!({"sessions": ids.len()}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(Deleted {
            sessions: ids
                .iter()
                .map(|s| parse_id(s, "session id"))
                .collect::<Result<_>>()?,
            turns: turns
                .into_iter()
                .flatten()
                .map(|t| parse_id(&t, "turn id"))
                .collect::<Result<_>>()?,
            processes: processes
                .iter()
                .map(|p| parse_id(p, "process id"))
                .collect::<Result<_>>()?,
            files,
        })
    }
}

/// Every session row of the lineages of `roots`: the roots and their rotated segments.
async fn lineage_ids(tx: &WriteTx, roots: &[String]) -> Result<Vec<String>> {
    let mut ids: Vec<String> = session::Entity::find()
        .select_only()
        .column(session::Column::Id)
        .filter(
            session::Column::Id
                .is_in(roots.to_vec())
                .or(session::Column::RootId.is_in(roots.to_vec())),
        )
        .into_tuple()
        .all(tx)
        .await?;
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// The files the user rows of `ids` attached (their `file_id`s, each once).
async fn attached_files(tx: &WriteTx, ids: &[String]) -> Result<Vec<String>> {
    let attached: Vec<Option<String>> = message::Entity::find()
        .select_only()
        .column(message::Column::Attachments)
        .filter(message::Column::SessionId.is_in(ids.to_vec()))
        .filter(message::Column::Attachments.is_not_null())
        .into_tuple()
        .all(tx)
        .await?;
    let mut files: Vec<String> = attached
        .iter()
        .flatten()
        .filter_map(|a| serde_json::from_str::<serde_json::Value>(a).ok())
        .flat_map(|a| {
            a.as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["file_id"].as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

/// Deletes the rows of sessions `ids` from every table that holds them, the session rows
/// last; the principal's own records only forget the sessions.
async fn delete_rows(tx: &WriteTx, ids: &[String]) -> Result<()> {
    macro_rules! delete_by {
        ($entity:ident, $col:expr) => {
            $entity::Entity::delete_many()
                .filter($col.is_in(ids.to_vec()))
                .exec(tx)
                .await?;
        };
    }
    delete_by!(admission, admission::Column::SessionId);
    delete_by!(approval, approval::Column::SessionId);
    delete_by!(background_process, background_process::Column::SessionId);
    delete_by!(chat_session, chat_session::Column::SessionId);
    delete_by!(compression_lock, compression_lock::Column::SessionId);
    delete_by!(event, event::Column::SessionId);
    delete_by!(inbound_update, inbound_update::Column::SessionId);
    delete_by!(interrupt_request, interrupt_request::Column::SessionId);
    delete_by!(lease, lease::Column::SessionId);
    delete_by!(message, message::Column::SessionId);
    delete_by!(outbox, outbox::Column::SessionId);
    delete_by!(response_deletion, response_deletion::Column::SessionId);
    delete_by!(review, review::Column::SessionId);
    delete_by!(schedule, schedule::Column::SessionId);
    delete_by!(session_key, session_key::Column::SessionId);
    delete_by!(subagent_task, subagent_task::Column::ParentSessionId);
    delete_by!(subagent_task, subagent_task::Column::ChildSessionId);
    delete_by!(tool_run, tool_run::Column::SessionId);
    delete_by!(usage, usage::Column::SessionId);
    // The principal's own records stay; they only forget the session.
    memory_pending::Entity::update_many()
        .col_expr(
            memory_pending::Column::SessionId,
            Expr::value(None::<String>),
        )
        .filter(memory_pending::Column::SessionId.is_in(ids.to_vec()))
        .exec(tx)
        .await?;
    memory_change::Entity::update_many()
        .col_expr(
            memory_change::Column::SessionId,
            Expr::value(None::<String>),
        )
        .filter(memory_change::Column::SessionId.is_in(ids.to_vec()))
        .exec(tx)
        .await?;
    skill_proposal::Entity::update_many()
        .col_expr(
            skill_proposal::Column::SessionId,
            Expr::value(None::<String>),
        )
        .filter(skill_proposal::Column::SessionId.is_in(ids.to_vec()))
        .exec(tx)
        .await?;
    delete_by!(session, session::Column::Id);
    Ok(())
}
