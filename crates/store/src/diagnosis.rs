//! Diagnoses: what a method said about a run, with everything needed to trust and reproduce it
//! (method, model, prompt versions, parameters, usage, time). A scan's implicit-failure events
//! also get a row each; credit tables and eval reports are kept as their owning crates write them.

use serde_json::Value;
use sqlx::any::AnyRow;

use crate::{col, json_col, now_ns, q, sha256, Result, Store};

/// One implicit-failure event of a scan.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ImplicitEvent {
    pub step: Option<i64>,
    pub agent: Option<String>,
    pub error_type: Option<String>,
    pub severity: Option<f64>,
    /// The step that absorbed it, when one did.
    pub absorbed_by: Option<i64>,
    /// The whole event as the method wrote it.
    pub event: Value,
}

/// A diagnosis to store.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NewDiagnosis {
    pub run_id: String,
    /// `prior`, `locate`, `scan`, ...
    pub method: String,
    pub model: Option<String>,
    /// Prompt id -> SHA-256 of its text.
    pub prompt_versions: Value,
    pub params: Value,
    /// `maslens_llm::Totals` as JSON.
    pub usage: Value,
    pub trace_hash: Option<String>,
    /// The localization (agent, step index), when the method gives one.
    pub agent: Option<String>,
    pub step: Option<i64>,
    /// The decisive step's span, for write-back.
    pub otel_trace_id: Option<String>,
    pub span_id: Option<String>,
    pub confidence: Option<f64>,
    pub risk: Option<f64>,
    /// The method's whole verdict.
    pub result: Value,
    pub elapsed_ms: Option<i64>,
    #[serde(default)]
    pub events: Vec<ImplicitEvent>,
}

/// Where a localization verdict came from, as a diagnosis records it (`params`): enough to tell
/// whether two diagnoses can be compared.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Provenance {
    /// The job kind the row is filed under: `prior` (on arrival) or `locate`.
    pub kind: String,
    /// The method's typed options, as JSON (`maslens_core::locate::LocateOptions`).
    pub options: Value,
    /// Usage of the verdict (`maslens_llm::Totals` as JSON), `null` without model calls.
    pub usage: Value,
    /// Prompt id -> SHA-256 of its text, for the prompts the method sends.
    pub prompts: Value,
    pub elapsed_ms: Option<i64>,
}

impl Provenance {
    /// A provenance from typed parts (serialized here, so each front end writes one line).
    pub fn of(
        kind: &str,
        options: &impl serde::Serialize,
        usage: &impl serde::Serialize,
        prompts: Value,
        elapsed: std::time::Duration,
    ) -> Provenance {
        Provenance {
            kind: kind.to_string(),
            options: serde_json::to_value(options).unwrap_or(Value::Null),
            usage: serde_json::to_value(usage).unwrap_or(Value::Null),
            prompts,
            elapsed_ms: i64::try_from(elapsed.as_millis()).ok(),
        }
    }
}

impl NewDiagnosis {
    /// A localization verdict of `trace` (the one `maslens_trace::Verdict`, written as the
    /// front ends write it, with `trace`) as a diagnosis: what `maslens locate --db` and
    /// `maslens serve`'s jobs store alike. The agent and step columns hold the verdict's primary
    /// pair; `params` records the method, model, prompts, revision and options.
    pub fn from_verdict(
        trace: &maslens_trace::Trace,
        verdict: &maslens_trace::Verdict,
        trace_hash: &str,
        p: Provenance,
    ) -> NewDiagnosis {
        let span = verdict
            .step
            .and_then(|i| trace.position_of(i))
            .and_then(|pos| trace.steps[pos].span.as_ref());
        NewDiagnosis {
            run_id: trace.id.clone(),
            method: p.kind,
            model: verdict.model.clone(),
            prompt_versions: p.prompts,
            params: serde_json::json!({
                "method": verdict.method,
                "model": verdict.model,
                "prompt_version": verdict.prompt_version,
                "revision": verdict.revision,
                "options": p.options,
            }),
            usage: p.usage,
            trace_hash: Some(trace_hash.to_string()),
            agent: verdict.agent.clone(),
            step: verdict.step.and_then(|s| i64::try_from(s).ok()),
            otel_trace_id: span.map(|s| s.trace_id.clone()),
            span_id: span.map(|s| s.span_id.clone()),
            confidence: verdict.probability,
            risk: None,
            result: verdict.to_json(&trace.id),
            elapsed_ms: p.elapsed_ms,
            events: Vec::new(),
        }
    }
}

/// A stored diagnosis.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Diagnosis {
    pub id: String,
    pub created_ns: i64,
    #[serde(flatten)]
    pub body: NewDiagnosis,
}

const COLS: &str = "id, run_id, method, model, prompt_versions, params, usage, trace_hash, agent, \
     step, span_id, otel_trace_id, confidence, risk, result, created_ns, elapsed_ms";

fn json_or_null(row: &AnyRow, name: &'static str, id: &str) -> Result<Value> {
    let text: Option<String> = col(row, name)?;
    match text {
        Some(t) => json_col(&t, || format!("diagnosis {id} field {name}")),
        None => Ok(Value::Null),
    }
}

fn diagnosis(row: &AnyRow) -> Result<Diagnosis> {
    let id: String = col(row, "id")?;
    Ok(Diagnosis {
        created_ns: col(row, "created_ns")?,
        body: NewDiagnosis {
            run_id: col(row, "run_id")?,
            method: col(row, "method")?,
            model: col(row, "model")?,
            prompt_versions: json_or_null(row, "prompt_versions", &id)?,
            params: json_or_null(row, "params", &id)?,
            usage: json_or_null(row, "usage", &id)?,
            trace_hash: col(row, "trace_hash")?,
            agent: col(row, "agent")?,
            step: col(row, "step")?,
            otel_trace_id: col(row, "otel_trace_id")?,
            span_id: col(row, "span_id")?,
            confidence: col(row, "confidence")?,
            risk: col(row, "risk")?,
            result: json_or_null(row, "result", &id)?,
            elapsed_ms: col(row, "elapsed_ms")?,
            events: Vec::new(),
        },
        id,
    })
}

fn text(v: &Value) -> Option<String> {
    (!v.is_null()).then(|| v.to_string())
}

/// A fresh id: hex of SHA-256 over what identifies the row and the time.
pub fn new_id(parts: &[&str]) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let seed = format!(
        "{}|{}|{}|{}",
        parts.join("|"),
        now_ns(),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    sha256(seed.as_bytes())[..24].to_string()
}

/// Rows committed with a diagnosis, in its transaction ([`Store::add_diagnosis_with`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct FollowUp<'a> {
    /// Write-back targets to queue it for (the outbox).
    pub outbox: &'a [&'a str],
    /// The job that made it, marked done.
    pub finish_job: Option<&'a str>,
}

impl Store {
    /// Store a diagnosis (and its events); the run's latest localization and risk follow it.
    pub async fn add_diagnosis(&self, d: &NewDiagnosis) -> Result<String> {
        self.add_diagnosis_with(d, FollowUp::default()).await
    }

    /// [`Store::add_diagnosis`] with its follow-up rows (the outbox, the job's end) in the same
    /// transaction: a killed server leaves either all of them or none.
    pub async fn add_diagnosis_with(&self, d: &NewDiagnosis, f: FollowUp<'_>) -> Result<String> {
        let mut tx = self.write_tx().await?;
        let id = insert_diagnosis(&mut tx, d).await?;
        for target in f.outbox {
            crate::outbox::insert(&mut *tx, &id, target).await?;
        }
        if let Some(job) = f.finish_job {
            crate::jobs::finish(&mut *tx, job, &id).await?;
        }
        tx.commit().await.map_err(q("commit diagnosis"))?;
        Ok(id)
    }
}

async fn insert_diagnosis(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    d: &NewDiagnosis,
) -> Result<String> {
    {
        let id = new_id(&[&d.run_id, &d.method]);
        let now = now_ns();
        sqlx::query(
            "INSERT INTO diagnoses (id, run_id, method, model, prompt_versions, params, usage,
               trace_hash, agent, step, span_id, otel_trace_id, confidence, risk, result,
               created_ns, elapsed_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
        )
        .bind(id.as_str())
        .bind(d.run_id.as_str())
        .bind(d.method.as_str())
        .bind(d.model.clone())
        .bind(text(&d.prompt_versions))
        .bind(text(&d.params))
        .bind(text(&d.usage))
        .bind(d.trace_hash.clone())
        .bind(d.agent.clone())
        .bind(d.step)
        .bind(d.span_id.clone())
        .bind(d.otel_trace_id.clone())
        .bind(d.confidence)
        .bind(d.risk)
        .bind(d.result.to_string())
        .bind(now)
        .bind(d.elapsed_ms)
        .execute(&mut **tx)
        .await
        .map_err(q("insert diagnosis"))?;
        for (i, e) in d.events.iter().enumerate() {
            sqlx::query(
                "INSERT INTO implicit_events (diagnosis_id, run_id, ordinal, step, agent,
                   error_type, severity, absorbed_by, event)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(id.as_str())
            .bind(d.run_id.as_str())
            .bind(i64::try_from(i).unwrap_or(i64::MAX))
            .bind(e.step)
            .bind(e.agent.clone())
            .bind(e.error_type.clone())
            .bind(e.severity)
            .bind(e.absorbed_by)
            .bind(e.event.to_string())
            .execute(&mut **tx)
            .await
            .map_err(q("insert implicit event"))?;
        }
        if let Some(agent) = &d.agent {
            sqlx::query("UPDATE runs SET located_agent = $1, located_step = $2 WHERE id = $3")
                .bind(agent.as_str())
                .bind(d.step)
                .bind(d.run_id.as_str())
                .execute(&mut **tx)
                .await
                .map_err(q("run localization"))?;
        }
        if let Some(risk) = d.risk {
            sqlx::query("UPDATE runs SET risk = $1 WHERE id = $2")
                .bind(risk)
                .bind(d.run_id.as_str())
                .execute(&mut **tx)
                .await
                .map_err(q("run risk"))?;
        }
        Ok(id)
    }
}

impl Store {
    /// Every diagnosis of a run, oldest first, with their events.
    /// Whether `method` stored a diagnosis of this version (`trace_hash`) of the run.
    pub async fn has_diagnosis(
        &self,
        run_id: &str,
        method: &str,
        trace_hash: &str,
    ) -> Result<bool> {
        let found: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM diagnoses WHERE run_id = $1 AND method = $2 AND trace_hash = $3 LIMIT 1",
        )
        .bind(run_id)
        .bind(method)
        .bind(trace_hash)
        .fetch_optional(&self.pool)
        .await
        .map_err(q("find diagnosis"))?;
        Ok(found.is_some())
    }

    pub async fn diagnoses(&self, run_id: &str) -> Result<Vec<Diagnosis>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLS} FROM diagnoses WHERE run_id = $1 ORDER BY created_ns, id"
        )))
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(q("diagnoses"))?;
        let mut out: Vec<Diagnosis> = rows.iter().map(diagnosis).collect::<Result<_>>()?;
        for d in &mut out {
            d.body.events = self.events(&d.id).await?;
        }
        Ok(out)
    }

    /// One diagnosis by id.
    pub async fn diagnosis(&self, id: &str) -> Result<Option<Diagnosis>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLS} FROM diagnoses WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(q("diagnosis"))?;
        match row {
            Some(r) => {
                let mut d = diagnosis(&r)?;
                d.body.events = self.events(&d.id).await?;
                Ok(Some(d))
            }
            None => Ok(None),
        }
    }

    async fn events(&self, diagnosis_id: &str) -> Result<Vec<ImplicitEvent>> {
        let rows = sqlx::query(
            "SELECT step, agent, error_type, severity, absorbed_by, event FROM implicit_events
             WHERE diagnosis_id = $1 ORDER BY ordinal",
        )
        .bind(diagnosis_id)
        .fetch_all(&self.pool)
        .await
        .map_err(q("implicit events"))?;
        rows.iter()
            .map(|r| {
                let event: String = col(r, "event")?;
                Ok(ImplicitEvent {
                    step: col(r, "step")?,
                    agent: col(r, "agent")?,
                    error_type: col(r, "error_type")?,
                    severity: col(r, "severity")?,
                    absorbed_by: col(r, "absorbed_by")?,
                    event: json_col(&event, || format!("event of diagnosis {diagnosis_id}"))?,
                })
            })
            .collect()
    }

    /// Store a credit table (`maslens_credit::CreditRun` JSON), an eval report (`maslens_eval`
    /// report JSON) or an improvement loop's report (named by its system). Returns its id.
    pub async fn add_report(
        &self,
        kind: ReportKind,
        name: &str,
        run_id: Option<&str>,
        body: &Value,
    ) -> Result<String> {
        let id = new_id(&[name]);
        let sql = match kind {
            ReportKind::Credit => {
                "INSERT INTO credit_tables (id, name, body, created_ns, run_id)
                 VALUES ($1, $2, $3, $4, $5)"
            }
            ReportKind::Eval => {
                "INSERT INTO eval_reports (id, name, body, created_ns) VALUES ($1, $2, $3, $4)"
            }
            ReportKind::Improve => {
                "INSERT INTO improve_reports (id, name, body, created_ns) VALUES ($1, $2, $3, $4)"
            }
        };
        let mut query = sqlx::query(sql)
            .bind(id.as_str())
            .bind(name)
            .bind(body.to_string())
            .bind(now_ns());
        if kind == ReportKind::Credit {
            query = query.bind(run_id.map(String::from));
        }
        query
            .execute(&self.pool)
            .await
            .map_err(q("insert report"))?;
        Ok(id)
    }

    /// Reports of one kind, newest first: `(id, name, created_ns, body)`.
    pub async fn reports(&self, kind: ReportKind) -> Result<Vec<(String, String, i64, Value)>> {
        let sql = match kind {
            ReportKind::Credit => {
                "SELECT id, name, created_ns, body FROM credit_tables ORDER BY created_ns DESC"
            }
            ReportKind::Eval => {
                "SELECT id, name, created_ns, body FROM eval_reports ORDER BY created_ns DESC"
            }
            ReportKind::Improve => {
                "SELECT id, name, created_ns, body FROM improve_reports ORDER BY created_ns DESC"
            }
        };
        let rows = sqlx::query(sql)
            .fetch_all(&self.pool)
            .await
            .map_err(q("reports"))?;
        rows.iter().map(report_row).collect()
    }
}

impl Store {
    /// One credit table or eval report: `(name, created_ns, run_id, body)` (eval reports belong
    /// to no run).
    pub async fn report(
        &self,
        kind: ReportKind,
        id: &str,
    ) -> Result<Option<(String, i64, Option<String>, Value)>> {
        let sql = match kind {
            ReportKind::Credit => {
                "SELECT name, created_ns, run_id, body FROM credit_tables WHERE id = $1"
            }
            ReportKind::Eval => "SELECT name, created_ns, body FROM eval_reports WHERE id = $1",
            ReportKind::Improve => {
                "SELECT name, created_ns, body FROM improve_reports WHERE id = $1"
            }
        };
        let row = sqlx::query(sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(q("report"))?;
        let Some(r) = row else { return Ok(None) };
        let body: String = col(&r, "body")?;
        let body = json_col(&body, || format!("report {id}"))?;
        let run_id: Option<String> = match kind {
            ReportKind::Credit => col(&r, "run_id")?,
            ReportKind::Eval | ReportKind::Improve => None,
        };
        Ok(Some((
            col(&r, "name")?,
            col(&r, "created_ns")?,
            run_id,
            body,
        )))
    }

    /// The credit tables of one run, newest first: `(id, name, created_ns, body)`.
    pub async fn reports_of_run(&self, run_id: &str) -> Result<Vec<(String, String, i64, Value)>> {
        let rows = sqlx::query(
            "SELECT id, name, created_ns, body FROM credit_tables WHERE run_id = $1
             ORDER BY created_ns DESC, id",
        )
        .bind(run_id)
        .fetch_all(&self.pool)
        .await
        .map_err(q("reports of run"))?;
        rows.iter().map(report_row).collect()
    }
}

/// A report list row: `(id, name, created_ns, body)`.
fn report_row(r: &AnyRow) -> Result<(String, String, i64, Value)> {
    let id: String = col(r, "id")?;
    let body: String = col(r, "body")?;
    let body = json_col(&body, || format!("report {id}"))?;
    Ok((id, col(r, "name")?, col(r, "created_ns")?, body))
}

/// Which report table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportKind {
    Credit,
    Eval,
    /// The improvement loop's report (`maslens improve --db`), named by its system.
    Improve,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::stores;
    use crate::RunFilter;
    use maslens_trace::TraceBuilder;
    use serde_json::json;

    #[tokio::test]
    async fn diagnoses_round_trip_and_update_the_run() {
        for (store, _dir) in stores().await {
            let t = TraceBuilder::new("r1")
                .step("Planner", "a")
                .step("Coder", "b")
                .build();
            store.put_trace(&t).await.expect("put");
            let d = NewDiagnosis {
                run_id: "r1".into(),
                method: "scan".into(),
                model: Some("local:smollm2-135m".into()),
                prompt_versions: json!({"implicit/detect.v2": "abc"}),
                params: json!({"budget": 3}),
                usage: json!({"calls": 1, "prompt_tokens": 10}),
                agent: Some("Coder".into()),
                step: Some(1),
                risk: Some(0.75),
                result: json!({"events": 1}),
                events: vec![ImplicitEvent {
                    step: Some(0),
                    agent: Some("Planner".into()),
                    error_type: Some("omission".into()),
                    severity: Some(0.5),
                    absorbed_by: Some(1),
                    event: json!({"why": "<script>x</script>"}),
                }],
                ..NewDiagnosis::default()
            };
            let id = store.add_diagnosis(&d).await.expect("add");
            let back = store.diagnosis(&id).await.expect("get").expect("exists");
            assert_eq!(back.body, d);
            assert_eq!(store.diagnoses("r1").await.expect("list").len(), 1);
            let risky = store
                .list_runs(&RunFilter {
                    min_risk: Some(0.7),
                    located_agent: Some("Coder".into()),
                    ..RunFilter::default()
                })
                .await
                .expect("filter");
            assert_eq!(risky.len(), 1);
            let eval = store
                .add_report(
                    ReportKind::Eval,
                    "who&when",
                    None,
                    &json!({"format_version": 3}),
                )
                .await
                .expect("report");
            let reports = store.reports(ReportKind::Eval).await.expect("reports");
            assert_eq!(reports[0].0, eval);
            assert_eq!(reports[0].3["format_version"], 3);
            let (name, _, run, body) = store
                .report(ReportKind::Eval, &eval)
                .await
                .expect("report")
                .expect("exists");
            assert_eq!(
                (name.as_str(), run, body["format_version"].as_i64()),
                ("who&when", None, Some(3))
            );
            let credit = store
                .add_report(
                    ReportKind::Credit,
                    "debate",
                    Some("r1"),
                    &json!({"roles": 2}),
                )
                .await
                .expect("credit");
            store
                .add_report(ReportKind::Credit, "other", Some("r2"), &json!({}))
                .await
                .expect("credit");
            let (_, _, run, _) = store
                .report(ReportKind::Credit, &credit)
                .await
                .expect("report")
                .expect("exists");
            assert_eq!(run.as_deref(), Some("r1"));
            assert!(store
                .report(ReportKind::Credit, &eval)
                .await
                .expect("report")
                .is_none());
            let improve = store
                .add_report(ReportKind::Improve, "planner-coder", None, &json!({"k": 1}))
                .await
                .expect("improve");
            let listed = store.reports(ReportKind::Improve).await.expect("reports");
            assert_eq!((listed.len(), listed[0].0.as_str()), (1, improve.as_str()));
            let (name, _, run, body) = store
                .report(ReportKind::Improve, &improve)
                .await
                .expect("report")
                .expect("exists");
            assert_eq!(
                (name.as_str(), run, body["k"].as_i64()),
                ("planner-coder", None, Some(1))
            );
            let of_run = store.reports_of_run("r1").await.expect("of run");
            assert_eq!(of_run.len(), 1);
            assert_eq!(
                (of_run[0].0.as_str(), of_run[0].1.as_str()),
                (credit.as_str(), "debate")
            );
            assert_eq!(of_run[0].3["roles"], 2);
        }
    }
}
