//! The improvement loop's report: written by the loop (`maslens.improve`) as JSON
//! (`report.json`), rendered here as Markdown and HTML from `templates/improve.*.j2`.

use std::collections::BTreeMap;

use maslens_llm::Totals;
use serde::{Deserialize, Serialize};

use super::{Acceptance, AgentCredit, Replay, Rewritten};

/// The version of [`ImproveReport`]'s JSON (2: `usage` is the one usage type, [`Totals`], and
/// `system_runs` its own field).
pub const FORMAT_VERSION: u32 = 2;

/// One run of the loop (the credit-targeted one, or the black-box baseline).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImproveReport {
    pub format_version: u32,
    pub system: String,
    pub model: String,
    pub seed: u64,
    pub train_tasks: usize,
    pub held_out_tasks: usize,
    /// Agents rewritten per iteration (bottom-k by credit).
    pub k: usize,
    pub level: f64,
    pub resamples: usize,
    pub initial_prompts: BTreeMap<String, String>,
    pub final_prompts: BTreeMap<String, String>,
    /// Held-out score of the initial and of the final prompts.
    pub initial_score: Option<f64>,
    pub final_score: Option<f64>,
    pub iterations: Vec<Iteration>,
    /// The black-box baseline at the same measured call budget, when it ran.
    pub baseline: Option<Baseline>,
    /// Replay from the decisive step with the proposal, when it ran ([`Replay`]).
    pub replay: Option<Replay>,
    /// Model calls (cache hits included), tokens and cost of the loop (locate, rewrite; the
    /// baseline's calls are in [`Baseline::calls`]): the model's totals, the one usage type.
    pub usage: Totals,
    /// System runs this call made for the loop (runs taken from the resume state not counted;
    /// the baseline's and the replay's are in theirs).
    pub system_runs: u64,
    /// Why the loop stopped before its iterations were done (a budget), when it did.
    pub stopped: Option<String>,
    pub notes: Vec<String>,
}

/// One iteration: run, localize, credit, rewrite, verify.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Iteration {
    pub index: usize,
    /// Mean training score with the prompts this iteration started from.
    pub train_score: f64,
    pub failures: usize,
    pub located: usize,
    /// Every prompted agent's credit, weakest first.
    pub credit: Vec<AgentCredit>,
    /// Located at agents the loop cannot change, with counts.
    pub unprompted: BTreeMap<String, usize>,
    pub chosen: Vec<String>,
    pub rewrites: Vec<Rewritten>,
    pub acceptance: Option<Acceptance>,
    /// The rewrite proposed a candidate already tried: not verified again.
    pub repeated: bool,
    /// The loop's model calls when the iteration ended (cumulative).
    pub calls: u64,
}

/// The black-box baseline: whole-system rewrites until it spent the loop's calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Baseline {
    /// The call budget it was given (the loop's measured calls).
    pub budget_calls: u64,
    pub calls: u64,
    pub proposals: Vec<Proposal>,
    pub final_prompts: BTreeMap<String, String>,
    pub final_score: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Proposal {
    pub index: usize,
    /// Agents whose prompt the proposal changed; none when it failed (`rejected`).
    pub changed: Vec<String>,
    pub rejected: Option<String>,
    pub acceptance: Option<Acceptance>,
}

const TEMPLATES: [(&str, &str); 2] = [
    (
        "improve.md.j2",
        include_str!("../../templates/improve.md.j2"),
    ),
    (
        "improve.html.j2",
        include_str!("../../templates/improve.html.j2"),
    ),
];

impl ImproveReport {
    /// Agents whose final prompt differs from the initial one.
    pub fn changed(&self) -> Vec<String> {
        changed(&self.initial_prompts, &self.final_prompts)
    }

    pub fn to_markdown(&self) -> String {
        maslens_eval::page::render_or_note(&TEMPLATES, "improve.md.j2", self.context())
    }

    pub fn to_html(&self) -> String {
        maslens_eval::page::render_or_note(&TEMPLATES, "improve.html.j2", self.context())
    }

    fn context(&self) -> serde_json::Value {
        let diffs: Vec<serde_json::Value> = self
            .changed()
            .iter()
            .map(|a| {
                serde_json::json!({"agent": a, "before": self.initial_prompts.get(a),
                                   "after": self.final_prompts.get(a)})
            })
            .collect();
        let baseline_changed = self
            .baseline
            .as_ref()
            .map(|b| changed(&self.initial_prompts, &b.final_prompts));
        serde_json::json!({
            "title": format!("maslens improve: {}", self.system),
            "r": self, "changed": self.changed(), "diffs": diffs,
            "baseline_changed": baseline_changed,
        })
    }
}

/// Agents of `after` whose prompt differs from `before`.
pub fn changed(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    after
        .iter()
        .filter(|(a, p)| before.get(*a) != Some(*p))
        .map(|(a, _)| a.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::improve::accept;

    fn report() -> ImproveReport {
        let prompts = |coder: &str| {
            BTreeMap::from([
                ("Coder".to_string(), coder.to_string()),
                ("Planner".to_string(), "Plan.".to_string()),
            ])
        };
        ImproveReport {
            format_version: FORMAT_VERSION,
            system: "toy".into(),
            model: "m".into(),
            train_tasks: 6,
            held_out_tasks: 6,
            k: 1,
            level: 0.95,
            resamples: 1000,
            initial_prompts: prompts("Code <fast>."),
            final_prompts: prompts("Code carefully."),
            initial_score: Some(0.0),
            final_score: Some(1.0),
            iterations: vec![Iteration {
                index: 1,
                failures: 6,
                located: 5,
                chosen: vec!["Coder".into()],
                acceptance: Some(accept(&[0.0; 6], &[1.0; 6], 1000, 0.95, 0).unwrap()),
                calls: 7,
                ..Iteration::default()
            }],
            baseline: Some(Baseline {
                budget_calls: 7,
                calls: 2,
                proposals: vec![Proposal {
                    index: 1,
                    rejected: Some("not JSON".into()),
                    ..Proposal::default()
                }],
                final_prompts: prompts("Code <fast>."),
                final_score: Some(0.0),
            }),
            ..ImproveReport::default()
        }
    }

    #[test]
    fn markdown_and_html_show_scores_iterations_diffs_and_the_baseline() {
        let r = report();
        assert_eq!(r.changed(), ["Coder"]);
        let md = r.to_markdown();
        assert!(md.contains("| final prompts | 1.0 |"), "{md}");
        assert!(md.contains("| 1 | 0.0 | 6 | 5 |"), "{md}");
        assert!(md.contains("+1.000 [+1.000, +1.000] | yes | 7 |"), "{md}");
        assert!(
            md.contains("### Coder") && md.contains("Code carefully."),
            "{md}"
        );
        assert!(md.contains("- (not JSON)"), "{md}");
        let html = r.to_html();
        assert!(html.contains("Code &lt;fast&gt;."), "escaped: {html}");
        assert!(!html.contains("report template"), "{html}");
    }

    #[test]
    fn the_replay_section_shows_rates_intervals_and_what_was_skipped() {
        use maslens_implicit::replay::ReplayOutcome;
        let row = |task: &str, intervention: &str, success: bool| ReplayOutcome {
            config: "held-out".into(),
            task: task.into(),
            trace: format!("run-{task}"),
            if_step: Some(2),
            original_success: false,
            intervention: intervention.into(),
            success,
        };
        let rows = vec![row("a", "noop", false), row("a", "fix", true)];
        let stats = crate::improve::replay::stats(&rows, 200, 0).unwrap();
        let mut r = report();
        r.replay = Some(Replay {
            kept: true,
            changed: vec!["Coder".into()],
            rows,
            stats,
            skipped: vec!["run-x: not located".into()],
            ..Replay::default()
        });
        let md = r.to_markdown();
        assert!(
            md.contains("| held-out | 1 | 1 | n/a -> n/a | 0.00 -> 1.00 | +1.000"),
            "{md}"
        );
        assert!(md.contains("- not replayed: run-x: not located"), "{md}");
        let html = r.to_html();
        assert!(html.contains("0.00 → 1.00"), "{html}");
        r.replay = Some(Replay {
            unsupported: Some("cannot resume".into()),
            ..Replay::default()
        });
        assert!(r.to_markdown().contains("Not replayed: cannot resume"));
    }
}
