//! Search over runs. Every stored trace's steps are rows of `step_text` under a full-text index
//! (FTS5 on SQLite; on PostgreSQL a GIN index over a stored `to_tsvector('simple', content)`),
//! and its acting agents are rows of `run_agents` (the agent filter). Both are rewritten with the
//! trace, in the transaction that writes `runs.trace_json`; runs stored before these tables
//! existed are indexed when the store opens ([`Store::reindex_search`]).
//!
//! A text query is an OR of groups, each an AND of words and quoted phrases: `flaky test` (both
//! words in one step, the default), `"exact words"` (those words next to each other, in that
//! order), `paris OR london` (either), `flaky "unit test" OR timeout` (both `flaky` and the
//! phrase, or `timeout`). `OR` is an operator only in capitals and only between two words or
//! phrases; anywhere else it is the word "or". The query is parsed here, in Rust, the same way
//! for both backends ([`Query::parse`]); each word is cut into terms, maximal runs of letters and
//! digits ([`terms`]); everything else separates terms. No user input is ever query syntax:
//! `foo"`, `-x`, `a:b`, `NEAR(`, `*` are words or nothing. SQLite gets each term quoted (`"a"
//! "b"`, FTS5's implicit AND; a phrase as one quoted string; groups in parentheses joined by
//! `OR`); PostgreSQL gets the words of a group through `plainto_tsquery('simple', ...)` (an AND;
//! it reads no operators), each phrase through `phraseto_tsquery('simple', ...)`, combined with
//! `&&` and `||`, every text a bound parameter. A query without any letter or digit matches no
//! run on both. At most [`MAX_TERMS`] terms of a query are searched. Both sides lower-case and do
//! not stem, so ordinary words match the same runs. Known differences (tested): SQLite's
//! `unicode61 remove_diacritics 2` folds accents (`cafe` finds `café`), PostgreSQL's `simple`
//! configuration does not; PostgreSQL keeps file names, host names, URLs, e-mail addresses and
//! numbers like `3.14` as one token, so a part of one (`parser` of `parser.rs`) is found on SQLite
//! only (the whole, `parser.rs`, on both).
//!
//! A run matches when one of its steps matches (a group's AND is per step, as the index is).

use std::collections::{BTreeMap, BTreeSet};

use maslens_trace::Trace;
use sqlx::AssertSqlSafe;

use crate::{big, col, q, Backend, Result, Store};

/// The most text kept per step (bytes, cut on a character boundary).
pub const MAX_STEP_TEXT: usize = 64 * 1024;

/// The most terms of a query that are searched; later ones are ignored.
pub const MAX_TERMS: usize = 32;

/// Runs indexed per transaction when the store indexes what it holds.
const BACKFILL_BATCH: i64 = 50;

/// Rows per multi-row INSERT (SQLite allows 32,766 parameters, PostgreSQL 65,535).
const ROWS_PER_INSERT: usize = 500;

/// The flag set once every run stored before the search tables existed has been indexed.
const BACKFILL_FLAG: &str = "search_backfill";

/// A step of a run that matches a text query.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepMatch {
    /// The step's index in its trace (`Step::index`).
    pub step: i64,
    pub agent: Option<String>,
}

/// The values the run list's filters can take, for drop-downs.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Facets {
    /// `runs.system` values (service names, import formats).
    pub systems: Vec<String>,
    /// Agents named by a run's latest localization.
    pub located_agents: Vec<String>,
    /// Agents acting in some run.
    pub agents: Vec<String>,
}

/// The searchable terms of a query: maximal runs of letters and digits, at most [`MAX_TERMS`].
/// Empty when the query has none (then it matches no run).
pub fn terms(query: &str) -> Vec<String> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .take(MAX_TERMS)
        .map(str::to_string)
        .collect()
}

/// A query that filters nothing: empty or only whitespace.
pub(crate) fn is_blank(query: &str) -> bool {
    query.trim().is_empty()
}

/// An FTS5 MATCH expression for `terms`: each term a quoted string (`"` doubled), joined by
/// spaces (AND). Quoted strings are never operators (`OR`, `NEAR`, `-`, `:` , `*`, `^`).
pub(crate) fn fts5_query(terms: &[String]) -> String {
    terms
        .iter()
        .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a query looks for in a step: a word (each of its terms must occur) or a quoted phrase
/// (its terms next to each other, in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Atom {
    /// As typed (NUL characters as spaces): PostgreSQL's parser reads it.
    pub text: String,
    /// Its terms ([`terms`]), within the query's [`MAX_TERMS`].
    pub terms: Vec<String>,
    pub phrase: bool,
}

/// A parsed text query (see the module docs): a step matches when it holds every atom of one
/// group. No group: it matches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    pub groups: Vec<Vec<Atom>>,
}

/// A piece of a query before grouping.
enum Token {
    Word(String),
    Phrase(String),
    Or,
}

/// Words (split on whitespace), phrases (between double quotes; an unclosed one runs to the
/// end) and `OR`s, in order.
fn tokens(query: &str) -> Vec<Token> {
    fn flush(out: &mut Vec<Token>, cur: &mut String, phrase: bool) {
        if cur.is_empty() {
            return;
        }
        let text = std::mem::take(cur);
        out.push(match (phrase, text.as_str()) {
            (false, "OR") => Token::Or,
            (false, _) => Token::Word(text),
            (true, _) => Token::Phrase(text),
        });
    }
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut phrase = false;
    for c in query.chars() {
        match c {
            '"' => {
                flush(&mut out, &mut cur, phrase);
                phrase = !phrase;
            }
            c if !phrase && (c.is_whitespace() || c == '\0') => flush(&mut out, &mut cur, false),
            '\0' => cur.push(' '),
            c => cur.push(c),
        }
    }
    flush(&mut out, &mut cur, phrase);
    out
}

impl Query {
    /// Parse a query: words and `"phrases"` that must all occur in one step, alternatives
    /// separated by `OR`. Never fails; at most [`MAX_TERMS`] terms are kept.
    pub fn parse(query: &str) -> Query {
        let toks = tokens(query);
        let item = |t: Option<&Token>| matches!(t, Some(Token::Word(_) | Token::Phrase(_)));
        let mut groups: Vec<Vec<Atom>> = vec![Vec::new()];
        let mut budget = MAX_TERMS;
        for (i, t) in toks.iter().enumerate() {
            let (text, phrase) = match t {
                Token::Or if i > 0 && item(toks.get(i - 1)) && item(toks.get(i + 1)) => {
                    groups.push(Vec::new());
                    continue;
                }
                Token::Or => ("OR", false),
                Token::Word(w) => (w.as_str(), false),
                Token::Phrase(p) => (p.as_str(), true),
            };
            let mut ts = terms(text);
            if ts.is_empty() {
                continue;
            }
            if budget == 0 {
                break;
            }
            // A cut word is searched by the terms kept (on both backends).
            let text = if ts.len() > budget {
                ts.truncate(budget);
                ts.join(" ")
            } else {
                text.to_string()
            };
            budget -= ts.len();
            if let Some(g) = groups.last_mut() {
                g.push(Atom {
                    text,
                    terms: ts,
                    phrase,
                });
            }
        }
        groups.retain(|g| !g.is_empty());
        Query { groups }
    }

    /// Nothing to search for: the query matches no run.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The words to mark where a query matched: each word and each word of each phrase as
    /// typed, without the `OR` operators, in order.
    pub fn marked_words(&self) -> Vec<&str> {
        self.groups
            .iter()
            .flatten()
            .flat_map(|a| a.text.split_whitespace())
            .collect()
    }

    /// The FTS5 MATCH expression (SQLite): a group's atoms joined by spaces (AND), each term or
    /// phrase a quoted string; several groups in parentheses joined by `OR`.
    pub(crate) fn fts5(&self) -> String {
        let groups: Vec<String> = self
            .groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|a| match a.phrase {
                        true => format!("\"{}\"", a.terms.join(" ").replace('"', "\"\"")),
                        false => fts5_query(&a.terms),
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        match groups.as_slice() {
            [one] => one.clone(),
            _ => groups
                .iter()
                .map(|g| format!("({g})"))
                .collect::<Vec<_>>()
                .join(" OR "),
        }
    }

    /// The tsquery expression (PostgreSQL): per group, `plainto_tsquery` of its words and
    /// `phraseto_tsquery` of each phrase joined by `&&`, groups joined by `||`. `bind` takes each
    /// text and answers its placeholder, so no text is ever SQL. `None` for an empty query.
    pub(crate) fn pg_tsquery(&self, mut bind: impl FnMut(String) -> String) -> Option<String> {
        let groups: Vec<String> = self
            .groups
            .iter()
            .map(|g| {
                let words: Vec<&str> = g
                    .iter()
                    .filter(|a| !a.phrase)
                    .map(|a| a.text.as_str())
                    .collect();
                let mut parts = Vec::new();
                if !words.is_empty() {
                    parts.push(format!(
                        "plainto_tsquery('simple', {})",
                        bind(words.join(" "))
                    ));
                }
                for a in g.iter().filter(|a| a.phrase) {
                    parts.push(format!(
                        "phraseto_tsquery('simple', {})",
                        bind(a.text.clone())
                    ));
                }
                format!("({})", parts.join(" && "))
            })
            .collect();
        (!groups.is_empty()).then(|| format!("({})", groups.join(" || ")))
    }
}

/// One row of `step_text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepRow {
    pub step: i64,
    pub agent: Option<String>,
    pub content: String,
}

/// The `step_text` rows of a trace: per step (by `Step::index`; steps sharing an index share a
/// row) its content, then each tool call's name and arguments on lines of their own; NUL
/// characters become spaces (PostgreSQL text has none); at most [`MAX_STEP_TEXT`] bytes.
pub(crate) fn step_rows(trace: &Trace) -> Vec<StepRow> {
    let mut rows: BTreeMap<i64, StepRow> = BTreeMap::new();
    for s in &trace.steps {
        let step = big(s.index as u64);
        let row = rows.entry(step).or_insert_with(|| StepRow {
            step,
            agent: (!s.agent.is_empty()).then(|| s.agent.clone()),
            content: String::new(),
        });
        append(&mut row.content, &s.content);
        for call in &s.tool_calls {
            append(&mut row.content, &call.name);
            append(&mut row.content, &call.arguments);
        }
    }
    rows.into_values()
        .map(|mut r| {
            if r.content.contains('\0') {
                r.content = r.content.replace('\0', " ");
            }
            r
        })
        .collect()
}

/// Append `part` on a line of its own, keeping `buf` within [`MAX_STEP_TEXT`] bytes (so a huge
/// step costs no more than that).
fn append(buf: &mut String, part: &str) {
    if part.is_empty() || buf.len() >= MAX_STEP_TEXT {
        return;
    }
    if !buf.is_empty() {
        buf.push('\n');
    }
    let room = MAX_STEP_TEXT.saturating_sub(buf.len());
    buf.push_str(cut(part, room));
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The acting agents of a trace (non-empty names, each once).
pub(crate) fn run_agents(trace: &Trace) -> BTreeSet<&str> {
    trace
        .steps
        .iter()
        .map(|s| s.agent.as_str())
        .filter(|a| !a.is_empty())
        .collect()
}

/// `INSERT INTO {head} VALUES (...), ...` for `rows` rows of `cols` placeholders each.
fn multi_insert(head: &str, cols: usize, rows: usize) -> String {
    let mut sql = format!("INSERT INTO {head} VALUES ");
    for r in 0..rows {
        if r > 0 {
            sql.push(',');
        }
        sql.push('(');
        for c in 0..cols {
            if c > 0 {
                sql.push(',');
            }
            sql.push_str(&format!("${}", r * cols + c + 1));
        }
        sql.push(')');
    }
    sql
}

/// Rows of one run in `step_text` on SQLite: `id = search_key << STEP_BITS | position`.
pub(crate) const STEP_BITS: u32 = 20;

/// Rewrite a run's `step_text` and `run_agents` rows for `trace` (none: remove them), inside the
/// transaction that writes the run (its `runs` row must exist). `received_ns` is the run's
/// `runs.received_ns`. On SQLite a step past the 2^20th of a run is not indexed.
pub(crate) async fn index_run(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    backend: Backend,
    run_id: &str,
    trace: Option<&Trace>,
    received_ns: i64,
) -> Result<()> {
    sqlx::query("DELETE FROM step_text WHERE run_id = $1")
        .bind(run_id)
        .execute(&mut **tx)
        .await
        .map_err(q("clear step text"))?;
    sqlx::query("DELETE FROM run_agents WHERE run_id = $1")
        .bind(run_id)
        .execute(&mut **tx)
        .await
        .map_err(q("clear run agents"))?;
    let Some(trace) = trace else { return Ok(()) };
    let mut rows = step_rows(trace);
    match backend {
        Backend::Sqlite => {
            let Some(key) = search_key(tx, run_id).await? else {
                return Ok(());
            };
            rows.truncate(1 << STEP_BITS);
            for (n, chunk) in rows.chunks(ROWS_PER_INSERT).enumerate() {
                let sql = multi_insert(
                    "step_text (id, run_id, step, agent, content)",
                    5,
                    chunk.len(),
                );
                let mut query = sqlx::query(AssertSqlSafe(sql));
                for (i, r) in chunk.iter().enumerate() {
                    let position = big((n * ROWS_PER_INSERT + i) as u64);
                    query = query
                        .bind((key << STEP_BITS) | position)
                        .bind(run_id)
                        .bind(r.step)
                        .bind(r.agent.clone())
                        .bind(r.content.as_str());
                }
                query
                    .execute(&mut **tx)
                    .await
                    .map_err(q("insert step text"))?;
            }
        }
        Backend::Postgres => {
            for chunk in rows.chunks(ROWS_PER_INSERT) {
                let sql = multi_insert("step_text (run_id, step, agent, content)", 4, chunk.len());
                let mut query = sqlx::query(AssertSqlSafe(sql));
                for r in chunk {
                    query = query
                        .bind(run_id)
                        .bind(r.step)
                        .bind(r.agent.clone())
                        .bind(r.content.as_str());
                }
                query
                    .execute(&mut **tx)
                    .await
                    .map_err(q("insert step text"))?;
            }
        }
    }
    // Index entries cut to a length an index can hold (the trace keeps whole names).
    let agents: BTreeSet<&str> = run_agents(trace)
        .into_iter()
        .map(crate::text::indexed_name)
        .collect();
    let agents: Vec<&str> = agents.into_iter().collect();
    for chunk in agents.chunks(ROWS_PER_INSERT) {
        let sql = multi_insert("run_agents (run_id, agent, received_ns)", 3, chunk.len());
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for a in chunk {
            query = query.bind(run_id).bind(*a).bind(received_ns);
        }
        query
            .execute(&mut **tx)
            .await
            .map_err(q("insert run agents"))?;
    }
    Ok(())
}

/// The run's search key (SQLite), assigned on first use: one more than the largest. None when
/// the run is not in the store.
async fn search_key(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    run_id: &str,
) -> Result<Option<i64>> {
    let key: Option<Option<i64>> = sqlx::query_scalar("SELECT search_key FROM runs WHERE id = $1")
        .bind(run_id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(q("search key"))?;
    match key {
        None => Ok(None),
        Some(Some(k)) => Ok(Some(k)),
        Some(None) => {
            // Under the write lock (BEGIN IMMEDIATE): no other writer can take the same key.
            let k: i64 = sqlx::query_scalar(
                "UPDATE runs SET search_key = (SELECT COALESCE(MAX(search_key), 0) + 1 FROM runs)
                 WHERE id = $1 RETURNING search_key",
            )
            .bind(run_id)
            .fetch_one(&mut **tx)
            .await
            .map_err(q("new search key"))?;
            Ok(Some(k))
        }
    }
}

/// Keep `run_agents.received_ns` equal to the run's `received_ns` after a write that moved it.
pub(crate) async fn touch_run_agents(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    run_id: &str,
    received_ns: i64,
) -> Result<()> {
    sqlx::query("UPDATE run_agents SET received_ns = $1 WHERE run_id = $2")
        .bind(received_ns)
        .bind(run_id)
        .execute(&mut **tx)
        .await
        .map_err(q("run agents time"))?;
    Ok(())
}

impl Store {
    /// Index the runs stored before the search tables existed, once per database (a flag in
    /// `store_flags` records it). Called by [`Store::open`].
    pub(crate) async fn backfill_search(&self) -> Result<()> {
        let done: Option<i64> = sqlx::query_scalar("SELECT value FROM store_flags WHERE name = $1")
            .bind(BACKFILL_FLAG)
            .fetch_optional(&self.pool)
            .await
            .map_err(q("store flag"))?;
        if done.is_some() {
            return Ok(());
        }
        let n = self.reindex_search().await?;
        if n > 0 {
            tracing::info!(runs = n, "indexed the stored runs for search");
        }
        sqlx::query(
            "INSERT INTO store_flags (name, value) VALUES ($1, 1) ON CONFLICT (name) DO NOTHING",
        )
        .bind(BACKFILL_FLAG)
        .execute(&self.pool)
        .await
        .map_err(q("set store flag"))?;
        Ok(())
    }

    /// Build the search rows (`step_text`, `run_agents`) of every run that has a trace but no
    /// such rows, in batches of one transaction each; safe to repeat and to run beside writers.
    /// Returns how many runs it indexed. A run whose stored trace cannot be read is skipped with
    /// a warning.
    pub async fn reindex_search(&self) -> Result<u64> {
        let lock = match self.backend {
            Backend::Postgres => " FOR UPDATE",
            Backend::Sqlite => "",
        };
        let sql = format!(
            "SELECT id, trace_json, received_ns FROM runs r
             WHERE id > $1 AND trace_hash IS NOT NULL AND trace_json IS NOT NULL
               AND (NOT EXISTS (SELECT 1 FROM step_text s WHERE s.run_id = r.id)
                    OR NOT EXISTS (SELECT 1 FROM run_agents a WHERE a.run_id = r.id))
             ORDER BY id LIMIT {BACKFILL_BATCH}{lock}"
        );
        let mut after = String::new();
        let mut n = 0u64;
        loop {
            let mut tx = self.write_tx().await?;
            let rows = sqlx::query(AssertSqlSafe(sql.as_str()))
                .bind(after.as_str())
                .fetch_all(&mut *tx)
                .await
                .map_err(q("runs to index"))?;
            let Some(last) = rows.last() else {
                tx.commit().await.map_err(q("commit index"))?;
                break;
            };
            if after.is_empty() {
                tracing::info!("indexing the stored runs for search (once, after an upgrade)");
            }
            after = col(last, "id")?;
            for row in &rows {
                let id: String = col(row, "id")?;
                let json: String = col(row, "trace_json")?;
                let received_ns: i64 = col(row, "received_ns")?;
                match serde_json::from_str::<Trace>(&json) {
                    Ok(trace) => {
                        index_run(&mut tx, self.backend, &id, Some(&trace), received_ns).await?;
                        n += 1;
                    }
                    Err(e) => {
                        tracing::warn!(run = %id, error = %e, "stored trace unreadable; not indexed")
                    }
                }
            }
            tx.commit().await.map_err(q("commit index"))?;
        }
        Ok(n)
    }

    /// The steps of run `run_id` whose text matches `query` ([`Query::parse`]; see the module
    /// docs), in step order, at most `limit`. A blank query or one without letters or digits
    /// matches nothing.
    pub async fn step_matches(
        &self,
        run_id: &str,
        query: &str,
        limit: i64,
    ) -> Result<Vec<StepMatch>> {
        let parsed = Query::parse(query);
        let mut texts = Vec::new();
        let sql = match self.backend {
            // The run's steps are one rowid range of the full-text index: one probe.
            Backend::Sqlite if !parsed.is_empty() => {
                texts.push(parsed.fts5());
                "SELECT s.step, s.agent FROM step_fts f CROSS JOIN step_text s
                 WHERE step_fts MATCH $3
                   AND f.rowid BETWEEN (SELECT search_key << 20 FROM runs WHERE id = $1)
                                   AND (SELECT (search_key << 20) + 1048575 FROM runs WHERE id = $1)
                   AND s.id = f.rowid
                 ORDER BY s.step LIMIT $2"
                    .to_string()
            }
            Backend::Postgres => {
                let Some(tsq) = parsed.pg_tsquery(|t| {
                    texts.push(t);
                    format!("${}", texts.len() + 2)
                }) else {
                    return Ok(Vec::new());
                };
                format!(
                    "SELECT step, agent FROM step_text WHERE run_id = $1 AND tsv @@ {tsq}
                     ORDER BY step LIMIT $2"
                )
            }
            Backend::Sqlite => return Ok(Vec::new()),
        };
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(run_id)
            .bind(limit.max(0));
        for t in texts {
            query = query.bind(t);
        }
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(q("step matches"))?;
        rows.iter()
            .map(|r| {
                Ok(StepMatch {
                    step: col(r, "step")?,
                    agent: col(r, "agent")?,
                })
            })
            .collect()
    }

    /// The distinct values of the list filters (systems, localized agents, acting agents), sorted.
    /// Each is a walk over the leading column of an index, one seek per value, so it costs the
    /// number of values, not of runs.
    pub async fn facets(&self) -> Result<Facets> {
        Ok(Facets {
            systems: self.distinct("runs", "system").await?,
            located_agents: self.distinct("runs", "located_agent").await?,
            agents: self.distinct("run_agents", "agent").await?,
        })
    }

    /// The non-null values of `table.column` (the leading column of an index), ascending.
    async fn distinct(&self, table: &'static str, column: &'static str) -> Result<Vec<String>> {
        let sql = format!(
            "WITH RECURSIVE v (x) AS (
               SELECT MIN({column}) FROM {table}
               UNION ALL
               SELECT (SELECT MIN({column}) FROM {table} WHERE {column} > v.x) FROM v
               WHERE v.x IS NOT NULL)
             SELECT x FROM v WHERE x IS NOT NULL"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(q("facets"))?;
        rows.iter().map(|r| col(r, "x")).collect()
    }
}

#[cfg(test)]
mod tests;
