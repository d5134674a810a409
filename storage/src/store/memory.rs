//! Memory (SPEC R5.2; API.md "Memory and skills"): per principal (`scope`; a platform chat is
//! its own principal) the agent's notes (`memory`) and what it knows about the user
//! (`profile`), each a list of entries bounded in characters. An edit is one transaction: the
//! bound is checked against the entries as they are in it (on PostgreSQL under a lock per
//! scope and target, so two writers cannot both pass it), and the change is recorded with who
//! made it and the text before and after, so a person can see and undo it; a change made from
//! a session (a tool call, a review) is announced there by `memory.updated`, in the same
//! commit. What a write may say (no instructions to the model, no secrets) is checked before it
//! reaches the store.
use super::{insert_event, Result, Store, StoreError, WriteTx};
use crate::entity::{memory_change, memory_entry};
use crate::ids::{now_ms, parse_id, MemoryChangeId, MemoryEntryId, SessionId};
use crate::model::{Event, EventKind, NewEvent};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, Statement,
};
use serde::{Deserialize, Serialize};

/// Which of a principal's two stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryTarget {
    /// The agent's own notes.
    Memory,
    /// What it knows about the user.
    Profile,
}

impl MemoryTarget {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Profile => "profile",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "memory" => Some(Self::Memory),
            "profile" => Some(Self::Profile),
            _ => None,
        }
    }
}

/// Who changed an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangedBy {
    /// The `memory` tool, in a turn.
    Tool,
    /// The post-delivery review (SPEC R10.4).
    Review,
    /// A person, through `/v1/memory`.
    Api,
}

impl ChangedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tool => "tool",
            Self::Review => "review",
            Self::Api => "api",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "tool" => Some(Self::Tool),
            "review" => Some(Self::Review),
            "api" => Some(Self::Api),
            _ => None,
        }
    }
}

/// Who makes an edit, and from which session (none for the API).
#[derive(Clone, Copy, Debug)]
pub struct Author {
    pub by: ChangedBy,
    pub session: Option<SessionId>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryEntry {
    pub id: MemoryEntryId,
    pub target: MemoryTarget,
    pub text: String,
    pub created_at: i64,
    pub updated_at: i64,
}

impl MemoryEntry {
    /// What the entry counts against its store's bound.
    pub fn chars(&self) -> usize {
        self.text.chars().count()
    }
}

/// One recorded change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryChange {
    pub id: MemoryChangeId,
    pub target: MemoryTarget,
    pub entry_id: MemoryEntryId,
    /// `add`, `replace` or `remove`.
    pub action: String,
    pub by: ChangedBy,
    pub session_id: Option<SessionId>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub at: i64,
}

/// An edit of one store. `old_text` picks the one entry that contains it.
#[derive(Clone, Copy, Debug)]
pub enum MemoryEdit<'a> {
    Add {
        text: &'a str,
    },
    Replace {
        old_text: &'a str,
        text: &'a str,
    },
    Remove {
        old_text: &'a str,
    },
    /// By id (the API): an entry of another scope is not found.
    ReplaceId {
        id: MemoryEntryId,
        text: &'a str,
    },
    /// By id (the API): an entry of another scope is not found.
    RemoveId(MemoryEntryId),
}

/// How an edit ended. Only `Done` changed anything.
#[derive(Clone, Debug, PartialEq)]
pub enum MemoryWrite {
    /// `entry` as written (for a removal: as it was); `chars` the store's size after; the
    /// `memory.updated` event when the author's session was given.
    Done {
        entry: MemoryEntry,
        chars: usize,
        event: Option<Box<Event>>,
    },
    /// It would pass the bound: `chars` used of `limit`, and `needed` by this write.
    Full {
        chars: usize,
        limit: usize,
        needed: usize,
    },
    /// No entry contains `old_text` (or has that id).
    NoMatch,
    /// `old_text` is in more than one entry.
    Ambiguous { matches: usize },
}

impl Store {
    /// The entries of one store, oldest first.
    pub async fn memory_entries(
        &self,
        scope: &str,
        target: MemoryTarget,
    ) -> Result<Vec<MemoryEntry>> {
        entries_of(self.reader(), scope, Some(target)).await
    }

    /// Both of `scope`'s stores in one read, oldest first (each entry names its target): what
    /// a new session's prompt shows.
    pub async fn principal_memory(&self, scope: &str) -> Result<Vec<MemoryEntry>> {
        entries_of(self.reader(), scope, None).await
    }

    /// Applies `edit` to `scope`'s `target` store, bounded by `limit` characters, and records
    /// the change. A refused edit (full, no match, ambiguous) writes nothing.
    pub async fn edit_memory(
        &self,
        scope: &str,
        target: MemoryTarget,
        edit: MemoryEdit<'_>,
        limit: usize,
        author: &Author,
    ) -> Result<MemoryWrite> {
        let tx = self.write_tx().await?;
        let written = edit_in(&tx, scope, target, edit, limit, author).await?;
        if matches!(written, MemoryWrite::Done { .. }) {
            tx.commit().await?;
        } else {
            tx.rollback().await?;
        }
        Ok(written)
    }

    /// Changes of `scope`'s stores, newest first, at most `limit`.
    pub async fn memory_changes(&self, scope: &str, limit: u64) -> Result<Vec<MemoryChange>> {
        memory_change::Entity::find()
            .filter(memory_change::Column::Scope.eq(scope))
            .order_by_desc(memory_change::Column::At)
            .order_by_desc(memory_change::Column::Id)
            .limit(limit)
            .all(self.reader())
            .await?
            .into_iter()
            .map(change_of)
            .collect()
    }
}

/// [`Store::edit_memory`] inside `tx`: the caller commits (a refused edit wrote nothing, so
/// the caller may go on with other writes or roll back).
pub(crate) async fn edit_in(
    tx: &WriteTx,
    scope: &str,
    target: MemoryTarget,
    edit: MemoryEdit<'_>,
    limit: usize,
    author: &Author,
) -> Result<MemoryWrite> {
    lock_store(tx, scope, target).await?;
    let entries = entries_of(tx, scope, Some(target)).await?;
    let chars: usize = entries.iter().map(MemoryEntry::chars).sum();
    let now = now_ms();
    let (action, before, after) = match plan(&entries, edit) {
        Err(refused) => return Ok(refused),
        Ok(p) => p,
    };
    let was = before.map_or(0, MemoryEntry::chars);
    let will = after.map_or(0, |t| t.chars().count());
    let size = chars - was + will;
    if will > was && size > limit {
        return Ok(MemoryWrite::Full {
            chars,
            limit,
            needed: will - was,
        });
    }
    let entry = match (before, after) {
        (None, Some(text)) => insert(tx, scope, target, text, now).await?,
        (Some(old), Some(text)) => {
            update(tx, old.id, text, now).await?;
            MemoryEntry {
                text: text.to_owned(),
                updated_at: now,
                ..old.clone()
            }
        }
        (Some(old), None) => {
            memory_entry::Entity::delete_by_id(old.id.to_string())
                .exec(tx)
                .await?;
            old.clone()
        }
        (None, None) => return Err(StoreError::Corrupt("an empty memory edit".into())),
    };
    record(
        tx, scope, target, &entry, action, author, before, after, now,
    )
    .await?;
    let event = match author.session {
        Some(session) => {
            let data = serde_json::json!({
                "target": target.as_str(),
                "action": action,
                "chars": size,
                "limit": limit,
                "by": author.by.as_str(),
            });
            Some(Box::new(announce(tx, session, data).await?))
        }
        None => None,
    };
    Ok(MemoryWrite::Done {
        entry,
        chars: size,
        event,
    })
}

/// `memory.updated` in the session whose tool call or review made the change.
async fn announce(tx: &WriteTx, session: SessionId, data: serde_json::Value) -> Result<Event> {
    let event = NewEvent {
        session_id: session,
        kind: EventKind::MemoryUpdated,
        turn_id: None,
        admission_id: None,
        data,
    };
    insert_event(tx, &event).await
}

/// What an edit does: its action name, the entry it changes (none for an add) and the text
/// after (none for a removal); or why it is refused.
fn plan<'e, 'a>(
    entries: &'e [MemoryEntry],
    edit: MemoryEdit<'a>,
) -> std::result::Result<(&'static str, Option<&'e MemoryEntry>, Option<&'a str>), MemoryWrite> {
    let one = |old_text: &str| {
        let mut hits = entries.iter().filter(|e| e.text.contains(old_text));
        match (hits.next(), hits.count()) {
            (None, _) => Err(MemoryWrite::NoMatch),
            (Some(e), 0) => Ok(e),
            (Some(_), more) => Err(MemoryWrite::Ambiguous { matches: more + 1 }),
        }
    };
    let by_id = |id: MemoryEntryId| {
        entries
            .iter()
            .find(|e| e.id == id)
            .ok_or(MemoryWrite::NoMatch)
    };
    Ok(match edit {
        MemoryEdit::Add { text } => ("add", None, Some(text)),
        MemoryEdit::Replace { old_text, text } => ("replace", Some(one(old_text)?), Some(text)),
        MemoryEdit::Remove { old_text } => ("remove", Some(one(old_text)?), None),
        MemoryEdit::ReplaceId { id, text } => ("replace", Some(by_id(id)?), Some(text)),
        MemoryEdit::RemoveId(id) => ("remove", Some(by_id(id)?), None),
    })
}

/// On PostgreSQL, one writer at a time per store (until the transaction ends): the bound is
/// checked against what is there. SQLite has one writer anyway.
async fn lock_store(tx: &WriteTx, scope: &str, target: MemoryTarget) -> Result<()> {
    if tx.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    let key = format!("memory:{scope}:{}", target.as_str());
    tx.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        [key.into()],
    ))
    .await?;
    Ok(())
}

/// `scope`'s entries of `target`, or of both stores; oldest first.
async fn entries_of<C: ConnectionTrait>(
    db: &C,
    scope: &str,
    target: Option<MemoryTarget>,
) -> Result<Vec<MemoryEntry>> {
    let mut q = memory_entry::Entity::find().filter(memory_entry::Column::Scope.eq(scope));
    if let Some(t) = target {
        q = q.filter(memory_entry::Column::Target.eq(t.as_str()));
    }
    q.order_by_asc(memory_entry::Column::CreatedAt)
        .order_by_asc(memory_entry::Column::Id)
        .all(db)
        .await?
        .into_iter()
        .map(entry_of)
        .collect()
}

async fn insert(
    tx: &WriteTx,
    scope: &str,
    target: MemoryTarget,
    text: &str,
    now: i64,
) -> Result<MemoryEntry> {
    let id = MemoryEntryId::new();
    memory_entry::Entity::insert(memory_entry::ActiveModel {
        id: Set(id.to_string()),
        scope: Set(scope.to_owned()),
        target: Set(target.as_str().to_owned()),
        text: Set(text.to_owned()),
        created_at: Set(now),
        updated_at: Set(now),
    })
    .exec_without_returning(tx)
    .await?;
    Ok(MemoryEntry {
        id,
        target,
        text: text.to_owned(),
        created_at: now,
        updated_at: now,
    })
}

async fn update(tx: &WriteTx, id: MemoryEntryId, text: &str, now: i64) -> Result<()> {
    memory_entry::Entity::update_many()
        .col_expr(memory_entry::Column::Text, Expr::value(text))
        .col_expr(memory_entry::Column::UpdatedAt, Expr::value(now))
        .filter(memory_entry::Column::Id.eq(id.to_string()))
        .exec(tx)
        .await?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn record(
    tx: &WriteTx,
    scope: &str,
    target: MemoryTarget,
    entry: &MemoryEntry,
    action: &str,
    author: &Author,
    before: Option<&MemoryEntry>,
    after: Option<&str>,
    now: i64,
) -> Result<()> {
    memory_change::Entity::insert(memory_change::ActiveModel {
        id: Set(MemoryChangeId::new().to_string()),
        scope: Set(scope.to_owned()),
        target: Set(target.as_str().to_owned()),
        entry_id: Set(entry.id.to_string()),
        action: Set(action.to_owned()),
        changed_by: Set(author.by.as_str().to_owned()),
        session_id: Set(author.session.map(|s| s.to_string())),
        before: Set(before.map(|e| e.text.clone())),
        after: Set(after.map(str::to_owned)),
        at: Set(now),
    })
    .exec_without_returning(tx)
    .await?;
    Ok(())
}

fn target_of(s: &str) -> Result<MemoryTarget> {
    MemoryTarget::parse(s).ok_or_else(|| StoreError::Corrupt(format!("memory target {s:?}")))
}

fn entry_of(m: memory_entry::Model) -> Result<MemoryEntry> {
    Ok(MemoryEntry {
        id: parse_id(&m.id, "memory entry id")?,
        target: target_of(&m.target)?,
        text: m.text,
        created_at: m.created_at,
        updated_at: m.updated_at,
    })
}

fn change_of(m: memory_change::Model) -> Result<MemoryChange> {
    Ok(MemoryChange {
        id: parse_id(&m.id, "memory change id")?,
        target: target_of(&m.target)?,
        entry_id: parse_id(&m.entry_id, "memory entry id")?,
        action: m.action,
        by: ChangedBy::parse(&m.changed_by)
            .ok_or_else(|| StoreError::Corrupt(format!("memory author {:?}", m.changed_by)))?,
        session_id: m
            .session_id
            .as_deref()
            .map(|s| parse_id(s, "session id"))
            .transpose()?,
        before: m.before,
        after: m.after,
        at: m.at,
    })
}
