//! `maslens credit` as a library path: score every trace (role x segment credit) with a bounded
//! number of concurrent critic runs, pool the corpus table, and the credit file it writes
//! ([`CreditRun`], versioned by [`CREDIT_FILE_VERSION`]), with the verdict each trace gets.

use crate::credit::CreditTable;
use crate::critic::{AGENT_TURN_EVAL, AGGREGATOR_EVAL, PEER_VIEW_JUDGE};
use crate::trace_credit::{
    corpus_table, system_tables, trace_credit, SystemCredit, TraceCredit, TraceCreditOptions,
    GENERIC_TURN_EVAL, GENERIC_TURN_EVAL_INPUT, GENERIC_WINDOW_JUDGE, GENERIC_WINDOW_JUDGE_INPUT,
};
use crate::CreditError;
use maslens_eval::run::Progress;
use maslens_llm::{ChatModel, LlmError};
use maslens_trace::{Trace, Verdict};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Version of the credit file (`maslens credit --out FILE`). 1: files before the field existed
/// (their `prompt_versions` listed template files by hand); 2: `format_version`, the prompt
/// versions taken from the templates the run used.
pub const CREDIT_FILE_VERSION: u32 = 2;

/// Verdict method name written back onto traces.
pub const VERDICT_METHOD: &str = "credit/role-segment";

/// A finished credit run over a corpus: the credit file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreditRun {
    #[serde(default = "v1")]
    pub format_version: u32,
    pub model: String,
    pub lambda: f64,
    /// The corpus table (cells: fused credit c; last row: temporal credit).
    pub table: CreditTable,
    /// Per-trace credit, in input order (traces that failed are in `errors`).
    pub traces: Vec<TraceCredit>,
    /// `trace id: why` for each trace that could not be scored.
    pub errors: Vec<String>,
    /// Traces whose critic calls went to a batch file (export mode) instead of being sent: not
    /// failures, a rerun after `maslens batch import` scores them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deferred: Vec<String>,
    pub prompt_versions: Vec<String>,
    /// When the traces come from several multi-agent systems (traces sharing no agent name),
    /// one table per system: the corpus table then mixes roles of different systems, and the
    /// reports show these instead. Empty for one system.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub systems: Vec<SystemCredit>,
}

fn v1() -> u32 {
    1
}

/// Every template a credit run may send.
pub fn prompt_versions() -> Vec<String> {
    [
        AGENT_TURN_EVAL,
        AGGREGATOR_EVAL,
        PEER_VIEW_JUDGE,
        GENERIC_TURN_EVAL,
        GENERIC_TURN_EVAL_INPUT,
        GENERIC_WINDOW_JUDGE,
        GENERIC_WINDOW_JUDGE_INPUT,
    ]
    .iter()
    .map(|t| t.name.to_string())
    .collect()
}

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

impl CreditRun {
    /// A title for the table's renderings.
    pub fn title(&self) -> String {
        format!(
            "Credit over {} trace(s), model {} (cells: fused c; last row: temporal credit)",
            self.traces.len(),
            self.model
        )
    }

    /// The tables a report shows, each with its title: the corpus table, or one per system
    /// when the traces come from several.
    pub fn sections(&self) -> Vec<(String, &CreditTable)> {
        if self.systems.is_empty() {
            return vec![(self.title(), &self.table)];
        }
        let n = self.systems.len();
        self.systems
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let title = format!(
                    "System {} of {n} (agents {}): credit over {} trace(s), model {} (cells: \
                     fused c; last row: temporal credit)",
                    k + 1,
                    s.agents.join(", "),
                    s.traces.len(),
                    self.model
                );
                (title, &s.table)
            })
            .collect()
    }

    /// The run as Markdown: its table, or one per system.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        if !self.systems.is_empty() {
            out.push_str(&systems_note(self.systems.len()));
            out.push_str("\n\n");
        }
        for (title, table) in self.sections() {
            out.push_str(&crate::report::credit_markdown(table, &title));
            out.push('\n');
        }
        out
    }

    /// The run as a self-contained HTML page: a heat map and a table per section.
    pub fn html(&self) -> String {
        let note = (!self.systems.is_empty()).then(|| systems_note(self.systems.len()));
        crate::report::credit_html_sections(&self.sections(), note.as_deref())
    }

    /// The verdict written back onto the trace a credit result belongs to.
    pub fn verdict(&self, c: &TraceCredit) -> Result<Verdict, serde_json::Error> {
        let template = if c.mode == "debate-mcq" {
            AGENT_TURN_EVAL.name
        } else {
            GENERIC_TURN_EVAL_INPUT.name
        };
        Ok(Verdict {
            model: Some(self.model.clone()),
            prompt_version: Some(template.into()),
            ..Verdict::new(VERDICT_METHOD, serde_json::to_value(c)?)
        })
    }

    /// The scored traces of `traces`, each with its credit verdict appended, in run order.
    pub fn with_verdicts(&self, traces: &[Trace]) -> Result<Vec<Trace>, serde_json::Error> {
        let mut out = Vec::new();
        for c in &self.traces {
            if let Some(t) = traces.iter().find(|t| t.id == c.trace_id) {
                let mut t = t.clone();
                t.labels.verdicts.push(self.verdict(c)?);
                out.push(t);
            }
        }
        Ok(out)
    }
}

/// What a report over several systems says first.
fn systems_note(n: usize) -> String {
    format!(
        "These traces come from {n} multi-agent systems (traces that share no agent name): one \
         table per system, since credit is relative to the roles of one system."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
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
