//! From stored spans to diagnoses: assembly, completion, the prior on arrival, the queue worker.
//! Every method is the library call the CLI makes (`maslens_core::locate`, `maslens_implicit`).

use std::sync::Arc;
use std::time::Instant;

use maslens_core::localize::Setup;
use maslens_core::locate::{LocateOptions, Method};
use maslens_store::{NewDiagnosis, Provenance, Store};
use maslens_trace::Trace;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::{AppState, JobMethod, Policy};

/// Assemble runs whose spans changed; complete the quiet ones and diagnose them; give back jobs
/// of dead workers.
pub async fn assemble_loop(state: Arc<AppState>, mut shutdown: watch::Receiver<bool>) {
    // Jobs of servers that died (a restart of this one included) go back to the queue.
    let mut last_requeue: Option<Instant> = None;
    loop {
        // A long pass (a huge run) is dropped at shutdown: its transaction rolls back and the
        // run stays pending for the next start.
        tokio::select! {
            r = assemble_once(&state) => if let Err(e) = r {
                tracing::warn!(%e, "assembly");
            },
            _ = shutdown.changed() => return,
        }
        if last_requeue.is_none_or(|t| t.elapsed() > std::time::Duration::from_secs(10)) {
            last_requeue = Some(Instant::now());
            let cutoff = maslens_store::now_ns().saturating_sub(nanos(state.config.lease));
            match state.store.requeue_stale(cutoff).await {
                Ok(n) if n > 0 => tracing::info!(n, "jobs of dead workers queued again"),
                Ok(_) => {}
                Err(e) => tracing::warn!(%e, "requeue"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(state.config.tick) => {}
            _ = shutdown.changed() => return,
        }
    }
}

fn nanos(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// One pass: assemble, then complete and diagnose what is due.
pub async fn assemble_once(state: &AppState) -> Result<(), maslens_store::StoreError> {
    state.store.assemble_pending(200).await?;
    let now = maslens_store::now_ns();
    let due = state
        .store
        .due_for_completion(now, nanos(state.config.settle), nanos(state.config.idle))
        .await?;
    for (run, seq) in due {
        if state.store.mark_complete(&run, seq).await? {
            // A run whose diagnosis fails is marked failed with its reason; the others go on.
            if let Err(e) = on_complete(state, &run).await {
                tracing::warn!(%run, %e, "diagnosis on arrival failed; the run is marked failed");
                let reason = format!("diagnosis on arrival: {e}");
                if let Err(e) = state.store.mark_failed(&run, seq, &reason).await {
                    tracing::warn!(%run, %e, "could not mark the run failed");
                }
            }
        }
    }
    Ok(())
}

/// A run just completed: the prior localizes it now; LLM methods are queued by policy.
async fn on_complete(state: &AppState, run: &str) -> Result<(), maslens_store::StoreError> {
    let Some(stored) = state.store.run(run).await? else {
        return Ok(());
    };
    let Some(trace) = stored.trace else {
        return Ok(());
    };
    let hash = stored.summary.trace_hash.unwrap_or_default();
    if let Some(d) = prior_diagnosis(state, &trace, &hash) {
        let targets = writeback_targets(state);
        let follow = maslens_store::FollowUp {
            outbox: &targets,
            ..Default::default()
        };
        state.store.add_diagnosis_with(&d, follow).await?;
    }
    let wanted = match state.config.policy {
        Policy::Off => false,
        Policy::All => true,
        Policy::Failed => trace.outcome == maslens_trace::Outcome::Failure,
    };
    if wanted {
        for m in &state.config.on_arrival {
            enqueue(&state.store, run, *m, &hash, &json!({})).await?;
        }
    }
    Ok(())
}

/// Queue `method` on a run's current trace version (once per version and parameters).
pub async fn enqueue(
    store: &Store,
    run: &str,
    method: JobMethod,
    trace_hash: &str,
    params: &Value,
) -> Result<maslens_store::Job, maslens_store::StoreError> {
    let dedup = format!("{run}/{}/{trace_hash}/{params}", method.as_str());
    store.enqueue(run, method.as_str(), params, &dedup).await
}

/// The write-back targets configured (outbox rows queued with each diagnosis).
pub(crate) fn writeback_targets(state: &AppState) -> Vec<&'static str> {
    let w = &state.config.writeback;
    [
        (w.otlp_logs.is_some(), "otlp"),
        (w.phoenix.is_some(), "phoenix"),
    ]
    .into_iter()
    .filter_map(|(on, t)| on.then_some(t))
    .collect()
}

/// The prior's localization as a diagnosis (none for a trace without steps).
pub fn prior_diagnosis(state: &AppState, trace: &Trace, hash: &str) -> Option<NewDiagnosis> {
    prior_to_diagnosis(&state.prior, trace, hash)
}

/// The prior's verdict of `trace` as a diagnosis: the verdict `maslens locate --method prior`
/// gives ([`maslens_core::localize::prior_located`]), stored as `--db` stores it.
pub fn prior_to_diagnosis(
    prior: &maslens_core::locate::PriorSource,
    trace: &Trace,
    hash: &str,
) -> Option<NewDiagnosis> {
    let started = Instant::now();
    let opts = LocateOptions {
        method: Method::Prior,
        ..LocateOptions::default()
    };
    let l = maslens_core::localize::prior_located(prior, trace, opts.allow_non_acting).ok()?;
    let p = Provenance::of("prior", &opts, &l.usage, json!({}), started.elapsed());
    Some(NewDiagnosis::from_verdict(trace, &l.verdict, hash, p))
}

/// Drain the queue, one job at a time (the LLM layer bounds the calls within a job). At
/// shutdown a running job is interrupted and given back to the queue ([`Store::release`]), so
/// the server stops at once and the next start resumes the job.
pub async fn worker_loop(state: Arc<AppState>, mut shutdown: watch::Receiver<bool>) {
    loop {
        match work_once_until(&state, &mut shutdown).await {
            Ok(Some(true)) => continue,
            Ok(Some(false)) => {}
            Ok(None) => return,
            Err(e) => tracing::warn!(%e, "queue"),
        }
        tokio::select! {
            _ = tokio::time::sleep(state.config.tick) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Claim and run one job; false when the queue was empty.
pub async fn work_once(state: &AppState) -> Result<bool, maslens_store::StoreError> {
    let (_tx, mut never) = watch::channel(false);
    Ok(work_once_until(state, &mut never).await?.unwrap_or(false))
}

/// [`work_once`], interrupted when `shutdown` changes (then `None`, the job given back).
async fn work_once_until(
    state: &AppState,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<bool>, maslens_store::StoreError> {
    let Some(job) = state.store.claim(&state.config.worker).await? else {
        return Ok(Some(false));
    };
    let result = tokio::select! {
        r = run_job(state, &job) => r,
        _ = shutdown.changed() => {
            tracing::info!(job = %job.id, "stopping: the running job goes back to the queue");
            state.store.release(&job.id).await?;
            return Ok(None);
        }
    };
    match result {
        Ok(d) => {
            // The diagnosis, its outbox rows and the job's end: one transaction.
            let targets = writeback_targets(state);
            let follow = maslens_store::FollowUp {
                outbox: &targets,
                finish_job: Some(&job.id),
            };
            state.store.add_diagnosis_with(&d, follow).await?;
        }
        Err(e) => {
            tracing::warn!(job = %job.id, run = %job.run_id, method = %job.method, %e, "job failed");
            state
                .store
                .fail(&job.id, &e, state.config.max_attempts)
                .await?;
        }
    }
    Ok(Some(true))
}

async fn run_job(state: &AppState, job: &maslens_store::Job) -> Result<NewDiagnosis, String> {
    let stored = state
        .store
        .run(&job.run_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("run {} is not in the store", job.run_id))?;
    let trace = stored
        .trace
        .ok_or_else(|| format!("run {} has no assembled trace yet", job.run_id))?;
    let hash = stored.summary.trace_hash.unwrap_or_default();
    let method =
        JobMethod::parse(&job.method).ok_or_else(|| format!("unknown method {:?}", job.method))?;
    match method.localizer() {
        Some(Method::Prior) => prior_diagnosis(state, &trace, &hash)
            .ok_or_else(|| format!("{}: the trace has no steps to localize", trace.id)),
        Some(m) => locate(state, &trace, &hash, m).await,
        None => scan(state, &trace, &hash).await,
    }
}

async fn models(state: &AppState) -> Result<&maslens_core::locate::Models, String> {
    state
        .models
        .get_or_try_init(|| async {
            let judge = maslens_llm::open(&state.config.model, &state.config.llm)
                .await
                .map_err(|e| format!("cannot open model {}: {e}", state.config.model))?;
            Ok::<_, String>(maslens_core::locate::Models {
                judge,
                evaluators: Vec::new(),
            })
        })
        .await
}

/// A locate job: the localizer `maslens locate --method METHOD` builds, with the same options
/// and model, stored as `maslens locate --db` stores it.
async fn locate(
    state: &AppState,
    trace: &Trace,
    hash: &str,
    method: Method,
) -> Result<NewDiagnosis, String> {
    let started = Instant::now();
    let models = models(state).await?;
    let opts = LocateOptions {
        method,
        ..LocateOptions::default()
    };
    let any_aegis = trace.source.format == "aegis";
    let setup = Setup::new(&opts, Some(models), any_aegis).map_err(|e| e.to_string())?;
    for n in &setup.notes {
        tracing::info!(run = %trace.id, "{n}");
    }
    let chosen = setup.localizer;
    let l = chosen.verdict(trace).await.map_err(|e| e.to_string())?;
    let p = Provenance::of(
        chosen.diagnosis_kind(),
        &opts,
        &l.usage,
        chosen.prompt_hashes(),
        started.elapsed(),
    );
    Ok(NewDiagnosis::from_verdict(trace, &l.verdict, hash, p))
}

async fn scan(state: &AppState, trace: &Trace, hash: &str) -> Result<NewDiagnosis, String> {
    let started = Instant::now();
    let models = models(state).await?;
    let model: &dyn maslens_llm::ChatModel = models.judge.model.as_ref();
    let cfg = maslens_implicit::scan::ScanConfig::default();
    let s = maslens_implicit::scan::scan_trace(&[model], trace, &cfg)
        .await
        .map_err(|e| e.to_string())?;
    Ok(scan_to_diagnosis(
        &s,
        trace,
        hash,
        &state.config.model,
        &json!({"config": "default"}),
        started,
    ))
}

/// A scan of `trace` as a diagnosis with its events (what `maslens scan --db` stores too).
pub fn scan_to_diagnosis(
    s: &maslens_implicit::scan::TraceScan,
    trace: &Trace,
    hash: &str,
    model: &str,
    params: &Value,
    started: Instant,
) -> NewDiagnosis {
    // Each event's weight is the paper's severity-weighted cost term, w_type x w_abs.
    let w = maslens_implicit::weights::Weights::default();
    let events = s
        .events
        .iter()
        .map(|e| maslens_store::ImplicitEvent {
            step: i64::try_from(e.step).ok(),
            agent: Some(e.agent.clone()),
            error_type: serde_json::to_value(e.error_type)
                .ok()
                .and_then(|v| v.as_str().map(String::from)),
            severity: Some(
                w.w_type(e.error_type) * w.w_abs(e.absorption.as_ref().and_then(|a| a.label)),
            ),
            absorbed_by: None,
            event: serde_json::to_value(e).unwrap_or(Value::Null),
        })
        .collect();
    let mut result = serde_json::to_value(s).unwrap_or(Value::Null);
    // The span of each step, so that write-back can put each event on its span.
    let step_spans: Vec<Value> = trace
        .steps
        .iter()
        .filter_map(|st| {
            let sp = st.span.as_ref()?;
            Some(json!({"step": st.index, "trace_id": sp.trace_id, "span_id": sp.span_id}))
        })
        .collect();
    if let Some(o) = result.as_object_mut() {
        o.insert("step_spans".into(), Value::Array(step_spans));
    }
    NewDiagnosis {
        run_id: trace.id.clone(),
        method: "scan".into(),
        model: Some(model.to_string()),
        prompt_versions: json!(maslens_implicit::scan_file::prompt_versions()),
        params: params.clone(),
        usage: serde_json::to_value(s.usage).unwrap_or(Value::Null),
        trace_hash: Some(hash.to_string()),
        risk: Some(s.risk),
        result,
        elapsed_ms: i64::try_from(started.elapsed().as_millis()).ok(),
        events,
        ..NewDiagnosis::default()
    }
}
