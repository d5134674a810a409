//! Session search (`GET /v1/sessions?q=`): lineages whose title holds the text, or any of whose
//! transcript rows holds its words (SQLite FTS5, PostgreSQL `tsvector`, both indexed by the
//! migration `m20261216_000001_search`). The words are the query's runs of letters and digits,
//! each matched as a word prefix and all of them required; nothing of the query reaches the SQL
//! text, only bound values built from those words.
use super::{Result, Store};
use crate::entity::session;
use crate::model::Session;
use sea_orm::sea_query::{Expr, ExprTrait, Func};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, QueryFilter, QuerySelect, Statement,
};

/// At most this many words of a query are used.
const MAX_WORDS: usize = 8;
/// At most this many lineages match through their messages (the list then takes `limit`).
const MAX_HITS: u64 = 1000;

/// The query's words: runs of letters and digits, lower-cased, at most [`MAX_WORDS`].
pub fn words(q: &str) -> Vec<String> {
    q.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(MAX_WORDS)
        .map(str::to_lowercase)
        .collect()
}

impl Store {
    /// The lineages (by root) of `owner` (everyone's for `None`) that `q` finds, newest first,
    /// created before `before` when given, at most `limit`.
    pub async fn search_sessions(
        &self,
        owner: Option<&str>,
        q: &str,
        limit: u64,
        before: Option<i64>,
    ) -> Result<Vec<Session>> {
        let words = words(q);
        let mut ids = self.ids_by_messages(owner, &words).await?;
        ids.extend(self.ids_by_title(owner, q).await?);
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let found = session::Entity::find().filter(session::Column::Id.is_in(ids));
        self.newest_roots(found, limit, before).await
    }

    /// Roots whose title holds `q` (case-insensitively, as typed).
    async fn ids_by_title(&self, owner: Option<&str>, q: &str) -> Result<Vec<String>> {
        let q = q.trim().to_lowercase();
        if q.is_empty() {
            return Ok(Vec::new());
        }
        let escaped = q
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        let mut find = session::Entity::find()
            .select_only()
            .column(session::Column::Id)
            .filter(session::Column::RootId.is_null())
            .filter(
                Expr::expr(Func::lower(Expr::col(session::Column::Title)))
                    .like(sea_orm::sea_query::LikeExpr::new(format!("%{escaped}%")).escape('\\')),
            );
        if let Some(o) = owner {
            find = find.filter(session::Column::Owner.eq(o));
        }
        Ok(find.into_tuple::<String>().all(self.reader()).await?)
    }

    /// Roots of the lineages with a transcript row holding every word (as a word prefix).
    async fn ids_by_messages(&self, owner: Option<&str>, words: &[String]) -> Result<Vec<String>> {
        if words.is_empty() {
            return Ok(Vec::new());
        }
        let backend = self.backend();
        let (sql, query) = match backend {
            DbBackend::Postgres => (
                "SELECT DISTINCT COALESCE(s.root_id, s.id) AS id FROM messages m \
                 JOIN sessions s ON s.id = m.session_id \
                 WHERE to_tsvector('simple', coalesce(m.content, '')) @@ to_tsquery('simple', $1)",
                words
                    .iter()
                    .map(|w| format!("{w}:*"))
                    .collect::<Vec<_>>()
                    .join(" & "),
            ),
            _ => (
                "SELECT DISTINCT COALESCE(s.root_id, s.id) AS id FROM messages_fts f \
                 JOIN messages m ON m.rowid = f.rowid \
                 JOIN sessions s ON s.id = m.session_id \
                 WHERE messages_fts MATCH $1",
                words
                    .iter()
                    .map(|w| format!("\"{w}\"*"))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        };
        let mut sql = sql.to_owned();
        let mut values: Vec<sea_orm::Value> = vec![query.into()];
        if let Some(o) = owner {
            sql.push_str(" AND s.owner = $2");
            values.push(o.into());
        }
        sql.push_str(&format!(" LIMIT {MAX_HITS}"));
        let rows = self
            .reader()
            .query_all_raw(Statement::from_sql_and_values(backend, sql, values))
            .await?;
        rows.iter()
            .map(|r| r.try_get::<String>("", "id").map_err(Into::into))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_runs_of_letters_and_digits_without_operators() {
        assert_eq!(
            words("Grüße, \"quoted\" AND x*y -- 42"),
            ["grüße", "quoted", "and", "x", "y", "42"]
        );
        assert!(words("\"*():^-").is_empty());
    }
}
