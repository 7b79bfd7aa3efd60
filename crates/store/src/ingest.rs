//! Spans in, traces out. [`Store::ingest`] stores a request's spans in one transaction and marks
//! the runs they belong to; [`Store::assemble`] rebuilds a marked run's trace from all its stored
//! spans (so a run that arrives over minutes, out of order or repeated, grows one trace); a run
//! whose root span arrived and that has been quiet for a while, or that has been idle for longer,
//! is complete ([`Store::due_for_completion`], [`Store::mark_complete`]).
//!
//! Several servers may share one PostgreSQL store: a span is stored once whichever server got it
//! (`ON CONFLICT DO NOTHING`), every ingest bumps the run's `ingest_seq`, and a trace is written
//! only over an older assembly (`assembled_seq < seq`), so a slow assembler never overwrites a
//! newer one and a run marked again is assembled again.

use std::collections::{BTreeMap, BTreeSet};

use maslens_otlp::span::SpanRecord;
use maslens_trace::Trace;
use sqlx::{AssertSqlSafe, Row};

use crate::search::index_run;
use crate::{big, col, json_col, now_ns, q, Result, Store};

/// What one ingest did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IngestOutcome {
    /// Spans stored for the first time.
    pub stored: usize,
    /// Spans already in the store (a retried export, a span sent to two servers).
    pub duplicates: usize,
    /// Runs that received new spans (they are assembled again).
    pub runs: Vec<String>,
    /// Spans stored with text the store cannot hold replaced (NUL characters become U+FFFD),
    /// as `TRACE_ID/SPAN_ID`: the exporter is told in the partial-success message.
    pub sanitized: Vec<String>,
}

impl IngestOutcome {
    /// The partial-success warning for the sanitized spans (empty when there were none).
    pub fn sanitized_message(&self) -> String {
        match self.sanitized.as_slice() {
            [] => String::new(),
            ids => format!(
                "{} span(s) stored with NUL characters replaced by U+FFFD: {}{}",
                ids.len(),
                ids.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
                if ids.len() > 3 { ", ..." } else { "" }
            ),
        }
    }
}

/// Rows per multi-row INSERT (8 parameters each; SQLite allows 32,766 parameters).
const CHUNK: usize = 256;

/// The conversation or session id a span carries, if any (GenAI or OpenInference).
fn conversation_of(span: &SpanRecord) -> Option<&str> {
    ["gen_ai.conversation.id", "session.id"]
        .iter()
        .find_map(|k| span.attributes.get(*k).and_then(|v| v.as_str()))
        .filter(|s| !s.is_empty())
}

impl Store {
    /// Store the spans of one OTLP request (already flattened and validated) in one transaction.
    /// Returns after the commit: what it returns is durable.
    /// Text the store cannot hold is replaced span by span ([`crate::text::sanitize_span`]) and
    /// reported in [`IngestOutcome::sanitized`]; the other spans are untouched.
    pub async fn ingest(&self, spans: &[SpanRecord]) -> Result<IngestOutcome> {
        self.check_file()?;
        let (cleaned, sanitized) = sanitized(spans);
        let spans: &[SpanRecord] = cleaned.as_deref().unwrap_or(spans);
        let now = now_ns();
        // One copy per (trace, span) id, grouped by OpenTelemetry trace, in start order.
        let mut by_trace: BTreeMap<&str, BTreeMap<&str, &SpanRecord>> = BTreeMap::new();
        for s in spans {
            by_trace
                .entry(&s.trace_id)
                .or_default()
                .entry(&s.span_id)
                .or_insert(s);
        }
        let mut out = IngestOutcome {
            duplicates: spans.len() - by_trace.values().map(BTreeMap::len).sum::<usize>(),
            sanitized,
            ..IngestOutcome::default()
        };
        let mut touched: BTreeMap<String, bool> = BTreeMap::new(); // run -> a root span arrived
        let mut tx = self.write_tx().await?;
        for (otel_trace, spans) in &by_trace {
            let mut ordered: Vec<&SpanRecord> = spans.values().copied().collect();
            ordered.sort_by_key(|s| (s.start_ns, s.span_id.as_str()));
            let conversation = ordered.iter().find_map(|s| conversation_of(s));
            let run = resolve_run(&mut tx, otel_trace, conversation, &mut touched).await?;
            let mut new = 0usize;
            for chunk in ordered.chunks(CHUNK) {
                new += insert_spans(&mut tx, chunk, now).await?;
            }
            out.stored += new;
            out.duplicates += ordered.len() - new;
            if new > 0 {
                let root = ordered.iter().any(|s| s.parent_span_id.is_none());
                let entry = touched.entry(run).or_insert(false);
                *entry |= root;
            }
        }
        for (run, root) in &touched {
            sqlx::query(
                "INSERT INTO runs (id, source, received_ns, ingest_seq, has_root, state)
                 VALUES ($1, 'otlp', $2, 1, $3, 'open')
                 ON CONFLICT (id) DO UPDATE SET
                   ingest_seq = runs.ingest_seq + 1,
                   received_ns = excluded.received_ns,
                   has_root = CASE WHEN excluded.has_root > runs.has_root
                                   THEN excluded.has_root ELSE runs.has_root END,
                   state = 'open', error = NULL
                 WHERE runs.source = 'otlp'",
            )
            .bind(run.as_str())
            .bind(now)
            .bind(i64::from(*root))
            .execute(&mut *tx)
            .await
            .map_err(q("mark run"))?;
            crate::search::touch_run_agents(&mut tx, run, now).await?;
        }
        tx.commit().await.map_err(q("commit ingest"))?;
        out.runs = touched.into_keys().collect();
        Ok(out)
    }

    /// Runs whose stored trace is older than their spans, oldest ingest first: `(id, ingest_seq)`.
    pub async fn pending_assembly(&self, limit: i64) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT id, ingest_seq FROM runs WHERE ingest_seq > assembled_seq
             ORDER BY received_ns LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(q("pending assembly"))?;
        rows.iter()
            .map(|r| Ok((col(r, "id")?, col(r, "ingest_seq")?)))
            .collect()
    }

    /// Every stored span of a run, in start order.
    pub async fn run_spans(&self, run: &str) -> Result<Vec<SpanRecord>> {
        let rows = sqlx::query(
            "SELECT s.otel_trace_id, s.span_id, s.record FROM spans s
             JOIN otel_traces t ON t.otel_trace_id = s.otel_trace_id
             WHERE t.run_id = $1 ORDER BY s.start_ns, s.span_id",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await
        .map_err(q("run spans"))?;
        rows.iter()
            .map(|r| {
                let record: String = col(r, "record")?;
                json_col(&record, || {
                    let t: String = r.try_get("otel_trace_id").unwrap_or_default();
                    let s: String = r.try_get("span_id").unwrap_or_default();
                    format!("span {t}/{s}")
                })
            })
            .collect()
    }

    /// Assemble a run's trace from its stored spans and store it, unless a newer assembly is
    /// already stored. A run left without spans (its trace joined a conversation) is removed.
    /// Returns the trace when this call stored it.
    pub async fn assemble(&self, run: &str) -> Result<Option<Trace>> {
        let seq: Option<i64> = sqlx::query_scalar("SELECT ingest_seq FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(&self.pool)
            .await
            .map_err(q("run seq"))?;
        let Some(seq) = seq else { return Ok(None) };
        let spans = self.run_spans(run).await?;
        if spans.is_empty() {
            let mut tx = self.write_tx().await?;
            let gone = sqlx::query(
                "DELETE FROM runs WHERE id = $1 AND source = 'otlp' AND ingest_seq = $2
                 AND NOT EXISTS (SELECT 1 FROM otel_traces WHERE run_id = $1)",
            )
            .bind(run)
            .bind(seq)
            .execute(&mut *tx)
            .await
            .map_err(q("remove empty run"))?;
            if gone.rows_affected() > 0 {
                index_run(&mut tx, self.backend, run, None, 0).await?;
            }
            tx.commit().await.map_err(q("commit remove empty run"))?;
            return Ok(None);
        }
        let refs: Vec<&SpanRecord> = spans.iter().collect();
        let trace = maslens_otlp::assemble::assemble(run, &refs);
        let (json, hash) = crate::trace_json(&trace)?;
        let first = spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
        let last = spans.iter().map(|s| s.end_ns).max().unwrap_or(0);
        let system = spans.iter().find_map(|s| s.service.clone());
        let agents: BTreeSet<&str> = trace.steps.iter().map(|s| s.agent.as_str()).collect();
        let mut tx = self.write_tx().await?;
        // The trace and its search rows change together; `received_ns` (read under the write)
        // keeps `run_agents` in step with the run.
        let received_ns: Option<i64> = sqlx::query_scalar(
            "UPDATE runs SET trace_json = $1, trace_hash = $2, task = $3, outcome = $4,
               n_steps = $5, n_spans = $6, agents = $7, system = $8, first_ns = $9, last_ns = $10,
               assembled_seq = $11, warnings = $13
             WHERE id = $12 AND assembled_seq < $11 AND source = 'otlp'
             RETURNING received_ns",
        )
        .bind(json.as_str())
        .bind(hash.as_str())
        .bind(trace.task.as_str())
        .bind(trace.outcome.as_str())
        .bind(big(trace.steps.len() as u64))
        .bind(big(spans.len() as u64))
        .bind(agents.into_iter().collect::<Vec<_>>().join(" "))
        .bind(system)
        .bind(big(first))
        .bind(big(last))
        .bind(seq)
        .bind(run)
        .bind(crate::runs::warnings_text(&trace))
        .fetch_optional(&mut *tx)
        .await
        .map_err(q("store assembled trace"))?;
        if let Some(received_ns) = received_ns {
            index_run(&mut tx, self.backend, run, Some(&trace), received_ns).await?;
        }
        tx.commit().await.map_err(q("commit assembled trace"))?;
        Ok(received_ns.map(|_| trace))
    }

    /// Assemble every run waiting for it (up to `limit`); returns the runs assembled. A run
    /// that fails to assemble is marked failed with its reason ([`Store::mark_failed`]) and the
    /// others go on; only a store that cannot even list the pending runs is an error.
    pub async fn assemble_pending(&self, limit: i64) -> Result<Vec<String>> {
        let mut done = Vec::new();
        for (run, seq) in self.pending_assembly(limit).await? {
            match self.assemble(&run).await {
                Ok(Some(_)) => done.push(run),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(%run, %e, "assembly failed; the run is marked failed");
                    let reason = format!("assembly: {e}");
                    if let Err(e) = self.mark_failed(&run, seq, &reason).await {
                        tracing::warn!(%run, %e, "could not mark the run failed");
                    }
                }
            }
        }
        Ok(done)
    }

    /// Mark a run failed with `reason` unless spans arrived after `seq`: it is no longer
    /// pending assembly or completion; a later ingest reopens it.
    pub async fn mark_failed(&self, run: &str, seq: i64, reason: &str) -> Result<bool> {
        let r = sqlx::query(
            "UPDATE runs SET state = 'failed', error = $1, assembled_seq = ingest_seq
             WHERE id = $2 AND ingest_seq <= $3",
        )
        .bind(crate::text::storable(reason))
        .bind(run)
        .bind(seq)
        .execute(&self.pool)
        .await
        .map_err(q("mark run failed"))?;
        Ok(r.rows_affected() == 1)
    }

    /// Open OTLP runs, assembled up to date, that are complete at `now`: a root span arrived and
    /// nothing arrived for `settle_ns`, or nothing arrived for `idle_ns`. `(id, ingest_seq)`.
    pub async fn due_for_completion(
        &self,
        now: i64,
        settle_ns: i64,
        idle_ns: i64,
    ) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT id, ingest_seq FROM runs
             WHERE state = 'open' AND source = 'otlp' AND assembled_seq = ingest_seq
               AND ((has_root = 1 AND received_ns <= $1) OR received_ns <= $2)
             ORDER BY received_ns LIMIT 100",
        )
        .bind(now.saturating_sub(settle_ns))
        .bind(now.saturating_sub(idle_ns))
        .fetch_all(&self.pool)
        .await
        .map_err(q("due for completion"))?;
        rows.iter()
            .map(|r| Ok((col(r, "id")?, col(r, "ingest_seq")?)))
            .collect()
    }

    /// Mark a run complete if nothing arrived since `seq`. True for the one caller that did it
    /// (with several servers, exactly one diagnoses the run).
    pub async fn mark_complete(&self, run: &str, seq: i64) -> Result<bool> {
        let r = sqlx::query(
            "UPDATE runs SET state = 'complete', completed_ns = $1
             WHERE id = $2 AND state = 'open' AND ingest_seq = $3",
        )
        .bind(now_ns())
        .bind(run)
        .bind(seq)
        .execute(&self.pool)
        .await
        .map_err(q("mark complete"))?;
        Ok(r.rows_affected() == 1)
    }
}

/// `spans` with text the store cannot hold replaced (None when all are clean), and the ids of
/// the spans changed.
fn sanitized(spans: &[SpanRecord]) -> (Option<Vec<SpanRecord>>, Vec<String>) {
    if !spans.iter().any(crate::text::needs_sanitizing) {
        return (None, Vec::new());
    }
    let mut ids = Vec::new();
    let cleaned = spans
        .iter()
        .cloned()
        .map(|mut s| {
            if crate::text::sanitize_span(&mut s) {
                ids.push(format!("{}/{}", s.trace_id, s.span_id));
            }
            s
        })
        .collect();
    (Some(cleaned), ids)
}

/// The run an OpenTelemetry trace belongs to. A trace first seen without a conversation id is
/// its own run; when a later span names a conversation, the trace joins that run (the old run is
/// marked so that assembly removes it).
async fn resolve_run(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    otel_trace: &str,
    conversation: Option<&str>,
    touched: &mut BTreeMap<String, bool>,
) -> Result<String> {
    let existing: Option<String> =
        sqlx::query_scalar("SELECT run_id FROM otel_traces WHERE otel_trace_id = $1")
            .bind(otel_trace)
            .fetch_optional(&mut **tx)
            .await
            .map_err(q("otel trace run"))?;
    let conversation = match conversation {
        Some(c) => Some(otlp_run_id(tx, c).await?),
        None => None,
    };
    let conversation = conversation.as_deref();
    match (existing, conversation) {
        (Some(run), Some(conv)) if run == otel_trace && conv != otel_trace => {
            sqlx::query("UPDATE otel_traces SET run_id = $1 WHERE otel_trace_id = $2")
                .bind(conv)
                .bind(otel_trace)
                .execute(&mut **tx)
                .await
                .map_err(q("move trace to conversation"))?;
            touched.entry(run).or_insert(false);
            // The moved spans (a root among them) now count for the conversation's run.
            let root: Option<i64> = sqlx::query_scalar(
                "SELECT MAX(CASE WHEN parent_span_id IS NULL THEN 1 ELSE 0 END) FROM spans
                 WHERE otel_trace_id = $1",
            )
            .bind(otel_trace)
            .fetch_one(&mut **tx)
            .await
            .map_err(q("root of moved trace"))?;
            let entry = touched.entry(conv.to_string()).or_insert(false);
            *entry |= root == Some(1);
            Ok(conv.to_string())
        }
        (Some(run), _) => Ok(run),
        (None, conv) => {
            let run = match conv {
                Some(c) => c.to_string(),
                None => otlp_run_id(tx, otel_trace).await?,
            };
            sqlx::query(
                "INSERT INTO otel_traces (otel_trace_id, run_id) VALUES ($1, $2)
                 ON CONFLICT (otel_trace_id) DO NOTHING",
            )
            .bind(otel_trace)
            .bind(run.as_str())
            .execute(&mut **tx)
            .await
            .map_err(q("new otel trace"))?;
            // Another server may have mapped it first: read the winner.
            let run: String =
                sqlx::query_scalar("SELECT run_id FROM otel_traces WHERE otel_trace_id = $1")
                    .bind(otel_trace)
                    .fetch_one(&mut **tx)
                    .await
                    .map_err(q("otel trace run"))?;
            Ok(run)
        }
    }
}

/// The run id OTLP spans use for `wanted` (a conversation or OpenTelemetry trace id): itself,
/// or `otlp:{wanted}` when an imported run already has that id, so spans never replace an
/// imported trace.
async fn otlp_run_id(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    wanted: &str,
) -> Result<String> {
    let wanted = crate::text::bounded_id(wanted);
    // `otlp:` is this namespace: an id that already starts with it is always namespaced too, so
    // a conversation named `otlp:Y` never meets the conversation `Y` put aside for an import.
    if wanted.starts_with(OTLP_PREFIX) {
        return Ok(format!("{OTLP_PREFIX}{wanted}"));
    }
    let imported: Option<i64> =
        sqlx::query_scalar("SELECT 1 FROM runs WHERE id = $1 AND source <> 'otlp'")
            .bind(wanted.as_ref())
            .fetch_optional(&mut **tx)
            .await
            .map_err(q("run id clash"))?;
    Ok(match imported {
        Some(_) => format!("{OTLP_PREFIX}{wanted}"),
        None => wanted.into_owned(),
    })
}

/// The prefix of OTLP run ids put aside from imported ones; imported ids cannot start with it.
pub const OTLP_PREFIX: &str = "otlp:";

/// One multi-row `INSERT ... ON CONFLICT DO NOTHING`; returns the rows stored.
async fn insert_spans(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    spans: &[&SpanRecord],
    now: i64,
) -> Result<usize> {
    let mut sql = String::from(
        "INSERT INTO spans (otel_trace_id, span_id, parent_span_id, name, start_ns, end_ns, \
         record, received_ns) VALUES ",
    );
    for i in 0..spans.len() {
        let b = i * 8;
        if i > 0 {
            sql.push(',');
        }
        sql.push_str(&format!(
            "(${},${},${},${},${},${},${},${})",
            b + 1,
            b + 2,
            b + 3,
            b + 4,
            b + 5,
            b + 6,
            b + 7,
            b + 8
        ));
    }
    sql.push_str(" ON CONFLICT (otel_trace_id, span_id) DO NOTHING");
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for s in spans {
        let record = serde_json::to_string(s).map_err(|e| crate::StoreError::Corrupt {
            what: format!("span {}/{}", s.trace_id, s.span_id),
            message: e.to_string(),
        })?;
        query = query
            .bind(s.trace_id.clone())
            .bind(s.span_id.clone())
            .bind(s.parent_span_id.clone())
            .bind(s.name.clone())
            .bind(big(s.start_ns))
            .bind(big(s.end_ns))
            .bind(record)
            .bind(now);
    }
    let r = query.execute(&mut **tx).await.map_err(q("insert spans"))?;
    Ok(usize::try_from(r.rows_affected()).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::stores;
    use serde_json::{json, Map, Value};

    fn span(trace: &str, id: &str, parent: Option<&str>, start: u64, attrs: Value) -> SpanRecord {
        let attributes: Map<String, Value> = attrs.as_object().cloned().unwrap_or_default();
        SpanRecord {
            trace_id: trace.repeat(32 / trace.len()),
            span_id: id.repeat(16 / id.len()),
            parent_span_id: parent.map(|p| p.repeat(16 / p.len())),
            name: "chat".into(),
            start_ns: start,
            end_ns: start + 10,
            error: None,
            attributes,
            events: vec![],
            service: Some("svc".into()),
        }
    }

    fn chat(agent: &str, text: &str) -> Value {
        json!({
            "gen_ai.operation.name": "chat",
            "gen_ai.agent.name": agent,
            "gen_ai.output.messages": format!(
                "[{{\"role\":\"assistant\",\"parts\":[{{\"type\":\"text\",\"content\":\"{text}\"}}]}}]"
            ),
        })
    }

    #[tokio::test]
    async fn a_run_grows_over_requests_idempotently_and_in_start_order() {
        for (store, _dir) in stores().await {
            let a = span("a", "1", Some("9"), 300, chat("Coder", "third"));
            let b = span("a", "2", Some("9"), 100, chat("Planner", "first"));
            let out = store
                .ingest(std::slice::from_ref(&a))
                .await
                .expect("ingest 1");
            assert_eq!((out.stored, out.duplicates), (1, 0));
            let run = out.runs[0].clone();
            store.assemble_pending(10).await.expect("assemble");
            // A repeated span and a late, earlier one.
            let out = store
                .ingest(&[a.clone(), b.clone(), b])
                .await
                .expect("ingest 2");
            assert_eq!((out.stored, out.duplicates), (1, 2));
            assert_eq!(store.pending_assembly(10).await.expect("pending").len(), 1);
            let trace = store
                .assemble(&run)
                .await
                .expect("assemble")
                .expect("newer");
            let texts: Vec<&str> = trace.steps.iter().map(|s| s.content.as_str()).collect();
            assert_eq!(texts, ["first", "third"]);
            // Only duplicates: nothing to assemble again.
            let out = store.ingest(&[a]).await.expect("ingest 3");
            assert!(out.runs.is_empty());
            assert!(store
                .pending_assembly(10)
                .await
                .expect("pending")
                .is_empty());
        }
    }

    #[tokio::test]
    async fn a_stale_assembly_never_overwrites_a_newer_one() {
        for (store, _dir) in stores().await {
            let out = store
                .ingest(&[span("b", "1", None, 1, chat("A", "x"))])
                .await
                .expect("ingest");
            let run = &out.runs[0];
            assert!(store.assemble(run).await.expect("first").is_some());
            // Assembled at the current seq already: a second assembly of the same seq is refused.
            assert!(store.assemble(run).await.expect("again").is_none());
        }
    }

    #[tokio::test]
    async fn traces_join_their_conversation_even_when_the_id_comes_late() {
        for (store, _dir) in stores().await {
            let conv = json!({"gen_ai.conversation.id": "conv-7"});
            // Trace c first arrives without the conversation id: its own run.
            let out = store
                .ingest(&[span("c", "1", Some("5"), 10, chat("A", "one"))])
                .await
                .expect("ingest");
            let first_run = out.runs[0].clone();
            assert_eq!(first_run, "c".repeat(32));
            store.assemble_pending(10).await.expect("assemble");
            // Its root span names the conversation; trace d is in the same conversation.
            let mut root = span("c", "5", None, 5, conv.clone());
            root.name = "invoke_agent".into();
            let mut attrs = chat("B", "two").as_object().cloned().unwrap_or_default();
            attrs.insert("gen_ai.conversation.id".into(), json!("conv-7"));
            let d = span("d", "1", None, 20, Value::Object(attrs));
            let out = store.ingest(&[root, d]).await.expect("ingest");
            assert!(out.runs.contains(&"conv-7".to_string()), "{out:?}");
            store.assemble_pending(10).await.expect("assemble");
            let trace = store.assemble_pending(10).await.expect("nothing left");
            assert!(trace.is_empty());
            let run = store.run("conv-7").await.expect("run").expect("exists");
            let texts: Vec<String> = run
                .trace
                .expect("assembled")
                .steps
                .iter()
                .map(|s| s.content.clone())
                .collect();
            assert_eq!(texts, ["one", "two"]);
            assert!(run.summary.has_root);
            assert!(store.run(&first_run).await.expect("old").is_none());
            // The removed run's search rows went with it; the conversation has them now.
            for table in ["step_text", "run_agents"] {
                let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT COUNT(*) FROM {table} WHERE run_id = $1"
                )))
                .bind(first_run.as_str())
                .fetch_one(store.pool())
                .await
                .expect("count");
                assert_eq!(n, 0, "{table}");
            }
            let m = store.step_matches("conv-7", "one two", 3).await.expect("m");
            assert!(m.is_empty());
            let m = store.step_matches("conv-7", "one", 3).await.expect("m");
            assert_eq!(m.len(), 1);
        }
    }

    #[tokio::test]
    async fn completion_needs_a_quiet_root_or_a_long_idle() {
        for (store, _dir) in stores().await {
            let out = store
                .ingest(&[span("e", "1", Some("2"), 1, chat("A", "x"))])
                .await
                .expect("ingest");
            let run = out.runs[0].clone();
            store.assemble_pending(10).await.expect("assemble");
            let now = now_ns();
            // No root yet, not idle long: open.
            assert!(store
                .due_for_completion(now, 0, 60_000_000_000)
                .await
                .expect("due")
                .is_empty());
            // Idle long enough: due.
            let due = store
                .due_for_completion(now + 120_000_000_000, 0, 60_000_000_000)
                .await
                .expect("due");
            assert_eq!(due.len(), 1);
            // The root arrives: due after the settle time; a stale seq cannot complete it.
            store
                .ingest(&[span("e", "2", None, 0, json!({}))])
                .await
                .expect("root");
            assert!(!store.mark_complete(&run, due[0].1).await.expect("stale"));
            store.assemble_pending(10).await.expect("assemble");
            let due = store
                .due_for_completion(now_ns(), 0, 60_000_000_000)
                .await
                .expect("due");
            assert_eq!(due.len(), 1);
            assert!(store.mark_complete(&run, due[0].1).await.expect("complete"));
            assert!(!store.mark_complete(&run, due[0].1).await.expect("twice"));
            // A late span reopens it.
            store
                .ingest(&[span("e", "3", Some("2"), 5, chat("B", "late"))])
                .await
                .expect("late");
            let run = store.run(&run).await.expect("run").expect("exists");
            assert_eq!(run.summary.state, "open");
        }
    }

    /// Assembly writes the search rows with the trace; a later ingest keeps `run_agents` in step
    /// with the run's received time; a run removed by assembly loses its rows.
    #[tokio::test]
    async fn assembly_indexes_steps_and_agents() {
        for (store, _dir) in stores().await {
            let out = store
                .ingest(&[span("f", "1", None, 1, chat("Scout", "a quokka appears"))])
                .await
                .expect("ingest");
            let run = out.runs[0].clone();
            store.assemble_pending(10).await.expect("assemble");
            let find = |q: &str| crate::RunFilter {
                q: Some(q.into()),
                ..crate::RunFilter::default()
            };
            let ids = |runs: Vec<crate::RunSummary>| -> Vec<String> {
                runs.into_iter().map(|r| r.id).collect()
            };
            assert_eq!(
                ids(store.list_runs(&find("quokka")).await.expect("list")),
                std::slice::from_ref(&run)
            );
            let m = store
                .step_matches(&run, "quokka", 3)
                .await
                .expect("matches");
            assert_eq!(m[0].agent.as_deref(), Some("Scout"));
            // More spans: the run is received again (run_agents follows), then reassembled.
            store
                .ingest(&[span("f", "2", Some("1"), 5, chat("Keeper", "a wombat too"))])
                .await
                .expect("ingest");
            let times: Vec<(i64, i64)> = sqlx::query_as::<_, (i64, i64)>(
                "SELECT a.received_ns, r.received_ns FROM run_agents a
                 JOIN runs r ON r.id = a.run_id",
            )
            .fetch_all(store.pool())
            .await
            .expect("times");
            assert!(
                !times.is_empty() && times.iter().all(|(a, r)| a == r),
                "{times:?}"
            );
            store.assemble_pending(10).await.expect("assemble");
            assert_eq!(
                ids(store.list_runs(&find("wombat")).await.expect("list")),
                std::slice::from_ref(&run)
            );
            assert_eq!(
                ids(store.list_runs(&find("quokka")).await.expect("list")),
                std::slice::from_ref(&run)
            );
            let keeper = crate::RunFilter {
                agent: Some("Keeper".into()),
                ..crate::RunFilter::default()
            };
            assert_eq!(
                ids(store.list_runs(&keeper).await.expect("list")),
                std::slice::from_ref(&run)
            );
        }
    }

    /// Issue 35: a NUL in the agent name, an attribute key, the service, the span name or the
    /// conversation id is stored replaced (and reported) with the good spans of the request,
    /// and every run is assembled (PostgreSQL refused the text: a 503 or a poisoned run).
    #[tokio::test]
    async fn nul_characters_are_replaced_span_by_span_and_reported() {
        for (store, _dir) in stores().await {
            let mut bad = span("a", "1", None, 1, chat("Pl\0anner", "hi"));
            bad.name = "ch\0at".into();
            bad.service = Some("svc\0".into());
            bad.attributes.insert("k\0".into(), json!("v"));
            bad.attributes
                .insert("gen_ai.conversation.id".into(), json!("conv\0x"));
            let good = span("b", "2", None, 2, chat("Coder", "fine"));
            let out = store.ingest(&[bad, good]).await.expect("ingest");
            assert_eq!(out.stored, 2);
            assert_eq!(
                out.sanitized,
                [format!("{}/{}", "a".repeat(32), "1".repeat(16))]
            );
            assert!(out.sanitized_message().contains("1 span(s)"), "{out:?}");
            let done = store.assemble_pending(10).await.expect("assemble");
            assert_eq!(done.len(), 2, "{done:?}");
            let run = store
                .run("conv\u{FFFD}x")
                .await
                .expect("run")
                .expect("stored under the cleaned id");
            let trace = run.trace.expect("assembled");
            assert_eq!(trace.steps[0].agent, "Pl\u{FFFD}anner");
            assert_eq!(run.summary.system.as_deref(), Some("svc\u{FFFD}"));
        }
    }

    /// Issue 35: a run that cannot be assembled is marked failed with its reason and the other
    /// runs are still assembled; new spans reopen it.
    #[tokio::test]
    async fn a_run_that_fails_to_assemble_is_marked_failed_and_skipped() {
        for (store, _dir) in stores().await {
            let out = store
                .ingest(&[span("c", "1", None, 1, chat("A", "x"))])
                .await
                .expect("ingest");
            let broken = out.runs[0].clone();
            sqlx::query("UPDATE spans SET record = 'not json' WHERE otel_trace_id = $1")
                .bind("c".repeat(32))
                .execute(store.pool())
                .await
                .expect("corrupt");
            let out = store
                .ingest(&[span("d", "1", None, 2, chat("B", "y"))])
                .await
                .expect("ingest");
            let good = out.runs[0].clone();
            let done = store.assemble_pending(10).await.expect("the loop goes on");
            assert_eq!(done, [good]);
            let s = store
                .run(&broken)
                .await
                .expect("run")
                .expect("kept")
                .summary;
            assert_eq!(s.state, "failed");
            assert!(
                s.error.as_deref().is_some_and(|e| e.contains("assembly")),
                "{s:?}"
            );
            assert!(store.pending_assembly(10).await.expect("p").is_empty());
            // New spans reopen it (and clear the reason).
            store
                .ingest(&[span("c", "2", Some("1"), 3, chat("A", "z"))])
                .await
                .expect("ingest");
            let s = store
                .run(&broken)
                .await
                .expect("run")
                .expect("kept")
                .summary;
            assert_eq!((s.state.as_str(), s.error), ("open", None));
        }
    }

    /// Red-team findings: a conversation id or agent name longer than an index entry can be,
    /// and the `otlp:` namespace colliding with imported ids or merging two conversations.
    #[tokio::test]
    async fn otlp_runs_with_long_or_namespaced_ids_and_names() {
        for (store, _dir) in stores().await {
            let with_conv = |trace: &str, conv: &str, agent: &str| {
                let mut attrs = chat(agent, "x").as_object().cloned().unwrap_or_default();
                attrs.insert("gen_ai.conversation.id".into(), json!(conv));
                span(trace, "1", None, 1, Value::Object(attrs))
            };
            // A 4,000-character conversation id and agent name (PostgreSQL's index refused both:
            // a retryable 503, and a run that never assembled).
            let long_conv = "c".repeat(4000);
            let long_agent = "A".repeat(4000);
            let out = store
                .ingest(&[with_conv("h", &long_conv, &long_agent)])
                .await
                .expect("ingest");
            let id = out.runs[0].clone();
            assert!(id.chars().count() <= crate::text::MAX_ID_CHARS, "{id}");
            assert!(id.starts_with(&"c".repeat(200)) && id.contains('~'), "{id}");
            store.assemble_pending(10).await.expect("assemble");
            let run = store.run(&id).await.expect("run").expect("stored");
            assert_ne!(run.summary.state, "failed", "{:?}", run.summary.error);
            assert_eq!(run.trace.expect("assembled").steps[0].agent, long_agent);
            // The same long id from another trace meets it in the same run.
            let again = store
                .ingest(&[with_conv("i", &long_conv, "B")])
                .await
                .expect("ingest");
            assert_eq!(again.runs, [id]);
            // Imported `Y`: OTLP `Y` goes to `otlp:Y`, OTLP `otlp:Y` to `otlp:otlp:Y`, never one run.
            let y = maslens_trace::TraceBuilder::new("Y")
                .step("A", "imported")
                .build();
            store.put_trace(&y).await.expect("import");
            let a = store
                .ingest(&[with_conv("j", "Y", "Alice")])
                .await
                .expect("a");
            let b = store
                .ingest(&[with_conv("k", "otlp:Y", "Bob")])
                .await
                .expect("b");
            assert_eq!(a.runs, ["otlp:Y"]);
            assert_eq!(b.runs, ["otlp:otlp:Y"]);
        }
    }

    /// Imports: text PostgreSQL cannot hold is replaced (it answered a retryable 503); ids that
    /// are empty, too long or in the OTLP namespace are refused with the reason.
    #[tokio::test]
    async fn imports_with_nul_or_bad_ids() {
        for (store, _dir) in stores().await {
            let t = maslens_trace::TraceBuilder::new("n")
                .task("ta\0sk")
                .step("Ag\0ent", "x")
                .build();
            store.put_trace(&t).await.expect("stored");
            let run = store.run("n").await.expect("run").expect("kept");
            assert_eq!(run.trace.expect("trace").steps[0].agent, "Ag\u{FFFD}ent");
            for (id, says) in [
                ("", "cannot be empty"),
                (&*"x".repeat(300), "at most 256"),
                ("otlp:z", "kept for runs received over OTLP"),
                ("a\0b", "NUL"),
            ] {
                let t = maslens_trace::TraceBuilder::new(id).step("A", "x").build();
                let e = store.put_trace(&t).await.expect_err("refused");
                assert!(
                    matches!(&e, crate::StoreError::Invalid(m) if m.contains(says)),
                    "{e}"
                );
            }
        }
    }

    /// Issue 35: OTLP spans whose conversation id is an imported run's id go to their own run
    /// (`otlp:ID`), and an import over an OTLP run's id is refused, not reported as stored.
    #[tokio::test]
    async fn otlp_and_imported_runs_never_replace_each_other() {
        for (store, _dir) in stores().await {
            let imported = maslens_trace::TraceBuilder::new("shared")
                .task("q")
                .step("A", "imported text")
                .build();
            store.put_trace(&imported).await.expect("import");
            let mut attrs = chat("B", "otlp text")
                .as_object()
                .cloned()
                .unwrap_or_default();
            attrs.insert("gen_ai.conversation.id".into(), json!("shared"));
            let out = store
                .ingest(&[span("g", "1", None, 1, Value::Object(attrs))])
                .await
                .expect("ingest");
            assert_eq!(out.runs, ["otlp:shared"]);
            store.assemble_pending(10).await.expect("assemble");
            let kept = store.run("shared").await.expect("run").expect("kept");
            assert_eq!(kept.summary.source, "import");
            assert_eq!(kept.summary.state, "complete");
            assert_eq!(kept.trace.expect("trace").steps[0].content, "imported text");
            let otlp = store
                .run("otlp:shared")
                .await
                .expect("run")
                .expect("own run");
            assert_eq!(otlp.trace.expect("trace").steps[0].content, "otlp text");
            // An import with an OTLP run's id: an error, nothing replaced.
            let clash = maslens_trace::TraceBuilder::new("otlp:shared")
                .task("q")
                .step("C", "import over otlp")
                .build();
            let e = store.put_trace(&clash).await.expect_err("clash");
            assert!(
                matches!(&e, crate::StoreError::Invalid(m) if m.contains("kept for runs received over OTLP")),
                "{e}"
            );
            let otlp = store
                .run("otlp:shared")
                .await
                .expect("run")
                .expect("own run");
            assert_eq!(otlp.trace.expect("trace").steps[0].content, "otlp text");
        }
    }
}
