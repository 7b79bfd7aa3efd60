//! The diagnosis queue: jobs (run a method on a run) live in the store, so they survive restarts
//! and are shared by every server on one PostgreSQL store. A worker claims the oldest queued job
//! (`FOR UPDATE SKIP LOCKED` on PostgreSQL: two workers never get the same job; SQLite has one
//! writer at a time), finishes or fails it; a claim older than its lease (the worker died) is
//! given back by [`Store::requeue_stale`]. One job per `dedup` key: the same method on the same
//! trace version with the same parameters is queued once.

use serde_json::Value;
use sqlx::any::AnyRow;

use crate::diagnosis::new_id;
use crate::{col, json_col, now_ns, q, Backend, Result, Store};

/// Mark a job done with its diagnosis, on `ex` (the pool, or the diagnosis' transaction).
pub(crate) async fn finish<'e, E>(ex: E, job_id: &str, diagnosis_id: &str) -> Result<()>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    sqlx::query(
        "UPDATE jobs SET state = 'done', finished_ns = $1, diagnosis_id = $2, error = NULL
         WHERE id = $3",
    )
    .bind(now_ns())
    .bind(diagnosis_id)
    .bind(job_id)
    .execute(ex)
    .await
    .map_err(q("finish job"))?;
    Ok(())
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }
    fn parse(s: &str) -> JobState {
        match s {
            "running" => JobState::Running,
            "done" => JobState::Done,
            "failed" => JobState::Failed,
            _ => JobState::Queued,
        }
    }
}

/// A job.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Job {
    pub id: String,
    pub run_id: String,
    pub method: String,
    pub params: Value,
    pub state: JobState,
    pub attempts: i64,
    pub worker: Option<String>,
    pub created_ns: i64,
    pub claimed_ns: Option<i64>,
    pub finished_ns: Option<i64>,
    pub diagnosis_id: Option<String>,
    pub error: Option<String>,
}

/// A job to queue ([`Store::enqueue_many`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub run_id: String,
    pub method: String,
    pub params: Value,
    /// One job per key: the same method on the same trace version with the same parameters.
    pub dedup: String,
}

/// A run without any diagnosis ([`Store::undiagnosed_runs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndiagnosedRun {
    pub id: String,
    pub trace_hash: String,
    /// The later of its receipt and its completion: the sweep's cursor.
    pub swept_ns: i64,
}

const COLS: &str = "id, run_id, method, params, state, attempts, worker, created_ns, claimed_ns, \
     finished_ns, diagnosis_id, error";

fn job(row: &AnyRow) -> Result<Job> {
    let id: String = col(row, "id")?;
    let params: String = col(row, "params")?;
    let state: String = col(row, "state")?;
    Ok(Job {
        params: json_col(&params, || format!("job {id} params"))?,
        state: JobState::parse(&state),
        run_id: col(row, "run_id")?,
        method: col(row, "method")?,
        attempts: col(row, "attempts")?,
        worker: col(row, "worker")?,
        created_ns: col(row, "created_ns")?,
        claimed_ns: col(row, "claimed_ns")?,
        finished_ns: col(row, "finished_ns")?,
        diagnosis_id: col(row, "diagnosis_id")?,
        error: col(row, "error")?,
        id,
    })
}

impl Store {
    /// Queue a job unless one with the same `dedup` key exists. Returns the job (new or old).
    pub async fn enqueue(
        &self,
        run_id: &str,
        method: &str,
        params: &Value,
        dedup: &str,
    ) -> Result<Job> {
        let id = new_id(&[run_id, method, dedup]);
        sqlx::query(
            "INSERT INTO jobs (id, run_id, method, params, dedup, state, created_ns)
             VALUES ($1, $2, $3, $4, $5, 'queued', $6) ON CONFLICT (dedup) DO NOTHING",
        )
        .bind(id.as_str())
        .bind(run_id)
        .bind(method)
        .bind(params.to_string())
        .bind(dedup)
        .bind(now_ns())
        .execute(&self.pool)
        .await
        .map_err(q("enqueue"))?;
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLS} FROM jobs WHERE dedup = $1"
        )))
        .bind(dedup)
        .fetch_one(&self.pool)
        .await
        .map_err(q("enqueued job"))?;
        job(&row)
    }

    /// Claim the oldest queued job for `worker`, if any.
    pub async fn claim(&self, worker: &str) -> Result<Option<Job>> {
        self.claim_in(worker, &[]).await
    }

    /// Claim the oldest queued job whose method is one of `methods` (any method when empty) for
    /// `worker`, if any: a worker per lane, so that instant jobs never wait behind slow ones.
    pub async fn claim_in(&self, worker: &str, methods: &[&str]) -> Result<Option<Job>> {
        let lane = if methods.is_empty() {
            String::new()
        } else {
            let params: Vec<String> = (1..=methods.len()).map(|i| format!("${i}")).collect();
            format!(" AND method IN ({})", params.join(", "))
        };
        let lock = match self.backend {
            Backend::Postgres => " FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let pick = format!(
            "SELECT id FROM jobs WHERE state = 'queued'{lane} ORDER BY created_ns, id LIMIT 1{lock}"
        );
        let mut tx = self.write_tx().await?;
        let mut query = sqlx::query_scalar(sqlx::AssertSqlSafe(pick));
        for m in methods {
            query = query.bind(*m);
        }
        let id: Option<String> = query
            .fetch_optional(&mut *tx)
            .await
            .map_err(q("pick job"))?;
        let Some(id) = id else {
            tx.commit().await.map_err(q("commit claim"))?;
            return Ok(None);
        };
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE jobs SET state = 'running', worker = $1, claimed_ns = $2,
               attempts = attempts + 1
             WHERE id = $3 AND state = 'queued' RETURNING {COLS}"
        )))
        .bind(worker)
        .bind(now_ns())
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(q("claim job"))?;
        tx.commit().await.map_err(q("commit claim"))?;
        row.as_ref().map(job).transpose()
    }

    /// Queue many jobs in one transaction, each unless one with its `dedup` key exists. Returns
    /// how many were queued (jobs that existed already are not counted).
    pub async fn enqueue_many(&self, jobs: &[NewJob]) -> Result<u64> {
        if jobs.is_empty() {
            return Ok(0);
        }
        let now = now_ns();
        let mut queued = 0;
        let mut tx = self.write_tx().await?;
        for chunk in jobs.chunks(500) {
            let mut sql = String::from(
                "INSERT INTO jobs (id, run_id, method, params, dedup, state, created_ns) VALUES ",
            );
            for i in 0..chunk.len() {
                if i > 0 {
                    sql.push(',');
                }
                let p = i * 5;
                sql.push_str(&format!(
                    "(${}, ${}, ${}, ${}, ${}, 'queued', ${})",
                    p + 1,
                    p + 2,
                    p + 3,
                    p + 4,
                    p + 5,
                    chunk.len() * 5 + 1
                ));
            }
            sql.push_str(" ON CONFLICT (dedup) DO NOTHING");
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for j in chunk {
                query = query
                    .bind(new_id(&[&j.run_id, &j.method, &j.dedup]))
                    .bind(j.run_id.as_str())
                    .bind(j.method.as_str())
                    .bind(j.params.to_string())
                    .bind(j.dedup.as_str());
            }
            let r = query
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(q("enqueue many"))?;
            queued += r.rows_affected();
        }
        tx.commit().await.map_err(q("commit enqueue"))?;
        Ok(queued)
    }

    /// Runs that have never been diagnosed: complete, with an assembled trace of at least one
    /// step, no diagnosis at all; in `(swept_ns, id)` order after `after` (a keyset cursor on the
    /// later of receipt and completion: `(since_ns, "")` starts at `since_ns`), at most `limit`. What to queue the prior on when
    /// runs arrive other than through OTLP (`maslens import --db`, `POST /api/runs`). An OTLP run
    /// is diagnosed on arrival by the server that completes it, so it is one only when it
    /// completed before `settled_ns` (that diagnosis was lost, e.g. the server was killed).
    pub async fn undiagnosed_runs(
        &self,
        after: (i64, &str),
        settled_ns: i64,
        limit: i64,
    ) -> Result<Vec<UndiagnosedRun>> {
        // The cursor is the later of receipt and completion: a run completed long after its
        // last span (a root-less run, by `--idle`) is still after the cursor of the sweep that
        // found it not yet settled.
        let rows = sqlx::query(
            "SELECT id, trace_hash, CASE WHEN completed_ns > received_ns THEN completed_ns
                                        ELSE received_ns END AS swept_ns
             FROM runs
             WHERE (received_ns >= $1 OR completed_ns >= $1)
               AND (CASE WHEN completed_ns > received_ns THEN completed_ns ELSE received_ns END,
                    id) > ($1, $2)
               AND state = 'complete' AND trace_hash IS NOT NULL AND n_steps > 0
               AND (source <> 'otlp' OR completed_ns < $4)
               AND NOT EXISTS (SELECT 1 FROM diagnoses d WHERE d.run_id = runs.id)
             ORDER BY swept_ns, id LIMIT $3",
        )
        .bind(after.0)
        .bind(after.1)
        .bind(limit.max(0))
        .bind(settled_ns)
        .fetch_all(&self.pool)
        .await
        .map_err(q("undiagnosed runs"))?;
        rows.iter()
            .map(|r| {
                Ok(UndiagnosedRun {
                    id: col(r, "id")?,
                    trace_hash: col(r, "trace_hash")?,
                    swept_ns: col(r, "swept_ns")?,
                })
            })
            .collect()
    }

    /// A claimed job finished with a diagnosis.
    pub async fn finish(&self, job_id: &str, diagnosis_id: &str) -> Result<()> {
        finish(&self.pool, job_id, diagnosis_id).await
    }

    /// A claimed job failed: queued again while it has attempts left, else failed for good.
    pub async fn fail(&self, job_id: &str, error: &str, max_attempts: i64) -> Result<JobState> {
        let state: Option<String> = sqlx::query_scalar(
            "UPDATE jobs SET state = CASE WHEN attempts < $1 THEN 'queued' ELSE 'failed' END,
               error = $2, finished_ns = $3, worker = NULL
             WHERE id = $4 RETURNING state",
        )
        .bind(max_attempts)
        .bind(error)
        .bind(now_ns())
        .bind(job_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(q("fail job"))?;
        Ok(JobState::parse(state.as_deref().unwrap_or("failed")))
    }

    /// Give back a claimed job that was interrupted (the server is stopping): queued again, the
    /// interrupted attempt not counted, so the next start resumes it.
    pub async fn release(&self, job_id: &str) -> Result<()> {
        sqlx::query(
            "UPDATE jobs SET state = 'queued', worker = NULL,
               attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END
             WHERE id = $1 AND state = 'running'",
        )
        .bind(job_id)
        .execute(&self.pool)
        .await
        .map_err(q("release job"))?;
        Ok(())
    }

    /// Give back running jobs claimed before `claimed_before_ns` (their worker died). Returns how
    /// many.
    pub async fn requeue_stale(&self, claimed_before_ns: i64) -> Result<u64> {
        let r = sqlx::query(
            "UPDATE jobs SET state = 'queued', worker = NULL
             WHERE state = 'running' AND claimed_ns < $1",
        )
        .bind(claimed_before_ns)
        .execute(&self.pool)
        .await
        .map_err(q("requeue stale"))?;
        Ok(r.rows_affected())
    }

    /// One job.
    pub async fn job(&self, id: &str) -> Result<Option<Job>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLS} FROM jobs WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(q("job"))?;
        row.as_ref().map(job).transpose()
    }

    /// Jobs of a run, oldest first.
    pub async fn jobs_of(&self, run_id: &str) -> Result<Vec<Job>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLS} FROM jobs WHERE run_id = $1 ORDER BY created_ns, id"
        )))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(q("jobs of run"))?;
        rows.iter().map(job).collect()
    }

    /// How many jobs are in each state.
    pub async fn job_counts(&self) -> Result<Vec<(String, i64)>> {
        let rows =
            sqlx::query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state ORDER BY state")
                .fetch_all(&self.pool)
                .await
                .map_err(q("job counts"))?;
        rows.iter()
            .map(|r| Ok((col(r, "state")?, col(r, "n")?)))
            .collect()
    }
}

/// How far the jobs of one batch are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BatchProgress {
    pub total: i64,
    pub queued: i64,
    pub running: i64,
    pub done: i64,
    pub failed: i64,
}

impl Store {
    /// Put jobs in batch `batch` (one UI action over many runs). A job may be in several batches
    /// (the queue deduplicates jobs); adding one twice is a no-op.
    pub async fn add_to_batch(&self, batch: &str, job_ids: &[String]) -> Result<()> {
        if job_ids.is_empty() {
            return Ok(());
        }
        let mut tx = self.write_tx().await?;
        for chunk in job_ids.chunks(500) {
            let mut sql = String::from("INSERT INTO job_batches (batch, job_id) VALUES ");
            for i in 0..chunk.len() {
                if i > 0 {
                    sql.push(',');
                }
                sql.push_str(&format!("($1, ${})", i + 2));
            }
            sql.push_str(" ON CONFLICT (batch, job_id) DO NOTHING");
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(batch);
            for id in chunk {
                query = query.bind(id.as_str());
            }
            query.execute(&mut *tx).await.map_err(q("add to batch"))?;
        }
        tx.commit().await.map_err(q("commit batch"))?;
        Ok(())
    }

    /// How many jobs of batch `batch` are in each state (all zero for an unknown batch).
    pub async fn batch_progress(&self, batch: &str) -> Result<BatchProgress> {
        let rows = sqlx::query(
            "SELECT j.state AS state, COUNT(*) AS n FROM job_batches b
             JOIN jobs j ON j.id = b.job_id WHERE b.batch = $1 GROUP BY j.state",
        )
        .bind(batch)
        .fetch_all(&self.pool)
        .await
        .map_err(q("batch progress"))?;
        let mut p = BatchProgress::default();
        for r in &rows {
            let state: String = col(r, "state")?;
            let n: i64 = col(r, "n")?;
            p.total += n;
            match JobState::parse(&state) {
                JobState::Queued => p.queued += n,
                JobState::Running => p.running += n,
                JobState::Done => p.done += n,
                JobState::Failed => p.failed += n,
            }
        }
        Ok(p)
    }

    /// The jobs of batch `batch`, oldest first.
    pub async fn batch_jobs(&self, batch: &str) -> Result<Vec<Job>> {
        let cols = COLS
            .split(", ")
            .map(|c| format!("j.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {cols} FROM job_batches b JOIN jobs j ON j.id = b.job_id
             WHERE b.batch = $1 ORDER BY j.created_ns, j.id"
        )))
        .bind(batch)
        .fetch_all(&self.pool)
        .await
        .map_err(q("batch jobs"))?;
        rows.iter().map(job).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::stores;
    use serde_json::json;
    use std::collections::BTreeSet;

    #[tokio::test]
    async fn queue_dedups_claims_once_retries_and_requeues() {
        for (store, _dir) in stores().await {
            let a = store
                .enqueue("r1", "locate", &json!({}), "r1/locate/h1")
                .await
                .expect("enqueue");
            let again = store
                .enqueue("r1", "locate", &json!({}), "r1/locate/h1")
                .await
                .expect("enqueue");
            assert_eq!(a.id, again.id);
            store
                .enqueue("r2", "scan", &json!({"k": 1}), "r2/scan/h1")
                .await
                .expect("enqueue");
            let first = store.claim("w1").await.expect("claim").expect("a job");
            assert_eq!(first.id, a.id);
            assert_eq!(first.state, JobState::Running);
            assert_eq!(first.attempts, 1);
            let second = store.claim("w2").await.expect("claim").expect("a job");
            assert_ne!(second.id, first.id);
            assert!(store.claim("w3").await.expect("claim").is_none());
            // A failure with attempts left goes back to the queue; then for good.
            assert_eq!(
                store.fail(&second.id, "timeout", 2).await.expect("fail"),
                JobState::Queued
            );
            let retry = store.claim("w2").await.expect("claim").expect("again");
            assert_eq!(retry.attempts, 2);
            assert_eq!(
                store.fail(&retry.id, "timeout", 2).await.expect("fail"),
                JobState::Failed
            );
            // A worker that died: its claim is given back after the lease.
            assert_eq!(store.requeue_stale(now_ns() + 1).await.expect("requeue"), 1);
            let back = store.claim("w4").await.expect("claim").expect("requeued");
            store.finish(&back.id, "d1").await.expect("finish");
            let done = store.job(&back.id).await.expect("job").expect("exists");
            assert_eq!(done.state, JobState::Done);
            assert_eq!(done.diagnosis_id.as_deref(), Some("d1"));
        }
    }

    /// A lane claims only its methods, oldest first, whatever is older in the other lane.
    #[tokio::test]
    async fn lanes_claim_only_their_methods() {
        for (store, _dir) in stores().await {
            let llm = store
                .enqueue("r1", "llm", &json!({}), "r1/llm")
                .await
                .expect("enqueue");
            let prior = store
                .enqueue("r1", "prior", &json!({}), "r1/prior")
                .await
                .expect("enqueue");
            let got = store.claim_in("w", &["prior"]).await.expect("claim");
            assert_eq!(got.map(|j| j.id), Some(prior.id));
            assert!(store
                .claim_in("w", &["prior"])
                .await
                .expect("claim")
                .is_none());
            let got = store.claim_in("w", &["locate", "llm", "scan"]).await;
            assert_eq!(got.expect("claim").map(|j| j.id), Some(llm.id));
            assert!(store.claim("w").await.expect("claim").is_none());
        }
    }

    /// A red-team finding: a run completed long after its last span (no root span: `--idle`)
    /// whose diagnosis on arrival was lost fell between two sweeps (the cursor was on receipt,
    /// the condition on completion). The cursor is the later of the two now.
    #[tokio::test]
    async fn a_run_completed_long_after_its_last_span_is_still_swept() {
        use maslens_trace::TraceBuilder;
        for (store, _dir) in stores().await {
            let t = TraceBuilder::new("late").task("q").step("A", "x").build();
            store.put_trace(&t).await.expect("put");
            sqlx::query(
                "UPDATE runs SET source = 'otlp', received_ns = 1000, completed_ns = 5000
                 WHERE id = 'late'",
            )
            .execute(store.pool())
            .await
            .expect("otlp run");
            let ids = |v: Vec<UndiagnosedRun>| v.into_iter().map(|r| r.id).collect::<Vec<_>>();
            // A sweep whose cursor is past its receipt: not settled yet, then found.
            let early = store.undiagnosed_runs((3000, ""), 4000, 10).await;
            assert!(ids(early.expect("runs")).is_empty());
            let settled = store.undiagnosed_runs((3000, ""), 6000, 10).await;
            assert_eq!(ids(settled.expect("runs")), ["late"]);
        }
    }

    /// Bulk queueing counts only new jobs; undiagnosed runs are the complete, assembled,
    /// non-empty runs without a diagnosis, in keyset pages.
    #[tokio::test]
    async fn undiagnosed_runs_and_bulk_queueing() {
        use maslens_trace::TraceBuilder;
        for (store, _dir) in stores().await {
            for id in ["a", "b", "c"] {
                let t = TraceBuilder::new(id).task("q").step("A", "x").build();
                store.put_trace(&t).await.expect("put");
            }
            store
                .put_trace(&TraceBuilder::new("empty").task("q").build())
                .await
                .expect("put");
            let d = crate::NewDiagnosis {
                run_id: "b".into(),
                method: "prior".into(),
                ..crate::NewDiagnosis::default()
            };
            store.add_diagnosis(&d).await.expect("diagnosis");
            let all = store
                .undiagnosed_runs((0, ""), i64::MAX, 10)
                .await
                .expect("runs");
            let ids: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
            let mut sorted = ids.clone();
            sorted.sort();
            assert_eq!(sorted, ["a", "c"], "no diagnosed or empty run");
            let first = store
                .undiagnosed_runs((0, ""), i64::MAX, 1)
                .await
                .expect("page");
            let next = store
                .undiagnosed_runs((first[0].swept_ns, &first[0].id), i64::MAX, 10)
                .await
                .expect("page");
            assert_eq!(first.len() + next.len(), 2);
            assert_ne!(first[0].id, next[0].id);
            // An OTLP run is the server's to diagnose on arrival until it settled.
            sqlx::query("UPDATE runs SET source = 'otlp', completed_ns = 100 WHERE id = 'a'")
                .execute(store.pool())
                .await
                .expect("otlp run");
            let ids = |v: Vec<UndiagnosedRun>| v.into_iter().map(|r| r.id).collect::<Vec<_>>();
            let fresh = store
                .undiagnosed_runs((0, ""), 100, 10)
                .await
                .expect("runs");
            assert_eq!(ids(fresh), ["c"]);
            let settled = store
                .undiagnosed_runs((0, ""), 101, 10)
                .await
                .expect("runs");
            assert_eq!(ids(settled).len(), 2);
            let jobs: Vec<NewJob> = all
                .iter()
                .map(|r| NewJob {
                    run_id: r.id.clone(),
                    method: "prior".into(),
                    params: json!({}),
                    dedup: format!("{}/prior/{}", r.id, r.trace_hash),
                })
                .collect();
            assert_eq!(store.enqueue_many(&jobs).await.expect("queue"), 2);
            assert_eq!(store.enqueue_many(&jobs).await.expect("again"), 0);
            assert_eq!(store.enqueue_many(&[]).await.expect("none"), 0);
            let a = store.jobs_of("a").await.expect("jobs");
            assert_eq!(a.len(), 1);
            assert_eq!(
                (a[0].method.as_str(), a[0].state),
                ("prior", JobState::Queued)
            );
        }
    }

    #[tokio::test]
    async fn concurrent_workers_never_share_a_job() {
        for (store, _dir) in stores().await {
            for i in 0..40 {
                store
                    .enqueue(&format!("r{i}"), "prior", &json!({}), &format!("k{i}"))
                    .await
                    .expect("enqueue");
            }
            let mut handles = Vec::new();
            for w in 0..4 {
                let store = store.clone();
                handles.push(tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some(j) = store.claim(&format!("w{w}")).await.expect("claim") {
                        got.push(j.id);
                    }
                    got
                }));
            }
            let mut all = Vec::new();
            for h in handles {
                all.extend(h.await.expect("join"));
            }
            assert_eq!(all.len(), 40);
            assert_eq!(all.iter().collect::<BTreeSet<_>>().len(), 40);
        }
    }

    #[tokio::test]
    async fn batches_count_their_jobs_by_state() {
        for (store, _dir) in stores().await {
            let mut ids = Vec::new();
            for i in 0..4 {
                let j = store
                    .enqueue(&format!("r{i}"), "locate", &json!({}), &format!("b{i}"))
                    .await
                    .expect("enqueue");
                ids.push(j.id);
            }
            // One job in two batches; adding twice is a no-op; an empty batch is all zeros.
            store.add_to_batch("ui-1", &ids[..3]).await.expect("batch");
            store.add_to_batch("ui-1", &ids[..1]).await.expect("again");
            store.add_to_batch("ui-2", &ids[2..]).await.expect("batch");
            store.add_to_batch("ui-3", &[]).await.expect("empty");
            assert_eq!(
                store.batch_progress("ui-1").await.expect("progress"),
                BatchProgress {
                    total: 3,
                    queued: 3,
                    ..BatchProgress::default()
                }
            );
            let a = store.claim("w").await.expect("claim").expect("job");
            store.finish(&a.id, "d").await.expect("finish");
            let b = store.claim("w").await.expect("claim").expect("job");
            store.fail(&b.id, "boom", 1).await.expect("fail");
            let c = store.claim("w").await.expect("claim").expect("job");
            let p1 = store.batch_progress("ui-1").await.expect("progress");
            assert_eq!(
                p1,
                BatchProgress {
                    total: 3,
                    queued: 0,
                    running: 1,
                    done: 1,
                    failed: 1,
                }
            );
            assert_eq!(c.id, ids[2]);
            let p2 = store.batch_progress("ui-2").await.expect("progress");
            assert_eq!((p2.total, p2.running, p2.queued), (2, 1, 1));
            assert_eq!(
                store.batch_progress("none").await.expect("progress"),
                BatchProgress::default()
            );
            let jobs = store.batch_jobs("ui-1").await.expect("jobs");
            let got: BTreeSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
            assert_eq!(got, ids[..3].iter().map(String::as_str).collect());
            assert!(store.batch_jobs("none").await.expect("jobs").is_empty());
            let json = serde_json::to_value(p1).expect("json");
            assert_eq!(json["done"], 1);
        }
    }
}
