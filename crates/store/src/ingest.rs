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

/// Runs touched by an ingest: run -> whether a root span arrived.
type Touched = BTreeMap<String, bool>;

impl Store {
    /// Store the spans of one OTLP request (already flattened and validated) in one transaction.
    /// Returns after the commit: what it returns is durable.
    /// Text the store cannot hold is replaced span by span ([`crate::text::sanitize_span`]) and
    /// reported in [`IngestOutcome::sanitized`]; the other spans are untouched.
    pub async fn ingest(&self, spans: &[SpanRecord]) -> Result<IngestOutcome> {
        let mut once = Some(spans);
        self.ingest_slices(move || once.take()).await
    }

    /// [`Store::ingest`] of a request that comes in slices (a large body decoded slice by slice):
    /// each slice `next` gives is stored and dropped before the next is asked for, all in one
    /// transaction, so memory stays that of one slice and no run is seen half-stored.
    pub async fn ingest_slices<S: AsRef<[SpanRecord]>>(
        &self,
        mut next: impl FnMut() -> Option<S> + Send,
    ) -> Result<IngestOutcome> {
        self.check_file()?;
        let now = now_ns();
        let mut out = IngestOutcome::default();
        let mut touched = Touched::new();
        let mut tx = self.write_tx().await?;
        while let Some(slice) = next() {
            ingest_slice(&mut tx, slice.as_ref(), now, &mut out, &mut touched).await?;
        }
        mark_runs(&mut tx, &touched, now).await?;
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

    /// Every stored span of a run, in start order, with only the attributes assembly reads
    /// ([`maslens_otlp::assemble::keep_read_attributes`]). Rows are read one at a time, so a
    /// run's stored text and its parsed spans are never all in memory at once.
    pub async fn run_spans(&self, run: &str) -> Result<Vec<SpanRecord>> {
        use futures_util::TryStreamExt;
        let mut rows = sqlx::query(
            "SELECT s.otel_trace_id, s.span_id, s.record FROM spans s
             JOIN otel_traces t ON t.otel_trace_id = s.otel_trace_id
             WHERE t.run_id = $1 ORDER BY s.start_ns, s.span_id",
        )
        .bind(run)
        .fetch(&self.pool);
        let mut spans = Vec::new();
        while let Some(row) = rows.try_next().await.map_err(q("run spans"))? {
            let record: &str = col(&row, "record")?;
            let mut span: SpanRecord = json_col(record, || {
                let t: String = row.try_get("otel_trace_id").unwrap_or_default();
                let s: String = row.try_get("span_id").unwrap_or_default();
                format!("span {t}/{s}")
            })?;
            maslens_otlp::assemble::keep_read_attributes(&mut span);
            spans.push(span);
        }
        Ok(spans)
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
        let first = spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
        let last = spans.iter().map(|s| s.end_ns).max().unwrap_or(0);
        let system = spans.iter().find_map(|s| s.service.clone());
        let n_spans = spans.len();
        // The spans are done with: free them before the trace's JSON and its copies in the
        // UPDATE below take their place (the peak of a large run's assembly).
        drop(refs);
        drop(spans);
        let (json, hash) = crate::trace_json(&trace)?;
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
        // Moved, not copied: the driver makes its own copies of a large trace.
        .bind(json)
        .bind(hash.as_str())
        .bind(trace.task.as_str())
        .bind(trace.outcome.as_str())
        .bind(big(trace.steps.len() as u64))
        .bind(big(n_spans as u64))
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
            if self.assemble_or_fail(&run, seq).await {
                done.push(run);
            }
        }
        Ok(done)
    }

    /// [`Store::assemble`] `run` (pending at `seq`); when that fails, the run is marked failed
    /// with the reason ([`Store::mark_failed`]), unless the error passes
    /// ([`StoreError::is_transient`]: a full disk, a lost connection): then it stays pending and
    /// the next pass tries again. True when a new trace was stored.
    pub async fn assemble_or_fail(&self, run: &str, seq: i64) -> bool {
        match self.assemble(run).await {
            Ok(stored) => stored.is_some(),
            Err(e) if e.is_transient() => {
                tracing::warn!(%run, %e, "assembly deferred: the store failed; tried again next pass");
                false
            }
            Err(e) => {
                tracing::warn!(%run, %e, "assembly failed; the run is marked failed");
                let reason = format!("assembly: {e}");
                if let Err(e) = self.mark_failed(run, seq, &reason).await {
                    tracing::warn!(%run, %e, "could not mark the run failed");
                }
                false
            }
        }
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

    /// Open again a run marked complete at `seq` whose diagnosis on arrival could not be stored
    /// (the store failed), so the next pass completes and diagnoses it again. False when spans
    /// arrived since (they reopened it already) or it is not complete.
    pub async fn reopen(&self, run: &str, seq: i64) -> Result<bool> {
        let r = sqlx::query(
            "UPDATE runs SET state = 'open', completed_ns = NULL
             WHERE id = $1 AND state = 'complete' AND ingest_seq = $2",
        )
        .bind(run)
        .bind(seq)
        .execute(&self.pool)
        .await
        .map_err(q("reopen run"))?;
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
/// Store one slice of a request's spans in `tx` (see [`Store::ingest`]).
async fn ingest_slice(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    spans: &[SpanRecord],
    now: i64,
    out: &mut IngestOutcome,
    touched: &mut Touched,
) -> Result<()> {
    let (cleaned, sanitized) = sanitized(spans);
    let spans: &[SpanRecord] = cleaned.as_deref().unwrap_or(spans);
    // One copy per (trace, span) id, grouped by OpenTelemetry trace, in start order.
    let mut by_trace: BTreeMap<&str, BTreeMap<&str, &SpanRecord>> = BTreeMap::new();
    for s in spans {
        by_trace
            .entry(&s.trace_id)
            .or_default()
            .entry(&s.span_id)
            .or_insert(s);
    }
    out.duplicates += spans.len() - by_trace.values().map(BTreeMap::len).sum::<usize>();
    out.sanitized.extend(sanitized);
    for (otel_trace, spans) in &by_trace {
        let mut ordered: Vec<&SpanRecord> = spans.values().copied().collect();
        ordered.sort_by_key(|s| (s.start_ns, s.span_id.as_str()));
        let conversation = ordered.iter().find_map(|s| conversation_of(s));
        let run = resolve_run(tx, otel_trace, conversation, touched).await?;
        let mut new = 0usize;
        for chunk in ordered.chunks(CHUNK) {
            new += insert_spans(tx, chunk, now).await?;
        }
        out.stored += new;
        out.duplicates += ordered.len() - new;
        if new > 0 {
            let root = ordered.iter().any(|s| s.parent_span_id.is_none());
            let entry = touched.entry(run).or_insert(false);
            *entry |= root;
        }
    }
    Ok(())
}

/// Mark the runs an ingest touched as open and due for assembly.
async fn mark_runs(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    touched: &Touched,
    now: i64,
) -> Result<()> {
    for (run, root) in touched {
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
        .execute(&mut **tx)
        .await
        .map_err(q("mark run"))?;
        crate::search::touch_run_agents(tx, run, now).await?;
    }
    Ok(())
}

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
mod tests;
