//! The session's transcript as its actor last read it (SPEC R5.1 "copy the history"): read
//! whole for the actor's first turn, then only the rows appended since, so a turn's cost does
//! not grow with the length of its session.
//!
//! Rows are append-only except where a compression marks them replaced or a rotation moves
//! the transcript to a new segment; both bump the session's compression epoch in the same
//! commit (and a rotation changes the canonical segment). The kept copy is reused only while
//! both still match the session row the turn just read; otherwise the turn reads the whole
//! transcript again. Another replica's turns append rows or bump the epoch the same way, so a
//! lease that moved away and back is caught up the same way too.
//!
//! The copy holds only rows read back from the store, never rows a turn kept in memory: what
//! the next turn sees is what is durable. It holds only the rows compression has not taken
//! out (they are never sent again), so what an actor keeps is bounded by its live context,
//! not by the length of its session. A fresh turn's own rows (its user row, committed with
//! its claim) are handed to it apart and left out of the copy, so the next turn reads them
//! back with whatever else the turn appended.
use std::sync::{Arc, Mutex};
use turnkey_storage::{Message, Session, SessionId, Store, StoreError, TurnId};

/// One session's kept transcript, shared by its actor's drains (one turn at a time).
#[derive(Clone, Default)]
pub struct TranscriptCache(Arc<Mutex<Option<Kept>>>);

struct Kept {
    canonical: SessionId,
    epoch: i32,
    rows: Arc<Vec<Message>>,
}

/// What `TranscriptCache::load` answers.
pub struct Loaded {
    /// The transcript before the turn's own rows.
    pub history: Arc<Vec<Message>>,
    /// The rows at the end that belong to the turn asked about, oldest first.
    pub own: Vec<Message>,
    pub read: Read,
}

/// How `TranscriptCache::load` came by the rows (for its test and the turn's trace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// Read whole: the first turn, or the epoch or segment changed.
    Whole,
    /// Only the rows after the kept ones.
    Appended(usize),
}

impl TranscriptCache {
    /// The live transcript of `session` (the root row this turn read), oldest first, and
    /// apart from it the rows at its end that belong to `turn` (a fresh turn's user row). The
    /// returned history is shared with the cache: a turn that changes its copy (compression)
    /// copies it first (`Arc::make_mut`).
    pub async fn load(
        &self,
        store: &Store,
        session: &Session,
        turn: Option<TurnId>,
    ) -> Result<Loaded, StoreError> {
        let canonical = session.transcript_id.unwrap_or(session.id);
        let epoch = session.compression_epoch;
        let kept = self
            .lock()
            .take()
            .filter(|k| k.canonical == canonical && k.epoch == epoch);
        let (rows, read) = match kept {
            Some(k) => {
                let mut rows = k.rows;
                let after = rows.last().map_or(i64::MIN, |m| m.idx);
                let new = store.live_transcript_after(canonical, after).await?;
                let n = new.len();
                if n > 0 {
                    Arc::make_mut(&mut rows).extend(new);
                }
                (rows, Read::Appended(n))
            }
            // The whole segment that this session row names: the same row the epoch came
            // from, so the copy is keyed by what was read.
            None => {
                let all = store.live_transcript_after(canonical, i64::MIN).await?;
                (Arc::new(all), Read::Whole)
            }
        };
        let mine = turn.map_or(0, |t| {
            rows.iter()
                .rev()
                .take_while(|m| m.turn_id == Some(t))
                .count()
        });
        let (history, own) = if mine == 0 {
            (rows, Vec::new())
        } else {
            let mut all = Arc::try_unwrap(rows).unwrap_or_else(|shared| (*shared).clone());
            let own = all.split_off(all.len() - mine);
            (Arc::new(all), own)
        };
        *self.lock() = Some(Kept {
            canonical,
            epoch,
            rows: history.clone(),
        });
        Ok(Loaded { history, own, read })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Kept>> {
        // The guarded value is replaced whole, never left half-changed: a poisoned lock
        // still holds a consistent (at worst stale, then re-read) value.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use turnkey_storage::*;

    async fn store() -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/t.db?mode=rwc", dir.path().display());
        let s = Store::connect(&url).await.unwrap();
        s.migrate().await.unwrap();
        (s, dir)
    }

    async fn append(s: &Store, fence: &Fence, text: &str) -> Message {
        let row = NewMessage {
            id: MessageId::new(),
            role: Some(MessageRole::User),
            content: Some(text.into()),
            ..Default::default()
        };
        s.append_message(fence, &row).await.unwrap()
    }

    /// What a turn that reads the session row now gets: the history and how it was read.
    async fn now(cache: &TranscriptCache, s: &Store, sid: SessionId) -> (Arc<Vec<Message>>, Read) {
        let session = s.get_session(sid).await.unwrap().unwrap();
        let loaded = cache.load(s, &session, None).await.unwrap();
        (loaded.history, loaded.read)
    }

    /// What the turn would have read without the kept copy: the rows still in the context.
    async fn matches_store(s: &Store, sid: SessionId, rows: &[Message]) {
        let mut whole = s.transcript(sid).await.unwrap();
        whole.retain(|m| m.compressed_epoch.is_none());
        let ids = |r: &[Message]| {
            r.iter()
                .map(|m| (m.id, m.idx, m.compressed_epoch, m.summary_epoch))
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(rows), ids(&whole));
    }

    #[tokio::test]
    async fn r5_1_a_kept_transcript_reads_only_new_rows_until_a_compression_changes_it() {
        let (s, _dir) = store().await;
        let sid = SessionId::new();
        s.create_session(NewSession {
            id: sid,
            owner: "operator".into(),
            platform: "api".into(),
            chat_key: None,
            title: None,
            model: None,
            system_message: None,
            system_prompt: "sys".into(),
            workspace_snapshot: None,
            seed: Vec::new(),
        })
        .await
        .unwrap();
        let owner = Owner {
            instance: InstanceId::new(),
            pid: 1,
            host: "h".into(),
        };
        let claim = LeaseClaim {
            session: sid,
            owner: owner.clone(),
            platform: "test",
            ttl_ms: 60_000,
        };
        let fence = s
            .try_acquire_lease(claim, std::sync::Arc::new(|_: &Owner| false))
            .await
            .unwrap()
            .unwrap();
        let mut written = Vec::new();
        for i in 0..3 {
            written.push(append(&s, &fence, &format!("m{i}")).await);
        }
        let cache = TranscriptCache::default();
        let session = |s: Store| async move { s.get_session(sid).await.unwrap().unwrap() };

        let (rows, read) = now(&cache, &s, sid).await;
        assert_eq!(read, Read::Whole, "the first turn reads everything");
        matches_store(&s, sid, &rows).await;
        drop(rows);

        for i in 3..5 {
            written.push(append(&s, &fence, &format!("m{i}")).await);
        }
        let (rows, read) = now(&cache, &s, sid).await;
        assert_eq!(read, Read::Appended(2), "only the rows since");
        matches_store(&s, sid, &rows).await;
        assert_eq!(rows.len(), 5);

        // A turn that still holds its copy does not stop the next from extending the kept one.
        let held = rows;
        written.push(append(&s, &fence, "m5").await);
        let (rows, read) = now(&cache, &s, sid).await;
        assert_eq!(read, Read::Appended(1));
        assert_eq!(held.len(), 5, "the held copy is not changed under its turn");
        matches_store(&s, sid, &rows).await;

        // A fresh turn's user row, committed with its claim, comes apart from the history and
        // stays out of the kept copy: the next turn reads it back with the turn's other rows.
        let turn = TurnId::new();
        let user = NewMessage {
            id: MessageId::new(),
            role: Some(MessageRole::User),
            content: Some("u".into()),
            turn_id: Some(turn),
            ..Default::default()
        };
        s.append_message(&fence, &user).await.unwrap();
        let loaded = cache
            .load(&s, &session(s.clone()).await, Some(turn))
            .await
            .unwrap();
        assert_eq!(loaded.read, Read::Appended(1));
        assert_eq!(
            loaded.own.iter().map(|m| m.id).collect::<Vec<_>>(),
            [user.id]
        );
        assert_eq!(
            loaded.history.len(),
            6,
            "the history ends before the turn's row"
        );
        drop(loaded);
        written.push(append(&s, &fence, "reply").await);
        let Loaded {
            history: rows,
            read,
            own,
        } = cache
            .load(&s, &session(s.clone()).await, None)
            .await
            .unwrap();
        assert_eq!(read, Read::Appended(2), "the user row and the reply");
        assert!(own.is_empty());
        matches_store(&s, sid, &rows).await;

        // A compression marks rows in place and bumps the epoch: the whole transcript again.
        let stale = session(s.clone()).await;
        let compressed: Vec<Replaced> = written[1..3]
            .iter()
            .map(|m| Replaced {
                id: m.id,
                idx: m.idx,
                summary: false,
            })
            .collect();
        let done = s
            .commit_compression(
                &fence,
                &Compaction {
                    session_id: sid,
                    turn_id: TurnId::new(),
                    admission_id: AdmissionId::new(),
                    base_epoch: 0,
                    compressed,
                    summary: NewMessage {
                        id: MessageId::new(),
                        role: Some(MessageRole::System),
                        content: Some("summary".into()),
                        summary_after_idx: Some(1),
                        ..Default::default()
                    },
                    event_data: serde_json::json!({}),
                },
            )
            .await
            .unwrap();
        assert_eq!(done.epoch, 1);
        let (rows, read) = now(&cache, &s, sid).await;
        assert_eq!(read, Read::Whole, "a new epoch is read whole");
        matches_store(&s, sid, &rows).await;
        assert_eq!(
            s.transcript(sid).await.unwrap().len() - rows.len(),
            2,
            "the two replaced rows are not kept"
        );
        assert!(rows.iter().any(|m| m.summary_epoch == Some(1)));
        // A session row read before the compression does not match the kept epoch either.
        let read = cache.load(&s, &stale, None).await.unwrap().read;
        assert_eq!(read, Read::Whole);
    }
}
