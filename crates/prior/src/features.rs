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
    if trace.steps.is_empty() {
        return Vec::new();
    }
    let facts = TraceFacts::of(trace);
    let mut seen = Seen::of_task(trace, &facts);
    let mut rows = Vec::with_capacity(facts.n);
    for i in 0..facts.n {
        let mut f = [0.0; N_FEATURES];
        facts.position_features(&mut f, &mut seen, i);
        facts.kind_features(&mut f, i);
        facts.content_features(&mut f, i);
        let brought = facts.novelty_features(&mut f, &seen, i);
        facts.order_features(&mut f, &mut seen, i);
        seen.take(brought);
        rows.push(f);
    }
    rows
}

/// `f[F::Id] = value`.
macro_rules! set {
    ($f:ident, $id:ident, $v:expr $(,)?) => {
        $f[F::$id as usize] = $v
    };
}

/// 1.0 or 0.0.
fn flag(b: bool) -> f64 {
    f64::from(u8::from(b))
}

/// What the whole trace says that every step's row reads: agent-level facts, per-step text
/// facts and what the run ended on. Computed once per trace.
struct TraceFacts<'t> {
    trace: &'t Trace,
    n: usize,
    kinds: Vec<AgentKind>,
    /// Per agent: first step, last step, number of steps.
    turns: HashMap<&'t str, (usize, usize, usize)>,
    /// Per agent: verifier, planner, coder, retriever role words.
    roles: HashMap<&'t str, [bool; 4]>,
    /// Acting (non-terminal) steps: the one rule of maslens-trace (`Trace::is_acting`).
    acting: Vec<bool>,
    first_nt: Option<usize>,
    last_nt: Option<usize>,
    lowers: Vec<String>,
    counts: Vec<Vec<usize>>,
    errors: Vec<usize>,
    chars: Vec<f64>,
    mean_chars: f64,
    /// Order of each step among the non-terminal steps (1-based; 0 for terminal steps).
    nt_ord: Vec<usize>,
    len_factor: f64,
    /// The last non-terminal step before the first failing tool output: the step whose code
    /// or call failed first.
    cause_of_first_error: Option<usize>,
    task_words: HashSet64,
    /// Numbers and content words of the run's last two substantive non-terminal steps that
    /// the task does not contain. A failed run ends on a wrong answer, so the step that first
    /// brought those in is a candidate origin of the failure.
    final_numbers: HashSet64,
    final_words: HashSet64,
}

/// What the task and the earlier steps brought in, updated after each step.
struct Seen<'t> {
    numbers: HashSet64,
    trigrams: HashSet64,
    words: HashSet64,
    agent_turns: HashMap<&'t str, usize>,
    errors_before: usize,
}

/// What one step brings in: its numbers, word trigrams and content words.
struct Brought {
    numbers: HashSet64,
    trigrams: Vec<u64>,
    words: Vec<u64>,
}

fn agent_roles(trace: &Trace, agent: &str) -> [bool; 4] {
    let mut text = agent.to_lowercase();
    if let Some(a) = trace.agent(agent) {
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
}

impl<'t> TraceFacts<'t> {
    fn of(trace: &'t Trace) -> TraceFacts<'t> {
        let n = trace.steps.len();
        let steps = &trace.steps;
        let kinds: Vec<AgentKind> = steps.iter().map(|s| trace.agent_kind(&s.agent)).collect();
        let mut turns: HashMap<&str, (usize, usize, usize)> = HashMap::new();
        let mut roles: HashMap<&str, [bool; 4]> = HashMap::new();
        for (i, s) in steps.iter().enumerate() {
            let e = turns.entry(s.agent.as_str()).or_insert((i, i, 0));
            e.1 = i;
            e.2 += 1;
            roles
                .entry(s.agent.as_str())
                .or_insert_with(|| agent_roles(trace, &s.agent));
        }
        let acting: Vec<bool> = steps.iter().map(|s| trace.is_acting(&s.agent)).collect();
        let lowers: Vec<String> = steps.iter().map(|s| s.content.to_lowercase()).collect();
        let counts: Vec<Vec<usize>> = lowers.iter().map(|l| vocab().count(l)).collect();
        let errors: Vec<usize> = counts.iter().map(|c| c[V_ERROR]).collect();
        let chars: Vec<f64> = steps
            .iter()
            .map(|s| s.content.chars().count() as f64)
            .collect();
        let mean_chars = (chars.iter().sum::<f64>() / n as f64).max(1.0);
        let mut nt_ord = vec![0usize; n];
        let mut k = 0;
        for (i, is_acting) in acting.iter().enumerate() {
            if *is_acting {
                k += 1;
                nt_ord[i] = k;
            }
        }
        let cause_of_first_error = (0..n)
            .find(|i| kinds[*i] == AgentKind::Tool && errors[*i] > 0)
            .and_then(|e| (0..e).rev().find(|i| acting[*i]));
        let task_words: HashSet64 = content_word_hashes(&trace.task, 4).into_iter().collect();
        let task_numbers: HashSet64 = number_hashes(&trace.task).into_iter().collect();
        let final_steps: Vec<usize> = (0..n)
            .rev()
            .filter(|i| acting[*i] && steps[*i].content.trim().chars().count() >= 20)
            .take(2)
            .collect();
        let final_numbers: HashSet64 = final_steps
            .iter()
            .flat_map(|i| number_hashes(&steps[*i].content))
            .filter(|h| !task_numbers.contains(h))
            .collect();
        let final_words: HashSet64 = final_steps
            .iter()
            .flat_map(|i| content_word_hashes(&steps[*i].content, 4))
            .filter(|h| !task_words.contains(h))
            .collect();
        TraceFacts {
            trace,
            n,
            first_nt: acting.iter().position(|a| *a),
            last_nt: acting.iter().rposition(|a| *a),
            kinds,
            turns,
            roles,
            acting,
            lowers,
            counts,
            errors,
            chars,
            mean_chars,
            nt_ord,
            len_factor: ln1p(n as f64),
            cause_of_first_error,
            task_words,
            final_numbers,
            final_words,
        }
    }

    fn tool_error(&self, i: usize) -> bool {
        self.kinds[i] == AgentKind::Tool && self.errors[i] > 0
    }

    /// Where the step stands in the trace and in its agent's turns.
    fn position_features(&self, f: &mut StepFeatures, seen: &mut Seen<'t>, i: usize) {
        let (n, trace) = (self.n, self.trace);
        let agent = trace.steps[i].agent.as_str();
        let (first, last, count) = self.turns.get(agent).copied().unwrap_or((i, i, 1));
        let so_far = seen.agent_turns.entry(agent).or_insert(0);
        set!(
            f,
            PosRel,
            if n > 1 {
                i as f64 / (n - 1) as f64
            } else {
                0.0
            }
        );
        set!(f, PosFirst, flag(i == 0));
        set!(f, PosLast, flag(i + 1 == n));
        set!(f, LogIndex, ln1p(i as f64));
        set!(f, AgentFirstTurn, flag(first == i));
        set!(f, AgentLastTurn, flag(last == i));
        set!(f, AgentTurnLog, ln1p(*so_far as f64));
        set!(f, AgentTurn2, flag(*so_far == 1));
        set!(f, AgentTurn3, flag(*so_far == 2));
        set!(f, AgentShare, count as f64 / n as f64);
        set!(f, FirstNonterminal, flag(self.first_nt == Some(i)));
        set!(f, LastNonterminal, flag(self.last_nt == Some(i)));
        let after_human = i > 0 && self.kinds[i - 1] == AgentKind::Human && self.acting[i];
        set!(f, AfterHuman, flag(after_human));
        let agent_of = |pos: Option<usize>| pos.map(|p| trace.steps[p].agent.as_str());
        set!(
            f,
            AgentIsFirstActor,
            flag(agent_of(self.first_nt) == Some(agent))
        );
        set!(
            f,
            AgentIsLastActor,
            flag(agent_of(self.last_nt) == Some(agent))
        );
        *so_far += 1;
    }

    /// The acting agent's kind and role words.
    fn kind_features(&self, f: &mut StepFeatures, i: usize) {
        let kind = self.kinds[i];
        set!(f, KindWorker, flag(kind == AgentKind::Worker));
        set!(f, KindOrchestrator, flag(kind == AgentKind::Orchestrator));
        set!(f, KindTool, flag(kind == AgentKind::Tool));
        set!(f, KindHuman, flag(kind == AgentKind::Human));
        let agent = self.trace.steps[i].agent.as_str();
        let roles = self.roles.get(agent).copied().unwrap_or_default();
        set!(f, RoleVerifier, flag(roles[0]));
        set!(f, RolePlanner, flag(roles[1]));
        set!(f, RoleCoder, flag(roles[2]));
        set!(f, RoleRetriever, flag(roles[3]));
    }

    /// The step's own text: length, code, error and other word counts.
    fn content_features(&self, f: &mut StepFeatures, i: usize) {
        let step = &self.trace.steps[i];
        let (lower, counts) = (&self.lowers[i], &self.counts[i]);
        set!(f, LogChars, ln1p(self.chars[i]));
        set!(f, LenRel, (self.chars[i] / self.mean_chars).min(5.0));
        set!(
            f,
            ShortContent,
            flag(step.content.trim().chars().count() < 20)
        );
        set!(f, CodeBlock, flag(lower.contains("```")));
        set!(f, ErrorWords, ln1p(self.errors[i] as f64));
        let next = i + 1;
        let next_err = next < self.n && self.errors[next] > 0;
        set!(
            f,
            NextToolError,
            flag(next_err && self.kinds[next] == AgentKind::Tool)
        );
        set!(f, NextStepError, flag(next_err));
        set!(f, AssumeWords, ln1p(counts[V_ASSUME] as f64));
        set!(f, HedgeWords, ln1p(counts[V_HEDGE] as f64));
        set!(f, SuccessClaims, ln1p(counts[V_SUCCESS] as f64));
        set!(f, FinalWords, flag(counts[V_FINAL] > 0));
        set!(f, PlanChange, ln1p(counts[V_PLAN] as f64));
        let delegation = step.speaker.contains("->") || counts[V_DELEGATION] > 0;
        set!(f, Delegation, flag(delegation));
        set!(f, Url, flag(lower.contains("http")));
    }

    /// What the step brings in that the task and the earlier steps did not: numbers,
    /// repeated trigrams, new words, the words the run ended on, overlap with the task.
    fn novelty_features(&self, f: &mut StepFeatures, seen: &Seen, i: usize) -> Brought {
        let content = &self.trace.steps[i].content;
        let numbers: HashSet64 = number_hashes(content).into_iter().collect();
        let novel_nums = numbers.iter().filter(|h| !seen.numbers.contains(h)).count();
        set!(f, NovelNumbers, ln1p(novel_nums as f64));
        let trigrams = trigram_hashes(&word_hashes(content));
        set!(
            f,
            RepeatFrac,
            share(&trigrams, |h| seen.trigrams.contains(h))
        );
        let origin_numbers = numbers
            .iter()
            .filter(|h| !seen.numbers.contains(h) && self.final_numbers.contains(h))
            .count();
        set!(f, OriginFinalNumbers, ln1p(origin_numbers as f64));
        let words = content_word_hashes(content, 4);
        let origin_words = words
            .iter()
            .filter(|h| !seen.words.contains(*h) && self.final_words.contains(*h))
            .copied()
            .collect::<HashSet64>()
            .len();
        let origin_share = if self.final_words.is_empty() {
            0.0
        } else {
            origin_words as f64 / self.final_words.len() as f64
        };
        set!(f, OriginFinalWords, origin_share);
        set!(f, NovelWords, share(&words, |h| !seen.words.contains(h)));
        let overlap = if self.task_words.is_empty() {
            0.0
        } else {
            let step_words: HashSet64 = words.iter().copied().collect();
            let mentioned = self.task_words.iter().filter(|h| step_words.contains(*h));
            mentioned.count() as f64 / self.task_words.len() as f64
        };
        set!(f, TaskOverlap, overlap);
        Brought {
            numbers,
            trigrams,
            words,
        }
    }

    /// Order among non-terminal steps, position scaled by the trace's length, interactions
    /// and the error neighbourhood (reads the position and kind features already set).
    fn order_features(&self, f: &mut StepFeatures, seen: &mut Seen, i: usize) {
        let ord = self.nt_ord[i];
        set!(f, NtOrd2, flag(ord == 2));
        set!(f, NtOrd3, flag(ord == 3));
        set!(f, NtOrdLog, ln1p(ord as f64));
        let len = self.len_factor;
        set!(f, PosRelXLen, f[F::PosRel as usize] * len);
        set!(f, LogIndexXLen, f[F::LogIndex as usize] * len);
        set!(f, AgentFirstTurnXLen, f[F::AgentFirstTurn as usize] * len);
        set!(f, OrchestratorXLen, f[F::KindOrchestrator as usize] * len);
        set!(
            f,
            FirstStepCode,
            flag(i == 0 && self.lowers[i].contains("```"))
        );
        set!(
            f,
            CauseOfFirstError,
            flag(self.cause_of_first_error == Some(i))
        );
        set!(f, PrevToolError, flag(i > 0 && self.tool_error(i - 1)));
        set!(f, ErrorsBefore, ln1p(seen.errors_before as f64));
        let next = i + 1;
        let next_tool_short =
            next < self.n && self.kinds[next] == AgentKind::Tool && self.chars[next] < 80.0;
        set!(f, NextToolShort, flag(next_tool_short));
        if self.errors[i] > 0 {
            seen.errors_before += 1;
        }
    }
}

impl<'t> Seen<'t> {
    /// Before the first step: the task's numbers and content words.
    fn of_task(trace: &Trace, facts: &TraceFacts) -> Seen<'t> {
        Seen {
            numbers: number_hashes(&trace.task).into_iter().collect(),
            trigrams: HashSet64::default(),
            words: facts.task_words.clone(),
            agent_turns: HashMap::new(),
            errors_before: 0,
        }
    }

    fn take(&mut self, brought: Brought) {
        self.numbers.extend(brought.numbers);
        self.trigrams.extend(brought.trigrams);
        self.words.extend(brought.words);
    }
}

/// Hashes of a step's word trigrams.
fn trigram_hashes(words: &[u64]) -> Vec<u64> {
    words
        .windows(3)
        .map(|w| {
            w[0].wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ w[1].rotate_left(21) ^ w[2].rotate_left(42)
        })
        .collect()
}

/// The share of `items` for which `pred` holds (0 for none).
fn share(items: &[u64], pred: impl Fn(&u64) -> bool) -> f64 {
    if items.is_empty() {
        0.0
    } else {
        items.iter().filter(|h| pred(h)).count() as f64 / items.len() as f64
    }
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
