//! Outcome blindness. Detection and absorption prompts may only see the task, the agent
//! roster and the steps. This is enforced twice:
//!
//! 1. by construction: prompts are rendered from a [`BlindView`], which has no field for the
//!    ground truth, the outcome, the labels or the metadata of a trace;
//! 2. by a check on the rendered text ([`check_outcome_blind`]): every outcome-bearing string of
//!    the trace (ground truth, decisive-label reason and agent/step naming, implicit labels,
//!    verdict payloads, outcome-like metadata) may occur in the prompt at most as often as it
//!    occurs in the data the prompt legitimately contains (task, rendered steps, annotation).
//!    A reference answer that an agent itself wrote into a step is trace evidence, not a leak.

use maslens_trace::{Agent, Step, Trace};

/// The only parts of a trace an outcome-blind prompt may be built from.
#[derive(Debug, Clone, Copy)]
pub struct BlindView<'a> {
    pub id: &'a str,
    pub task: &'a str,
    pub agents: &'a [Agent],
    pub steps: &'a [Step],
}

impl<'a> BlindView<'a> {
    pub fn of(trace: &'a Trace) -> Self {
        BlindView {
            id: &trace.id,
            task: &trace.task,
            agents: &trace.agents,
            steps: &trace.steps,
        }
    }

    /// Position in `steps` of the step with source index `index`.
    pub fn position(&self, index: usize) -> Option<usize> {
        if self.steps.get(index).map(|s| s.index) == Some(index) {
            return Some(index);
        }
        self.steps.iter().position(|s| s.index == index)
    }
}

/// A prompt that would reveal outcome information.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("outcome leak in prompt for trace {trace}: {what} appears {in_prompt} time(s) in the prompt but only {in_data} time(s) in the task/trace data")]
pub struct OutcomeLeak {
    pub trace: String,
    pub what: String,
    pub in_prompt: usize,
    pub in_data: usize,
}

/// Outcome-bearing strings of a trace (each at least 3 characters, to avoid matching noise).
pub fn secrets(trace: &Trace) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut push = |what: &str, s: &str| {
        let s = s.trim();
        if s.chars().count() >= 3 {
            out.push((what.to_string(), s.to_string()));
        }
    };
    if let Some(gt) = &trace.ground_truth {
        push("the ground truth", gt);
    }
    if let Some(d) = &trace.labels.decisive {
        if let Some(r) = &d.reason {
            push("the decisive-failure reason", r);
        }
    }
    for fa in &trace.labels.faulty_agents {
        if let Some(d) = &fa.description {
            push("a faulty-agent description", d);
        }
    }
    for v in &trace.labels.verdicts {
        let p = v.payload.to_string();
        if p.len() > 2 {
            push("a stored verdict", &p);
        }
    }
    for (k, v) in &trace.metadata {
        let key = k.to_ascii_lowercase();
        let outcome_like = [
            "correct", "mistake", "answer", "outcome", "success", "fail", "label", "truth",
        ]
        .iter()
        .any(|w| key.contains(w));
        if outcome_like {
            if let Some(s) = v.as_str() {
                push(&format!("metadata field {k:?}"), s);
            }
        }
    }
    // Label field names never belong in a blind prompt.
    for marker in [
        "mistake_agent",
        "mistake_step",
        "mistake_reason",
        "ground_truth",
        "is_correct",
    ] {
        out.push((format!("the label marker {marker:?}"), marker.to_string()));
    }
    out
}

fn count(hay: &str, needle: &str) -> usize {
    if needle.is_empty() {
        return 0;
    }
    hay.to_lowercase().matches(&needle.to_lowercase()).count()
}

/// Check a rendered prompt (`prompt`) against the data it was built from (`data`: the task,
/// rendered steps and annotation text concatenated).
pub fn check_outcome_blind(trace: &Trace, prompt: &str, data: &str) -> Result<(), OutcomeLeak> {
    for (what, secret) in secrets(trace) {
        let in_prompt = count(prompt, &secret);
        let in_data = count(data, &secret);
        if in_prompt > in_data {
            return Err(OutcomeLeak {
                trace: trace.id.clone(),
                what,
                in_prompt,
                in_data,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_trace::Outcome;

    fn trace() -> Trace {
        maslens_trace::TraceBuilder::new("t1")
            .task("How many apples?")
            .ground_truth("forty-two apples")
            .outcome(Outcome::Failure)
            .decisive_because("B", 1, "B miscounted the crates")
            .metadata("is_correct", serde_json::json!("false"))
            .build()
    }

    #[test]
    fn leak_is_caught() {
        let t = trace();
        let data = "How many apples? [Step 0] A: let me count";
        assert!(check_outcome_blind(&t, data, data).is_ok());
        let leaky = format!("{data}\nExpected answer: forty-two apples");
        let err = check_outcome_blind(&t, &leaky, data).unwrap_err();
        assert!(err.what.contains("ground truth"), "{err}");
        let leaky = format!("{data}\nNote: B miscounted the crates");
        assert!(check_outcome_blind(&t, &leaky, data).is_err());
        let leaky = format!("{data}\nmistake_step: 1");
        assert!(check_outcome_blind(&t, &leaky, data).is_err());
    }

    #[test]
    fn answer_written_by_an_agent_is_evidence_not_a_leak() {
        let t = trace();
        let data = "[Step 3] B: so the total is forty-two apples";
        assert!(check_outcome_blind(&t, &format!("prefix {data}"), data).is_ok());
    }
}
