//! `delivery_outbox` (SPEC R13.5): a platform message is a row before it is a request. Rows are
//! written in the transaction of the fact that causes them (a turn's end, an approval request),
//! so a crash can neither lose a reply nor write one for a turn that did not end. The sender
//! marks a row `sending` (committed) before it calls the platform and `sent` after, so a row
//! found `sending` after a crash is `unknown`: it may have reached the chat, and it is not sent
//! again blindly.
use super::{convert, Result, Store, StoreError};
use crate::entity::{outbox, session};
use crate::ids::*;
use crate::model::*;
use crate::status::OutboxStatus;
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict, Query};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect,
};
use std::collections::BTreeMap;

impl Store {
    /// Writes one platform message on its own (a command's answer, a refusal). `false` when
    /// its idempotency key was written before; the first row stands.
    pub async fn enqueue_outbox(&self, row: &NewOutbox) -> Result<bool> {
        enqueue_in(self.writer(), row).await
    }

    /// Rows newest first, optionally of one status and only of sessions owned by `owner`
    /// (API.md `GET /v1/outbox`: the operator sees all, another principal its own sessions').
    pub async fn list_outbox(
        &self,
        status: Option<OutboxStatus>,
        owner: Option<&str>,
        limit: u64,
    ) -> Result<Vec<Outbox>> {
        let mut q = outbox::Entity::find();
        if let Some(s) = status {
            q = q.filter(outbox::Column::Status.eq(s.as_str()));
        }
        if let Some(owner) = owner {
            q = q.filter(
                outbox::Column::SessionId.in_subquery(
                    Query::select()
                        .column(session::Column::Id)
                        .from(session::Entity)
                        .and_where(Expr::col(session::Column::Owner).eq(owner))
                        .to_owned(),
                ),
            );
        }
        q.order_by_desc(outbox::Column::CreatedAt)
            .order_by_desc(outbox::Column::Id)
            .limit(limit)
            .all(self.reader())
            .await?
            .into_iter()
            .map(convert::outbox)
            .collect()
    }

    pub async fn get_outbox(&self, id: &str) -> Result<Option<Outbox>> {
        outbox::Entity::find_by_id(id.to_owned())
            .one(self.reader())
            .await?
            .map(convert::outbox)
            .transpose()
    }

    /// The row written under `idempotency_key`, if any (e.g. `draft:<turn_id>`).
    pub async fn outbox_by_key(&self, idempotency_key: &str) -> Result<Option<Outbox>> {
        outbox::Entity::find()
            .filter(outbox::Column::IdempotencyKey.eq(idempotency_key))
            .one(self.reader())
            .await?
            .map(convert::outbox)
            .transpose()
    }

    /// The rows the sender may send now, oldest first: of each chat of `platforms`, the oldest
    /// row still `pending` or `sending`, when it is `pending` and due. A chat's later rows wait
    /// until it is done (`sent`, `failed` or `unknown`), so a chat gets its messages in order.
    pub async fn due_outbox(&self, platforms: &[&str], now: i64) -> Result<Vec<Outbox>> {
        let open = outbox::Entity::find()
            .filter(outbox::Column::Platform.is_in(platforms.iter().copied()))
            .filter(outbox::Column::Status.is_in([
                OutboxStatus::Pending.as_str(),
                OutboxStatus::Sending.as_str(),
            ]))
            .order_by_asc(outbox::Column::CreatedAt)
            .order_by_asc(outbox::Column::Id)
            .limit(OPEN_ROWS_SCANNED)
            .all(self.reader())
            .await?;
        let mut seen = std::collections::HashSet::new();
        let mut due = Vec::new();
        for row in open {
            if !seen.insert(row.chat_key.clone()) {
                continue;
            }
            if row.status == OutboxStatus::Pending.as_str() && row.next_attempt_at <= now {
                due.push(convert::outbox(row)?);
            }
        }
        Ok(due)
    }

    /// How many rows of `chat_key` are still `pending` or `sending`.
    pub async fn open_outbox_in_chat(&self, chat_key: &str) -> Result<u64> {
        Ok(outbox::Entity::find()
            .filter(outbox::Column::ChatKey.eq(chat_key))
            .filter(outbox::Column::Status.is_in([
                OutboxStatus::Pending.as_str(),
                OutboxStatus::Sending.as_str(),
            ]))
            .count(self.reader())
            .await?)
    }

    /// `pending → sending` for `owner`, with one more attempt; committed before the platform
    /// is called. `None` when the row is not pending and due any more (another sender took it,
    /// or it was changed).
    pub async fn claim_outbox(&self, id: &str, owner: &Owner) -> Result<Option<Outbox>> {
        let now = now_ms();
        let res = outbox::Entity::update_many()
            .col_expr(
                outbox::Column::Status,
                Expr::value(OutboxStatus::Sending.as_str()),
            )
            .col_expr(
                outbox::Column::Attempts,
                Expr::col(outbox::Column::Attempts).add(1),
            )
            .col_expr(
                outbox::Column::OwnerInstance,
                Expr::value(owner.instance.to_string()),
            )
            .col_expr(outbox::Column::OwnerPid, Expr::value(owner.pid))
            .col_expr(outbox::Column::OwnerHost, Expr::value(owner.host.clone()))
            .col_expr(outbox::Column::UpdatedAt, Expr::value(now))
            .filter(outbox::Column::Id.eq(id))
            .filter(outbox::Column::Status.eq(OutboxStatus::Pending.as_str()))
            .filter(outbox::Column::NextAttemptAt.lte(now))
            .exec(self.writer())
            .await?;
        if res.rows_affected == 0 {
            return Ok(None);
        }
        self.get_outbox(id).await
    }

    /// While `owner` sends a split message: `chunks_sent` pieces are out, the first one being
    /// `platform_message_id`. The row stays `sending`.
    pub async fn outbox_progress(
        &self,
        id: &str,
        owner: InstanceId,
        chunks_sent: i32,
        platform_message_id: Option<&str>,
    ) -> Result<()> {
        self.outbox_change(id, OutboxStatus::Sending, Some(owner), |q| {
            q.col_expr(outbox::Column::ChunksSent, Expr::value(chunks_sent))
                .col_expr(
                    outbox::Column::PlatformMessageId,
                    Expr::value(platform_message_id.map(str::to_owned)),
                )
        })
        .await
    }

    /// `sending → sent`: every piece is out.
    pub async fn outbox_sent(
        &self,
        id: &str,
        owner: InstanceId,
        chunks_sent: i32,
        platform_message_id: Option<&str>,
    ) -> Result<()> {
        let now = now_ms();
        self.outbox_change(id, OutboxStatus::Sending, Some(owner), |q| {
            q.col_expr(
                outbox::Column::Status,
                Expr::value(OutboxStatus::Sent.as_str()),
            )
            .col_expr(outbox::Column::ChunksSent, Expr::value(chunks_sent))
            .col_expr(
                outbox::Column::PlatformMessageId,
                Expr::value(platform_message_id.map(str::to_owned)),
            )
            .col_expr(outbox::Column::SentAt, Expr::value(now))
            .col_expr(
                outbox::Column::LastError,
                Expr::value(Option::<String>::None),
            )
        })
        .await
    }

    /// `sending → pending`, to be tried again at `next_attempt_at`: the platform did not take
    /// the message (it could not be reached, it asked to wait, it failed).
    pub async fn outbox_retry(
        &self,
        id: &str,
        owner: InstanceId,
        next_attempt_at: i64,
        error: &str,
    ) -> Result<()> {
        self.outbox_change(id, OutboxStatus::Sending, Some(owner), |q| {
            q.col_expr(
                outbox::Column::Status,
                Expr::value(OutboxStatus::Pending.as_str()),
            )
            .col_expr(outbox::Column::NextAttemptAt, Expr::value(next_attempt_at))
            .col_expr(outbox::Column::LastError, Expr::value(error.to_owned()))
        })
        .await
    }

    /// `sending → failed` (the platform refused it for good) or `sending → unknown` (it may
    /// have arrived: a timeout after the request was sent).
    pub async fn outbox_settle(
        &self,
        id: &str,
        owner: InstanceId,
        to: OutboxStatus,
        error: &str,
    ) -> Result<()> {
        if !matches!(to, OutboxStatus::Failed | OutboxStatus::Unknown) {
            return Err(StoreError::WrongState(format!(
                "outbox {id}: settle to {} (only failed or unknown)",
                to.as_str()
            )));
        }
        self.outbox_change(id, OutboxStatus::Sending, Some(owner), |q| {
            q.col_expr(outbox::Column::Status, Expr::value(to.as_str()))
                .col_expr(outbox::Column::LastError, Expr::value(error.to_owned()))
        })
        .await
    }

    /// Every row in `sending`, for the judge of dead senders.
    pub async fn sending_outbox(&self) -> Result<Vec<Outbox>> {
        outbox::Entity::find()
            .filter(outbox::Column::Status.eq(OutboxStatus::Sending.as_str()))
            .order_by_asc(outbox::Column::CreatedAt)
            .all(self.reader())
            .await?
            .into_iter()
            .map(convert::outbox)
            .collect()
    }

    /// A row left `sending` by `owner_instance`, which is gone: `unknown` (it may have reached
    /// the chat), or back to `pending` when the platform's `resend_unknown` says to send such
    /// rows again. `false` when the row had changed already.
    pub async fn orphan_outbox(
        &self,
        id: &str,
        owner_instance: &str,
        resend: bool,
        note: &str,
    ) -> Result<bool> {
        let to = if resend {
            OutboxStatus::Pending
        } else {
            OutboxStatus::Unknown
        };
        let res = outbox::Entity::update_many()
            .col_expr(outbox::Column::Status, Expr::value(to.as_str()))
            .col_expr(outbox::Column::LastError, Expr::value(note.to_owned()))
            .col_expr(outbox::Column::NextAttemptAt, Expr::value(now_ms()))
            .col_expr(outbox::Column::UpdatedAt, Expr::value(now_ms()))
            .filter(outbox::Column::Id.eq(id))
            .filter(outbox::Column::Status.eq(OutboxStatus::Sending.as_str()))
            .filter(outbox::Column::OwnerInstance.eq(owner_instance))
            .exec(self.writer())
            .await?;
        Ok(res.rows_affected == 1)
    }

    /// A person asks to send an `unknown` (or `failed`) row again: back to `pending`, due now.
    /// `WrongState` for any other status.
    pub async fn resend_outbox(&self, id: &str) -> Result<Outbox> {
        let now = now_ms();
        let res = outbox::Entity::update_many()
            .col_expr(
                outbox::Column::Status,
                Expr::value(OutboxStatus::Pending.as_str()),
            )
            .col_expr(outbox::Column::NextAttemptAt, Expr::value(now))
            .col_expr(outbox::Column::UpdatedAt, Expr::value(now))
            .filter(outbox::Column::Id.eq(id))
            .filter(outbox::Column::Status.is_in([
                OutboxStatus::Unknown.as_str(),
                OutboxStatus::Failed.as_str(),
            ]))
            .exec(self.writer())
            .await?;
        let row = self
            .get_outbox(id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("outbox {id}")))?;
        if res.rows_affected == 0 {
            return Err(StoreError::WrongState(format!(
                "outbox {id} is {}",
                row.status.as_str()
            )));
        }
        Ok(row)
    }

    /// A streamed draft's message (SPEC R11.1), recorded once it is in the chat: a row of kind
    /// `draft`, already `sent`, holding its platform message id so the final reply edits it.
    /// `false` when the key was recorded before (the first row stands).
    pub async fn record_draft(&self, row: &NewOutbox, platform_message_id: &str) -> Result<bool> {
        let now = now_ms();
        let inserted = outbox::Entity::insert(outbox::ActiveModel {
            status: Set(OutboxStatus::Sent.as_str().to_owned()),
            attempts: Set(1),
            platform_message_id: Set(Some(platform_message_id.to_owned())),
            sent_at: Set(Some(now)),
            chunks_sent: Set(1),
            ..new_row(row, now)
        })
        .on_conflict(
            OnConflict::column(outbox::Column::IdempotencyKey)
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(self.writer())
        .await?;
        Ok(inserted == 1)
    }

    /// One compare-and-set of row `id` from `from` (and, when given, of `owner`), bumping
    /// `updated_at`; `WrongState` when it does not hold any more.
    async fn outbox_change(
        &self,
        id: &str,
        from: OutboxStatus,
        owner: Option<InstanceId>,
        set: impl FnOnce(sea_orm::UpdateMany<outbox::Entity>) -> sea_orm::UpdateMany<outbox::Entity>,
    ) -> Result<()> {
        let mut q = set(outbox::Entity::update_many())
            .col_expr(outbox::Column::UpdatedAt, Expr::value(now_ms()))
            .filter(outbox::Column::Id.eq(id))
            .filter(outbox::Column::Status.eq(from.as_str()));
        if let Some(o) = owner {
            q = q.filter(outbox::Column::OwnerInstance.eq(o.to_string()));
        }
        let res = q.exec(self.writer()).await?;
        if res.rows_affected == 1 {
            Ok(())
        } else {
            Err(StoreError::WrongState(format!(
                "outbox {id} is no longer {} for this sender",
                from.as_str()
            )))
        }
    }

    /// How many rows are in each status (for `/metrics`).
    pub async fn count_outbox(&self) -> Result<BTreeMap<OutboxStatus, u64>> {
        let mut counts = BTreeMap::new();
        for status in [
            OutboxStatus::Pending,
            OutboxStatus::Sending,
            OutboxStatus::Sent,
            OutboxStatus::Failed,
            OutboxStatus::Unknown,
        ] {
            let n = outbox::Entity::find()
                .filter(outbox::Column::Status.eq(status.as_str()))
                .count(self.reader())
                .await?;
            counts.insert(status, n);
        }
        Ok(counts)
    }
}

/// Inserts `row` unless its idempotency key exists; `true` when it was inserted.
pub(crate) async fn enqueue_in<C: ConnectionTrait>(db: &C, row: &NewOutbox) -> Result<bool> {
    let inserted = outbox::Entity::insert(new_row(row, now_ms()))
        .on_conflict(
            OnConflict::column(outbox::Column::IdempotencyKey)
                .do_nothing()
                .to_owned(),
        )
        .exec_without_returning(db)
        .await?;
    Ok(inserted == 1)
}

/// How many open rows `due_outbox` reads at most; chats beyond wait for the next round.
const OPEN_ROWS_SCANNED: u64 = 2000;

/// A new `pending` row, due now.
fn new_row(row: &NewOutbox, now: i64) -> outbox::ActiveModel {
    outbox::ActiveModel {
        // v7: time-ordered, so a chat's rows sort in the order they were written.
        id: Set(uuid::Uuid::now_v7().to_string()),
        platform: Set(row.platform.clone()),
        chat_key: Set(row.chat_key.clone()),
        session_id: Set(row.session_id.map(|s| s.to_string())),
        idempotency_key: Set(row.idempotency_key.clone()),
        kind: Set(row.kind.clone()),
        payload: Set(row.payload.to_string()),
        status: Set(OutboxStatus::Pending.as_str().to_owned()),
        attempts: Set(0),
        platform_message_id: Set(None),
        created_at: Set(now),
        next_attempt_at: Set(now),
        sent_at: Set(None),
        turn_id: Set(row.turn_id.map(|t| t.to_string())),
        owner_instance: Set(None),
        last_error: Set(None),
        updated_at: Set(now),
        chunks_sent: Set(0),
        owner_pid: Set(None),
        owner_host: Set(None),
    }
}

/// A message for `session`'s chat, if the session (or its lineage root) belongs to one:
/// written in the caller's transaction. Sessions of the API doors have no chat; for them
/// this writes nothing and answers `false`.
pub(crate) async fn to_session_chat<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
    turn: Option<TurnId>,
    idempotency_key: String,
    kind: &str,
    payload: serde_json::Value,
) -> Result<bool> {
    let Some((platform, chat_key)) = session_chat(db, session).await? else {
        return Ok(false);
    };
    enqueue_in(
        db,
        &NewOutbox {
            platform,
            chat_key,
            session_id: Some(session),
            turn_id: turn,
            idempotency_key,
            kind: kind.to_owned(),
            payload,
        },
    )
    .await
}

/// The platform and chat key of `session`'s lineage root, when it has a chat.
async fn session_chat<C: ConnectionTrait>(
    db: &C,
    session: SessionId,
) -> Result<Option<(String, String)>> {
    let Some(row) = session::Entity::find_by_id(session.to_string())
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let row = match &row.root_id {
        Some(root) => session::Entity::find_by_id(root.clone()).one(db).await?,
        None => Some(row),
    };
    Ok(row.and_then(|r| r.chat_key.map(|k| (r.platform, k))))
}
