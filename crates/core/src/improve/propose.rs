//! A fix proposed for one failure mode (the UI's "Propose a fix", `POST /api/modes/propose`):
//! the mode's agent's system prompt, as its traces recorded it, rewritten by [`super::rewrite`]
//! from the mode's example runs (their decisive steps and reasons). It is a proposal: whether it
//! helps is what the improvement loop's held-out check and replay measure (docs/improve.md).

use std::collections::BTreeMap;

use maslens_llm::ChatModel;
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};

use super::rewrite::{rewrite, Rewritten, REWRITE, REWRITE_INPUT};
use super::Evidence;
use crate::modes::{Mode, ModesReport};
use crate::CoreError;

/// The version of [`FixProposal`]'s JSON.
pub const FORMAT_VERSION: u32 = 1;

/// Example runs of a mode the rewrite is shown at most (group the modes with this many examples).
pub const EXAMPLES: usize = 8;

/// A prompt change proposed for one failure mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixProposal {
    pub format_version: u32,
    pub system: String,
    /// The mode's id and its words, as the modes report gives them.
    pub mode: String,
    pub words: Vec<String>,
    /// The mode's failed runs.
    pub runs: usize,
    pub agent: String,
    /// The agent's system prompt as the traces recorded it.
    pub before: String,
    /// The new prompt, or why there is none.
    pub rewrite: Rewritten,
    /// The runs whose decisive steps the rewrite was shown.
    pub examples: Vec<String>,
    pub model: String,
    /// The prompt template of the rewrite's input.
    pub template: String,
}

impl FixProposal {
    /// The rewrite's prompt templates, id -> SHA-256 of the text (what a stored diagnosis records).
    pub fn prompt_versions() -> serde_json::Value {
        [REWRITE, REWRITE_INPUT]
            .iter()
            .map(|t| {
                let r = maslens_eval::run::PromptRef::new(t.name, t.source);
                (r.id, serde_json::Value::String(r.sha256))
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// The proposal for a person: what it is for, the old and the new prompt.
    pub fn to_markdown(&self) -> String {
        let new = match (&self.rewrite.prompt, &self.rewrite.rejected) {
            (Some(p), _) => format!("Proposed:\n\n```text\n{p}\n```\n"),
            (None, why) => format!("No proposal: {}.\n", why.as_deref().unwrap_or("no answer")),
        };
        format!(
            "# A fix proposed for {agent}\n\nSystem {system}, failure mode {mode} ({words}; {runs} \
             runs). Model `{model}`, prompt `{template}`, shown {n} example runs: {examples}.\n\n\
             Now:\n\n```text\n{before}\n```\n\n{new}\nA proposal, not a verified fix: the \
             improvement loop (`maslens improve`, docs/improve.md) verifies a change on your system.\n",
            agent = self.agent,
            system = self.system,
            mode = self.mode,
            words = self.words.join(", "),
            runs = self.runs,
            model = self.model,
            template = self.template,
            n = self.examples.len(),
            examples = self.examples.join(", "),
            before = self.before,
        )
    }

    /// One paragraph for a person or a span annotation.
    pub fn note(&self) -> String {
        match &self.rewrite.prompt {
            Some(p) => format!(
                "maslens proposes a new system prompt for {} (failure mode {}: {}; {} runs): {p}",
                self.agent,
                self.mode,
                self.words.join(", "),
                self.runs
            ),
            None => format!(
                "maslens could not propose a prompt for {} (failure mode {}): {}",
                self.agent,
                self.mode,
                self.rewrite.rejected.as_deref().unwrap_or("no answer")
            ),
        }
    }
}

/// `agent`'s system prompt as the first of `traces` that records one has it.
pub fn prompt_of<'a>(agent: &str, traces: impl IntoIterator<Item = &'a Trace>) -> Option<String> {
    traces.into_iter().find_map(|t| {
        t.agents
            .iter()
            .find(|a| a.name == agent)
            .and_then(|a| a.system_prompt.clone())
            .filter(|p| !p.trim().is_empty())
    })
}

/// The traces of `mode`'s example runs that `trace_of` finds (by run id), in example order.
fn example_traces<'a>(mode: &Mode, trace_of: impl Fn(&str) -> Option<&'a Trace>) -> Vec<&'a Trace> {
    mode.examples
        .iter()
        .filter_map(|ex| trace_of(&ex.run))
        .collect()
}

/// The evidence of `mode`'s examples whose run `trace_of` finds and that has a step.
pub fn evidence_of_mode<'a>(
    mode: &Mode,
    trace_of: impl Fn(&str) -> Option<&'a Trace>,
) -> Vec<Evidence> {
    let Some(agent) = &mode.agent else {
        return Vec::new();
    };
    mode.examples
        .iter()
        .filter_map(|ex| {
            let trace = trace_of(&ex.run)?;
            Some(Evidence::at(trace, agent, ex.step?, ex.reason.clone()))
        })
        .collect()
}

/// What a proposal for a mode is made from: its agent, the agent's recorded prompt, and the
/// evidence of its examples.
struct Inputs {
    agent: String,
    before: String,
    evidence: Vec<Evidence>,
}

/// The [`Inputs`] of `mode` from its example runs' traces (`trace_of`: a run id's trace, when
/// there is one), or why there are none: the mode names no agent, no example records the
/// agent's system prompt, or no example has a located step.
fn inputs<'a>(mode: &Mode, trace_of: impl Fn(&str) -> Option<&'a Trace>) -> Result<Inputs, String> {
    let Some(agent) = mode.agent.clone() else {
        return Err("the mode has no located agent: there is no prompt to change".into());
    };
    let Some(before) = prompt_of(&agent, example_traces(mode, &trace_of)) else {
        return Err(format!(
            "its runs do not record {agent}'s system prompt (over OpenTelemetry: \
             gen_ai.system_instructions or a system message); run the improvement loop on the \
             system instead (docs/improve.md)"
        ));
    };
    let evidence = evidence_of_mode(mode, &trace_of);
    if evidence.is_empty() {
        return Err("no example run has a located step in a stored trace".into());
    }
    Ok(Inputs {
        agent,
        before,
        evidence,
    })
}

/// Why [`propose`] cannot propose a fix for `mode` (see [`inputs`]), or `None` when it can. The
/// modes reports mark each mode with it ([`mark`]), so a front end offers "propose a fix" only
/// where one can be made.
pub fn obstacle<'a>(mode: &Mode, trace_of: impl Fn(&str) -> Option<&'a Trace>) -> Option<String> {
    inputs(mode, trace_of).err()
}

/// Mark every mode of `report` with its [`obstacle`] (`Mode::no_proposal`).
pub fn mark<'a>(report: &mut ModesReport, trace_of: impl Fn(&str) -> Option<&'a Trace>) {
    for mode in report.systems.iter_mut().flat_map(|s| s.modes.iter_mut()) {
        mode.no_proposal = obstacle(mode, &trace_of);
    }
}

/// A failure mode and the traces its proposal reads: what [`propose`] takes.
#[derive(Debug, Clone)]
pub struct ModeToFix {
    pub system: String,
    pub mode: Mode,
    /// The traces by run id (every trace given, so any example's is there).
    pub traces: BTreeMap<String, Trace>,
}

/// Mode `id` (of `system`, when given) among the failure modes of `traces`, grouped as
/// [`crate::modes::of_traces`] groups them but with [`EXAMPLES`] examples per mode (the
/// examples the rewrite is shown). An unknown id is [`CoreError::NotFound`].
pub fn mode_of_traces(
    traces: Vec<Trace>,
    selection: &crate::modes::Selection,
    options: crate::modes::ModesOptions,
    id: &str,
) -> Result<ModeToFix, CoreError> {
    let options = crate::modes::ModesOptions {
        examples: EXAMPLES,
        ..options
    };
    let report = crate::modes::of_traces(&traces, selection, options)?;
    let (system, mode) = report.find(selection.system.as_deref(), id)?;
    Ok(ModeToFix {
        system: system.to_string(),
        mode: mode.clone(),
        traces: traces.into_iter().map(|t| (t.id.clone(), t)).collect(),
    })
}

/// Propose a new prompt for `mode`'s agent of `system` from its examples (`traces`: their
/// traces by run id). An error when the mode names no agent, no trace records the agent's
/// prompt, or no example has a located step; a failed call or a budget stop is an error too.
pub async fn propose(
    model: &dyn ChatModel,
    system: &str,
    mode: &Mode,
    traces: &BTreeMap<String, Trace>,
    max_tokens: u32,
    seed: u64,
) -> Result<FixProposal, CoreError> {
    let Inputs {
        agent,
        before,
        evidence,
    } = inputs(mode, |run| traces.get(run)).map_err(|why| {
        CoreError::Invalid(format!(
            "no fix can be proposed for failure mode {}: {why}",
            mode.id
        ))
    })?;
    let rewrite = rewrite(model, &agent, &before, &evidence, max_tokens, seed).await?;
    Ok(FixProposal {
        format_version: FORMAT_VERSION,
        system: system.to_string(),
        mode: mode.id.clone(),
        words: mode.words.clone(),
        runs: mode.runs,
        agent,
        before,
        rewrite,
        examples: evidence.iter().map(|e| e.trace.clone()).collect(),
        model: model.id().to_string(),
        template: REWRITE_INPUT.name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modes::Example;
    use maslens_llm::testing::ScriptedModel;

    fn trace(id: &str, prompt: Option<&str>) -> Trace {
        let mut t = maslens_trace::builder::TraceBuilder::new(id)
            .task("Compute (2 + 3) * 4.")
            .step("Planner", "Add 2 and 3.")
            .step("Solver", "The product is 21.")
            .build();
        if let Some(p) = prompt {
            let pos = t.ensure_agent("Solver", maslens_trace::AgentKind::Worker);
            t.agents[pos].system_prompt = Some(p.into());
        }
        t
    }

    fn mode(agent: Option<&str>) -> Mode {
        Mode {
            id: "m1".into(),
            agent: agent.map(String::from),
            words: vec!["product".into()],
            runs: 2,
            examples: vec![
                Example {
                    run: "r1".into(),
                    step: Some(1),
                    reason: "multiplied wrongly".into(),
                },
                Example {
                    run: "r2".into(),
                    step: Some(1),
                    reason: "off by one".into(),
                },
                Example {
                    run: "gone".into(),
                    step: Some(1),
                    reason: "not stored".into(),
                },
            ],
            ..Mode::default()
        }
    }

    #[tokio::test]
    async fn a_mode_gets_its_agents_prompt_rewritten_from_its_examples() {
        let traces = BTreeMap::from([
            (
                "r1".to_string(),
                trace("r1", Some("You multiply. Be quick.")),
            ),
            ("r2".to_string(), trace("r2", None)),
        ]);
        let model =
            ScriptedModel::new("fixture").on("improve/rewrite_input", "You multiply carefully.");
        let p = propose(&model, "calc", &mode(Some("Solver")), &traces, 200, 0)
            .await
            .unwrap();
        assert_eq!(p.before, "You multiply. Be quick.");
        assert_eq!(p.rewrite.prompt.as_deref(), Some("You multiply carefully."));
        assert_eq!(
            p.examples,
            ["r1", "r2"],
            "the example without a stored trace is left out"
        );
        let shown = &model.calls.lock().unwrap()[0].messages[1].content;
        assert!(
            shown.contains("multiplied wrongly") && shown.contains("The product is 21."),
            "{shown}"
        );
        assert!(
            p.note()
                .contains("for Solver (failure mode m1: product; 2 runs)"),
            "{}",
            p.note()
        );
    }

    #[test]
    fn the_modes_report_marks_the_modes_no_fix_can_be_proposed_for() {
        let traces = BTreeMap::from([
            ("r1".to_string(), trace("r1", Some("You multiply."))),
            ("r2".to_string(), trace("r2", None)),
        ]);
        let mut unlocated = mode(None);
        unlocated.id = "m2".into();
        let mut unrecorded = mode(Some("Solver"));
        unrecorded.id = "m3".into();
        unrecorded.examples.retain(|e| e.run != "r1");
        let mut report = crate::modes::group(&[], crate::modes::ModesOptions::default());
        report.systems.push(crate::modes::SystemModes {
            system: "calc".into(),
            failed_runs: 4,
            located_runs: 4,
            scanned_runs: 0,
            modes: vec![mode(Some("Solver")), unlocated, unrecorded],
        });
        mark(&mut report, |run| traces.get(run));
        let marks: Vec<Option<&str>> = report.systems[0]
            .modes
            .iter()
            .map(|m| m.no_proposal.as_deref())
            .collect();
        assert_eq!(marks[0], None, "r1 records Solver's prompt");
        assert!(marks[1].is_some_and(|w| w.contains("no located agent")));
        assert!(marks[2].is_some_and(|w| w.contains("do not record Solver's system prompt")));
        let md = report.to_markdown();
        assert!(md.contains("| `--propose` |"), "{md}");
        assert!(
            md.contains("- No fix can be proposed for `m2`: the mode has no located agent"),
            "{md}"
        );
    }

    #[tokio::test]
    async fn a_mode_without_agent_prompt_or_steps_says_why() {
        let model = ScriptedModel::new("fixture").on("improve/rewrite_input", "x");
        let with_prompt = BTreeMap::from([("r1".to_string(), trace("r1", Some("p")))]);
        let none = BTreeMap::from([("r1".to_string(), trace("r1", None))]);
        let e = propose(&model, "s", &mode(None), &with_prompt, 10, 0)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("has no located agent"), "{e}");
        let e = propose(&model, "s", &mode(Some("Solver")), &none, 10, 0)
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("do not record Solver's system prompt"),
            "{e}"
        );
        let e = propose(&model, "s", &mode(Some("Solver")), &BTreeMap::new(), 10, 0)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("do not record"), "{e}");
        assert!(
            model.calls.lock().unwrap().is_empty(),
            "no call without a prompt and evidence"
        );
    }
}
