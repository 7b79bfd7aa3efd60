//! `maslens credit` as one call: structural (role) and temporal (segment) credit over a corpus
//! with a bounded number of concurrent critic runs, progress, per-trace failures kept, and the
//! credit file (`maslens_credit::credit_run::CreditRun`). The CLI and the Python package call
//! [`credit_traces`]; one trace's credit is `maslens_credit::trace_credit::trace_credit`.

use maslens_credit::credit_run::{prompt_versions, CreditRun, CREDIT_FILE_VERSION};
use maslens_credit::trace_credit::{
    corpus_table, system_tables, trace_credit, TraceCredit, TraceCreditOptions,
};
use maslens_credit::CreditError;
use maslens_eval::run::Progress;
use maslens_llm::{ChatModel, LlmError};
use maslens_trace::Trace;
use std::sync::Arc;

/// Score `traces` with at most `concurrency` traces in flight; a trace that fails is listed in
/// `errors` and the run goes on. `progress` hears each trace as it finishes (in completion
/// order, which with concurrency is not input order).
pub async fn credit_traces(
    model: Arc<dyn ChatModel>,
    traces: &[Trace],
    opts: &TraceCreditOptions,
    concurrency: usize,
    progress: &dyn Progress,
) -> CreditRun {
    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for (i, t) in traces.iter().enumerate() {
        let (m, t, o, sem) = (model.clone(), t.clone(), opts.clone(), sem.clone());
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            (i, trace_credit(m.as_ref(), &t, &o).await)
        });
    }
    progress.start(traces.len());
    // Err(None): deferred to the batch file; Err(Some(why)): failed.
    let mut out: Vec<Option<Result<TraceCredit, Option<String>>>> = vec![None; traces.len()];
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((i, r)) => {
                let id = &traces[i].id;
                progress.case(id);
                out[i] = Some(r.map_err(|e| match e {
                    CreditError::Llm(LlmError::Deferred { .. }) => {
                        progress.deferred(id);
                        None
                    }
                    e => {
                        progress.error(id, &e.to_string());
                        Some(e.to_string())
                    }
                }));
                progress.case_done();
            }
            Err(e) => tracing::error!("credit task failed: {e}"),
        }
    }
    progress.finish();
    let mut ok = Vec::new();
    let (mut errors, mut deferred) = (Vec::new(), Vec::new());
    for (t, r) in traces.iter().zip(out) {
        match r {
            Some(Ok(c)) => ok.push(c),
            Some(Err(Some(e))) => errors.push(format!("{}: {e}", t.id)),
            Some(Err(None)) => deferred.push(t.id.clone()),
            None => errors.push(format!("{}: not scored (its task failed)", t.id)),
        }
    }
    CreditRun {
        format_version: CREDIT_FILE_VERSION,
        model: model.id().to_string(),
        lambda: opts.lambda,
        table: corpus_table(&ok),
        systems: system_tables(&ok),
        traces: ok,
        errors,
        deferred,
        prompt_versions: prompt_versions(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_credit::credit_run::VERDICT_METHOD;
    use maslens_llm::testing::ScriptedModel;
    use maslens_trace::TraceBuilder;

    #[tokio::test]
    async fn scores_in_input_order_and_writes_verdicts() {
        let trace = |id: &str| {
            TraceBuilder::new(id)
                .task("Find X.")
                .step("planner", "plan")
                .step("coder", "code")
                .build()
        };
        let (first, second) = (trace("g"), trace("h"));
        let m: Arc<dyn ChatModel> = Arc::new(
            ScriptedModel::new("fixture")
                .on(
                    "credit/generic_turn_eval_input",
                    r#"{"failure_pattern":"NONE","explanation":"x","score":4}"#,
                )
                .on(
                    "credit/generic_window_judge_input",
                    r#"{"scores":{"planner":4,"coder":4},"segment_score":4}"#,
                ),
        );
        let opts = TraceCreditOptions::default();
        let run = credit_traces(
            m,
            &[first.clone(), second.clone()],
            &opts,
            2,
            &maslens_eval::run::Silent,
        )
        .await;
        assert_eq!(run.format_version, CREDIT_FILE_VERSION);
        assert!(run.errors.is_empty(), "{:?}", run.errors);
        let ids: Vec<&str> = run.traces.iter().map(|c| c.trace_id.as_str()).collect();
        assert_eq!(ids, ["g", "h"]);
        assert!(run
            .prompt_versions
            .contains(&"credit/generic_turn_eval_input.v2".to_string()));
        let back = run.with_verdicts(&[second, first]).unwrap();
        assert_eq!(back[0].id, "g", "run order");
        let v = &back[0].labels.verdicts[0];
        assert_eq!(v.method, VERDICT_METHOD);
        assert_eq!(
            v.prompt_version.as_deref(),
            Some("credit/generic_turn_eval_input.v2")
        );
        let json = serde_json::to_string(&run).unwrap();
        let read: CreditRun = serde_json::from_str(&json).unwrap();
        assert_eq!(read, run);
        assert!(run
            .title()
            .starts_with("Credit over 2 trace(s), model fixture"));
    }
}
