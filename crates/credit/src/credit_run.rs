//! The credit file `maslens credit` writes ([`CreditRun`], versioned by [`CREDIT_FILE_VERSION`]):
//! the corpus table, per-system tables, per-trace credit, and the verdict each trace gets. The
//! corpus loop that makes it (bounded concurrency, progress) is `maslens_core::credit`.

use crate::credit::CreditTable;
use crate::critic::{AGENT_TURN_EVAL, AGGREGATOR_EVAL, PEER_VIEW_JUDGE};
use crate::trace_credit::{
    SystemCredit, TraceCredit, GENERIC_TURN_EVAL, GENERIC_TURN_EVAL_INPUT, GENERIC_WINDOW_JUDGE,
    GENERIC_WINDOW_JUDGE_INPUT,
};
use maslens_trace::{Trace, Verdict};
use serde::{Deserialize, Serialize};

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
