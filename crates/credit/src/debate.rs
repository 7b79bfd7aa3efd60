//! The debate runtime: N roles with stationary prompts theta_i, R rounds, a per-round aggregator
//! psi_t producing the shared state S_t = f_t(U_t; psi_t), role prompts built as
//! phi_{i,t} = g(x, S_{t-1}; theta_i), and a final decision y = J(x, S_R).
//!
//! Questions run concurrently (bounded); every call goes through the caller's model stack, so a
//! cached stack makes an interrupted run resume for free.

use crate::answer::{extract_choice, option_letters};
use crate::config::{DebateConfig, Decoding, FinalDecision, PromptSet, AGGREGATOR_AGENT};
use crate::data::Mcq;
use crate::CreditError;
use maslens_llm::prompt::{untrusted, Rendered};
use maslens_llm::usage::{TrackedModel, UsageTracker};
use maslens_llm::{prompt_template, ChatModel, ChatRequest, Message, Usage};
use maslens_trace::{AgentKind, Outcome, Step, Trace};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const ROLE_TURN: maslens_llm::prompt::Template = prompt_template!("credit/role_turn.v1");
pub const AGGREGATE: maslens_llm::prompt::Template = prompt_template!("credit/aggregate.v1");
pub const FINAL_DECISION: maslens_llm::prompt::Template =
    prompt_template!("credit/final_decision.v1");
pub const FINAL_DECISION_SYSTEM: maslens_llm::prompt::Template =
    prompt_template!("credit/final_decision_system.v1");

/// The models a debate uses: a default plus any named in the configuration.
#[derive(Clone)]
pub struct ModelSet {
    pub default: Arc<dyn ChatModel>,
    pub named: BTreeMap<String, Arc<dyn ChatModel>>,
}

impl ModelSet {
    pub fn single(model: Arc<dyn ChatModel>) -> Self {
        ModelSet {
            default: model,
            named: BTreeMap::new(),
        }
    }
    pub fn with(mut self, spec: impl Into<String>, model: Arc<dyn ChatModel>) -> Self {
        self.named.insert(spec.into(), model);
        self
    }
    /// The model for an optional spec; a spec the caller did not build is an error.
    pub fn get(&self, spec: Option<&str>) -> Result<Arc<dyn ChatModel>, CreditError> {
        match spec {
            None => Ok(self.default.clone()),
            Some(s) => self
                .named
                .get(s)
                .cloned()
                .ok_or_else(|| CreditError::UnknownModel(s.to_string())),
        }
    }
    /// The same set with every model counted in `meter` (see [`call_meter`]).
    pub fn metered(&self, meter: &Arc<UsageTracker>) -> ModelSet {
        let wrap = |m: &Arc<dyn ChatModel>| -> Arc<dyn ChatModel> {
            Arc::new(TrackedModel::new(m.clone(), meter.clone()))
        };
        ModelSet {
            default: wrap(&self.default),
            named: self
                .named
                .iter()
                .map(|(k, m)| (k.clone(), wrap(m)))
                .collect(),
        }
    }
}

/// A fresh call counter for [`ModelSet::metered`], so that the optimizer and the black-box
/// baseline can be compared at the same number of LLM calls: it counts the tokens of cache hits
/// too, so that its figures (and the budgets read from them) do not depend on the cache state.
/// Calls that got an answer are `total().answered()`; tokens `total().tokens()`.
pub fn call_meter() -> Arc<UsageTracker> {
    Arc::new(UsageTracker::unpriced("credit").counting_cache_hits())
}

/// One role utterance u_{i,t}.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Utterance {
    pub role: String,
    /// 0-based round.
    pub round: usize,
    pub text: String,
    pub answer: Option<char>,
    pub correct: bool,
}

/// One shared state S_t.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateRecord {
    /// 0-based round.
    pub round: usize,
    pub text: String,
    pub answer: Option<char>,
    pub correct: bool,
}

/// One debate on one question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DebateRun {
    pub question: Mcq,
    /// `utterances[t][i]`: role i in round t.
    pub utterances: Vec<Vec<Utterance>>,
    pub states: Vec<StateRecord>,
    /// Text of the LLM final decision (when `final_decision = "llm"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_text: Option<String>,
    pub final_answer: Option<char>,
    pub correct: bool,
    /// Rounds actually run (fewer than R after a consensus early stop).
    pub rounds_run: usize,
    pub calls: u32,
    pub usage: Usage,
}

impl DebateRun {
    /// Whether at least one role answered correctly in round t.
    pub fn any_agent_correct(&self, t: usize) -> bool {
        self.utterances
            .get(t)
            .is_some_and(|u| u.iter().any(|x| x.correct))
    }
}

pub(crate) fn request(
    system: &str,
    user: Rendered,
    dec: &Decoding,
    seed: u64,
    stage: String,
) -> ChatRequest {
    let mut r = ChatRequest::new(vec![Message::system(system), Message::user(user.text)])
        .max_tokens(dec.max_tokens)
        .temperature(dec.temperature)
        .stage(stage)
        .template(user.template);
    r.top_p = dec.top_p;
    r.seed = Some(seed);
    r
}

fn letters_phrase(n: usize) -> String {
    let l: Vec<String> = option_letters(n).iter().map(|c| c.to_string()).collect();
    match l.len() {
        0 | 1 => l.join(""),
        _ => format!("{} or {}", l[..l.len() - 1].join(", "), l[l.len() - 1]),
    }
}

/// Question and options as shown to models (untrusted data).
pub fn question_blocks(q: &Mcq) -> (String, String) {
    (
        untrusted("question", &q.question),
        untrusted("options", &q.options_block()),
    )
}

/// Run one debate.
pub async fn run_debate(
    models: &ModelSet,
    cfg: &DebateConfig,
    prompts: &PromptSet,
    q: &Mcq,
    seed: u64,
) -> Result<DebateRun, CreditError> {
    run_debate_with(models, cfg, prompts, q, seed, None).await
}

/// Run one debate, with one role turn replaced by an injected fault when `injection` is given
/// (crate::inject). Every other call is the clean run's own request, so a cached model stack
/// answers the turns before the injection from the clean run.
pub async fn run_debate_with(
    models: &ModelSet,
    cfg: &DebateConfig,
    prompts: &PromptSet,
    q: &Mcq,
    seed: u64,
    injection: Option<&crate::inject::Injection>,
) -> Result<DebateRun, CreditError> {
    let turns = Turns {
        injection,
        recorded: &[],
    };
    debate(models, cfg, prompts, q, seed, turns).await
}

/// Resume a debate after `recorded`: the texts of its first turns in trace order (each round's
/// role utterances, then the round's aggregation), taken as they were; the turns after them are
/// asked for with `prompts`. With no recorded turn this is [`run_debate`].
pub async fn resume_debate(
    models: &ModelSet,
    cfg: &DebateConfig,
    prompts: &PromptSet,
    q: &Mcq,
    seed: u64,
    recorded: &[String],
) -> Result<DebateRun, CreditError> {
    let turns = Turns {
        injection: None,
        recorded,
    };
    debate(models, cfg, prompts, q, seed, turns).await
}

/// How some turns are made other than by a plain call.
#[derive(Clone, Copy)]
struct Turns<'a> {
    injection: Option<&'a crate::inject::Injection>,
    recorded: &'a [String],
}

/// What one role's turn needs besides the models.
struct RoleTurn<'a> {
    theta: &'a str,
    user: Rendered,
    dec: &'a Decoding,
    round: usize,
    role: usize,
    name: &'a str,
}

/// One role's text: recorded, injected or asked for; the calls and usage it cost.
async fn role_text(
    model: &dyn ChatModel,
    turn: RoleTurn<'_>,
    turns: Turns<'_>,
    recorded: Option<&String>,
    q: &Mcq,
    rounds: usize,
    seed: u64,
) -> Result<(String, u32, Usage), CreditError> {
    if let Some(text) = recorded {
        return Ok((text.clone(), 0, Usage::default()));
    }
    match turns
        .injection
        .filter(|inj| inj.round == turn.round && inj.role == turn.role)
    {
        Some(inj) => {
            let (req, forced) = crate::inject::injected_request(
                inj, q, turn.theta, turn.name, turn.round, rounds, turn.dec, seed,
            )?;
            let resp = model.complete(&req).await?;
            let text = crate::inject::finish_injected(inj, resp.text, forced, q.options.len());
            Ok((text, 1, resp.usage))
        }
        None => {
            let stage = format!("debate/role/{}/r{}", turn.name, turn.round + 1);
            let req = request(turn.theta, turn.user, turn.dec, seed, stage);
            let resp = model.complete(&req).await?;
            Ok((resp.text, 1, resp.usage))
        }
    }
}

/// The final decision y = J(x, S_R): the last state's answer, or an LLM's over it; its text,
/// answer, calls and usage. `blocks`: the question, options and letters as shown to models.
async fn final_decision(
    models: &ModelSet,
    cfg: &DebateConfig,
    q: &Mcq,
    blocks: [&str; 3],
    last: Option<&StateRecord>,
    seed: u64,
) -> Result<(Option<String>, Option<char>, u32, Usage), CreditError> {
    let [question, options, letters] = blocks;
    match cfg.final_decision {
        FinalDecision::State => Ok((None, last.and_then(|s| s.answer), 0, Usage::default())),
        FinalDecision::Llm => {
            let state = last
                .map(|s| untrusted("shared_state", &s.text))
                .unwrap_or_default();
            let user = FINAL_DECISION.rendered(serde_json::json!({
                "question": question, "options": options, "state": state, "letters": letters,
            }))?;
            let system = FINAL_DECISION_SYSTEM.render(serde_json::json!({}))?;
            let req = request(&system, user, &cfg.decoding, seed, "debate/final".into());
            let resp = models.default.complete(&req).await?;
            let answer = extract_choice(&resp.text, q.options.len());
            Ok((Some(resp.text), answer, 1, resp.usage))
        }
    }
}

async fn debate(
    models: &ModelSet,
    cfg: &DebateConfig,
    prompts: &PromptSet,
    q: &Mcq,
    seed: u64,
    turns: Turns<'_>,
) -> Result<DebateRun, CreditError> {
    let n_opt = q.options.len();
    let (question, options) = question_blocks(q);
    let letters = letters_phrase(n_opt);
    let mut utterances: Vec<Vec<Utterance>> = Vec::new();
    let mut states: Vec<StateRecord> = Vec::new();
    let mut calls = 0u32;
    let mut usage = Usage::default();
    let mut step = 0usize;
    let rounds = cfg.rounds;
    for t in 0..rounds {
        let prev = states.last().map(|s| untrusted("shared_state", &s.text));
        let mut round_utts = Vec::with_capacity(cfg.roles.len());
        for (i, role) in cfg.roles.iter().enumerate() {
            let user = ROLE_TURN.rendered(serde_json::json!({
                "question": question, "options": options, "state": prev.clone().unwrap_or_default(),
                "prev_round": t, "role": role.name, "round": t + 1, "rounds": rounds, "letters": letters,
            }))?;
            let theta = prompts
                .roles
                .get(i)
                .map(String::as_str)
                .unwrap_or(&role.prompt);
            let turn = RoleTurn {
                theta,
                user,
                dec: role.decoding.as_ref().unwrap_or(&cfg.decoding),
                round: t,
                role: i,
                name: &role.name,
            };
            let model = models.get(role.model.as_deref())?;
            let recorded = turns.recorded.get(step);
            let (text, n, u) =
                role_text(model.as_ref(), turn, turns, recorded, q, rounds, seed).await?;
            step += 1;
            calls += n;
            usage += u;
            let answer = extract_choice(&text, n_opt);
            round_utts.push(Utterance {
                role: role.name.clone(),
                round: t,
                correct: answer == Some(q.answer),
                answer,
                text,
            });
        }
        let msgs: Vec<String> = round_utts
            .iter()
            .map(|u| format!("{}:\n{}", u.role, untrusted("agent_message", &u.text)))
            .collect();
        let user = AGGREGATE.rendered(serde_json::json!({
            "question": question, "options": options, "utterances": msgs,
            "round": t + 1, "rounds": rounds, "letters": letters,
        }))?;
        let psi = prompts
            .aggregators
            .get(t)
            .map(String::as_str)
            .unwrap_or(&cfg.aggregators[t].prompt);
        let req = request(
            psi,
            user,
            &cfg.decoding,
            seed,
            format!("debate/aggregate/r{}", t + 1),
        );
        let model = models.get(cfg.aggregators[t].model.as_deref())?;
        let text = match turns.recorded.get(step) {
            Some(text) => text.clone(),
            None => {
                let resp = model.complete(&req).await?;
                calls += 1;
                usage += resp.usage;
                resp.text
            }
        };
        step += 1;
        let answer = extract_choice(&text, n_opt);
        states.push(StateRecord {
            round: t,
            correct: answer == Some(q.answer),
            answer,
            text,
        });
        let consensus = {
            let first = round_utts.first().and_then(|u| u.answer);
            first.is_some() && round_utts.iter().all(|u| u.answer == first)
        };
        utterances.push(round_utts);
        if cfg.early_stop_consensus && consensus && t + 1 < rounds {
            break;
        }
    }
    let blocks = [question.as_str(), options.as_str(), letters.as_str()];
    let (final_text, final_answer, n, u) =
        final_decision(models, cfg, q, blocks, states.last(), seed).await?;
    calls += n;
    usage += u;
    Ok(DebateRun {
        question: q.clone(),
        rounds_run: utterances.len(),
        utterances,
        states,
        final_text,
        correct: final_answer == Some(q.answer),
        final_answer,
        calls,
        usage,
    })
}

/// Run debates on many questions, at most `cfg.concurrency` at a time. Results are in question
/// order. The first backend error stops the batch (re-running resumes through the cache).
pub async fn run_many(
    models: &ModelSet,
    cfg: &Arc<DebateConfig>,
    prompts: &PromptSet,
    questions: &[Mcq],
    seed: u64,
) -> Result<Vec<DebateRun>, CreditError> {
    let prompts = Arc::new(prompts.clone());
    let tasks = questions.iter().map(|q| {
        let (models, cfg, prompts, q) = (models.clone(), cfg.clone(), prompts.clone(), q.clone());
        async move { run_debate(&models, &cfg, &prompts, &q, seed).await }
    });
    run_ordered(cfg.concurrency, "debate", tasks).await
}

/// Run `tasks` (lazy futures, one per item) at most `concurrency` at a time and return their
/// results in item order. The first error aborts the remaining tasks and is returned; `what`
/// names the task kind in the error for a task that panicked or was cancelled.
pub(crate) async fn run_ordered<T, Fut>(
    concurrency: usize,
    what: &str,
    tasks: impl IntoIterator<Item = Fut>,
) -> Result<Vec<T>, CreditError>
where
    T: Send + 'static,
    Fut: std::future::Future<Output = Result<T, CreditError>> + Send + 'static,
{
    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut set = tokio::task::JoinSet::new();
    let mut n_tasks = 0;
    for (idx, task) in tasks.into_iter().enumerate() {
        n_tasks += 1;
        let sem = sem.clone();
        set.spawn(async move {
            let _permit = sem
                .acquire_owned()
                .await
                .map_err(|e| CreditError::Other(e.to_string()))?;
            task.await.map(|r| (idx, r))
        });
    }
    let mut out: Vec<Option<T>> = (0..n_tasks).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(Ok((idx, result))) => out[idx] = Some(result),
            Ok(Err(e)) => {
                set.abort_all();
                return Err(e);
            }
            Err(e) => {
                set.abort_all();
                return Err(CreditError::Other(format!("{what} task failed: {e}")));
            }
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// Accuracy of a batch of runs (0 when empty).
pub fn accuracy(runs: &[DebateRun]) -> f64 {
    if runs.is_empty() {
        return 0.0;
    }
    runs.iter().filter(|r| r.correct).count() as f64 / runs.len() as f64
}

/// Write a debate run as a maslens trace: agent = role, `round` (0-based), phase `utterance` or
/// `aggregation` (and `decision` for an LLM final decision).
pub fn to_trace(run: &DebateRun, cfg: &DebateConfig, prompts: &PromptSet, run_id: &str) -> Trace {
    let mut tr = Trace::new(format!("{run_id}/{}", run.question.id));
    tr.source.format = "debate".into();
    tr.source.record = Some(run.question.id.clone());
    tr.task = format!(
        "{}\n\n{}",
        run.question.question,
        run.question.options_block()
    );
    tr.ground_truth = Some(run.question.answer.to_string());
    tr.outcome = if run.correct {
        Outcome::Success
    } else {
        Outcome::Failure
    };
    for (i, role) in cfg.roles.iter().enumerate() {
        let pos = tr.ensure_agent(&role.name, AgentKind::Worker);
        tr.agents[pos].role = Some("debate role".into());
        tr.agents[pos].system_prompt = prompts.roles.get(i).cloned();
    }
    let pos = tr.ensure_agent(AGGREGATOR_AGENT, AgentKind::Orchestrator);
    tr.agents[pos].role = Some("per-round aggregator".into());
    let push = |tr: &mut Trace,
                agent: &str,
                content: &str,
                round: Option<usize>,
                phase: &str,
                tokens: Option<u64>| {
        let index = tr.steps.len();
        tr.steps.push(Step {
            index,
            agent: agent.to_string(),
            speaker: agent.to_string(),
            content: content.to_string(),
            round: round.map(|r| r as u32),
            phase: Some(phase.to_string()),
            tokens,
            ..Step::default()
        });
    };
    for (t, utts) in run.utterances.iter().enumerate() {
        for u in utts {
            push(&mut tr, &u.role, &u.text, Some(t), "utterance", None);
        }
        if let Some(s) = run.states.get(t) {
            push(
                &mut tr,
                AGGREGATOR_AGENT,
                &s.text,
                Some(t),
                "aggregation",
                None,
            );
        }
    }
    if let Some(text) = &run.final_text {
        push(&mut tr, "decision", text, None, "decision", None);
        tr.ensure_agent("decision", AgentKind::Orchestrator);
    }
    let m = &mut tr.metadata;
    m.insert("debate".into(), serde_json::json!(cfg.name));
    m.insert("rounds".into(), serde_json::json!(cfg.rounds));
    m.insert("rounds_run".into(), serde_json::json!(run.rounds_run));
    m.insert(
        "predicted".into(),
        serde_json::json!(run.final_answer.map(|c| c.to_string())),
    );
    m.insert(
        "aggregator_prompts".into(),
        serde_json::json!(prompts.aggregators),
    );
    m.insert("calls".into(), serde_json::json!(run.calls));
    m.insert(
        "n_options".into(),
        serde_json::json!(run.question.options.len()),
    );
    tr
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_llm::testing::ScriptedModel;

    fn cfg(early: bool) -> DebateConfig {
        let mut c = DebateConfig::from_toml(
            r#"
rounds = 2
[[roles]]
name = "solver"
prompt = "Solve."
[[roles]]
name = "skeptic"
prompt = "Doubt."
[[aggregators]]
prompt = "Aggregate."
"#,
            "t.toml",
        )
        .unwrap();
        c.early_stop_consensus = early;
        c
    }

    fn q() -> Mcq {
        Mcq {
            id: "q1".into(),
            question: "2+2?".into(),
            options: vec!["3".into(), "4".into(), "5".into(), "6".into()],
            answer: 'B',
            subject: None,
        }
    }

    #[tokio::test]
    async fn runs_rounds_and_threads_state() {
        // Fixture responses keyed on the template and the round the prompt carries.
        let m = ScriptedModel::new("fixture")
            .on_with("credit/aggregate", "round 1 of 2", "Answer: C (state one)")
            .on_with("credit/aggregate", "round 2 of 2", "Answer: B final")
            .on_with("credit/role_turn", "round 1 of 2", "Answer: C")
            .on_with("credit/role_turn", "round 2 of 2", "Answer: B");
        let m = Arc::new(m);
        let models = ModelSet::single(m.clone());
        let c = cfg(false);
        let run = run_debate(&models, &c, &c.prompts(), &q(), 0)
            .await
            .unwrap();
        assert_eq!(run.rounds_run, 2);
        assert_eq!(run.calls, 6);
        assert_eq!(run.states[0].answer, Some('C'));
        assert!(run.correct);
        assert!(!run.any_agent_correct(0) && run.any_agent_correct(1));
        // Round 2 role prompts carry S_1; round 1 prompts do not.
        let calls = m.calls.lock().unwrap();
        let r2 = calls
            .iter()
            .find(|r| r.stage == "debate/role/solver/r2")
            .unwrap();
        assert!(r2.messages[1].content.contains("state one"));
        assert_eq!(r2.messages[0].content, "Doubt.".replace("Doubt", "Solve"));
        let r1 = calls
            .iter()
            .find(|r| r.stage == "debate/role/skeptic/r1")
            .unwrap();
        assert!(!r1.messages[1].content.contains("state one"));
        let tr = to_trace(&run, &c, &c.prompts(), "run");
        assert_eq!(tr.steps.len(), 6);
        assert_eq!(tr.steps[2].phase.as_deref(), Some("aggregation"));
        assert_eq!(tr.steps[5].round, Some(1));
        assert_eq!(tr.outcome, Outcome::Success);
    }

    #[tokio::test]
    async fn a_resumed_debate_keeps_the_recorded_turns_and_asks_for_the_rest() {
        let m = Arc::new(
            ScriptedModel::new("fixture")
                .on("credit/aggregate", "Answer: B")
                .on("credit/role_turn", "Answer: B"),
        );
        let c = cfg(false);
        // Round 1's solver said C as recorded; the skeptic (step 1) and everything after are asked for.
        let recorded = vec!["Answer: C (recorded)".to_string()];
        let run = resume_debate(
            &ModelSet::single(m.clone()),
            &c,
            &c.prompts(),
            &q(),
            0,
            &recorded,
        )
        .await
        .unwrap();
        assert_eq!(run.utterances[0][0].text, "Answer: C (recorded)");
        assert_eq!(run.utterances[0][0].answer, Some('C'));
        assert_eq!(run.calls, 5, "the recorded turn is not asked for");
        let stages: Vec<String> = m
            .calls
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.stage.clone())
            .collect();
        assert!(
            !stages.contains(&"debate/role/solver/r1".to_string()),
            "{stages:?}"
        );
        assert!(
            stages.contains(&"debate/role/skeptic/r1".to_string()),
            "{stages:?}"
        );
        let tr = to_trace(&run, &c, &c.prompts(), "run");
        assert_eq!(tr.steps[0].content, "Answer: C (recorded)");
    }

    #[tokio::test]
    async fn early_stop_on_consensus() {
        let m = Arc::new(
            ScriptedModel::new("fixture")
                .on("credit/aggregate", "Answer: B")
                .on("credit/role_turn", "Answer: B"),
        );
        let c = cfg(true);
        let run = run_debate(&ModelSet::single(m), &c, &c.prompts(), &q(), 0)
            .await
            .unwrap();
        assert_eq!(run.rounds_run, 1);
        assert_eq!(run.calls, 3);
        assert!(run.correct);
    }

    #[tokio::test]
    async fn run_many_keeps_order_and_propagates_errors() {
        let m = Arc::new(
            ScriptedModel::new("fixture")
                .on("credit/aggregate", "Answer: A")
                .on("credit/role_turn", "Answer: A"),
        );
        let c = Arc::new(cfg(false));
        let mut qs = vec![q(), q()];
        qs[1].id = "q2".into();
        let runs = run_many(&ModelSet::single(m), &c, &c.prompts(), &qs, 0)
            .await
            .unwrap();
        assert_eq!(
            runs.iter()
                .map(|r| r.question.id.as_str())
                .collect::<Vec<_>>(),
            vec!["q1", "q2"]
        );
        assert_eq!(accuracy(&runs), 0.0);
        let empty = Arc::new(ScriptedModel::new("fixture"));
        assert!(run_many(&ModelSet::single(empty), &c, &c.prompts(), &qs, 0)
            .await
            .is_err());
    }
}
