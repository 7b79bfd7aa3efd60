//! From stored spans to diagnoses: assembly, completion, the prior on arrival and on runs stored
//! without a diagnosis, the queue workers (one lane for the instant prior, one for LLM methods).
//! Every method is the library call the CLI makes (`maslens_core::locate`, `maslens_implicit::scan`).

use std::sync::Arc;
use std::time::Instant;

use maslens_core::localize::Setup;
use maslens_core::locate::{LocateOptions, Method};
use maslens_locate::Protocol;
use maslens_store::{NewDiagnosis, Provenance, Store};
use maslens_trace::Trace;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::{nanos, AppState, JobMethod, Policy};

/// Assemble runs whose spans changed; complete the quiet ones and diagnose them; give back jobs
/// of dead workers; queue the prior on runs stored without a diagnosis ([`Sweeper`], after
/// assembly in the same task, so it never races this server's own diagnosis on arrival).
pub async fn assemble_loop(
    state: Arc<AppState>,
    mut shutdown: watch::Receiver<bool>,
    first_sweep: Option<SweepReport>,
) {
    // Jobs of servers that died (a restart of this one included) go back to the queue.
    let mut last_requeue: Option<Instant> = None;
    let mut sweeper = Sweeper {
        since_ns: 0,
        last: None,
        report: first_sweep,
    };
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
            _ = sweeper.tick(&state) => {}
            _ = shutdown.changed() => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(state.config.tick) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Told how many runs the start-up sweep queued for the prior, or why it could not.
pub type SweepReport = Box<dyn FnOnce(Result<u64, maslens_store::StoreError>) + Send>;

/// A later sweep looks again at runs received or completed this long before the previous one
/// began (the clocks of other writers, a run written while the previous sweep read); an OTLP run
/// is swept only this long after it completed.
const SWEEP_OVERLAP_NS: i64 = 60_000_000_000;

/// Finds runs stored without a diagnosis: every run at start-up, then every `config.sweep` the
/// runs received since the previous sweep began.
struct Sweeper {
    since_ns: i64,
    last: Option<Instant>,
    report: Option<SweepReport>,
}

impl Sweeper {
    async fn tick(&mut self, state: &AppState) {
        if self.last.is_some_and(|t| t.elapsed() < state.config.sweep) {
            return;
        }
        self.last = Some(Instant::now());
        let started = maslens_store::now_ns();
        let r = queue_undiagnosed(state, self.since_ns).await;
        match &r {
            // A failed sweep is tried again from where it started.
            Ok(_) => self.since_ns = started.saturating_sub(SWEEP_OVERLAP_NS),
            Err(e) => tracing::warn!(%e, "looking for runs without a diagnosis"),
        }
        match (self.report.take(), r) {
            (Some(report), r) => report(r),
            (None, Ok(n)) if n > 0 => {
                tracing::info!(n, "runs stored without a diagnosis queued for the prior")
            }
            (None, _) => {}
        }
    }
}

/// What the start-up sweep did, as `serve` says it on stderr; nothing when it queued nothing.
pub fn sweep_message(r: &Result<u64, maslens_store::StoreError>) -> Option<String> {
    match r {
        Ok(0) => None,
        Ok(1) => {
            Some("queued the prior (no LLM, instant) on 1 run stored without a diagnosis".into())
        }
        Ok(n) => Some(format!(
            "queued the prior (no LLM, instant) on {n} runs stored without a diagnosis"
        )),
        Err(e) => Some(format!(
            "warning: could not look for runs stored without a diagnosis: {e}"
        )),
    }
}

/// Queue the prior (no LLM, milliseconds) on every run received at or after `since_ns` that is
/// complete, has steps and has no diagnosis at all: runs that came in other than through OTLP
/// (`maslens import --db`, `POST /api/runs`), or whose diagnosis on arrival was lost. LLM
/// methods are never queued here (they cost money). Returns how many jobs this call queued (one
/// job per run and trace version: a run whose prior job exists already, failed included, is not
/// queued again).
pub async fn queue_undiagnosed(
    state: &AppState,
    since_ns: i64,
) -> Result<u64, maslens_store::StoreError> {
    const PAGE: i64 = 500;
    let params = json!({});
    // An OTLP run completed this long ago whose diagnosis on arrival is missing lost it; a more
    // recent one is being diagnosed by the server that completed it.
    let settled_ns = maslens_store::now_ns().saturating_sub(SWEEP_OVERLAP_NS);
    let mut after = (since_ns, String::new());
    let mut queued = 0;
    loop {
        let runs = state
            .store
            .undiagnosed_runs((after.0, &after.1), settled_ns, PAGE)
            .await?;
        let jobs: Vec<maslens_store::NewJob> = runs
            .iter()
            .map(|r| maslens_store::NewJob {
                run_id: r.id.clone(),
                method: JobMethod::Prior.as_str().into(),
                params: params.clone(),
                dedup: dedup_key(&r.id, JobMethod::Prior, &r.trace_hash, &params),
            })
            .collect();
        queued += state.store.enqueue_many(&jobs).await?;
        match runs.last() {
            Some(last) if runs.len() as i64 == PAGE => {
                after = (last.swept_ns, last.id.clone());
            }
            _ => return Ok(queued),
        }
    }
}

/// One pass: assemble, then complete and diagnose what is due.
pub async fn assemble_once(state: &AppState) -> Result<(), maslens_store::StoreError> {
    for (run, seq) in state.store.pending_assembly(200).await? {
        // A large run still growing waits a multiple of its last assembly's time.
        if !state.pace.due(&run, Instant::now()) {
            continue;
        }
        let started = Instant::now();
        state.store.assemble_or_fail(&run, seq).await;
        state.pace.record(&run, Instant::now(), started.elapsed());
    }
    let now = maslens_store::now_ns();
    let due = state
        .store
        .due_for_completion(now, nanos(state.config.settle), nanos(state.config.idle))
        .await?;
    for (run, seq) in due {
        if state.store.mark_complete(&run, seq).await? {
            if let Err(e) = on_complete(state, &run).await {
                diagnosis_failed(state, &run, seq, &e).await;
            }
        }
    }
    Ok(())
}

/// A run whose diagnosis on arrival failed: when the store failed (a full disk, a lost
/// connection) it is opened again, so a later pass diagnoses it once the store takes writes (if
/// even that write fails, the sweep for runs without a diagnosis queues the prior); otherwise it
/// is marked failed with its reason. The other runs go on either way.
async fn diagnosis_failed(state: &AppState, run: &str, seq: i64, e: &maslens_store::StoreError) {
    if e.is_transient() {
        tracing::warn!(%run, %e, "diagnosis on arrival deferred: the store failed; tried again");
        if let Err(e) = state.store.reopen(run, seq).await {
            tracing::warn!(%run, %e, "could not reopen the run; the sweep will queue the prior");
        }
        return;
    }
    tracing::warn!(%run, %e, "diagnosis on arrival failed; the run is marked failed");
    let reason = format!("diagnosis on arrival: {e}");
    if let Err(e) = state.store.mark_failed(run, seq, &reason).await {
        tracing::warn!(%run, %e, "could not mark the run failed");
    }
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
    // A run with nothing to read gets no diagnosis: its warning says why (API, UI, `show`).
    if let Some(w) = trace.not_understood() {
        tracing::info!(
            run,
            "not diagnosed, the run was not understood: {}",
            w.line()
        );
        return Ok(());
    }
    // Tried again after the store failed: the prior's diagnosis of this version may be stored.
    let has_prior = state.store.has_diagnosis(run, "prior", &hash).await?;
    if let Some(d) = (!has_prior)
        .then(|| prior_diagnosis(state, &trace, &hash))
        .flatten()
    {
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
    let dedup = dedup_key(run, method, trace_hash, params);
    store.enqueue(run, method.as_str(), params, &dedup).await
}

/// One job per run, method, trace version and parameters.
fn dedup_key(run: &str, method: JobMethod, trace_hash: &str, params: &Value) -> String {
    format!("{run}/{}/{trace_hash}/{params}", method.as_str())
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

/// A worker's share of the queue: the instant methods (no LLM) apart from the LLM methods, each
/// drained by its own worker, so that a prior never waits behind a slow LLM job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Instant,
    Llm,
}

impl Lane {
    /// The methods (as the queue stores them) this lane's worker claims.
    pub fn methods(self) -> Vec<&'static str> {
        JobMethod::ALL
            .iter()
            .filter(|m| m.instant() == (self == Lane::Instant))
            .map(|m| m.as_str())
            .collect()
    }
}

/// Drain `lane`'s jobs, one at a time (the LLM layer bounds the calls within a job). At shutdown
/// a running job is interrupted and given back to the queue ([`Store::release`]), so the server
/// stops at once and the next start resumes the job.
pub async fn worker_loop(state: Arc<AppState>, mut shutdown: watch::Receiver<bool>, lane: Lane) {
    let methods = lane.methods();
    loop {
        match work_once_until(&state, &methods, &mut shutdown).await {
            Ok(Some(true)) => continue,
            Ok(Some(false)) => {}
            Ok(None) => return,
            Err(e) => tracing::warn!(%e, ?lane, "queue"),
        }
        tokio::select! {
            _ = tokio::time::sleep(state.config.tick) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Claim and run one job of any method; false when the queue was empty.
pub async fn work_once(state: &AppState) -> Result<bool, maslens_store::StoreError> {
    let (_tx, mut never) = watch::channel(false);
    Ok(work_once_until(state, &[], &mut never)
        .await?
        .unwrap_or(false))
}

/// Claim one job of `methods` (any when empty) and run it, interrupted when `shutdown` changes
/// (then `None`, the job given back).
async fn work_once_until(
    state: &AppState,
    methods: &[&str],
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<bool>, maslens_store::StoreError> {
    let Some(job) = state.store.claim_in(&state.config.worker, methods).await? else {
        return Ok(Some(false));
    };
    let limit = state.config.job_timeout;
    let result = tokio::select! {
        r = tokio::time::timeout(limit, run_job(state, &job)) => r.unwrap_or_else(|_| Err(format!(
            "timed out after {} s (--job-timeout): the model {} did not answer in time",
            limit.as_secs_f64(),
            state.config.model
        ))),
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
    if let Some(w) = trace.not_understood() {
        return Err(format!(
            "{}: not diagnosed, the run was not understood: {}",
            trace.id,
            w.line()
        ));
    }
    let method =
        JobMethod::parse(&job.method).ok_or_else(|| format!("unknown method {:?}", job.method))?;
    match method.localizer() {
        Some(Method::Prior) => prior_diagnosis(state, &trace, &hash)
            .ok_or_else(|| format!("{}: the trace has no steps to localize", trace.id)),
        Some(m) => locate(state, &trace, &hash, m, &job.params).await,
        None => scan(state, &trace, &hash).await,
    }
}

pub(crate) async fn models(state: &AppState) -> Result<&maslens_core::locate::Models, String> {
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

/// A locate job: the localizer `maslens locate --method METHOD [--protocol P]` builds, with the
/// same options and model, stored as `maslens locate --db` stores it.
async fn locate(
    state: &AppState,
    trace: &Trace,
    hash: &str,
    method: Method,
    params: &Value,
) -> Result<NewDiagnosis, String> {
    let started = Instant::now();
    let protocol = match params["protocol"].as_str() {
        Some(p) => p.parse().map_err(|e| format!("job parameters: {e}"))?,
        None => Protocol::AllAtOnce,
    };
    let models = models(state).await?;
    let opts = LocateOptions {
        method,
        protocol,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::{background, background_with, Policy, ServeConfig};
    use maslens_store::JobState;
    use maslens_trace::TraceBuilder;
    use std::time::Duration;

    async fn state(model: &str) -> (Arc<AppState>, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&maslens_store::default_url(dir.path()))
            .await
            .expect("store");
        let config = ServeConfig {
            tick: Duration::from_millis(50),
            sweep: Duration::from_millis(100),
            policy: Policy::Off,
            model: model.into(),
            llm: maslens_llm::OpenOptions {
                cache_mode: maslens_llm::CacheMode::Off,
                ..maslens_llm::OpenOptions::default()
            },
            ..ServeConfig::default()
        };
        (AppState::new(store, config).expect("state"), dir)
    }

    fn trace(id: &str) -> Trace {
        TraceBuilder::new(id)
            .task("q")
            .step("A", "x")
            .step("B", "y")
            .build()
    }

    /// A model endpoint that accepts connections and never answers: an LLM job on it runs
    /// until the server stops.
    async fn hanging_model() -> String {
        let hang = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = hang.local_addr().expect("addr");
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((c, _)) = hang.accept().await {
                held.push(c);
            }
        });
        format!("openai:m@http://{addr}/v1/")
    }

    async fn wait_for(store: &Store, job: &str, want: JobState) -> maslens_store::Job {
        for _ in 0..200 {
            let j = store.job(job).await.expect("job").expect("exists");
            if j.state == want {
                return j;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("job {job} never became {want:?}");
    }

    /// Issue 37 item 7b: a prior queued behind an LLM job that does not end is done while the LLM
    /// job still runs (one worker per lane).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prior_job_finishes_while_an_llm_job_runs() {
        let (state, _dir) = state(&hanging_model().await).await;
        let store = state.store.clone();
        let h1 = store.put_trace(&trace("r1")).await.expect("put");
        let h2 = store.put_trace(&trace("r2")).await.expect("put");
        let llm = enqueue(&store, "r1", JobMethod::Llm, &h1, &json!({}))
            .await
            .expect("enqueue");
        let prior = enqueue(&store, "r2", JobMethod::Prior, &h2, &json!({}))
            .await
            .expect("enqueue");
        assert!(
            llm.created_ns < prior.created_ns,
            "the LLM job is first in line"
        );
        let (stop, rx) = watch::channel(false);
        let bg = tokio::spawn(background(state, rx));
        wait_for(&store, &llm.id, JobState::Running).await;
        let done = wait_for(&store, &prior.id, JobState::Done).await;
        assert!(done.diagnosis_id.is_some());
        let running = store.job(&llm.id).await.expect("job").expect("exists");
        assert_eq!(running.state, JobState::Running, "{running:?}");
        let _ = stop.send(true);
        let _ = bg.await;
    }

    /// Issue 37 item 7a: runs stored without a diagnosis get the prior (and nothing else) at
    /// start-up, counted for the start-up message, and later while the server runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_stored_without_a_diagnosis_get_the_prior() {
        let (state, _dir) = state(&hanging_model().await).await;
        let store = state.store.clone();
        for id in ["a", "b", "c"] {
            store.put_trace(&trace(id)).await.expect("put");
        }
        store
            .put_trace(&TraceBuilder::new("empty").task("q").build())
            .await
            .expect("put");
        let hash = store.put_trace(&trace("c")).await.expect("put");
        let d = prior_diagnosis(&state, &trace("c"), &hash).expect("prior");
        store.add_diagnosis(&d).await.expect("diagnosis");
        let (tx, first) = tokio::sync::oneshot::channel();
        let report: SweepReport = Box::new(move |r| {
            let _ = tx.send(r.map_err(|e| e.to_string()));
        });
        let (stop, rx) = watch::channel(false);
        let bg = tokio::spawn(background_with(state.clone(), rx, Some(report)));
        assert_eq!(first.await.expect("reported"), Ok(2), "a and b");
        let diagnosed = |id: &'static str| {
            let store = store.clone();
            async move {
                for _ in 0..200 {
                    let d = store.diagnoses(id).await.expect("diagnoses");
                    if !d.is_empty() {
                        return d;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                panic!("{id} never got a diagnosis");
            }
        };
        for id in ["a", "b"] {
            let d = diagnosed(id).await;
            assert_eq!(d.len(), 1);
            assert_eq!(d[0].body.method, "prior");
            let jobs = store.jobs_of(id).await.expect("jobs");
            assert_eq!(jobs.len(), 1, "the prior only, no LLM job: {jobs:?}");
        }
        assert_eq!(store.diagnoses("c").await.expect("c").len(), 1);
        assert!(store.jobs_of("c").await.expect("jobs").is_empty());
        assert!(store.jobs_of("empty").await.expect("jobs").is_empty());
        // Imported while the server runs: found by a later sweep.
        store.put_trace(&trace("late")).await.expect("put");
        assert_eq!(diagnosed("late").await[0].body.method, "prior");
        // Nothing left to queue.
        assert_eq!(queue_undiagnosed(&state, 0).await.expect("sweep"), 0);
        assert_eq!(sweep_message(&Ok(0)), None);
        assert_eq!(
            sweep_message(&Ok(1)).as_deref(),
            Some("queued the prior (no LLM, instant) on 1 run stored without a diagnosis")
        );
        let _ = stop.send(true);
        let _ = bg.await;
    }
}
