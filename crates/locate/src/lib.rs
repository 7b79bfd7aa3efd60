//! maslens-locate: failure localization (AgentLocate: Judge, Evaluators, confidence-weighted vote).
//!
//! - [`judge`]: the Judge protocols (all-at-once, step-by-step, binary search), each returning
//!   (agent, step, rationale, confidence) with a long-trace strategy chosen from the model's
//!   context size;
//! - [`evaluator`]: Evaluators (base, concise, evidence) that re-analyse a trace given the Judge's
//!   hypothesis;
//! - [`vote`]: the confidence-weighted vote of eq. 3-4 with a deterministic tie-break;
//! - [`pipeline`]: Judge + Evaluators + vote, variants I/II, one [`LocateVerdict`] per trace;
//! - [`refine`]: refinement instances z_q (eq. 5) and chat-format fine-tuning export;
//!
//! The trivial baselines live in `maslens_eval::baselines` (one set for every localizer).
//!
//! Methods return values and never print.

pub mod evaluator;
pub mod judge;
pub mod pipeline;
pub mod prompts;
pub mod refine;
pub mod render;
pub mod steering;
pub mod vote;

pub use evaluator::Style;
pub use judge::{Protocol, Settings};
pub use pipeline::{LocateConfig, LocateVerdict, Locator, Variant};

use maslens_llm::typed::lenient;
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};

/// Errors that stop localization of one trace (the caller records them and goes on).
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    #[error("trace {0}: no steps to localize")]
    EmptyTrace(String),
    #[error("trace {trace}: {source}")]
    Llm {
        trace: String,
        #[source]
        source: maslens_llm::LlmError,
    },
    #[error(transparent)]
    Prompt(#[from] maslens_llm::prompt::PromptError),
}

/// One located failure as proposed by a Judge or an Evaluator.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The agent acting at `step` (rho(t)); `None` when abstained.
    pub agent: Option<String>,
    /// The step index; `None` when abstained.
    pub step: Option<usize>,
    pub rationale: String,
    /// Confidence in `[0, 1]`.
    pub confidence: f64,
    /// Error mode (Aegis taxonomy), when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_mode: Option<String>,
    /// The agent name as the model wrote it, when it differs from rho(step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub named_agent: Option<String>,
    /// Whether the model named an agent that does not act at the chosen step (normalized to rho(t)).
    #[serde(default)]
    pub agent_mismatch: bool,
    /// Why there is no location (parse failure, no step flagged, step out of range).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abstain_reason: Option<String>,
    /// Why the rationale does not explain the location ([`rationale_problem`]), when it still
    /// did not after the one repair call: the location is kept, the rationale is not trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale_problem: Option<String>,
}

impl Finding {
    /// An abstention with its reason.
    pub fn abstain(reason: impl Into<String>) -> Self {
        Finding {
            abstain_reason: Some(reason.into()),
            ..Default::default()
        }
    }
    /// The located pair, when there is one.
    pub fn location(&self) -> Option<(&str, usize)> {
        Some((self.agent.as_deref()?, self.step?))
    }
}

/// Normalize a model's (agent, step) answer: the agent becomes the one acting at the step
/// (rho(t)); a different name is kept in `named_agent` and flagged. A step that is not in the
/// trace is an abstention naming the valid range.
pub fn normalize(
    trace: &Trace,
    named: Option<&str>,
    step: Option<i64>,
) -> Result<(String, usize, Option<String>, bool), String> {
    let Some(step) = step else {
        return Err("the answer has no step".into());
    };
    let last = trace.steps.last().map(|s| s.index).unwrap_or(0);
    let pos = usize::try_from(step)
        .ok()
        .and_then(|s| trace.position_of(s))
        .ok_or_else(|| format!("step {step} is not in the trace (steps 0 to {last})"))?;
    let acting = trace.steps[pos].agent.clone();
    let named = named.map(str::trim).filter(|n| !n.is_empty());
    let mismatch = named.is_some_and(|n| {
        !n.eq_ignore_ascii_case(&acting) && !n.eq_ignore_ascii_case(&trace.steps[pos].speaker)
    });
    Ok((
        acting,
        trace.steps[pos].index,
        if mismatch {
            named.map(String::from)
        } else {
            None
        },
        mismatch,
    ))
}

/// A model's (agent, step) answer, as [`judge::location_schema`] asks for it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct LocationAnswer {
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub agent: Option<String>,
    /// The step as written; `None` when it is not an integer (`3.0` passes the schema).
    #[serde(default, deserialize_with = "lenient::int")]
    pub step: Option<i64>,
    #[serde(default)]
    pub confidence: f64,
    #[serde(default)]
    pub error_mode: Option<String>,
}

/// Read a model's answer `{agent, step, reason, confidence[, error_mode]}` into a finding;
/// `answer: None` is an abstention for `abstain_reason`.
pub fn finding_from_answer(
    trace: &Trace,
    answer: Option<&LocationAnswer>,
    abstain_reason: Option<&str>,
) -> Finding {
    let Some(v) = answer else {
        return Finding::abstain(abstain_reason.unwrap_or("no valid answer"));
    };
    let rationale = v.reason.clone();
    let confidence = v.confidence.clamp(0.0, 1.0);
    let error_mode = v.error_mode.clone();
    match normalize(trace, v.agent.as_deref(), v.step) {
        Ok((agent, step, named_agent, agent_mismatch)) => Finding {
            rationale_problem: trace
                .position_of(step)
                .and_then(|pos| rationale_problem(trace, pos, &rationale)),
            agent: Some(agent),
            step: Some(step),
            rationale,
            confidence,
            error_mode,
            named_agent,
            agent_mismatch,
            abstain_reason: None,
        },
        Err(reason) => Finding {
            rationale,
            confidence,
            error_mode,
            ..Finding::abstain(reason)
        },
    }
}

/// Words that name a verdict rather than explain it: the criterion's vocabulary, words that
/// say only that something was wrong, and function words. A reason made of these, step
/// numbers and agent names ("The decisive failure step is step 1") restates the verdict.
const VERDICT_WORDS: &str = "\
    the and for with that this these those was were are has have had not but its from into \
    than then they them their there which when what who would should could will did does done \
    being been also only any all some more most very just such other about after before \
    because since while where here step steps agent agents decisive failure failures fail \
    fails failed failing mistake mistakes mistaken error errors erroneous wrong wrongly \
    incorrect incorrectly responsible earliest first made make makes making caused cause \
    causes causing led lead leads leading system action actions number point critical key root \
    occurred occur occurs happened happens happen problem problems issue issues fault faulty \
    bad correct correctly ideal judge proposed proposal hypothesis evaluator confidence reason \
    likely therefore thus hence clearly indeed trace one can may might must his her our your \
    you she him out via per due isn wasn didn doesn don won yes true false none null";

/// Lower-case words of `text` (letters and digits), at least three characters, not only digits.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3 && !w.chars().all(|c| c.is_ascii_digit()))
        .map(str::to_lowercase)
}

/// Lower-case runs of letters and digits of `text`, every length, in order.
fn plain_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// How many consecutive words of a reason, found in a prompt and not in the step, make it a
/// restatement of the prompt.
const PROMPT_RUN: usize = 6;

/// Every prompt template the pipeline sends, as its plain words joined by one space (with a
/// space at both ends, so a run matches whole words only).
fn prompt_texts() -> &'static [String] {
    static TEXTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    TEXTS.get_or_init(|| {
        prompts::all()
            .map(|t| format!(" {} ", plain_words(t.source).join(" ")))
            .collect()
    })
}

/// Whether `reason` echoes the prompt: an unfilled placeholder (`<your justification: ...>`), or
/// [`PROMPT_RUN`] consecutive words of a prompt template that the step itself does not say.
fn echoes_prompt(reason: &str, step_text: &str) -> bool {
    let t = reason.trim();
    if t.starts_with('<') && t.ends_with('>') || t.contains("<your ") {
        return true;
    }
    let step = format!(" {} ", plain_words(step_text).join(" "));
    plain_words(reason).windows(PROMPT_RUN).any(|w| {
        let run = format!(" {} ", w.join(" "));
        !step.contains(&run) && prompt_texts().iter().any(|p| p.contains(&run))
    })
}

/// Why `reason` does not explain the location at position `pos` of `trace`, or `None` when it
/// does. Cheap, language-light checks, in order:
/// 0. **Not text** ("1.5, 1.5"): no word of letters at all. **Prompt echo**: the prompt's
///    placeholder sent back, or a run of the prompt's words ([`echoes_prompt`]).
/// 1. **Tautology**: fewer than three distinct words are left once step numbers, agent names and
///    verdict vocabulary ([`VERDICT_WORDS`]) are taken out, so the reason only restates the
///    verdict ("The decisive failure step is step 1", "Orchestrator made the mistake at step 1").
/// 2. **Nothing from the step**: no word of four or more letters that is left is in the text of
///    the chosen step (nor in its speaker label), so the reason neither quotes nor refers to
///    what the step says.
///
/// The answer parser sends the problem in its one repair call (`typed::complete_as_checked`).
pub fn rationale_problem(trace: &Trace, pos: usize, reason: &str) -> Option<String> {
    let step = trace.steps.get(pos)?;
    let index = step.index;
    if !reason.chars().any(char::is_alphabetic) && !reason.trim().is_empty() {
        return Some(format!(
            "the reason is not text ({:?}): say in words what the agent did wrong at step {index}, \
             quoting the words of step {index} that are wrong",
            reason.trim()
        ));
    }
    if echoes_prompt(reason, &step.content) {
        return Some(format!(
            "the reason repeats the instructions instead of answering them ({:?}): write your own \
             words about step {index}, quoting the words of step {index} that are wrong",
            reason.trim()
        ));
    }
    let names: std::collections::HashSet<String> = trace
        .agents
        .iter()
        .map(|a| a.name.as_str())
        .chain(trace.steps.iter().map(|s| s.agent.as_str()))
        .chain(trace.steps.iter().map(|s| s.speaker.as_str()))
        .flat_map(words)
        .collect();
    let mut content: Vec<String> = words(reason)
        .filter(|w| !VERDICT_WORDS.split_whitespace().any(|v| v == w) && !names.contains(w))
        .collect();
    content.sort();
    content.dedup();
    if content.len() < 3 {
        // The whole reason is quoted: a repair that must leave the first answer out to fit
        // the window still shows the model what it wrote.
        return Some(format!(
            "the reason only restates the verdict ({:?}): say what the agent did wrong at step \
             {index}, quoting the words of step {index} that are wrong",
            reason.trim()
        ));
    }
    let said: std::collections::HashSet<String> =
        words(&step.content).chain(words(&step.speaker)).collect();
    if !content
        .iter()
        .any(|w| w.chars().count() >= 4 && said.contains(w))
    {
        return Some(format!(
            "the reason does not quote or refer to anything step {index} says: quote the words of \
             step {index} that are wrong and say what is wrong with them"
        ));
    }
    None
}

/// The check of a location answer before it is accepted (sent in the one repair call when it
/// fails): a step inside `range` (the steps the model was shown) and a reason that explains it
/// ([`rationale_problem`]).
pub fn location_problem(
    trace: &Trace,
    range: std::ops::RangeInclusive<usize>,
    answer: &LocationAnswer,
) -> Option<String> {
    let step = answer.step?;
    let (lo, hi) = (*range.start(), *range.end());
    let pos = usize::try_from(step)
        .ok()
        .filter(|s| range.contains(s))
        .and_then(|s| trace.position_of(s));
    match pos {
        None => Some(format!(
            "step {step} is not one of the steps shown ({lo} to {hi}): answer with one of them"
        )),
        Some(pos) => rationale_problem(trace, pos, &answer.reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace() -> Trace {
        maslens_trace::TraceBuilder::new("t")
            .steps(&["human", "Planner", "Coder"])
            .build()
    }

    #[test]
    fn normalizes_agent_to_the_one_acting() {
        let t = trace();
        assert_eq!(
            normalize(&t, Some("Coder"), Some(2)).unwrap(),
            ("Coder".into(), 2, None, false)
        );
        assert_eq!(
            normalize(&t, Some("coder "), Some(2)).unwrap(),
            ("Coder".into(), 2, None, false)
        );
        assert_eq!(
            normalize(&t, Some("Planner"), Some(2)).unwrap(),
            ("Coder".into(), 2, Some("Planner".into()), true)
        );
        assert!(normalize(&t, Some("Coder"), Some(3))
            .unwrap_err()
            .contains("steps 0 to 2"));
        assert!(normalize(&t, Some("Coder"), Some(-1)).is_err());
        assert!(normalize(&t, Some("Coder"), None).is_err());
    }

    #[test]
    fn rationale_check_rejects_tautologies_and_reasons_unrelated_to_the_step() {
        let t = maslens_trace::TraceBuilder::new("t")
            .step(
                "human",
                "How many studio albums did the band release before 2000?",
            )
            .step(
                "Orchestrator",
                "Ask WebSurfer to find the band's discography.",
            )
            .step(
                "WebSurfer",
                "I clicked on the Wikipedia page and found 12 albums listed.",
            )
            .build();
        let problem = |pos, r: &str| rationale_problem(&t, pos, r);
        // the issue's example, and other ways of saying only "this step, this agent"
        for r in [
            "The decisive failure step is step 1",
            "Orchestrator made the mistake at step 1.",
            "Step 1 is where the error occurred, because it was wrong.",
            "",
        ] {
            let p = problem(1, r).unwrap_or_default();
            assert!(p.contains("only restates the verdict"), "{r:?}: {p}");
        }
        // says something, but nothing step 2 says
        let p = problem(
            2,
            "The budget spreadsheet totals were summed twice by accident",
        )
        .unwrap();
        assert!(
            p.contains("does not quote or refer to anything step 2 says"),
            "{p}"
        );
        // quotes the step and says what is wrong
        assert_eq!(
            problem(
                2,
                "WebSurfer \"found 12 albums listed\" but counted compilations, not studio albums"
            ),
            None
        );
        let a = LocationAnswer {
            reason: "asks for the discography instead of studio albums only".into(),
            step: Some(1),
            ..Default::default()
        };
        assert_eq!(location_problem(&t, 0..=2, &a), None);
        let out = LocationAnswer {
            step: Some(7),
            ..a.clone()
        };
        assert!(location_problem(&t, 0..=2, &out)
            .unwrap()
            .contains("step 7 is not one of the steps shown (0 to 2)"));
        assert!(
            location_problem(&t, 1..=1, &LocationAnswer { step: Some(2), ..a })
                .unwrap()
                .contains("(1 to 1)")
        );
    }

    /// Rationales seen in real runs (issue 37 item 2) and honest ones, with the problem each
    /// must get (`None`: accepted).
    #[test]
    fn rationale_check_rejects_junk_seen_in_real_runs() {
        let t = maslens_trace::TraceBuilder::new("t")
            .step(
                "human",
                "Which words did the author quote in the 1998 letter?",
            )
            .step(
                "WebSurfer",
                "I searched the archive and quote the words: 'no comment'. The answer is 1.5",
            )
            .build();
        let cases: [(&str, Option<&str>); 7] = [
            // Hand-Crafted/24: the evaluator prompt's placeholder sent back as the answer.
            (
                "<your justification: quote the words of the decisive step that are wrong, and \
                 say what is wrong with them>",
                Some("repeats the instructions"),
            ),
            // The placeholder without its brackets.
            (
                "your justification: quote the words of the decisive step that are wrong",
                Some("repeats the instructions"),
            ),
            // Numbers only.
            ("1.5, 1.5", Some("is not text")),
            ("3", Some("is not text")),
            // The old checks still answer first for what they cover.
            ("The decisive failure step is step 1", Some("only restates the verdict")),
            // Honest reasons that share words with the prompt or quote the step.
            (
                "WebSurfer quote the words 'no comment' from an archive page but never checked \
                 the 1998 letter itself",
                None,
            ),
            (
                "WebSurfer answered 1.5 although the archive it searched says nothing about the letter",
                None,
            ),
        ];
        for (reason, want) in cases {
            let got = rationale_problem(&t, 1, reason);
            match (want, &got) {
                (None, None) => {}
                (Some(w), Some(p)) => assert!(p.contains(w), "{reason:?}: {p}"),
                _ => panic!("{reason:?}: expected {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn reads_a_location_answer_as_the_untyped_code_did() {
        let t = trace();
        let schema = judge::location_schema(&[]);
        let read = |text: &str| -> Finding {
            let a: LocationAnswer = maslens_llm::typed::parse_as(text, &schema).unwrap();
            finding_from_answer(&t, Some(&a), None)
        };
        let f = read(r#"{"reason": "r", "agent": "planner", "step": 2, "confidence": 1}"#);
        assert_eq!(f.location(), Some(("Coder", 2)));
        assert_eq!((f.confidence, f.agent_mismatch), (1.0, true));
        // 2.0 passes the schema as an integer; as before, it is not read as a step.
        let f = read(r#"{"reason": "r", "agent": "Coder", "step": 2.0, "confidence": 0.5}"#);
        assert_eq!((f.location(), f.rationale.as_str()), (None, "r"));
        assert!(f.abstain_reason.is_some());
        let f = finding_from_answer(&t, None, Some("invalid after one repair"));
        assert_eq!(
            f.abstain_reason.as_deref(),
            Some("invalid after one repair")
        );
    }
}

/// Test fixtures shared by the unit tests of this crate (hand-written, not models).
#[cfg(test)]
pub(crate) mod test_support {
    use maslens_llm::testing::ScriptedModel;
    use maslens_llm::ChatModel;
    use maslens_trace::{Step, Trace};

    /// Planner, Solver (whose 2 + 3 = 6 is the decisive mistake) and Checker (who accepts it).
    pub fn arithmetic() -> Trace {
        maslens_trace::builder::TraceBuilder::new("t")
            .task("What is (2 + 3) * 4?")
            .step("Planner", "Add first, then multiply.")
            .step("Solver", "2 + 3 = 6, so the product is 24.")
            .step("Checker", "Looks right: 24.")
            .build()
    }

    /// A trace of `n` short steps; step `i` is acted by `A{i % 2}`.
    pub fn trace(n: usize) -> Trace {
        long_trace(n, 0)
    }

    /// A trace of `n` steps of `len` filler characters after a short sentence.
    pub fn long_trace(n: usize, len: usize) -> Trace {
        let mut t = Trace::new("fixture/1");
        t.task = "Find the answer.".into();
        for i in 0..n {
            t.steps.push(Step {
                index: i,
                agent: format!("A{}", i % 2),
                content: format!("message {i}. {}", "lorem ipsum ".repeat(len / 12)),
                ..Default::default()
            });
        }
        t
    }

    /// Wraps a [`ScriptedModel`] fixture and reports a fixed context window.
    pub struct ContextFixture {
        pub inner: ScriptedModel,
        pub ctx: usize,
    }

    impl ContextFixture {
        pub fn new(inner: ScriptedModel, ctx: usize) -> Self {
            ContextFixture { inner, ctx }
        }

        /// Assert that every prompt sent so far left `answer` tokens free in the window.
        pub fn assert_every_prompt_fits(&self, answer: usize) {
            for c in self.inner.calls.lock().unwrap().iter() {
                let toks: usize = c
                    .messages
                    .iter()
                    .map(|x| self.count_tokens(&x.content))
                    .sum();
                assert!(
                    toks + answer <= self.ctx,
                    "prompt of {toks} tokens exceeds the window of {}",
                    self.ctx
                );
            }
        }
    }

    impl maslens_llm::wrap::ModelWrapper for ContextFixture {
        fn inner(&self) -> &dyn ChatModel {
            &self.inner
        }
        fn context_size(&self) -> Option<usize> {
            Some(self.ctx)
        }
    }
}

/// The 14 error modes of Aegis-Bench (MAST taxonomy codes with their meaning).
pub const AEGIS_ERROR_MODES: [(&str, &str); 14] = [
    ("FM-1.1", "role confusion"),
    ("FM-1.2", "role specification deviation"),
    ("FM-1.3", "add redundant steps"),
    ("FM-1.4", "role switching"),
    ("FM-1.5", "unauthorized role assumption"),
    ("FM-2.1", "information omission"),
    ("FM-2.2", "hide important information"),
    ("FM-2.3", "deviate from main goal"),
    ("FM-2.4", "spread misinformation"),
    ("FM-2.5", "corrupt reasoning process"),
    ("FM-2.6", "manipulate evidence"),
    ("FM-3.1", "disrupt coordination"),
    ("FM-3.2", "force early termination"),
    ("FM-3.3", "control conversation flow"),
];

/// The Aegis error-mode codes.
pub fn aegis_error_modes() -> Vec<String> {
    AEGIS_ERROR_MODES
        .iter()
        .map(|(c, _)| c.to_string())
        .collect()
}

/// Prompt lines for error-mode codes: `FM-1.1: role confusion` when the meaning is known.
pub fn error_mode_lines(codes: &[String]) -> Vec<String> {
    codes
        .iter()
        .map(|c| match AEGIS_ERROR_MODES.iter().find(|(k, _)| k == c) {
            Some((_, m)) => format!("{c}: {m}"),
            None => c.clone(),
        })
        .collect()
}
