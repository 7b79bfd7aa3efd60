//! A **simulated** multi-agent system for testing the optimizer. This is not a model and says
//! nothing about how real LLMs behave: it is a deterministic test environment whose answer
//! accuracy depends on the role and aggregator prompt *texts* in a known way, so that the
//! optimizer's logic (credit finds the weak role and round, Phase A/B fix them, budgets compare
//! fairly) can be checked end to end.
//!
//! The known way:
//! - A prompt may contain **flaw phrases**; each flaw has a failure label and a **remedy phrase**.
//!   A flaw is cured when the flaw phrase is gone or its remedy phrase is present.
//! - A role answers correctly with probability `0.6 - 0.4 * (uncured flaws)` (at least 0.05). In
//!   rounds after the first, a role whose own draw fails follows the previous shared state's
//!   answer with probability 0.7, so a bad early aggregation hurts later rounds.
//! - An aggregator carries the majority answer forward; with an uncured aggregator flaw it
//!   instead carries a random option with probability 0.6.
//! - The simulated critics know the gold answer (it is in their prompt): correct answers score
//!   5 / `NONE`; wrong answers score 1 with the label of the flaw whose hint the answer text
//!   carries (`KNOWLEDGE_DEFICIT` when none).
//! - The simulated AgentDiagnosis names the remedies of the labels it is given; the simulated
//!   rewrite modules drop flaw phrases whose remedies the diagnosis / failure records name, and
//!   append those remedies. The simulated black-box proposer has no diagnosis: it appends a
//!   random remedy to every prompt of the best set so far (a global, uninformed edit).
//!
//! Every draw is a hash of (seed, question, round, component, prompt text, state), so runs are
//! reproducible and independent of scheduling.

use crate::answer::extract_choice;
use crate::config::DebateConfig;
use crate::data::Mcq;
use async_trait::async_trait;
use maslens_llm::{ChatModel, ChatRequest, ChatResponse, LlmError, Role, Usage};
use std::collections::HashMap;

/// A flaw: phrase, failure label, remedy, hint the answer text carries.
pub struct Flaw {
    pub phrase: &'static str,
    pub label: &'static str,
    pub remedy: &'static str,
    pub hint: &'static str,
}

/// Role flaws.
pub const ROLE_FLAWS: &[Flaw] = &[
    Flaw {
        phrase: "answer on your first impression",
        label: "RANDOM_OR_UNGROUNDED",
        remedy: "ground every claim in the question",
        hint: "going with my first impression",
    },
    Flaw {
        phrase: "skip the reasoning",
        label: "INCOMPLETE_REASONING",
        remedy: "reason step by step",
        hint: "no need to reason it through",
    },
    Flaw {
        phrase: "ignore the exact wording",
        label: "MISINTERPRET_QUESTION",
        remedy: "read the question and its constraints carefully",
        hint: "the wording does not matter",
    },
    Flaw {
        phrase: "rely on general rules of thumb",
        label: "OVERGENERALIZATION",
        remedy: "check case-specific details",
        hint: "as a rule of thumb",
    },
];

/// Aggregator flaws.
pub const AGG_FLAWS: &[Flaw] = &[Flaw {
    phrase: "pick any answer without comparing",
    label: "RANDOM_OR_UNGROUNDED",
    remedy: "compare the agents' arguments and carry forward the best-supported answer",
    hint: "picked without comparing the agents",
}];

/// Remedy without a flaw (named for knowledge deficits; changes nothing in the simulation).
pub const KNOWLEDGE_REMEDY: &str = "use only relevant, task-appropriate knowledge";

fn has(text: &str, phrase: &str) -> bool {
    text.to_ascii_lowercase()
        .contains(&phrase.to_ascii_lowercase())
}

/// Flaws of `prompt` that are not cured.
pub fn uncured<'a>(prompt: &str, flaws: &'a [Flaw]) -> Vec<&'a Flaw> {
    flaws
        .iter()
        .filter(|f| has(prompt, f.phrase) && !has(prompt, f.remedy))
        .collect()
}

/// Probability that a role with this prompt answers correctly on its own.
pub fn role_accuracy(prompt: &str) -> f64 {
    (0.6 - 0.4 * uncured(prompt, ROLE_FLAWS).len() as f64).max(0.05)
}

/// Probability that an aggregator with this prompt carries a random option instead of the majority.
pub fn aggregator_noise(prompt: &str) -> f64 {
    if uncured(prompt, AGG_FLAWS).is_empty() {
        0.0
    } else {
        0.6
    }
}

fn fnv(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.as_bytes().iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    // splitmix64 finalizer
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d049bb133111eb);
    h ^ (h >> 31)
}

fn uniform(parts: &[&str]) -> f64 {
    (fnv(parts) >> 11) as f64 / (1u64 << 53) as f64
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let s = text.find(open)? + open.len();
    let e = text[s..].find(close)? + s;
    Some(text[s..e].trim())
}

fn blocks<'a>(text: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(s) = rest.find(&open) {
        let after = &rest[s + open.len()..];
        let Some(e) = after.find(&close) else { break };
        out.push(after[..e].trim());
        rest = &after[e + close.len()..];
    }
    out
}

/// Synthetic 4-option questions with deterministic gold answers.
pub fn questions(n: usize, seed: u64) -> Vec<Mcq> {
    (0..n)
        .map(|k| {
            let s = seed.to_string();
            let g = (fnv(&["gold", &s, &k.to_string()]) % 4) as u8;
            Mcq {
                id: format!("sim/{seed}/{k}"),
                question: format!(
                    "Simulated question {k} (set {seed}): which option is the right one?"
                ),
                options: vec![
                    "alpha".into(),
                    "beta".into(),
                    "gamma".into(),
                    "delta".into(),
                ],
                answer: (b'A' + g) as char,
                subject: Some("simulation".into()),
            }
        })
        .collect()
}

/// A debate configuration for the simulation: three roles (role `weak_role` carries a flaw) and
/// `rounds` rounds (round `weak_round`'s aggregator carries a flaw).
pub fn config(
    rounds: usize,
    weak_role: usize,
    weak_round: usize,
) -> Result<DebateConfig, crate::config::ConfigError> {
    let names = ["analyst", "skeptic", "synthesizer"];
    let mut toml = format!("name = \"simulation\"\nrounds = {rounds}\nconcurrency = 8\n");
    for (i, n) in names.iter().enumerate() {
        let prompt = if i == weak_role {
            format!("You are the {n}. Be quick: answer on your first impression.")
        } else {
            format!("You are the {n}. Give your best answer with a short justification.")
        };
        toml.push_str(&format!(
            "[[roles]]\nname = \"{n}\"\nprompt = \"{prompt}\"\n"
        ));
    }
    for t in 0..rounds {
        let prompt = if t == weak_round {
            "Summarize the round; to save time, pick any answer without comparing."
        } else {
            "Summarize the round and carry forward the majority answer."
        };
        toml.push_str(&format!("[[aggregators]]\nprompt = \"{prompt}\"\n"));
    }
    toml.push_str("[optimizer]\nrole_selection = { kind = \"bottom_k\", k = 1 }\ntau = 0.5\nbuffer_m = 10\nema_beta = 0.3\niterations = 3\npatience = 2\n");
    DebateConfig::from_toml(&toml, "simulation")
}

/// The simulated multi-agent system (not a model). It answers every request kind of the debate
/// runtime and the optimizer according to the rules in the module docs.
pub struct SimulatedMas {
    id: String,
    gold: HashMap<String, char>,
}

impl SimulatedMas {
    /// The models of a debate whose whole system is simulated: the simulation answers for every
    /// role (what `--simulation` runs, from the CLI and Python alike).
    pub fn models(questions: &[Mcq]) -> crate::debate::ModelSet {
        crate::debate::ModelSet::single(std::sync::Arc::new(SimulatedMas::new(questions)))
    }

    /// A simulation that knows the gold answers of `questions`.
    pub fn new(questions: &[Mcq]) -> Self {
        SimulatedMas {
            id: "simulation".into(),
            gold: questions
                .iter()
                .map(|q| (q.question.clone(), q.answer))
                .collect(),
        }
    }

    fn respond(&self, req: &ChatRequest) -> String {
        let system = req
            .messages
            .iter()
            .find(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .unwrap_or("");
        let user = req
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.as_str())
            .unwrap_or("");
        let seed = req.seed.unwrap_or(0).to_string();
        let stage = req.stage.as_str();
        let question = between(user, "<question>", "</question>").unwrap_or("");
        let gold = self.gold.get(question).copied();
        if let Some(rest) = stage.strip_prefix("debate/role/") {
            let (role, round) = rest.rsplit_once("/r").unwrap_or((rest, "1"));
            let state = between(user, "<shared_state>", "</shared_state>")
                .and_then(|s| extract_choice(s, 4));
            self.role_answer(system, role, round, question, gold, state, &seed)
        } else if let Some(round) = stage.strip_prefix("debate/aggregate/r") {
            let answers: Vec<Option<char>> = blocks(user, "agent_message")
                .iter()
                .map(|m| extract_choice(m, 4))
                .collect();
            self.aggregate(system, round, question, &answers, &seed)
        } else if stage == "debate/final" {
            let a = between(user, "<shared_state>", "</shared_state>")
                .and_then(|s| extract_choice(s, 4))
                .unwrap_or('A');
            format!("Answer: {a}")
        } else if stage.starts_with("critic/turn")
            || stage.starts_with("critic/agg")
            || stage.starts_with("critic/final")
        {
            let gold = between(user, "Gold correct answer:", "\n").and_then(|g| g.chars().next());
            let text = between(user, "<agent_answer>", "</agent_answer>")
                .or_else(|| between(user, "<aggregation_output>", "</aggregation_output>"))
                .unwrap_or("");
            turn_eval_answer(text, gold)
        } else if stage.starts_with("critic/peer") {
            let gold = between(user, "Gold correct answer:", "\n").and_then(|g| g.chars().next());
            let names: Vec<&str> = between(user, "Agents to score:", ". Return")
                .unwrap_or("")
                .split(", ")
                .collect();
            let msgs = blocks(user, "agent_message");
            let scores: serde_json::Map<String, serde_json::Value> = names
                .iter()
                .zip(msgs.iter())
                .map(|(n, m)| {
                    let ok = extract_choice(m, 4).is_some() && extract_choice(m, 4) == gold;
                    (n.to_string(), serde_json::json!(if ok { 5 } else { 1 }))
                })
                .collect();
            serde_json::json!({ "scores": scores }).to_string()
        } else if stage.starts_with("optimizer/diagnosis") {
            let mut remedies = Vec::new();
            for line in user.lines() {
                if let Some(label) = line.strip_prefix("Failure type: ") {
                    let r = ROLE_FLAWS
                        .iter()
                        .find(|f| f.label == label.trim())
                        .map(|f| f.remedy)
                        .unwrap_or(KNOWLEDGE_REMEDY);
                    if !remedies.contains(&r) {
                        remedies.push(r);
                    }
                }
            }
            format!(
                "The agent's failures are systematic: it needs to {}.",
                remedies.join(" and to ")
            )
        } else if stage.starts_with("optimizer/role_rewrite") {
            let original =
                between(user, "<original_role_prompt>", "</original_role_prompt>").unwrap_or("");
            let summary = between(user, "<failure_summary>", "</failure_summary>").unwrap_or("");
            rewrite(original, summary, ROLE_FLAWS, &[KNOWLEDGE_REMEDY])
        } else if stage.starts_with("optimizer/agg_rewrite") {
            let original = between(
                user,
                "<original_aggregation_prompt>",
                "</original_aggregation_prompt>",
            )
            .unwrap_or("");
            // The simulated rewriter reads the critic's explanations in the failure records.
            let mut named = String::new();
            for f in AGG_FLAWS {
                if has(user, f.hint) {
                    named.push_str(f.remedy);
                    named.push(' ');
                }
            }
            rewrite(original, &named, AGG_FLAWS, &[])
        } else if stage.starts_with("blackbox/propose") {
            blackbox_proposal(user, &seed)
        } else {
            "Answer: A".into()
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn role_answer(
        &self,
        prompt: &str,
        role: &str,
        round: &str,
        question: &str,
        gold: Option<char>,
        state: Option<char>,
        seed: &str,
    ) -> String {
        let Some(gold) = gold else {
            return "I cannot tell.".into();
        };
        let p = role_accuracy(prompt);
        let state_s = state.map(|c| c.to_string()).unwrap_or_default();
        let own = uniform(&["role", seed, question, role, round, prompt]) < p;
        let answer = if own {
            gold
        } else if state.is_some()
            && uniform(&["follow", seed, question, role, round, prompt, &state_s]) < 0.7
        {
            state.unwrap_or(gold)
        } else {
            wrong(gold, &["wrong", seed, question, role, round, prompt])
        };
        let hints: Vec<&str> = uncured(prompt, ROLE_FLAWS).iter().map(|f| f.hint).collect();
        if hints.is_empty() {
            format!("Answer: {answer}. I compared the options.")
        } else {
            format!("Answer: {answer}. Reason: {}.", hints.join("; "))
        }
    }

    fn aggregate(
        &self,
        prompt: &str,
        round: &str,
        question: &str,
        answers: &[Option<char>],
        seed: &str,
    ) -> String {
        let mut counts: Vec<(char, usize, usize)> = Vec::new(); // (letter, count, first position)
        for (pos, a) in answers.iter().enumerate() {
            if let Some(a) = a {
                match counts.iter_mut().find(|c| c.0 == *a) {
                    Some(c) => c.1 += 1,
                    None => counts.push((*a, 1, pos)),
                }
            }
        }
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)));
        let majority = counts.first().map(|c| c.0).unwrap_or('A');
        let noise = aggregator_noise(prompt);
        let joined: String = answers.iter().map(|a| a.unwrap_or('-')).collect();
        if uniform(&["agg", seed, question, round, prompt, &joined]) < noise {
            let r = (fnv(&["aggpick", seed, question, round, prompt]) % 4) as u8;
            let hints: Vec<&str> = uncured(prompt, AGG_FLAWS).iter().map(|f| f.hint).collect();
            format!(
                "Answer: {}. State: {}.",
                (b'A' + r) as char,
                hints.join("; ")
            )
        } else {
            format!("Answer: {majority}. State: the agents' arguments were compared.")
        }
    }
}

fn wrong(gold: char, parts: &[&str]) -> char {
    let g = gold as u8 - b'A';
    let off = 1 + (fnv(parts) % 3) as u8;
    (b'A' + (g + off) % 4) as char
}

fn turn_eval_answer(text: &str, gold: Option<char>) -> String {
    let answer = extract_choice(text, 4);
    let correct = answer.is_some() && answer == gold;
    if correct {
        return r#"{"correctness":"correct","failure_pattern":"NONE","explanation":"Correct and grounded.","score":5}"#.into();
    }
    let flaw = ROLE_FLAWS
        .iter()
        .chain(AGG_FLAWS)
        .find(|f| has(text, f.hint));
    let (label, expl) = match flaw {
        Some(f) => (f.label, format!("The answer was wrong: {}.", f.hint)),
        None => (
            "KNOWLEDGE_DEFICIT",
            "The answer was wrong for lack of knowledge.".to_string(),
        ),
    };
    serde_json::json!({"correctness": "incorrect", "failure_pattern": label, "explanation": expl, "score": 1}).to_string()
}

/// Simulated rewrite: drop flaw phrases whose remedy `feedback` names, append the remedies named.
fn rewrite(original: &str, feedback: &str, flaws: &[Flaw], extra: &[&str]) -> String {
    let mut out = original.to_string();
    let mut added: Vec<&str> = Vec::new();
    for f in flaws {
        if has(feedback, f.remedy) {
            out = remove_ci(&out, f.phrase);
            added.push(f.remedy);
        }
    }
    for r in extra {
        if has(feedback, r) && !has(&out, r) {
            added.push(r);
        }
    }
    if added.is_empty() {
        return out;
    }
    let mut s = out
        .trim()
        .trim_end_matches(['.', ':', ';', ','])
        .to_string();
    for r in added {
        if !has(&s, r) {
            s.push_str(&format!(". Always {r}"));
        }
    }
    s.push('.');
    s
}

fn remove_ci(text: &str, phrase: &str) -> String {
    let lower = text.to_ascii_lowercase();
    match lower.find(&phrase.to_ascii_lowercase()) {
        Some(i) => format!("{}{}", &text[..i], &text[i + phrase.len()..]).replace("  ", " "),
        None => text.to_string(),
    }
}

/// Simulated black-box proposal: the best prompt set so far (the last one shown) with one random
/// remedy appended to every prompt.
fn blackbox_proposal(user: &str, seed: &str) -> String {
    let sets = blocks(user, "prompt_set");
    let Some(best) = sets.last() else {
        return "{}".into();
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(best) else {
        return "{}".into();
    };
    let pool: Vec<&str> = ROLE_FLAWS
        .iter()
        .chain(AGG_FLAWS)
        .map(|f| f.remedy)
        .chain([KNOWLEDGE_REMEDY])
        .collect();
    let edit = |p: &str, tag: &str| -> String {
        let r = pool[(fnv(&["bb", seed, user, tag]) % pool.len() as u64) as usize];
        if has(p, r) {
            p.to_string()
        } else {
            format!("{}. Always {r}.", p.trim().trim_end_matches('.'))
        }
    };
    let roles: Vec<String> = v["roles"]
        .as_array()
        .map(|a| {
            a.iter()
                .enumerate()
                .map(|(i, p)| edit(p.as_str().unwrap_or(""), &format!("r{i}")))
                .collect()
        })
        .unwrap_or_default();
    let aggs: Vec<String> = v["aggregators"]
        .as_array()
        .map(|a| {
            a.iter()
                .enumerate()
                .map(|(i, p)| edit(p.as_str().unwrap_or(""), &format!("a{i}")))
                .collect()
        })
        .unwrap_or_default();
    serde_json::json!({"roles": roles, "aggregators": aggs}).to_string()
}

#[async_trait]
impl ChatModel for SimulatedMas {
    fn id(&self) -> &str {
        &self.id
    }
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let text = self.respond(request);
        let prompt_tokens: usize = request
            .messages
            .iter()
            .map(|m| maslens_llm::estimate_tokens(&m.content))
            .sum();
        Ok(ChatResponse {
            usage: Usage {
                prompt_tokens: prompt_tokens as u64,
                completion_tokens: maslens_llm::estimate_tokens(&text) as u64,
                cached_tokens: 0,
            },
            text,
            finish_reason: "stop".into(),
            latency_ms: 0,
            from_cache: false,
            queue: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_quality_is_known() {
        let weak = "You are X. Be quick: answer on your first impression.";
        assert_eq!(uncured(weak, ROLE_FLAWS).len(), 1);
        assert!((role_accuracy(weak) - 0.2).abs() < 1e-12);
        let fixed = rewrite(
            weak,
            "it needs to ground every claim in the question",
            ROLE_FLAWS,
            &[KNOWLEDGE_REMEDY],
        );
        assert!(uncured(&fixed, ROLE_FLAWS).is_empty(), "{fixed}");
        assert!((role_accuracy(&fixed) - 0.6).abs() < 1e-12);
        // Feedback that names another remedy does not cure this flaw.
        let not = rewrite(weak, "it needs to reason step by step", ROLE_FLAWS, &[]);
        assert_eq!(uncured(&not, ROLE_FLAWS).len(), 1, "{not}");
        assert!(aggregator_noise("pick any answer without comparing") > 0.5);
        assert_eq!(aggregator_noise("carry forward the majority answer"), 0.0);
    }

    #[test]
    fn questions_are_deterministic() {
        assert_eq!(questions(5, 1), questions(5, 1));
        assert_ne!(
            questions(20, 1)
                .iter()
                .map(|q| q.answer)
                .collect::<String>(),
            questions(20, 2)
                .iter()
                .map(|q| q.answer)
                .collect::<String>()
        );
    }
}
