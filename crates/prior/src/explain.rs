//! Why the prior ranks a step high: the features that pull the step's score above the trace's
//! other steps, each said in a sentence with the words or numbers of the trace that set it
//! ("introduces 69.6, which the run's last steps use; neither the task nor an earlier step gives
//! it"). A prior verdict states this evidence instead of a bare "step N".

use crate::features::{
    extract, feature_index, ASSUME_TERMS, ERROR_TERMS, FINAL_TERMS, HEDGE_TERMS, PLAN_CHANGE_TERMS,
    SUCCESS_TERMS,
};
use crate::model::PriorModel;
use crate::text::{content_word_hashes, number_strings};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// One reason a step scores high.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The step feature (`docs/prior.md`).
    pub feature: String,
    /// How far the feature lifts this step's logit above the trace's mean step (in logit units).
    pub pull: f64,
    /// The evidence in words, quoting the trace where the feature is about its text.
    pub text: String,
}

/// Common words that say nothing about what a step brought in (the evidence lists the others).
const COMMON_WORDS: &str = "\
    about after again being below could every first found given great here's their there these \
    thing those three under until using where which while would should other please provide \
    result results based check following information ensure verify correct answer final step \
    steps let's number value values approach code";

/// Characters quoted around a matched term.
const QUOTE_CHARS: usize = 90;

/// The first place in `text` where one of `terms` starts a word, quoted with some context.
fn quote_term(text: &str, terms: &[&str]) -> Option<String> {
    let lower = text.to_lowercase();
    let same = lower.len() == text.len();
    let src = if same { text } else { lower.as_str() };
    let at = terms
        .iter()
        .filter_map(|t| {
            lower.match_indices(t).map(|(i, _)| i).find(|&i| {
                i == 0
                    || !lower[..i]
                        .chars()
                        .next_back()
                        .is_some_and(char::is_alphanumeric)
            })
        })
        .min()?;
    Some(quote_around(src, at))
}

/// About [`QUOTE_CHARS`] characters of `text` around byte `at`, on one line, in quotes.
fn quote_around(text: &str, at: usize) -> String {
    let start = text[..at.min(text.len())]
        .char_indices()
        .rev()
        .nth(QUOTE_CHARS / 3)
        .map_or(0, |(i, _)| i);
    let body: String = text[start..].chars().take(QUOTE_CHARS).collect();
    let body = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let pre = if start > 0 { "..." } else { "" };
    let post = if text[start..].chars().count() > QUOTE_CHARS {
        "..."
    } else {
        ""
    };
    format!("\"{pre}{body}{post}\"")
}

/// The first characters of a step, quoted.
fn quote_start(text: &str) -> String {
    let t = text.trim();
    quote_around(t, 0)
}

fn list(items: &[String], max: usize) -> String {
    let mut shown: Vec<String> = items.iter().take(max).cloned().collect();
    if items.len() > max {
        shown.push(format!("and {} more", items.len() - max));
    }
    shown.join(", ")
}

/// Positions of the run's last two substantive (20+ characters) acting steps: what it ended on.
fn final_steps(trace: &Trace) -> Vec<usize> {
    (0..trace.steps.len())
        .rev()
        .filter(|&i| {
            trace.is_acting(&trace.steps[i].agent)
                && trace.steps[i].content.trim().chars().count() >= 20
        })
        .take(2)
        .collect()
}

/// Numbers step `pos` writes that neither the task nor an earlier step wrote.
fn novel_numbers(trace: &Trace, pos: usize) -> Vec<String> {
    let mut seen: HashSet<String> = number_strings(&trace.task).into_iter().collect();
    for s in &trace.steps[..pos] {
        seen.extend(number_strings(&s.content));
    }
    let mut out: Vec<String> = Vec::new();
    for n in number_strings(&trace.steps[pos].content) {
        if !seen.contains(&n) && !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// Word-count features and the sentence that quotes the step's matching words.
const TERM_SENTENCES: &[(&str, &[&str], &str)] = &[
    ("error_words", ERROR_TERMS, "it reports a failure"),
    ("assume_words", ASSUME_TERMS, "it assumes or makes up data"),
    ("hedge_words", HEDGE_TERMS, "it is unsure"),
    (
        "success_claims",
        SUCCESS_TERMS,
        "it claims success without the run succeeding",
    ),
    ("final_words", FINAL_TERMS, "it gives the run's answer"),
    ("plan_change", PLAN_CHANGE_TERMS, "it changes the plan"),
];

/// A sentence for feature `name` at position `pos`, quoting the trace where it can.
fn describe(trace: &Trace, pos: usize, name: &str) -> String {
    describe_evidence(trace, pos, name).unwrap_or_else(|| format!("feature `{name}` is high here"))
}

/// The sentence for `name` at `pos`, or `None` when the trace offers nothing to say beyond
/// the feature's name.
fn describe_evidence(trace: &Trace, pos: usize, name: &str) -> Option<String> {
    let text = trace.steps[pos].content.as_str();
    if let Some((_, terms, lead)) = TERM_SENTENCES.iter().find(|(n, ..)| *n == name) {
        return quote_term(text, terms).map(|q| format!("{lead}: {q}"));
    }
    match name {
        "origin_final_numbers" => origin_final_numbers(trace, pos),
        "novel_numbers" => {
            let nums = novel_numbers(trace, pos);
            (!nums.is_empty()).then(|| {
                format!(
                    "writes numbers that neither the task nor an earlier step gives: {}",
                    list(&nums, 4)
                )
            })
        }
        "origin_final_words" => origin_final_words(trace, pos),
        "next_tool_error" | "next_step_error" | "prev_tool_error" | "cause_of_first_error" => {
            neighbouring_failure(trace, pos, name)
        }
        _ => describe_fact(trace, pos, name),
    }
}

/// `origin_final_numbers`: the numbers the step brings in that the run's last steps use.
fn origin_final_numbers(trace: &Trace, pos: usize) -> Option<String> {
    let finals = final_steps(trace);
    let is_final = finals.contains(&pos);
    let later: HashSet<String> = finals
        .into_iter()
        .filter(|&i| i != pos)
        .flat_map(|i| number_strings(&trace.steps[i].content))
        .collect();
    let novel = novel_numbers(trace, pos);
    let used: Vec<String> = novel
        .iter()
        .filter(|n| later.contains(*n))
        .cloned()
        .collect();
    match (used.is_empty(), is_final && !novel.is_empty()) {
        (false, _) => Some(format!(
            "introduces {}, which the run's last steps use; neither the task nor an \
             earlier step gives {}",
            list(&used, 4),
            if used.len() == 1 { "it" } else { "them" }
        )),
        (true, true) => Some(format!(
            "it is one of the run's last steps and states numbers no earlier step gives: {}",
            list(&novel, 4)
        )),
        (true, false) => None,
    }
}

/// `origin_final_words`: the words the step brings in that the run ends on.
fn origin_final_words(trace: &Trace, pos: usize) -> Option<String> {
    let mut earlier: HashSet<u64> = content_word_hashes(&trace.task, 4).into_iter().collect();
    for s in &trace.steps[..pos] {
        earlier.extend(content_word_hashes(&s.content, 4));
    }
    let finals = final_steps(trace);
    let is_final = finals.contains(&pos);
    let finals: HashSet<u64> = finals
        .into_iter()
        .filter(|&i| i != pos || is_final)
        .flat_map(|i| content_word_hashes(&trace.steps[i].content, 4))
        .collect();
    let mut words: Vec<String> = Vec::new();
    for w in trace.steps[pos]
        .content
        .split(|c: char| !c.is_alphanumeric())
    {
        let h = content_word_hashes(w, 4);
        if h.len() == 1
            && w.chars().count() >= 5
            && !COMMON_WORDS
                .split_whitespace()
                .any(|c| c.eq_ignore_ascii_case(w))
            && finals.contains(&h[0])
            && !earlier.contains(&h[0])
            && !words.iter().any(|x| x.eq_ignore_ascii_case(w))
        {
            words.push(w.to_string());
        }
    }
    let quoted: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
    (!words.is_empty()).then(|| {
        format!(
            "brings in what the run ends on: {} (in neither the task nor an earlier step)",
            list(&quoted, 4)
        )
    })
}

/// The failure features that look at a neighbouring step: the next step's or the previous
/// step's failure, and the first failing tool output after the step.
fn neighbouring_failure(trace: &Trace, pos: usize, name: &str) -> Option<String> {
    let failure =
        |content: &str| quote_term(content, ERROR_TERMS).unwrap_or_else(|| quote_start(content));
    match name {
        "prev_tool_error" => pos.checked_sub(1).map(|p| &trace.steps[p]).map(|p| {
            format!(
                "it answers a failure reported just before (step {}): {}",
                p.index,
                failure(&p.content)
            )
        }),
        "cause_of_first_error" => {
            let failing = trace.steps[pos + 1..].iter().find(|s| {
                !trace.is_acting(&s.agent) && quote_term(&s.content, ERROR_TERMS).is_some()
            });
            Some(match failing {
                Some(f) => format!(
                    "its action is the last one before the first failing tool output (step {}: {})",
                    f.index,
                    quote_term(&f.content, ERROR_TERMS).unwrap_or_default()
                ),
                None => "its action is the last one before the first failing tool output".into(),
            })
        }
        _ => trace.steps.get(pos + 1).map(|n| {
            format!(
                "the next step ({}, step {}) reports a failure: {}",
                n.agent,
                n.index,
                failure(&n.content)
            )
        }),
    }
}

/// Position, kind and role facts, and the features that need no quote.
fn describe_fact(trace: &Trace, pos: usize, name: &str) -> Option<String> {
    let step = &trace.steps[pos];
    let (agent, text) = (&step.agent, step.content.as_str());
    Some(match name {
        "code_block" => format!(
            "it writes code the run executes: {}",
            quote_term(text, &["```"]).unwrap_or_default()
        ),
        "first_step_code" => "the run's first step already writes code".into(),
        "first_nonterminal" | "nt_ord_log" => format!(
            "it is the first step of an acting agent ({agent}), the plan the later steps build on: {}",
            quote_start(text)
        ),
        "nt_ord_2" => format!("it is the second step of an acting agent: {}", quote_start(text)),
        "nt_ord_3" => format!("it is the third step of an acting agent: {}", quote_start(text)),
        "last_nonterminal" | "pos_last" | "agent_is_last_actor" => format!(
            "it is the last step of an acting agent, where the run's answer is given: {}",
            quote_start(text)
        ),
        "pos_first" | "agent_is_first_actor" => format!("it opens the run: {}", quote_start(text)),
        "agent_first_turn" | "agent_first_turn_x_len" => {
            format!("it is {agent}'s first turn: {}", quote_start(text))
        }
        "agent_turn_2" => format!("it is {agent}'s second turn"),
        "agent_turn_3" => format!("it is {agent}'s third turn"),
        "after_human" => "it is the first answer to the user's request".into(),
        "kind_worker" => format!("{agent} is a worker agent (it acts, not a tool)"),
        "kind_orchestrator" | "orchestrator_x_len" => {
            format!("{agent} is the orchestrator, whose instructions the others follow")
        }
        "role_retriever" => format!("{agent} retrieves information (search, browse, files)"),
        "role_coder" => format!("{agent} writes and runs code"),
        "role_planner" => format!("{agent} plans and directs the others"),
        "role_verifier" => format!("{agent} checks the others' work"),
        "url" => "it relies on a web page it names".into(),
        "delegation" => "it hands work to another agent".into(),
        "len_rel" | "log_chars" => "it is one of the run's longest steps".into(),
        "task_overlap" => "it restates much of the task".into(),
        "novel_words" => "most of its words are new to the run".into(),
        "repeat_frac" => "it repeats earlier steps".into(),
        _ => return None,
    })
}

/// `Step N (AGENT): A; B; C.`, a quote already shown not repeated (position facts often quote
/// the same step start).
fn join(index: usize, agent: &str, ev: &[Evidence]) -> String {
    let mut shown: Vec<&str> = Vec::new();
    let parts: Vec<&str> = ev
        .iter()
        .map(|e| match e.text.split_once(": \"") {
            Some((head, quote)) if shown.contains(&quote) => head,
            Some((_, quote)) => {
                shown.push(quote);
                e.text.as_str()
            }
            None => e.text.as_str(),
        })
        .collect();
    format!("Step {index} ({agent}): {}.", parts.join("; "))
}

impl PriorModel {
    /// The `top` features that lift step position `pos` most above the trace's average step
    /// (each feature's contribution to the step head's logit, minus its mean over the trace's
    /// steps; only features the step has more of than that average), strongest first, with
    /// sentences quoting the trace. Empty when no feature lifts the step (or `pos` is not a
    /// step).
    pub fn explain(&self, trace: &Trace, pos: usize, top: usize) -> Vec<Evidence> {
        let rows = extract(trace);
        if pos >= rows.len() {
            return Vec::new();
        }
        let head = &self.step;
        let contrib =
            |row: &[f64], j: usize| head.weights[j] * (row[j] - head.mean[j]) / head.scale[j];
        let n = rows.len() as f64;
        // Only features the step *has* more of than the trace's average step: a pull that comes
        // from lacking a feature with a negative weight says little about what the step did.
        let mut pulls: Vec<(usize, f64)> = (0..head.weights.len())
            .filter(|&j| {
                let mean_x = rows.iter().map(|r| r[j]).sum::<f64>() / n;
                rows[pos][j] > mean_x + 1e-12
            })
            .map(|j| {
                let mean = rows.iter().map(|r| contrib(r, j)).sum::<f64>() / n;
                (j, contrib(&rows[pos], j) - mean)
            })
            .filter(|(_, p)| *p > 1e-9)
            .collect();
        pulls.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        pulls
            .into_iter()
            .take(top)
            .filter_map(|(j, pull)| {
                let name = head.features.get(j)?.clone();
                debug_assert_eq!(feature_index(&name), Some(j));
                Some(Evidence {
                    text: describe(trace, pos, &name),
                    feature: name,
                    pull,
                })
            })
            .collect()
    }

    /// [`PriorModel::explain`] as one sentence: `Step N (AGENT): A; B; C.`
    pub fn explain_text(&self, trace: &Trace, pos: usize, top: usize) -> String {
        let Some(step) = trace.steps.get(pos) else {
            return String::new();
        };
        let ev = self.explain(trace, pos, top);
        if ev.is_empty() {
            return format!(
                "Step {} ({}): no feature sets it apart; it ranks first by a small margin.",
                step.index, step.agent
            );
        }
        join(step.index, &step.agent, &ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TrainConfig;
    use maslens_trace::{AgentKind, TraceBuilder};

    #[test]
    fn evidence_quotes_the_numbers_and_errors_that_set_the_step_apart() {
        let data = crate::model::tests::synthetic_corpus(60, 21);
        let refs: Vec<&Trace> = data.iter().collect();
        let m = PriorModel::train(
            &refs,
            &TrainConfig {
                alpha: 1.0,
                ..TrainConfig::default()
            },
        )
        .unwrap();
        let t = &data[0];
        let label = t.labels.decisive.as_ref().unwrap().step;
        let ev = m.explain(t, label, 3);
        assert!(!ev.is_empty());
        assert!(ev.windows(2).all(|w| w[0].pull >= w[1].pull));
        let text = m.explain_text(t, label, 3);
        assert!(text.starts_with(&format!("Step {label} (")), "{text}");
        // the synthetic decisive step assumes a placeholder and the next output fails
        assert!(
            text.contains("\"Assume a placeholder") || text.contains("exitcode: 1"),
            "{text}"
        );
        assert!(!text.contains("decisive failure step is step"), "{text}");
        assert!(m.explain(t, 10_000, 3).is_empty());
    }

    #[test]
    fn sentences_name_the_numbers_a_step_introduces() {
        let t = TraceBuilder::new("x/1")
            .task("How strong is the force, in N?")
            .agent("Physics_Expert", AgentKind::Worker)
            .agent("Checker", AgentKind::Worker)
            .step(
                "Physics_Expert",
                "Let me compute it: the force is 69.6 N from F = m a.",
            )
            .step("Checker", "Looks fine to me, nothing to add here at all.")
            .step(
                "Physics_Expert",
                "The final answer is 69.6 N, as computed above.",
            )
            .build();
        let s = describe(&t, 0, "origin_final_numbers");
        assert!(s.contains("introduces 69.6"), "{s}");
        assert!(s.contains("neither the task nor an earlier step"), "{s}");
        // the same quote twice in one explanation is shown once
        let ev = |feature: &str, text: &str| Evidence {
            feature: feature.into(),
            pull: 1.0,
            text: text.into(),
        };
        let text = join(
            3,
            "WebSurfer",
            &[
                ev(
                    "nt_ord_3",
                    "it is the third step of an acting agent: \"I searched\"",
                ),
                ev("kind_worker", "WebSurfer is a worker agent"),
                ev(
                    "agent_first_turn",
                    "it is WebSurfer's first turn: \"I searched\"",
                ),
            ],
        );
        assert_eq!(
            text,
            "Step 3 (WebSurfer): it is the third step of an acting agent: \"I searched\"; \
             WebSurfer is a worker agent; it is WebSurfer's first turn."
        );
        let s = describe(&t, 2, "final_words");
        assert!(s.contains("\"The final answer is 69.6 N"), "{s}");
        assert_eq!(novel_numbers(&t, 2), Vec::<String>::new());
    }
}
