//! Fault injection: labelled failure traces from a debate's successful runs (docs/inject.md).
//!
//! A clean debate runs on a question. Where it answers correctly, the same debate runs again with
//! one role turn replaced by a fault, and every other turn asked exactly as before (same prompts,
//! same seed), so the turns after the fault react to it and the turns before it come from the
//! model cache. When the injected run's final answer is wrong, its trace is a labelled failure:
//! decisive agent = the role, decisive step = the injected turn. Each such trace carries
//! `metadata.injection`; `maslens-prior` uses those traces as training data only and never scores
//! them (`maslens_trace::Trace::is_injected`).
//!
//! Faults ([`FaultKind`]): `wrong-fact` (the role argues for a wrong option with a fact stated as
//! established; the wrong option is a seeded draw) and `dropped-instruction` (the role's
//! instruction and the debate's answer format are dropped: it writes background and picks no
//! option). The debate runtime has no tools, so a bad tool result is not injected here.

use crate::answer::{extract_choice, option_letters};
use crate::config::{DebateConfig, Decoding, PromptSet};
use crate::data::Mcq;
use crate::debate::ModelSet;
use crate::debate::{question_blocks, request, run_debate, run_debate_with, to_trace, DebateRun};
use crate::CreditError;
use maslens_llm::{prompt_template, ChatRequest};
use maslens_trace::{concepts::seeded_hash, DecisiveLabel, Trace};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const INJECT_WRONG_FACT: maslens_llm::prompt::Template =
    prompt_template!("credit/inject_wrong_fact.v1");
pub const INJECT_DROPPED_INSTRUCTION: maslens_llm::prompt::Template =
    prompt_template!("credit/inject_dropped_instruction.v1");
/// The generic system prompt that stands in for the dropped role instruction.
pub const INJECT_DROPPED_INSTRUCTION_SYSTEM: maslens_llm::prompt::Template =
    prompt_template!("credit/inject_dropped_instruction_system.v1");

/// The fault put into one role turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// The role argues for a wrong option with a fact stated as established.
    WrongFact,
    /// The role's instruction is dropped: background text, no option picked.
    DroppedInstruction,
}

impl FaultKind {
    pub const ALL: [FaultKind; 2] = [FaultKind::WrongFact, FaultKind::DroppedInstruction];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::WrongFact => "wrong-fact",
            FaultKind::DroppedInstruction => "dropped-instruction",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            FaultKind::WrongFact => "argues for a wrong option with an invented fact",
            FaultKind::DroppedInstruction => "drops its instruction and picks no option",
        }
    }
}

impl std::str::FromStr for FaultKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown fault kind {s:?} (wrong-fact, dropped-instruction)"))
    }
}

/// One injected fault: role `role` (index into the configuration's roles) in round `round`
/// (0-based).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Injection {
    pub round: usize,
    pub role: usize,
    pub kind: FaultKind,
    /// The wrong option a `wrong-fact` turn argues for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrong: Option<char>,
}

/// The request that replaces the role's turn, and the option the turn must end up naming.
#[allow(clippy::too_many_arguments)]
pub(crate) fn injected_request(
    inj: &Injection,
    q: &Mcq,
    theta: &str,
    role: &str,
    t: usize,
    rounds: usize,
    dec: &Decoding,
    seed: u64,
) -> Result<(ChatRequest, Option<char>), CreditError> {
    let (question, options) = question_blocks(q);
    let stage = format!("debate/inject/{}/{role}/r{}", inj.kind.as_str(), t + 1);
    match inj.kind {
        FaultKind::WrongFact => {
            let wrong = inj.wrong.unwrap_or(q.answer);
            let wrong_text = q
                .options
                .get((wrong as u8).saturating_sub(b'A') as usize)
                .cloned()
                .unwrap_or_default();
            let user = INJECT_WRONG_FACT.rendered(serde_json::json!({
                "question": question, "options": options, "role": role, "round": t + 1,
                "rounds": rounds, "wrong": wrong.to_string(), "wrong_text": wrong_text,
            }))?;
            Ok((request(theta, user, dec, seed, stage), Some(wrong)))
        }
        FaultKind::DroppedInstruction => {
            let user = INJECT_DROPPED_INSTRUCTION.rendered(serde_json::json!({
                "question": question,
            }))?;
            // The role's own instruction (theta) is what is dropped.
            let system = INJECT_DROPPED_INSTRUCTION_SYSTEM.render(serde_json::json!({}))?;
            Ok((request(system.trim(), user, dec, seed, stage), None))
        }
    }
}

/// The injected turn's text as the debate sees it: a `wrong-fact` turn that does not name its
/// wrong option gets the answer line appended (a weak model may not follow the instruction); a
/// `dropped-instruction` turn that names an option anyway has its text cut before it.
pub(crate) fn finish_injected(
    inj: &Injection,
    text: String,
    forced: Option<char>,
    n_options: usize,
) -> String {
    match (inj.kind, forced) {
        (FaultKind::WrongFact, Some(w)) if extract_choice(&text, n_options) != Some(w) => {
            format!("Answer: {w}\n{}", text.trim())
        }
        (FaultKind::DroppedInstruction, _) if extract_choice(&text, n_options).is_some() => {
            // Keep the background, never an option: the first sentence only, or a fixed line.
            let first = text.trim().split(['.', '\n']).next().unwrap_or("").trim();
            let cut = format!("{first}.");
            if first.is_empty() || extract_choice(&cut, n_options).is_some() {
                "This question touches on a broad topic with a long history.".to_string()
            } else {
                cut
            }
        }
        _ => text,
    }
}

/// What [`inject_question`] runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InjectOptions {
    pub kinds: Vec<FaultKind>,
    /// Injected runs per successful clean run at most (positions in a seeded order).
    pub per_run: usize,
    /// Decoding seed of every run, and the seed of the draws (positions, wrong options).
    pub seed: u64,
}

impl Default for InjectOptions {
    fn default() -> Self {
        InjectOptions {
            kinds: FaultKind::ALL.to_vec(),
            per_run: 4,
            seed: 0,
        }
    }
}

/// The injections tried on a question whose clean run ran `rounds_run` rounds: every (round,
/// role, kind) in a seeded order, the first `per_run`.
pub fn plan(
    cfg: &DebateConfig,
    q: &Mcq,
    rounds_run: usize,
    opts: &InjectOptions,
) -> Vec<Injection> {
    let wrong_options: Vec<char> = option_letters(q.options.len())
        .into_iter()
        .filter(|&c| c != q.answer)
        .collect();
    let mut all: Vec<(u64, Injection)> = Vec::new();
    for round in 0..rounds_run.min(cfg.rounds) {
        for role in 0..cfg.roles.len() {
            for &kind in &opts.kinds {
                let key = format!("{}/{round}/{role}/{}", q.id, kind.as_str());
                let wrong = match kind {
                    FaultKind::WrongFact if !wrong_options.is_empty() => Some(
                        wrong_options[(seeded_hash(opts.seed, &format!("{key}/wrong"))
                            % wrong_options.len() as u64)
                            as usize],
                    ),
                    FaultKind::WrongFact => continue,
                    FaultKind::DroppedInstruction => None,
                };
                all.push((
                    seeded_hash(opts.seed, &key),
                    Injection {
                        round,
                        role,
                        kind,
                        wrong,
                    },
                ));
            }
        }
    }
    all.sort_by_key(|(h, _)| *h);
    all.into_iter()
        .take(opts.per_run)
        .map(|(_, inj)| inj)
        .collect()
}

/// One injected run and what became of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tried {
    pub injection: Injection,
    pub final_answer: Option<char>,
    /// The injected run's answer is wrong: its trace is a labelled failure.
    pub flipped: bool,
}

/// The outcome on one question.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuestionOutcome {
    pub question: String,
    pub clean_answer: Option<char>,
    pub clean_correct: bool,
    pub tried: Vec<Tried>,
    /// The labelled failure traces (one per flipped injection).
    #[serde(skip)]
    pub traces: Vec<Trace>,
}

/// Run the clean debate on `q`; when it is correct, run the planned injections and label the
/// runs they turned wrong.
pub async fn inject_question(
    models: &ModelSet,
    cfg: &DebateConfig,
    prompts: &PromptSet,
    q: &Mcq,
    opts: &InjectOptions,
    run_id: &str,
) -> Result<QuestionOutcome, CreditError> {
    let clean = run_debate(models, cfg, prompts, q, opts.seed).await?;
    let mut out = QuestionOutcome {
        question: q.id.clone(),
        clean_answer: clean.final_answer,
        clean_correct: clean.correct,
        tried: Vec::new(),
        traces: Vec::new(),
    };
    if !clean.correct {
        return Ok(out);
    }
    for inj in plan(cfg, q, clean.rounds_run, opts) {
        let run = run_debate_with(models, cfg, prompts, q, opts.seed, Some(&inj)).await?;
        let flipped = !run.correct;
        if flipped {
            if let Some(trace) = labelled_trace(&run, cfg, prompts, &inj, &clean, run_id) {
                out.traces.push(trace);
            }
        }
        out.tried.push(Tried {
            injection: inj,
            final_answer: run.final_answer,
            flipped,
        });
    }
    Ok(out)
}

/// [`inject_question`] on each of `questions`, at most `cfg.concurrency` questions at a time
/// (the injected runs of one question run one after the other: each needs its clean run).
/// Outcomes are in question order whatever the concurrency, and every request is the same, so
/// the output and the LLM cache entries do not depend on it. The first backend error stops the
/// batch (a rerun resumes through the cache).
pub async fn inject_many(
    models: &ModelSet,
    cfg: &DebateConfig,
    prompts: &PromptSet,
    questions: &[Mcq],
    opts: &InjectOptions,
    run_id: &str,
) -> Result<Vec<QuestionOutcome>, CreditError> {
    let shared = Arc::new((
        cfg.clone(),
        prompts.clone(),
        opts.clone(),
        run_id.to_string(),
    ));
    let tasks = questions.iter().map(|q| {
        let (models, shared, q) = (models.clone(), shared.clone(), q.clone());
        async move {
            let (cfg, prompts, opts, run_id) = &*shared;
            inject_question(&models, cfg, prompts, &q, opts, run_id).await
        }
    });
    crate::debate::run_ordered(cfg.concurrency, "inject", tasks).await
}

/// The injected run as a trace labelled with its fault (None when the injected turn is not in
/// the trace, which cannot happen for a planned injection).
pub fn labelled_trace(
    run: &DebateRun,
    cfg: &DebateConfig,
    prompts: &PromptSet,
    inj: &Injection,
    clean: &DebateRun,
    run_id: &str,
) -> Option<Trace> {
    let role = cfg.roles.get(inj.role)?;
    let mut tr = to_trace(run, cfg, prompts, run_id);
    let step = tr.steps.iter().position(|s| {
        s.round == Some(inj.round as u32)
            && s.agent == role.name
            && s.phase.as_deref() == Some("utterance")
    })?;
    tr.id = format!(
        "{}/inject-{}-r{}-{}",
        tr.id,
        inj.kind.as_str(),
        inj.round + 1,
        role.name
    );
    let what = match (inj.kind, inj.wrong) {
        (FaultKind::WrongFact, Some(w)) => format!("{} ({w})", inj.kind.describe()),
        _ => inj.kind.describe().to_string(),
    };
    tr.labels.decisive = Some(DecisiveLabel {
        agent: role.name.clone(),
        step,
        reason: Some(format!(
            "injected fault: {} {what} in round {}; the clean run answered {}, this run {}",
            role.name,
            inj.round + 1,
            clean
                .final_answer
                .map_or("nothing".into(), |c| c.to_string()),
            run.final_answer.map_or("nothing".into(), |c| c.to_string()),
        )),
    });
    let mut meta = BTreeMap::new();
    meta.insert("kind", serde_json::json!(inj.kind.as_str()));
    meta.insert("round", serde_json::json!(inj.round));
    meta.insert("role", serde_json::json!(role.name));
    meta.insert("step", serde_json::json!(step));
    meta.insert("wrong", serde_json::json!(inj.wrong.map(|c| c.to_string())));
    meta.insert(
        "clean_answer",
        serde_json::json!(clean.final_answer.map(|c| c.to_string())),
    );
    tr.metadata
        .insert(maslens_trace::INJECTION_KEY.into(), serde_json::json!(meta));
    Some(tr)
}

/// Totals over many questions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InjectSummary {
    pub questions: usize,
    pub clean_correct: usize,
    pub tried: usize,
    pub labelled: usize,
    /// Per fault kind: (tried, flipped).
    pub by_kind: BTreeMap<String, (usize, usize)>,
}

impl InjectSummary {
    pub fn add(&mut self, o: &QuestionOutcome) {
        self.questions += 1;
        self.clean_correct += usize::from(o.clean_correct);
        self.tried += o.tried.len();
        self.labelled += o.traces.len();
        for t in &o.tried {
            let e = self
                .by_kind
                .entry(t.injection.kind.as_str().to_string())
                .or_default();
            e.0 += 1;
            e.1 += usize::from(t.flipped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulation::{self, SimulatedMas};

    fn setup() -> (DebateConfig, Vec<Mcq>, ModelSet) {
        let cfg = simulation::config(2, 0, 0).unwrap();
        let qs = simulation::questions(12, 0);
        let models = SimulatedMas::models(&qs);
        (cfg, qs, models)
    }

    #[test]
    fn plan_is_seeded_bounded_and_never_argues_for_the_gold_option() {
        let (cfg, qs, _) = setup();
        let opts = InjectOptions {
            per_run: 5,
            ..InjectOptions::default()
        };
        for q in &qs {
            let p = plan(&cfg, q, cfg.rounds, &opts);
            assert_eq!(p.len(), 5);
            assert_eq!(p, plan(&cfg, q, cfg.rounds, &opts), "same seed, same plan");
            for inj in &p {
                assert!(inj.round < cfg.rounds && inj.role < cfg.roles.len());
                match inj.kind {
                    FaultKind::WrongFact => {
                        let w = inj.wrong.unwrap();
                        assert_ne!(w, q.answer);
                        assert!(option_letters(q.options.len()).contains(&w));
                    }
                    FaultKind::DroppedInstruction => assert!(inj.wrong.is_none()),
                }
            }
            // A run that stopped after round 1 gets no round-2 injection.
            assert!(plan(&cfg, q, 1, &opts).iter().all(|i| i.round == 0));
        }
        let other = InjectOptions {
            seed: 1,
            ..opts.clone()
        };
        assert!(qs
            .iter()
            .any(|q| plan(&cfg, q, cfg.rounds, &opts) != plan(&cfg, q, cfg.rounds, &other)));
        let only = InjectOptions {
            kinds: vec![FaultKind::DroppedInstruction],
            per_run: 100,
            seed: 0,
        };
        let p = plan(&cfg, &qs[0], cfg.rounds, &only);
        assert_eq!(p.len(), cfg.rounds * cfg.roles.len());
        assert!(p.iter().all(|i| i.kind == FaultKind::DroppedInstruction));
    }

    #[test]
    fn injected_turns_say_what_their_fault_says() {
        let wrong = Injection {
            round: 0,
            role: 0,
            kind: FaultKind::WrongFact,
            wrong: Some('C'),
        };
        // A weak model that ignores the instruction still names the wrong option.
        let t = finish_injected(&wrong, "Answer: A, clearly".into(), Some('C'), 4);
        assert_eq!(extract_choice(&t, 4), Some('C'));
        let t = finish_injected(&wrong, "Answer: C because".into(), Some('C'), 4);
        assert_eq!(t, "Answer: C because");
        let dropped = Injection {
            kind: FaultKind::DroppedInstruction,
            wrong: None,
            ..wrong
        };
        for text in ["Rivers shape valleys. Answer: B", "B is right", "Answer: D"] {
            let t = finish_injected(&dropped, text.into(), None, 4);
            assert_eq!(extract_choice(&t, 4), None, "{text:?} -> {t:?}");
        }
        let t = finish_injected(&dropped, "Rivers shape valleys.".into(), None, 4);
        assert_eq!(t, "Rivers shape valleys.");
    }

    #[test]
    fn flipped_runs_become_coherent_labelled_traces_with_the_clean_prefix() {
        let (cfg, qs, models) = setup();
        let prompts = cfg.prompts();
        let opts = InjectOptions {
            per_run: 100,
            ..InjectOptions::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut summary = InjectSummary::default();
        let mut traces = Vec::new();
        for q in &qs {
            let o = rt
                .block_on(inject_question(&models, &cfg, &prompts, q, &opts, "t"))
                .unwrap();
            if !o.clean_correct {
                assert!(o.tried.is_empty(), "wrong clean runs are not injected");
            }
            let clean = rt
                .block_on(run_debate(&models, &cfg, &prompts, q, opts.seed))
                .unwrap();
            let clean_trace = to_trace(&clean, &cfg, &prompts, "t");
            for t in &o.traces {
                let label = t.labels.decisive.as_ref().unwrap();
                assert!(t.acts_at(&label.agent, label.step), "{}", t.id);
                assert!(t.is_injected());
                assert_eq!(t.outcome, maslens_trace::Outcome::Failure);
                // The turns before the fault are the clean run's, word for word.
                for (a, b) in t.steps[..label.step].iter().zip(&clean_trace.steps) {
                    assert_eq!(a.content, b.content, "{}", t.id);
                }
                assert_ne!(
                    t.steps[label.step].content,
                    clean_trace.steps[label.step].content
                );
            }
            summary.add(&o);
            traces.extend(o.traces);
        }
        assert_eq!(summary.questions, qs.len());
        assert_eq!(summary.labelled, traces.len());
        let flipped: usize = summary.by_kind.values().map(|(_, f)| f).sum();
        assert_eq!(flipped, traces.len());
        assert!(summary.clean_correct > 0 && summary.tried > 0);
        assert!(
            !traces.is_empty(),
            "the simulation flips some runs: {summary:?}"
        );
        // Many questions at once give the same outcomes, in question order.
        let many = |concurrency: usize| {
            let c = DebateConfig {
                concurrency,
                ..cfg.clone()
            };
            rt.block_on(inject_many(&models, &c, &prompts, &qs, &opts, "t"))
                .unwrap()
        };
        let (one, five) = (many(1), many(5));
        assert_eq!(
            serde_json::to_value(&one).unwrap(),
            serde_json::to_value(&five).unwrap()
        );
        let questions: Vec<&str> = five.iter().map(|o| o.question.as_str()).collect();
        let ids: Vec<&str> = qs.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(questions, ids);
        let from_many: Vec<Trace> = one.into_iter().flat_map(|o| o.traces).collect();
        assert_eq!(
            serde_json::to_value(&from_many).unwrap(),
            serde_json::to_value(&traces).unwrap()
        );
    }
}
