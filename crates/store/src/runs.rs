//! Runs: traces in the store. Imported traces ([`Store::put_trace`]) and traces assembled from
//! OTLP spans share one table; a list with filters and keyset pagination ([`Store::list_runs`])
//! and one run with its trace ([`Store::run`]).

use std::collections::BTreeSet;

use maslens_trace::Trace;
use sqlx::any::AnyRow;
use sqlx::AssertSqlSafe;

use crate::{big, col, json_col, now_ns, q, Result, Store};

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
    /// `open` (spans may still arrive) or `complete`.
    pub state: String,
    pub located_agent: Option<String>,
    pub located_step: Option<i64>,
    pub risk: Option<f64>,
    /// SHA-256 of the stored trace ([`crate::trace_hash`]); none until first assembled.
    pub trace_hash: Option<String>,
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
}

const SUMMARY_COLS: &str =
    "id, source, system, task, outcome, n_steps, n_spans, agents, has_root, \
     first_ns, last_ns, received_ns, state, located_agent, located_step, risk, trace_hash";

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
    })
}

impl Store {
    /// Store an imported trace (from a file, the CLI, the API) as a complete run, replacing an
    /// earlier import with the same id. Returns its content hash.
    pub async fn put_trace(&self, trace: &Trace) -> Result<String> {
        let (json, hash) = crate::trace_json(trace)?;
        let agents: BTreeSet<&str> = trace.steps.iter().map(|s| s.agent.as_str()).collect();
        let system = (!trace.source.format.is_empty()).then(|| trace.source.format.clone());
        let now = now_ns();
        sqlx::query(
            "INSERT INTO runs (id, source, system, trace_json, trace_hash, task, outcome, n_steps,
               agents, received_ns, ingest_seq, assembled_seq, state, completed_ns)
             VALUES ($1, 'import', $2, $3, $4, $5, $6, $7, $8, $9, 0, 0, 'complete', $9)
             ON CONFLICT (id) DO UPDATE SET system = excluded.system,
               trace_json = excluded.trace_json, trace_hash = excluded.trace_hash,
               task = excluded.task, outcome = excluded.outcome, n_steps = excluded.n_steps,
               agents = excluded.agents, received_ns = excluded.received_ns
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
        .execute(&self.pool)
        .await
        .map_err(q("put trace"))?;
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
        let mut w = Where::default();
        if let Some(v) = &filter.outcome {
            w.text("outcome = {}", v.clone());
        }
        if let Some(v) = &filter.system {
            w.text("system = {}", v.clone());
        }
        if let Some(v) = &filter.source {
            w.text("source = {}", v.clone());
        }
        if let Some(v) = &filter.state {
            w.text("state = {}", v.clone());
        }
        if let Some(v) = &filter.located_agent {
            w.text("located_agent = {}", v.clone());
        }
        if let Some(v) = &filter.agent {
            let name = v.replace(['%', '_'], "");
            w.text("(' ' || agents || ' ') LIKE {}", format!("% {name} %"));
        }
        if let Some(v) = filter.since_ns {
            w.int("received_ns >= {}", v);
        }
        if let Some(v) = filter.until_ns {
            w.int("received_ns < {}", v);
        }
        if let Some((ns, id)) = &filter.before {
            let a = w.push(Bind::Int(*ns));
            let b = w.push(Bind::Int(*ns));
            let c = w.push(Bind::Text(id.clone()));
            w.clauses.push(format!(
                "(received_ns < {a} OR (received_ns = {b} AND id < {c}))"
            ));
        }
        if let Some(r) = filter.min_risk {
            let p = w.push(Bind::Real(r));
            w.clauses.push(format!("risk >= {p}"));
        }
        let limit = w.push(Bind::Int(filter.limit.unwrap_or(50).clamp(1, 1000)));
        let mut sql = format!("SELECT {columns} FROM runs");
        if !w.clauses.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&w.clauses.join(" AND "));
        }
        sql.push_str(&format!(
            " ORDER BY received_ns DESC, id DESC LIMIT {limit}"
        ));
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for b in w.binds {
            query = match b {
                Bind::Text(v) => query.bind(v),
                Bind::Int(v) => query.bind(v),
                Bind::Real(v) => query.bind(v),
            };
        }
        query.fetch_all(&self.pool).await.map_err(q("list runs"))
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
mod tests {
    use super::*;
    use crate::test_support::stores;
    use maslens_trace::{Outcome, TraceBuilder};

    fn trace(id: &str, outcome: Outcome, agents: &[&str]) -> Trace {
        let mut b = TraceBuilder::new(id).task("q").outcome(outcome);
        for a in agents {
            b = b.step(a, "text");
        }
        b.build()
    }

    #[tokio::test]
    async fn put_list_filter_and_page() {
        for (store, _dir) in stores().await {
            for i in 0..7 {
                let outcome = if i % 2 == 0 {
                    Outcome::Failure
                } else {
                    Outcome::Success
                };
                let agents: &[&str] = if i < 3 {
                    &["Planner", "Coder"]
                } else {
                    &["Solo"]
                };
                store
                    .put_trace(&trace(&format!("t{i}"), outcome, agents))
                    .await
                    .expect("put");
            }
            let all = store.list_runs(&RunFilter::default()).await.expect("list");
            assert_eq!(all.len(), 7);
            let failed = store
                .list_runs(&RunFilter {
                    outcome: Some("failure".into()),
                    ..RunFilter::default()
                })
                .await
                .expect("list");
            assert_eq!(failed.len(), 4);
            let coder = store
                .list_runs(&RunFilter {
                    agent: Some("Coder".into()),
                    outcome: Some("failure".into()),
                    ..RunFilter::default()
                })
                .await
                .expect("list");
            let ids: BTreeSet<&str> = coder.iter().map(|r| r.id.as_str()).collect();
            assert_eq!(ids, BTreeSet::from(["t0", "t2"]));
            // Pages of 3 cover everything once, in order.
            let mut seen = Vec::new();
            let mut before = None;
            loop {
                let page = store
                    .list_runs(&RunFilter {
                        limit: Some(3),
                        before: before.clone(),
                        ..RunFilter::default()
                    })
                    .await
                    .expect("page");
                if page.is_empty() {
                    break;
                }
                before = page.last().map(|r| (r.received_ns, r.id.clone()));
                seen.extend(page.into_iter().map(|r| r.id));
            }
            assert_eq!(seen.len(), 7);
            assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 7);
            // `traces` walks every page (here pages of 3) in the same order.
            let traces = store
                .traces(&RunFilter {
                    limit: Some(3),
                    ..RunFilter::default()
                })
                .await
                .expect("traces");
            let ids: Vec<String> = traces.into_iter().map(|t| t.id).collect();
            assert_eq!(ids, seen);
            let back = store.run("t3").await.expect("run").expect("exists");
            assert_eq!(back.trace.expect("trace").steps.len(), 1);
            assert_eq!(back.summary.state, "complete");
            assert!(store.run("nope").await.expect("run").is_none());
        }
    }
}
