//! Runs: traces in the store. Imported traces ([`Store::put_trace`]) and traces assembled from
//! OTLP spans share one table; a list with filters and keyset pagination ([`Store::list_runs`])
//! and one run with its trace ([`Store::run`]).

use std::collections::BTreeSet;

use maslens_trace::Trace;
use sqlx::any::AnyRow;
use sqlx::AssertSqlSafe;

use crate::search::{self, index_run, Query};
use crate::{big, col, json_col, now_ns, q, Backend, Result, Store};

/// One run as lists show it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunSummary {
    pub id: String,
    /// `otlp` or `import`.
    pub source: String,
    pub system: Option<String>,
    pub task: Option<String>,
    pub outcome: Option<String>,
    pub n_steps: i64,
    pub n_spans: i64,
    /// Agent names, space separated.
    pub agents: Option<String>,
    pub has_root: bool,
    /// Earliest span start / latest span end (ns since the epoch), for OTLP runs.
    pub first_ns: Option<i64>,
    pub last_ns: Option<i64>,
    /// When the store last received something for this run.
    pub received_ns: i64,
    /// `open` (spans may still arrive), `complete`, or `failed` (could not be assembled or
    /// diagnosed; [`RunSummary::error`] says why; new spans reopen it).
    pub state: String,
    /// Why the run failed (state `failed`).
    pub error: Option<String>,
    pub located_agent: Option<String>,
    pub located_step: Option<i64>,
    pub risk: Option<f64>,
    /// SHA-256 of the stored trace ([`crate::trace_hash`]); none until first assembled.
    pub trace_hash: Option<String>,
    /// What maslens could not understand about the run (from its trace's metadata); a run with
    /// a blocking one ([`maslens_trace::RunWarning::blocks_diagnosis`]) gets no diagnosis.
    #[serde(default)]
    pub warnings: Vec<maslens_trace::RunWarning>,
}

/// One run with its trace (none until first assembled).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRun {
    pub summary: RunSummary,
    pub trace: Option<Trace>,
}

/// Filters for [`Store::list_runs`]; every field narrows, none set lists everything.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunFilter {
    /// `success`, `failure` or `unknown`.
    pub outcome: Option<String>,
    pub system: Option<String>,
    pub source: Option<String>,
    /// `open` or `complete`.
    pub state: Option<String>,
    /// The latest localization names this agent.
    pub located_agent: Option<String>,
    /// An agent that acts in the run.
    pub agent: Option<String>,
    /// Full text: runs with a step whose text (content, tool calls) holds every word of this,
    /// with `"phrases"` and `OR` ([`crate::search::Query`]). Blank: no filter; no letters or
    /// digits at all: no run.
    pub q: Option<String>,
    /// Latest implicit-failure risk at least this.
    pub min_risk: Option<f64>,
    /// Received at or after / before (ns since the epoch).
    pub since_ns: Option<i64>,
    pub until_ns: Option<i64>,
    /// Keyset cursor: runs received before this `(received_ns, id)` (the last row of a page).
    pub before: Option<(i64, String)>,
    /// Page size (default 50, at most 1,000).
    pub limit: Option<i64>,
}

/// A WHERE clause built from filters: each value is bound, numbered `$N` in bind order.
#[derive(Default)]
struct Where {
    clauses: Vec<String>,
    binds: Vec<Bind>,
}

enum Bind {
    Text(String),
    Int(i64),
    Real(f64),
}

impl Where {
    /// Add a value; returns its placeholder.
    fn push(&mut self, b: Bind) -> String {
        self.binds.push(b);
        format!("${}", self.binds.len())
    }
    fn text(&mut self, clause: &str, v: String) {
        let p = self.push(Bind::Text(v));
        self.clauses.push(clause.replace("{}", &p));
    }
    fn int(&mut self, clause: &str, v: i64) {
        let p = self.push(Bind::Int(v));
        self.clauses.push(clause.replace("{}", &p));
    }
    /// ` WHERE a AND b ...`, or nothing.
    fn sql(&self) -> String {
        if self.clauses.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.clauses.join(" AND "))
        }
    }
    /// `sql` with this clause's values bound in order.
    fn bound(self, sql: &str) -> sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments> {
        let mut query = sqlx::query(AssertSqlSafe(sql.to_string()));
        for b in self.binds {
            query = match b {
                Bind::Text(v) => query.bind(v),
                Bind::Int(v) => query.bind(v),
                Bind::Real(v) => query.bind(v),
            };
        }
        query
    }
}

/// A text query matching at most this many steps is checked by looking its runs up (SQLite).
const DRIVE_MAX: i64 = 1_000;
/// ... at most this many: by testing each listed run against the set of matching runs; more:
/// by asking the full-text index about each listed run's steps (a common word matches early).
const MEMBER_MAX: i64 = 50_000;

/// A text query the PostgreSQL planner expects in at most this many steps is checked by
/// collecting its runs through the GIN index; more: run by run along the list's index.
const PG_DRIVE_MAX: i64 = 5_000;

/// How a text filter is checked (SQLite: all four; PostgreSQL: Nothing, Drive, Probe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextPlan {
    /// No step matches.
    Nothing,
    /// Few matches: the matching runs drive the query (looked up by search key, then sorted).
    Drive,
    /// Some: the list walks its index and tests each run against the matching runs' keys.
    Member,
    /// Many: the list walks its index and probes the run's rowid range in the FTS index.
    Probe,
}

#[cfg(test)]
thread_local! {
    /// Tests force a text plan, to cover each one on a small store.
    pub(crate) static FORCE_TEXT_PLAN: std::cell::Cell<Option<TextPlan>> =
        const { std::cell::Cell::new(None) };
}

/// The parts of a list query.
struct ListSql {
    from: String,
    w: Where,
    order: &'static str,
    /// FROM starts at the full-text index: one row per matching step (counts only).
    from_text: bool,
}

/// `runs.`-qualified columns (lists may join `run_agents`, which has `received_ns` too).
fn qualified(columns: &str) -> String {
    columns
        .split(',')
        .map(|c| format!("runs.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

const SUMMARY_COLS: &str =
    "id, source, system, task, outcome, n_steps, n_spans, agents, has_root, \
     first_ns, last_ns, received_ns, state, located_agent, located_step, risk, trace_hash, error, \
     warnings";

fn summary(row: &AnyRow) -> Result<RunSummary> {
    let has_root: i64 = col(row, "has_root")?;
    Ok(RunSummary {
        id: col(row, "id")?,
        source: col(row, "source")?,
        system: col(row, "system")?,
        task: col(row, "task")?,
        outcome: col(row, "outcome")?,
        n_steps: col(row, "n_steps")?,
        n_spans: col(row, "n_spans")?,
        agents: col(row, "agents")?,
        has_root: has_root != 0,
        first_ns: col(row, "first_ns")?,
        last_ns: col(row, "last_ns")?,
        received_ns: col(row, "received_ns")?,
        state: col(row, "state")?,
        located_agent: col(row, "located_agent")?,
        located_step: col(row, "located_step")?,
        risk: col(row, "risk")?,
        trace_hash: col(row, "trace_hash")?,
        error: col(row, "error")?,
        warnings: warnings_col(row)?,
    })
}

/// An imported run's id: not empty, at most [`crate::text::MAX_ID_CHARS`] characters, no NUL
/// (an id is never changed to fit), and not in the namespace of OTLP runs put aside from imports.
fn check_import_id(id: &str) -> Result<()> {
    let why = if id.trim().is_empty() {
        "a run id cannot be empty".to_string()
    } else if id.chars().count() > crate::text::MAX_ID_CHARS {
        format!(
            "run id of {} characters: at most {} (starts {:?})",
            id.chars().count(),
            crate::text::MAX_ID_CHARS,
            id.chars().take(40).collect::<String>()
        )
    } else if id.contains('\0') {
        "a run id cannot hold a NUL character".to_string()
    } else if id.starts_with(crate::ingest::OTLP_PREFIX) {
        format!(
            "run id {id:?}: ids starting with {:?} are kept for runs received over OTLP",
            crate::ingest::OTLP_PREFIX
        )
    } else {
        return Ok(());
    };
    Err(crate::StoreError::Invalid(why))
}

/// The `warnings` column: none when NULL or unreadable (a warning never hides a run).
fn warnings_col(row: &AnyRow) -> Result<Vec<maslens_trace::RunWarning>> {
    let text: Option<String> = col(row, "warnings")?;
    Ok(text
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default())
}

/// A trace's run warnings as the `warnings` column stores them (NULL when none).
pub(crate) fn warnings_text(trace: &Trace) -> Option<String> {
    let warnings = trace.run_warnings();
    (!warnings.is_empty())
        .then(|| serde_json::to_string(&warnings).ok())
        .flatten()
}

impl Store {
    /// Store an imported trace (from a file, the CLI, the API) as a complete run, replacing an
    /// earlier import with the same id. A run received over OTLP with that id is left as it is
    /// and the import is refused ([`crate::StoreError::Clash`]), never reported as stored.
    /// Its search rows are rewritten in the same transaction. Returns its content hash.
    pub async fn put_trace(&self, trace: &Trace) -> Result<String> {
        self.check_file()?;
        check_import_id(&trace.id)?;
        let (mut json, mut hash) = crate::trace_json(trace)?;
        // Text PostgreSQL cannot hold (NUL, `\u0000` in the JSON) is replaced, as OTLP ingest
        // does; a trace without one is serialized once.
        let cleaned = match json.contains("\\u0000") {
            true => crate::text::sanitize_trace(trace),
            false => None,
        };
        if let Some(c) = &cleaned {
            (json, hash) = crate::trace_json(c)?;
        }
        let trace = cleaned.as_ref().unwrap_or(trace);
        let agents: BTreeSet<&str> = trace.steps.iter().map(|s| s.agent.as_str()).collect();
        let system = (!trace.source.format.is_empty()).then(|| trace.source.format.clone());
        let now = now_ns();
        let mut tx = self.write_tx().await?;
        let done = sqlx::query(
            "INSERT INTO runs (id, source, system, trace_json, trace_hash, task, outcome, n_steps,
               agents, received_ns, ingest_seq, assembled_seq, state, completed_ns, warnings)
             VALUES ($1, 'import', $2, $3, $4, $5, $6, $7, $8, $9, 0, 0, 'complete', $9, $10)
             ON CONFLICT (id) DO UPDATE SET system = excluded.system,
               trace_json = excluded.trace_json, trace_hash = excluded.trace_hash,
               task = excluded.task, outcome = excluded.outcome, n_steps = excluded.n_steps,
               agents = excluded.agents, received_ns = excluded.received_ns,
               warnings = excluded.warnings
             WHERE runs.source = 'import'",
        )
        .bind(trace.id.as_str())
        .bind(system)
        .bind(json.as_str())
        .bind(hash.as_str())
        .bind(trace.task.as_str())
        .bind(trace.outcome.as_str())
        .bind(big(trace.steps.len() as u64))
        .bind(agents.into_iter().collect::<Vec<_>>().join(" "))
        .bind(now)
        .bind(warnings_text(trace))
        .execute(&mut *tx)
        .await
        .map_err(q("put trace"))?;
        if done.rows_affected() == 0 {
            return Err(crate::StoreError::Clash(trace.id.clone()));
        }
        index_run(&mut tx, self.backend, &trace.id, Some(trace), now).await?;
        tx.commit().await.map_err(q("commit put trace"))?;
        Ok(hash)
    }

    /// One run with its trace.
    pub async fn run(&self, id: &str) -> Result<Option<StoredRun>> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {SUMMARY_COLS}, trace_json FROM runs WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(q("run"))?;
        let Some(row) = row else { return Ok(None) };
        let json: Option<String> = col(&row, "trace_json")?;
        let trace = match json {
            Some(j) => Some(json_col(&j, || format!("trace of run {id}"))?),
            None => None,
        };
        Ok(Some(StoredRun {
            summary: summary(&row)?,
            trace,
        }))
    }

    /// One run's summary, without loading its trace.
    pub async fn run_summary(&self, id: &str) -> Result<Option<RunSummary>> {
        let row = sqlx::query(AssertSqlSafe(format!(
            "SELECT {SUMMARY_COLS} FROM runs WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(q("run summary"))?;
        row.as_ref().map(summary).transpose()
    }

    /// The traces of every run matching `filter` (all pages, newest first; `filter.limit` is the
    /// page size), one query per page; runs not yet assembled are skipped.
    pub async fn traces(&self, filter: &RunFilter) -> Result<Vec<Trace>> {
        let mut out = Vec::new();
        let mut page = RunFilter {
            limit: Some(filter.limit.unwrap_or(1000)),
            ..filter.clone()
        };
        loop {
            let rows = self
                .select_runs(&page, &format!("{SUMMARY_COLS}, trace_json"))
                .await?;
            let Some(last) = rows.last() else { break };
            page.before = Some((col(last, "received_ns")?, col(last, "id")?));
            for row in &rows {
                let json: Option<String> = col(row, "trace_json")?;
                if let Some(j) = json {
                    let id: String = col(row, "id")?;
                    out.push(json_col(&j, || format!("trace of run {id}"))?);
                }
            }
        }
        Ok(out)
    }

    /// Runs matching `filter`, newest first (by the time the store last received them), one page.
    pub async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>> {
        self.select_runs(filter, SUMMARY_COLS)
            .await?
            .iter()
            .map(summary)
            .collect()
    }

    /// `columns` of one page of runs matching `filter`.
    async fn select_runs(&self, filter: &RunFilter, columns: &str) -> Result<Vec<AnyRow>> {
        let mut l = self.list_sql(filter, true).await?;
        let limit =
            l.w.push(Bind::Int(filter.limit.unwrap_or(50).clamp(1, 1000)));
        let sql = format!(
            "SELECT {} FROM {}{} ORDER BY {} LIMIT {limit}",
            qualified(columns),
            l.from,
            l.w.sql(),
            l.order
        );
        l.w.bound(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(q("list runs"))
    }

    /// How many runs match `filter` (its cursor and page size aside), counting no further than
    /// `cap`: `(min(count, cap), count > cap)`, for a "10,000+" display without a full count.
    pub async fn count_runs_capped(&self, filter: &RunFilter, cap: i64) -> Result<(i64, bool)> {
        let cap = cap.max(0);
        let mut l = self.list_sql(filter, false).await?;
        let limit = l.w.push(Bind::Int(cap.saturating_add(1)));
        let sql = if l.from_text {
            // One row per matching step, a run's steps together: count distinct runs (SQLite
            // streams this). With no other filter the index's rowids alone name the runs.
            let (from, run) = if l.w.clauses.len() == 1 {
                ("step_fts f", "f.rowid >> 20")
            } else {
                (l.from.as_str(), "runs.search_key")
            };
            format!(
                "SELECT COUNT(*) AS n FROM (SELECT DISTINCT {run} FROM {from}{} LIMIT {limit}) capped",
                l.w.sql()
            )
        } else {
            format!(
                "SELECT COUNT(*) AS n FROM (SELECT 1 AS one FROM {}{} LIMIT {limit}) capped",
                l.from,
                l.w.sql()
            )
        };
        let row =
            l.w.bound(&sql)
                .fetch_one(&self.pool)
                .await
                .map_err(q("count runs"))?;
        let n: i64 = col(&row, "n")?;
        Ok((n.min(cap), n > cap))
    }

    /// The FROM, WHERE and ORDER BY of a list with `filter` (with its keyset cursor when
    /// `cursor`, else for a count). The agent filter walks `run_agents` by (agent, received_ns,
    /// run_id), the others walk a `runs` index by (filter, received_ns, id); a text filter is
    /// checked as [`TextPlan`] says.
    async fn list_sql(&self, filter: &RunFilter, cursor: bool) -> Result<ListSql> {
        let mut w = Where::default();
        let text = filter
            .q
            .as_deref()
            .filter(|t| !search::is_blank(t))
            .map(Query::parse);
        let plan = match (&text, self.backend) {
            (None, _) => None,
            (Some(t), _) if t.is_empty() => Some(TextPlan::Nothing),
            (Some(t), Backend::Sqlite) => Some(self.text_plan(&t.fts5()).await?),
            (Some(t), Backend::Postgres) => Some(self.pg_text_plan(t).await?),
        };
        // A count with a common word reads the full-text index in rowid order (one run's steps
        // are together) instead of probing it once per run.
        let from_text = !cursor && plan == Some(TextPlan::Probe) && self.backend == Backend::Sqlite;
        let mut from = String::from(if from_text {
            "step_fts f CROSS JOIN runs ON runs.search_key = f.rowid >> 20"
        } else {
            "runs"
        });
        // The agent filter walks run_agents in list order, unless a rare text query drives (then
        // each of its few runs is checked for the agent).
        let agent_walk = filter.agent.is_some() && plan != Some(TextPlan::Drive);
        let (time, id, order) = if agent_walk {
            from = if from_text {
                format!("{from} JOIN run_agents a ON a.run_id = runs.id")
            } else {
                "run_agents a JOIN runs ON runs.id = a.run_id".into()
            };
            (
                "a.received_ns",
                "a.run_id",
                "a.received_ns DESC, a.run_id DESC",
            )
        } else {
            (
                "runs.received_ns",
                "runs.id",
                "runs.received_ns DESC, runs.id DESC",
            )
        };
        if let Some(v) = &filter.agent {
            if agent_walk {
                w.text("a.agent = {}", v.clone());
            } else {
                w.text(
                    "EXISTS (SELECT 1 FROM run_agents a WHERE a.run_id = runs.id AND a.agent = {})",
                    v.clone(),
                );
            }
        }
        if let Some(v) = &filter.outcome {
            w.text("runs.outcome = {}", v.clone());
        }
        if let Some(v) = &filter.system {
            w.text("runs.system = {}", v.clone());
        }
        if let Some(v) = &filter.source {
            w.text("runs.source = {}", v.clone());
        }
        if let Some(v) = &filter.state {
            w.text("runs.state = {}", v.clone());
        }
        if let Some(v) = &filter.located_agent {
            w.text("runs.located_agent = {}", v.clone());
        }
        match (&text, plan, self.backend) {
            (None, _, _) | (_, None, _) => {}
            (_, Some(TextPlan::Nothing), _) => w.clauses.push("1 = 0".into()),
            (Some(t), Some(plan), Backend::Postgres) => {
                let tsq = t.pg_tsquery(|v| w.push(Bind::Text(v)));
                w.clauses.push(match (tsq, plan) {
                    (None, _) => "1 = 0".into(),
                    // OFFSET 0 keeps the subquery whole: its rows are found by the GIN index.
                    (Some(tsq), TextPlan::Drive) => {
                        format!("runs.id IN (SELECT run_id FROM step_text WHERE tsv @@ {tsq} OFFSET 0)")
                    }
                    (Some(tsq), _) => format!(
                        "EXISTS (SELECT 1 FROM step_text s WHERE s.run_id = runs.id AND s.tsv @@ {tsq})"
                    ),
                });
            }
            (Some(t), Some(plan), Backend::Sqlite) => {
                let clause = match plan {
                    _ if from_text => "step_fts MATCH {}",
                    TextPlan::Drive => {
                        "runs.search_key IN (SELECT rowid >> 20 FROM step_fts WHERE step_fts MATCH {})"
                    }
                    TextPlan::Member => {
                        "+runs.search_key IN (SELECT rowid >> 20 FROM step_fts WHERE step_fts MATCH {})"
                    }
                    TextPlan::Probe | TextPlan::Nothing => {
                        "EXISTS (SELECT 1 FROM step_fts WHERE step_fts MATCH {}
                           AND rowid BETWEEN runs.search_key << 20
                           AND (runs.search_key << 20) + 1048575)"
                    }
                };
                w.text(clause, t.fts5());
            }
        }
        if let Some(v) = filter.since_ns {
            w.int(&format!("{time} >= {{}}"), v);
        }
        if let Some(v) = filter.until_ns {
            w.int(&format!("{time} < {{}}"), v);
        }
        if let (true, Some((ns, run))) = (cursor, &filter.before) {
            let a = w.push(Bind::Int(*ns));
            let b = w.push(Bind::Text(run.clone()));
            w.clauses.push(format!("({time}, {id}) < ({a}, {b})"));
        }
        if let Some(r) = filter.min_risk {
            let p = w.push(Bind::Real(r));
            w.clauses.push(format!("runs.risk >= {p}"));
        }
        Ok(ListSql {
            from,
            w,
            order,
            from_text,
        })
    }

    /// How to check `plainto_tsquery` text `text` on PostgreSQL, from the planner's estimate of
    /// the matching steps (its statistics on `step_text.tsv`; planning only, nothing is read).
    /// Few: the matching steps drive the query ([`TextPlan::Drive`]); else the list walks its
    /// index and checks each run's steps ([`TextPlan::Probe`]). Unknown: probe.
    async fn pg_text_plan(&self, text: &Query) -> Result<TextPlan> {
        #[cfg(test)]
        if let Some(plan) = FORCE_TEXT_PLAN.with(std::cell::Cell::get) {
            return Ok(if plan == TextPlan::Drive {
                plan
            } else {
                TextPlan::Probe
            });
        }
        let mut texts = Vec::new();
        let Some(tsq) = text.pg_tsquery(|t| {
            texts.push(t);
            format!("${}", texts.len())
        }) else {
            return Ok(TextPlan::Nothing);
        };
        let sql = format!("EXPLAIN SELECT 1 FROM step_text WHERE tsv @@ {tsq}");
        let mut query = sqlx::query_scalar(AssertSqlSafe(sql));
        for t in texts {
            query = query.bind(t);
        }
        let lines: Vec<String> = query
            .fetch_all(&self.pool)
            .await
            .map_err(q("estimate text matches"))?;
        let rows = lines.first().and_then(|l| {
            let at = l.find(" rows=")? + 6;
            let digits: String = l[at..].chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<i64>().ok()
        });
        Ok(match rows {
            Some(n) if n <= PG_DRIVE_MAX => TextPlan::Drive,
            _ => TextPlan::Probe,
        })
    }

    /// How to check FTS5 query `m` on SQLite, from how many steps match it (counted up to
    /// [`MEMBER_MAX`], which reads no more than that many index entries).
    async fn text_plan(&self, m: &str) -> Result<TextPlan> {
        #[cfg(test)]
        if let Some(plan) = FORCE_TEXT_PLAN.with(std::cell::Cell::get) {
            return Ok(plan);
        }
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT 1 FROM step_fts WHERE step_fts MATCH $1 LIMIT $2) hits",
        )
        .bind(m)
        .bind(MEMBER_MAX + 1)
        .fetch_one(&self.pool)
        .await
        .map_err(q("count text matches"))?;
        Ok(match n {
            0 => TextPlan::Nothing,
            n if n <= DRIVE_MAX => TextPlan::Drive,
            n if n <= MEMBER_MAX => TextPlan::Member,
            _ => TextPlan::Probe,
        })
    }

    /// The database's plan for [`Store::list_runs`] with `filter`, one line per plan row
    /// (SQLite `EXPLAIN QUERY PLAN` details, PostgreSQL `EXPLAIN` lines): for benchmarks and for
    /// finding out why a list is slow.
    pub async fn explain_list(&self, filter: &RunFilter) -> Result<Vec<String>> {
        let mut l = self.list_sql(filter, true).await?;
        let limit =
            l.w.push(Bind::Int(filter.limit.unwrap_or(50).clamp(1, 1000)));
        let sql = format!(
            "{} SELECT {} FROM {}{} ORDER BY {} LIMIT {limit}",
            match self.backend {
                Backend::Sqlite => "EXPLAIN QUERY PLAN",
                Backend::Postgres => "EXPLAIN",
            },
            qualified(SUMMARY_COLS),
            l.from,
            l.w.sql(),
            l.order
        );
        let rows =
            l.w.bound(&sql)
                .fetch_all(&self.pool)
                .await
                .map_err(q("explain list"))?;
        rows.iter()
            .map(|r| match self.backend {
                Backend::Sqlite => col(r, "detail"),
                Backend::Postgres => col(r, "QUERY PLAN"),
            })
            .collect()
    }

    /// How many runs the store holds, by source.
    pub async fn count_runs(&self) -> Result<i64> {
        sqlx::query_scalar("SELECT COUNT(*) FROM runs")
            .fetch_one(&self.pool)
            .await
            .map_err(q("count runs"))
    }
}

#[cfg(test)]
mod tests;
