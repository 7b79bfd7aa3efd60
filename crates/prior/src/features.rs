//! Per-step features. Every feature is computed from the trace alone (task text, agents with
//! their kind/role/system prompt, step contents in order); no dataset id or benchmark-specific
//! agent name is used. `docs/prior.md` documents each one; the order of [`FEATURE_NAMES`] is
//! the order of the values in a [`StepFeatures`] row and is checked when a model is loaded.

use crate::text::{content_word_hashes, number_hashes, word_hashes, HashSet64, TermSet};
use maslens_trace::{AgentKind, Trace};
use std::collections::HashMap;
use std::sync::OnceLock;

macro_rules! features {
    ($($(#[$m:meta])* $id:ident = $name:literal),* $(,)?) => {
        /// Feature positions in a row.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(usize)]
        pub enum F {
            $($(#[$m])* $id),*
        }
        /// Names of the features, in row order.
        pub const FEATURE_NAMES: &[&str] = &[$($name),*];
    };
}

features! {
    // position
    PosRel = "pos_rel",
    PosFirst = "pos_first",
    PosLast = "pos_last",
    LogIndex = "log_index",
    AgentFirstTurn = "agent_first_turn",
    AgentLastTurn = "agent_last_turn",
    AgentTurnLog = "agent_turn_log",
    AgentShare = "agent_share",
    FirstNonterminal = "first_nonterminal",
    LastNonterminal = "last_nonterminal",
    AfterHuman = "after_human",
    AgentIsFirstActor = "agent_is_first_actor",
    AgentIsLastActor = "agent_is_last_actor",
    // agent kind and role words
    KindWorker = "kind_worker",
    KindOrchestrator = "kind_orchestrator",
    KindTool = "kind_tool",
    KindHuman = "kind_human",
    RoleVerifier = "role_verifier",
    RolePlanner = "role_planner",
    RoleCoder = "role_coder",
    RoleRetriever = "role_retriever",
    // content
    LogChars = "log_chars",
    LenRel = "len_rel",
    ShortContent = "short_content",
    CodeBlock = "code_block",
    ErrorWords = "error_words",
    NextToolError = "next_tool_error",
    NextStepError = "next_step_error",
    AssumeWords = "assume_words",
    HedgeWords = "hedge_words",
    SuccessClaims = "success_claims",
    FinalWords = "final_words",
    PlanChange = "plan_change",
    Delegation = "delegation",
    NovelNumbers = "novel_numbers",
    RepeatFrac = "repeat_frac",
    NovelWords = "novel_words",
    TaskOverlap = "task_overlap",
    Url = "url",
    // order among non-terminal steps and the trace's length (subset-aware, no source names)
    NtOrd2 = "nt_ord_2",
    NtOrd3 = "nt_ord_3",
    NtOrdLog = "nt_ord_log",
    PosRelXLen = "pos_rel_x_len",
    LogIndexXLen = "log_index_x_len",
    AgentFirstTurnXLen = "agent_first_turn_x_len",
    OrchestratorXLen = "orchestrator_x_len",
    // interactions and the neighbourhood of errors
    FirstStepCode = "first_step_code",
    CauseOfFirstError = "cause_of_first_error",
    PrevToolError = "prev_tool_error",
    ErrorsBefore = "errors_before",
    NextToolShort = "next_tool_short",
    AgentTurn2 = "agent_turn_2",
    AgentTurn3 = "agent_turn_3",
    OriginFinalNumbers = "origin_final_numbers",
    OriginFinalWords = "origin_final_words",
}

/// Number of features.
pub const N_FEATURES: usize = FEATURE_NAMES.len();

/// One feature row (one step).
pub type StepFeatures = [f64; N_FEATURES];

/// Index of a feature by name (for tests and reports).
pub fn feature_index(name: &str) -> Option<usize> {
    FEATURE_NAMES.iter().position(|n| *n == name)
}

pub(crate) const ERROR_TERMS: &[&str] = &[
    "error",
    "exception",
    "traceback",
    "fail",
    "cannot",
    "can't",
    "can not",
    "unable",
    "not found",
    "invalid",
    "incorrect",
    "wrong",
    "timeout",
    "timed out",
    "denied",
    "unavailable",
    "no results",
    "does not exist",
    "doesn't exist",
    "not available",
    "exitcode: 1",
    "nan",
];

pub(crate) const ASSUME_TERMS: &[&str] = &[
    "assum",
    "hypothetical",
    "example",
    "placeholder",
    "mock",
    "dummy",
    "sample data",
    "simulat",
    "let's say",
    "suppose",
    "for demonstration",
    "for illustration",
    "fictional",
    "made-up",
    "approximat",
    "estimat",
    "typical",
    "generic",
];

pub(crate) const HEDGE_TERMS: &[&str] = &[
    "might",
    "may be",
    "likely",
    "probably",
    "seems",
    "appears",
    "unclear",
    "not sure",
    "uncertain",
    "possibly",
    "perhaps",
];

pub(crate) const SUCCESS_TERMS: &[&str] = &[
    "success",
    "verified",
    "confirmed",
    "correct",
    "accurate",
    "validated",
    "consistent",
    "complete",
];

pub(crate) const FINAL_TERMS: &[&str] = &[
    "final answer",
    "terminate",
    "the answer is",
    "in conclusion",
    "request satisfied",
];

pub(crate) const PLAN_CHANGE_TERMS: &[&str] = &[
    "instead",
    "alternative",
    "new plan",
    "updated plan",
    "revised plan",
    "revise",
    "different approach",
    "another approach",
    "new approach",
    "let's try",
    "try again",
    "retry",
    "replan",
    "re-plan",
    "change of plan",
];

const DELEGATION_TERMS: &[&str] = &["please", "next speaker", "your task", "could you"];

const ROLE_VERIFIER: &[&str] = &["verif", "valid", "check", "review", "critic", "test", "qa"];
const ROLE_PLANNER: &[&str] = &["plan", "manag", "orchestr", "coordinat", "lead", "supervis"];
const ROLE_CODER: &[&str] = &[
    "code", "coder", "python", "program", "debug", "develop", "engineer", "script",
];
const ROLE_RETRIEVER: &[&str] = &[
    "web", "search", "surf", "brows", "retriev", "file", "research", "fetch",
];

/// Vocabulary groups, in the order of [`vocab`]'s counts.
const VOCAB: &[&[&str]] = &[
    ERROR_TERMS,
    ASSUME_TERMS,
    HEDGE_TERMS,
    SUCCESS_TERMS,
    FINAL_TERMS,
    PLAN_CHANGE_TERMS,
    DELEGATION_TERMS,
];
const V_ERROR: usize = 0;
const V_ASSUME: usize = 1;
const V_HEDGE: usize = 2;
const V_SUCCESS: usize = 3;
const V_FINAL: usize = 4;
const V_PLAN: usize = 5;
const V_DELEGATION: usize = 6;

fn vocab() -> &'static TermSet {
    static SET: OnceLock<TermSet> = OnceLock::new();
    SET.get_or_init(|| TermSet::new(VOCAB))
}

/// Terms matched inside an agent's name and role text (substring match: names such as
/// `DataVerification_Expert` carry role words without separators).
fn has_role_word(lower: &str, terms: &[&str]) -> bool {
    terms.iter().any(|t| lower.contains(t))
}

fn ln1p(x: f64) -> f64 {
    x.max(0.0).ln_1p()
}

/// Feature rows for every step of `trace`, in step order. Runs in time linear in the
/// trace's text (no pairwise step comparisons), so traces of thousands of steps are cheap.
pub fn extract(trace: &Trace) -> Vec<StepFeatures> {
    let n = trace.steps.len();
    if n == 0 {
        return Vec::new();
    }

    // Agent-level facts.
    let kinds: Vec<AgentKind> = trace
        .steps
        .iter()
        .map(|s| trace.agent_kind(&s.agent))
        .collect();
    let mut turns: HashMap<&str, (usize, usize, usize)> = HashMap::new(); // first, last, count
    for (i, s) in trace.steps.iter().enumerate() {
        let e = turns.entry(s.agent.as_str()).or_insert((i, i, 0));
        e.1 = i;
        e.2 += 1;
    }
    let mut role_cache: HashMap<&str, [bool; 4]> = HashMap::new();
    for s in &trace.steps {
        role_cache.entry(s.agent.as_str()).or_insert_with(|| {
            let mut text = s.agent.to_lowercase();
            if let Some(a) = trace.agent(&s.agent) {
                if let Some(r) = &a.role {
                    text.push(' ');
                    text.push_str(&r.to_lowercase());
                }
                if let Some(p) = &a.system_prompt {
                    text.push(' ');
                    text.extend(p.chars().take(200).flat_map(char::to_lowercase));
                }
            }
            [
                has_role_word(&text, ROLE_VERIFIER),
                has_role_word(&text, ROLE_PLANNER),
                has_role_word(&text, ROLE_CODER),
                has_role_word(&text, ROLE_RETRIEVER),
            ]
        });
    }
    // Acting (non-terminal) steps: the one rule of maslens-trace (`Trace::is_acting`).
    let acting: Vec<bool> = trace
        .steps
        .iter()
        .map(|s| trace.is_acting(&s.agent))
        .collect();
    let first_nt = acting.iter().position(|a| *a);
    let last_nt = acting.iter().rposition(|a| *a);

    // Per-step text facts.
    let lowers: Vec<String> = trace
        .steps
        .iter()
        .map(|s| s.content.to_lowercase())
        .collect();
    let counts: Vec<Vec<usize>> = lowers.iter().map(|l| vocab().count(l)).collect();
    let errors: Vec<usize> = counts.iter().map(|c| c[V_ERROR]).collect();
    let chars: Vec<f64> = trace
        .steps
        .iter()
        .map(|s| s.content.chars().count() as f64)
        .collect();
    let mean_chars = (chars.iter().sum::<f64>() / n as f64).max(1.0);

    // Order of each step among the non-terminal steps (1-based; 0 for terminal steps).
    let mut nt_ord = vec![0usize; n];
    let mut k = 0;
    for (i, is_acting) in acting.iter().enumerate() {
        if *is_acting {
            k += 1;
            nt_ord[i] = k;
        }
    }
    let len_factor = ln1p(n as f64);
    let tool_error = |i: usize| kinds[i] == AgentKind::Tool && errors[i] > 0;
    // The last non-terminal step before the first failing tool output: the step whose code or
    // call failed first.
    let cause_of_first_error = (0..n)
        .find(|i| tool_error(*i))
        .and_then(|e| (0..e).rev().find(|i| acting[*i]));

    let task_words: HashSet64 = content_word_hashes(&trace.task, 4).into_iter().collect();
    let mut seen_numbers: HashSet64 = number_hashes(&trace.task).into_iter().collect();
    // What the run ended on: numbers and content words of its last two substantive
    // non-terminal steps that the task does not contain. A failed run ends on a wrong answer,
    // so the step that first brought those in is a candidate origin of the failure.
    let final_steps: Vec<usize> = (0..n)
        .rev()
        .filter(|i| acting[*i] && trace.steps[*i].content.trim().chars().count() >= 20)
        .take(2)
        .collect();
    let final_numbers: HashSet64 = final_steps
        .iter()
        .flat_map(|i| number_hashes(&trace.steps[*i].content))
        .filter(|h| !seen_numbers.contains(h))
        .collect();
    let final_words: HashSet64 = final_steps
        .iter()
        .flat_map(|i| content_word_hashes(&trace.steps[*i].content, 4))
        .filter(|h| !task_words.contains(h))
        .collect();
    let mut seen_trigrams = HashSet64::default();
    let mut seen_words: HashSet64 = task_words.clone();

    let mut agent_turns_so_far: HashMap<&str, usize> = HashMap::new();
    let mut errors_before = 0usize;
    let mut rows = Vec::with_capacity(n);
    for (i, step) in trace.steps.iter().enumerate() {
        let mut f = [0.0; N_FEATURES];
        macro_rules! set {
            ($id:ident, $v:expr $(,)?) => {
                f[F::$id as usize] = $v
            };
        }
        let kind = kinds[i];
        let (first, last, count) = turns.get(step.agent.as_str()).copied().unwrap_or((i, i, 1));
        let so_far = agent_turns_so_far.entry(step.agent.as_str()).or_insert(0);

        // position
        set!(
            PosRel,
            if n > 1 {
                i as f64 / (n - 1) as f64
            } else {
                0.0
            },
        );
        set!(PosFirst, f64::from(u8::from(i == 0)));
        set!(PosLast, f64::from(u8::from(i + 1 == n)));
        set!(LogIndex, ln1p(i as f64));
        set!(AgentFirstTurn, f64::from(u8::from(first == i)));
        set!(AgentLastTurn, f64::from(u8::from(last == i)));
        set!(AgentTurnLog, ln1p(*so_far as f64));
        set!(AgentTurn2, f64::from(u8::from(*so_far == 1)));
        set!(AgentTurn3, f64::from(u8::from(*so_far == 2)));
        set!(AgentShare, count as f64 / n as f64);
        set!(FirstNonterminal, f64::from(u8::from(first_nt == Some(i))));
        set!(LastNonterminal, f64::from(u8::from(last_nt == Some(i))));
        set!(
            AfterHuman,
            f64::from(u8::from(
                i > 0 && kinds[i - 1] == AgentKind::Human && acting[i],
            )),
        );
        let agent_of = |pos: Option<usize>| pos.map(|p| trace.steps[p].agent.as_str());
        set!(
            AgentIsFirstActor,
            f64::from(u8::from(agent_of(first_nt) == Some(step.agent.as_str())))
        );
        set!(
            AgentIsLastActor,
            f64::from(u8::from(agent_of(last_nt) == Some(step.agent.as_str())))
        );
        *so_far += 1;

        // kind and role words
        set!(KindWorker, f64::from(u8::from(kind == AgentKind::Worker)));
        set!(
            KindOrchestrator,
            f64::from(u8::from(kind == AgentKind::Orchestrator)),
        );
        set!(KindTool, f64::from(u8::from(kind == AgentKind::Tool)));
        set!(KindHuman, f64::from(u8::from(kind == AgentKind::Human)));
        let roles = role_cache
            .get(step.agent.as_str())
            .copied()
            .unwrap_or_default();
        set!(RoleVerifier, f64::from(u8::from(roles[0])));
        set!(RolePlanner, f64::from(u8::from(roles[1])));
        set!(RoleCoder, f64::from(u8::from(roles[2])));
        set!(RoleRetriever, f64::from(u8::from(roles[3])));

        // content
        let lower = &lowers[i];
        set!(LogChars, ln1p(chars[i]));
        set!(LenRel, (chars[i] / mean_chars).min(5.0));
        set!(
            ShortContent,
            f64::from(u8::from(step.content.trim().chars().count() < 20)),
        );
        set!(CodeBlock, f64::from(u8::from(lower.contains("```"))));
        set!(ErrorWords, ln1p(errors[i] as f64));
        let next = i + 1;
        let next_err = next < n && errors[next] > 0;
        set!(
            NextToolError,
            f64::from(u8::from(next_err && kinds[next] == AgentKind::Tool)),
        );
        set!(NextStepError, f64::from(u8::from(next_err)));
        set!(AssumeWords, ln1p(counts[i][V_ASSUME] as f64));
        set!(HedgeWords, ln1p(counts[i][V_HEDGE] as f64));
        set!(SuccessClaims, ln1p(counts[i][V_SUCCESS] as f64),);
        set!(FinalWords, f64::from(u8::from(counts[i][V_FINAL] > 0)),);
        set!(PlanChange, ln1p(counts[i][V_PLAN] as f64),);
        set!(
            Delegation,
            f64::from(u8::from(
                step.speaker.contains("->") || counts[i][V_DELEGATION] > 0,
            )),
        );

        // distinct numbers introduced without a source (not in the task or any earlier step)
        let nums: HashSet64 = number_hashes(&step.content).into_iter().collect();
        let novel_nums = nums.iter().filter(|h| !seen_numbers.contains(h)).count();
        set!(NovelNumbers, ln1p(novel_nums as f64));

        // repetition: share of the step's word trigrams already seen earlier
        let words = word_hashes(&step.content);
        let trigrams: Vec<u64> = words
            .windows(3)
            .map(|w| {
                w[0].wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    ^ w[1].rotate_left(21)
                    ^ w[2].rotate_left(42)
            })
            .collect();
        let repeat = if trigrams.is_empty() {
            0.0
        } else {
            trigrams
                .iter()
                .filter(|h| seen_trigrams.contains(h))
                .count() as f64
                / trigrams.len() as f64
        };
        set!(RepeatFrac, repeat);

        // new vocabulary: share of content words never seen in the task or earlier steps
        let origin_numbers = nums
            .iter()
            .filter(|h| !seen_numbers.contains(h) && final_numbers.contains(h))
            .count();
        set!(OriginFinalNumbers, ln1p(origin_numbers as f64));
        let cw = content_word_hashes(&step.content, 4);
        let origin_words = cw
            .iter()
            .filter(|h| !seen_words.contains(*h) && final_words.contains(*h))
            .copied()
            .collect::<HashSet64>()
            .len();
        set!(
            OriginFinalWords,
            if final_words.is_empty() {
                0.0
            } else {
                origin_words as f64 / final_words.len() as f64
            }
        );
        let novel_words = if cw.is_empty() {
            0.0
        } else {
            cw.iter().filter(|h| !seen_words.contains(h)).count() as f64 / cw.len() as f64
        };
        set!(NovelWords, novel_words);

        // relation to the task: share of the task's content words the step mentions
        let overlap = if task_words.is_empty() {
            0.0
        } else {
            let step_words: HashSet64 = cw.iter().copied().collect();
            task_words
                .iter()
                .filter(|h| step_words.contains(*h))
                .count() as f64
                / task_words.len() as f64
        };
        set!(TaskOverlap, overlap);
        set!(Url, f64::from(u8::from(lower.contains("http"))));

        // order among non-terminal steps, and position scaled by the trace's length
        set!(NtOrd2, f64::from(u8::from(nt_ord[i] == 2)));
        set!(NtOrd3, f64::from(u8::from(nt_ord[i] == 3)));
        set!(NtOrdLog, ln1p(nt_ord[i] as f64));
        set!(PosRelXLen, f[F::PosRel as usize] * len_factor);
        set!(LogIndexXLen, f[F::LogIndex as usize] * len_factor);
        set!(
            AgentFirstTurnXLen,
            f[F::AgentFirstTurn as usize] * len_factor
        );
        set!(
            OrchestratorXLen,
            f[F::KindOrchestrator as usize] * len_factor
        );

        // interactions and error neighbourhood
        set!(
            FirstStepCode,
            f64::from(u8::from(i == 0 && lower.contains("```")))
        );
        set!(
            CauseOfFirstError,
            f64::from(u8::from(cause_of_first_error == Some(i)))
        );
        set!(
            PrevToolError,
            f64::from(u8::from(i > 0 && tool_error(i - 1)))
        );
        set!(ErrorsBefore, ln1p(errors_before as f64));
        set!(
            NextToolShort,
            f64::from(u8::from(
                next < n && kinds[next] == AgentKind::Tool && chars[next] < 80.0
            ))
        );
        if errors[i] > 0 {
            errors_before += 1;
        }

        rows.push(f);
        seen_numbers.extend(nums);
        seen_trigrams.extend(trigrams);
        seen_words.extend(cw);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_trace::{Agent, Step};

    fn agent(name: &str, kind: AgentKind, role: Option<&str>) -> Agent {
        Agent {
            name: name.into(),
            kind,
            role: role.map(String::from),
            system_prompt: None,
        }
    }

    fn step(index: usize, agent: &str, content: &str) -> Step {
        Step {
            index,
            agent: agent.into(),
            speaker: agent.into(),
            content: content.into(),
            ..Step::default()
        }
    }

    /// Hand-written fixture: a human asks, a planner delegates, a coder guesses with a
    /// placeholder number, the terminal fails, the coder changes plan and claims success.
    fn fixture() -> Trace {
        let mut t = Trace::new("fixture/1");
        t.task = "What was the population of Paris in 2020?".into();
        t.agents = vec![
            agent("human", AgentKind::Human, None),
            agent(
                "Lead",
                AgentKind::Orchestrator,
                Some("plans and coordinates"),
            ),
            agent("Data_Expert", AgentKind::Worker, Some("writes python code")),
            agent("Computer_terminal", AgentKind::Tool, None),
            agent("Checker", AgentKind::Worker, None),
        ];
        t.steps = vec![
            step(0, "human", "What was the population of Paris in 2020?"),
            step(1, "Lead", "Please look up the population of Paris for 2020 on the web."),
            step(
                2,
                "Data_Expert",
                "```python\nprint(2161000)\n```\nAssume the population is 2161000, an example placeholder value.",
            ),
            step(3, "Computer_terminal", "exitcode: 1 (execution failed)\nTraceback: NameError"),
            step(
                4,
                "Data_Expert",
                "Let's try a different approach instead. It might be 2,161,000; see https://example.org",
            ),
            step(5, "Checker", "Verified: the final answer is correct. TERMINATE"),
            step(6, "Checker", "ok"),
        ];
        t
    }

    fn get(rows: &[StepFeatures], i: usize, name: &str) -> f64 {
        rows[i][feature_index(name).unwrap()]
    }

    #[test]
    fn names_and_rows_agree() {
        let rows = extract(&fixture());
        assert_eq!(rows.len(), 7);
        assert_eq!(FEATURE_NAMES.len(), N_FEATURES);
        let mut names: Vec<&str> = FEATURE_NAMES.to_vec();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), N_FEATURES, "feature names must be unique");
        assert!(rows.iter().flatten().all(|v| v.is_finite()));
        assert!(extract(&Trace::new("empty")).is_empty());
    }

    #[test]
    fn position_features() {
        let r = extract(&fixture());
        assert_eq!(get(&r, 0, "pos_rel"), 0.0);
        assert_eq!(get(&r, 3, "pos_rel"), 0.5);
        assert_eq!(get(&r, 6, "pos_rel"), 1.0);
        assert_eq!(get(&r, 0, "pos_first"), 1.0);
        assert_eq!(get(&r, 1, "pos_first"), 0.0);
        assert_eq!(get(&r, 6, "pos_last"), 1.0);
        assert_eq!(get(&r, 5, "pos_last"), 0.0);
        assert!((get(&r, 3, "log_index") - 4f64.ln()).abs() < 1e-12);
        // Data_Expert acts at 2 and 4
        assert_eq!(get(&r, 2, "agent_first_turn"), 1.0);
        assert_eq!(get(&r, 4, "agent_first_turn"), 0.0);
        assert_eq!(get(&r, 2, "agent_last_turn"), 0.0);
        assert_eq!(get(&r, 4, "agent_last_turn"), 1.0);
        assert_eq!(get(&r, 2, "agent_turn_log"), 0.0);
        assert!((get(&r, 4, "agent_turn_log") - 2f64.ln()).abs() < 1e-12);
        assert!((get(&r, 4, "agent_share") - 2.0 / 7.0).abs() < 1e-12);
        // first/last worker-or-orchestrator steps: Lead at 1, Checker at 6
        assert_eq!(get(&r, 1, "first_nonterminal"), 1.0);
        assert_eq!(get(&r, 0, "first_nonterminal"), 0.0);
        assert_eq!(get(&r, 6, "last_nonterminal"), 1.0);
        assert_eq!(get(&r, 5, "last_nonterminal"), 0.0);
        assert_eq!(get(&r, 1, "after_human"), 1.0);
        assert_eq!(get(&r, 2, "after_human"), 0.0);
        assert_eq!(get(&r, 1, "agent_is_first_actor"), 1.0);
        assert_eq!(get(&r, 2, "agent_is_first_actor"), 0.0);
        assert_eq!(get(&r, 5, "agent_is_last_actor"), 1.0);
        assert_eq!(get(&r, 4, "agent_is_last_actor"), 0.0);
    }

    #[test]
    fn kind_and_role_features() {
        let r = extract(&fixture());
        assert_eq!(get(&r, 2, "kind_worker"), 1.0);
        assert_eq!(get(&r, 1, "kind_worker"), 0.0);
        assert_eq!(get(&r, 1, "kind_orchestrator"), 1.0);
        assert_eq!(get(&r, 3, "kind_tool"), 1.0);
        assert_eq!(get(&r, 0, "kind_human"), 1.0);
        assert_eq!(get(&r, 3, "kind_human"), 0.0);
        // role words come from the name and the role text
        assert_eq!(get(&r, 5, "role_verifier"), 1.0, "Checker");
        assert_eq!(get(&r, 2, "role_verifier"), 0.0);
        assert_eq!(get(&r, 1, "role_planner"), 1.0, "role: plans");
        assert_eq!(get(&r, 2, "role_coder"), 1.0, "role: python code");
        assert_eq!(get(&r, 5, "role_coder"), 0.0);
        let mut t = fixture();
        t.agents[4].name = "WebSurfer".into();
        for s in &mut t.steps {
            if s.agent == "Checker" {
                s.agent = "WebSurfer".into();
            }
        }
        let r = extract(&t);
        assert_eq!(get(&r, 5, "role_retriever"), 1.0);
        assert_eq!(get(&r, 2, "role_retriever"), 0.0);
    }

    #[test]
    fn content_features() {
        let r = extract(&fixture());
        assert!(get(&r, 2, "log_chars") > get(&r, 6, "log_chars"));
        assert!(get(&r, 2, "len_rel") > 1.0);
        assert!(get(&r, 6, "len_rel") < 1.0);
        assert_eq!(get(&r, 6, "short_content"), 1.0);
        assert_eq!(get(&r, 2, "short_content"), 0.0);
        assert_eq!(get(&r, 2, "code_block"), 1.0);
        assert_eq!(get(&r, 4, "code_block"), 0.0);
        assert!(get(&r, 3, "error_words") > 0.0);
        assert_eq!(get(&r, 1, "error_words"), 0.0);
        // the terminal output after step 2 failed
        assert_eq!(get(&r, 2, "next_tool_error"), 1.0);
        assert_eq!(get(&r, 2, "next_step_error"), 1.0);
        assert_eq!(get(&r, 4, "next_tool_error"), 0.0);
        assert_eq!(get(&r, 1, "next_step_error"), 0.0);
        assert!(
            get(&r, 2, "assume_words") >= 3f64.ln_1p() - 1e-12,
            "assume, example, placeholder"
        );
        assert_eq!(get(&r, 1, "assume_words"), 0.0);
        assert!(get(&r, 4, "hedge_words") > 0.0, "might");
        assert_eq!(get(&r, 2, "hedge_words"), 0.0);
        assert!(get(&r, 5, "success_claims") > 0.0);
        assert_eq!(get(&r, 1, "success_claims"), 0.0);
        assert_eq!(get(&r, 5, "final_words"), 1.0);
        assert_eq!(get(&r, 4, "final_words"), 0.0);
        assert!(
            get(&r, 4, "plan_change") > 0.0,
            "different approach, instead"
        );
        assert_eq!(get(&r, 2, "plan_change"), 0.0);
        assert_eq!(get(&r, 1, "delegation"), 1.0, "please");
        assert_eq!(get(&r, 3, "delegation"), 0.0);
        assert_eq!(get(&r, 4, "url"), 1.0);
        assert_eq!(get(&r, 2, "url"), 0.0);
    }

    #[test]
    fn novelty_repetition_and_task_relation() {
        let r = extract(&fixture());
        // 2161000 is new at step 2 (2020 comes from the task), and no longer new at step 4
        assert!((get(&r, 2, "novel_numbers") - 1f64.ln_1p()).abs() < 1e-12);
        assert_eq!(get(&r, 0, "novel_numbers"), 0.0, "2020 is in the task");
        assert_eq!(get(&r, 4, "novel_numbers"), 0.0);
        // the human step repeats nothing; a later copy of it repeats everything
        assert_eq!(get(&r, 0, "repeat_frac"), 0.0);
        let mut t = fixture();
        t.steps[6].content = t.steps[0].content.clone();
        let r2 = extract(&t);
        assert_eq!(get(&r2, 6, "repeat_frac"), 1.0);
        assert_eq!(get(&r2, 6, "novel_words"), 0.0);
        assert!(get(&r, 2, "novel_words") > 0.5);
        // the human step restates the task: full overlap; the terminal output shares nothing
        assert_eq!(get(&r, 0, "task_overlap"), 1.0);
        assert_eq!(get(&r, 3, "task_overlap"), 0.0);
        assert!(get(&r, 1, "task_overlap") > 0.5);
    }

    #[test]
    fn order_and_length_features() {
        let r = extract(&fixture());
        let len = 8f64.ln(); // ln(1 + 7 steps)
                             // non-terminal order: Lead 1st, Data_Expert 2nd (step 2) and 3rd (step 4)
        assert_eq!(get(&r, 2, "nt_ord_2"), 1.0);
        assert_eq!(get(&r, 1, "nt_ord_2"), 0.0);
        assert_eq!(get(&r, 3, "nt_ord_2"), 0.0, "terminal steps have no order");
        assert_eq!(get(&r, 4, "nt_ord_3"), 1.0);
        assert_eq!(get(&r, 2, "nt_ord_3"), 0.0);
        assert_eq!(get(&r, 0, "nt_ord_log"), 0.0);
        assert!((get(&r, 4, "nt_ord_log") - 4f64.ln()).abs() < 1e-12);
        assert!((get(&r, 3, "pos_rel_x_len") - 0.5 * len).abs() < 1e-12);
        assert!((get(&r, 3, "log_index_x_len") - 4f64.ln() * len).abs() < 1e-12);
        assert!((get(&r, 2, "agent_first_turn_x_len") - len).abs() < 1e-12);
        assert_eq!(get(&r, 4, "agent_first_turn_x_len"), 0.0);
        assert!((get(&r, 1, "orchestrator_x_len") - len).abs() < 1e-12);
        assert_eq!(get(&r, 2, "orchestrator_x_len"), 0.0);
        // the acting agent's second and third turns
        assert_eq!(get(&r, 4, "agent_turn_2"), 1.0);
        assert_eq!(get(&r, 6, "agent_turn_2"), 1.0);
        assert_eq!(get(&r, 2, "agent_turn_2"), 0.0);
        assert_eq!(get(&r, 4, "agent_turn_3"), 0.0);
        let mut t = fixture();
        t.steps[6].agent = "Data_Expert".into();
        let r = extract(&t);
        assert_eq!(get(&r, 6, "agent_turn_3"), 1.0);
        assert_eq!(get(&r, 6, "agent_turn_2"), 0.0);
    }

    #[test]
    fn error_neighbourhood_features() {
        let r = extract(&fixture());
        // step 2's code made the first failing terminal output (step 3)
        assert_eq!(get(&r, 2, "cause_of_first_error"), 1.0);
        assert_eq!(get(&r, 1, "cause_of_first_error"), 0.0);
        assert_eq!(get(&r, 4, "cause_of_first_error"), 0.0);
        assert_eq!(get(&r, 4, "prev_tool_error"), 1.0);
        assert_eq!(get(&r, 3, "prev_tool_error"), 0.0);
        // one step with error vocabulary (3) before steps 4..6, none before 3
        assert_eq!(get(&r, 3, "errors_before"), 0.0);
        assert!((get(&r, 4, "errors_before") - 2f64.ln()).abs() < 1e-12);
        assert!((get(&r, 6, "errors_before") - 2f64.ln()).abs() < 1e-12);
        // the terminal output after step 2 is short (51 chars); step 4 is followed by a worker
        assert_eq!(get(&r, 2, "next_tool_short"), 1.0);
        assert_eq!(get(&r, 4, "next_tool_short"), 0.0);
        // no code in the first step here; a first step with code is flagged
        assert_eq!(get(&r, 0, "first_step_code"), 0.0);
        assert_eq!(
            get(&r, 2, "first_step_code"),
            0.0,
            "code, but not the first step"
        );
        let mut t = fixture();
        t.steps[0].content = "Plan:\n```python\nx = 1\n```".into();
        assert_eq!(get(&extract(&t), 0, "first_step_code"), 1.0);
        // no failing tool output at all: no cause
        let mut t = fixture();
        t.steps[3].content = "exitcode: 0 ok".into();
        let r = extract(&t);
        assert!((0..7).all(|i| get(&r, i, "cause_of_first_error") == 0.0));
    }

    #[test]
    fn origin_of_what_the_run_ended_on() {
        let r = extract(&fixture());
        // the run ends on steps 5 and 4 ("ok" is too short); their only number that the task
        // lacks, 2161000, was first written at step 2
        assert!((get(&r, 2, "origin_final_numbers") - 2f64.ln()).abs() < 1e-12);
        assert_eq!(
            get(&r, 4, "origin_final_numbers"),
            0.0,
            "repeated, not introduced"
        );
        assert_eq!(
            get(&r, 0, "origin_final_numbers"),
            0.0,
            "2020 is in the task"
        );
        // words: "example" comes from step 2, "verified", "final", ... from step 5 itself
        assert!(get(&r, 2, "origin_final_words") > 0.0);
        assert!(get(&r, 5, "origin_final_words") > get(&r, 2, "origin_final_words"));
        assert_eq!(get(&r, 3, "origin_final_words"), 0.0);
        assert_eq!(
            get(&r, 0, "origin_final_words"),
            0.0,
            "task words do not count"
        );
        let total: f64 = (0..7).map(|i| get(&r, i, "origin_final_words")).sum();
        assert!(
            (total - 1.0).abs() < 1e-12,
            "each final word has one origin: {total}"
        );
    }

    #[test]
    fn extraction_is_linear_enough_for_long_traces() {
        let mut t = fixture();
        let base = t.steps.clone();
        t.steps = (0..2000)
            .map(|i| {
                let mut s = base[i % base.len()].clone();
                s.index = i;
                s
            })
            .collect();
        let started = std::time::Instant::now();
        let rows = extract(&t);
        assert_eq!(rows.len(), 2000);
        // generous bound even for an unoptimized test build on a loaded machine
        assert!(started.elapsed().as_secs_f64() < 5.0);
    }
}
