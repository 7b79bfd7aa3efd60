//! Credit-guided prompt optimization by verbalized block coordinate descent (Algorithm 1), the
//! black-box baseline (OPRO-style propose-and-keep-best with the same call budget), and the
//! evaluation of baseline / black-box / ours on the held-out set.
//!
//! Each outer iteration k:
//! - **Phase A** (structural block, aggregators fixed): roll out the optimization set, score every
//!   role utterance with AgentTurnEval (q) and each round with the peer-view judge (p), fuse,
//!   average into C_role_i, select the low-credit roles (bottom-K and/or threshold), and rewrite
//!   only their prompts: AgentDiagnosis (B.2) over the failure-label frequencies and examples,
//!   then RolePromptOptimize (B.3).
//! - **Phase B** (temporal block, roles fixed): roll out again with the new role prompts (or
//!   reuse Phase A's rollouts), score each round's aggregation output (q_agg_t = C_time_t),
//!   update the EMA temporal credit on informative failures, and rewrite only the aggregator
//!   prompts of the selected rounds.
//!
//! Iterations stop at the iteration cap, when the call budget is spent, or when the
//! optimization-set accuracy has not improved for `patience` iterations (saturation). The
//! returned prompts are the evaluated iterate with the best optimization-set accuracy (latest on
//! ties); the test set is never read during optimization.

use crate::bcd_state::{observe_failures, BcdState};
use crate::config::{Blocks, CriticRounds, DebateConfig, Decoding, PromptSet};
use crate::credit::{
    credit_table, select_roles, select_rounds, CreditTable, EmaCredit, InformativeFailure,
    RunCritique,
};
use crate::critic::{peer_view, turn_eval, Subject, TurnEval, NONE_LABEL};
use crate::data::Mcq;
use crate::debate::{accuracy, run_many, DebateRun, ModelSet};
use crate::CreditError;
use maslens_llm::prompt::{untrusted, Rendered, Template};
use maslens_llm::typed::{complete_as, lenient};
use maslens_llm::usage::UsageTracker;
use maslens_llm::{prompt_template, ChatModel, ChatRequest, Message};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

pub const AGENT_DIAGNOSIS: Template = prompt_template!("credit/agent_diagnosis.v1");
pub const AGENT_DIAGNOSIS_INPUT: Template = prompt_template!("credit/agent_diagnosis_input.v1");
pub const ROLE_PROMPT_OPTIMIZE: Template = prompt_template!("credit/role_prompt_optimize.v1");
pub const ROLE_PROMPT_OPTIMIZE_INPUT: Template =
    prompt_template!("credit/role_prompt_optimize_input.v1");
pub const AGG_PROMPT_OPTIMIZE: Template = prompt_template!("credit/aggregator_prompt_optimize.v1");
pub const AGG_PROMPT_OPTIMIZE_INPUT: Template =
    prompt_template!("credit/aggregator_prompt_optimize_input.v1");
pub const BLACKBOX_PROPOSE: Template = prompt_template!("credit/blackbox_propose.v1");
pub const BLACKBOX_PROPOSE_INPUT: Template = prompt_template!("credit/blackbox_propose_input.v1");

/// Versions of every prompt template this module uses (recorded in reports).
pub const PROMPT_VERSIONS: &[&str] = &[
    "credit/role_turn.v1",
    "credit/aggregate.v1",
    "credit/agent_turn_eval.v1",
    "credit/aggregator_eval.v1",
    "credit/peer_view_judge.v1",
    "credit/agent_diagnosis.v1",
    "credit/role_prompt_optimize.v1",
    "credit/aggregator_prompt_optimize.v1",
    "credit/blackbox_propose.v1",
];

/// A rewrite made by the optimizer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rewrite {
    /// `role:<name>` or `aggregator:round <t>`.
    pub target: String,
    pub before: String,
    pub after: String,
    /// AgentDiagnosis summary (roles) or the failure records' count (aggregators).
    pub diagnosis: String,
}

/// One outer BCD iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationRecord {
    pub iteration: usize,
    /// Prompts at the start of the iteration.
    pub prompts: PromptSet,
    /// Accuracy of those prompts on the optimization set.
    pub opt_accuracy: f64,
    /// Optimizer calls spent before this iteration's rollout.
    pub calls_before: u64,
    /// Optimizer calls spent at the end of this iteration.
    pub calls_after: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credit: Option<CreditTable>,
    pub selected_roles: Vec<String>,
    /// 0-based rounds selected in Phase B.
    pub selected_rounds: Vec<usize>,
    /// EMA alpha_t at Phase B's selection (before resets of rewritten rounds).
    pub ema_alpha: Vec<f64>,
    /// Informative failures counted per round at Phase B's selection.
    pub informative_failures: Vec<usize>,
    pub rewrites: Vec<Rewrite>,
    /// Role-utterance failure labels by round from Phase A: `labels[t][label] = count`.
    pub utterance_labels: Vec<BTreeMap<String, usize>>,
}

/// Outcome of the credit-guided optimizer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BcdResult {
    pub iterations: Vec<IterationRecord>,
    /// Evaluated iterates: `(prompts, optimization accuracy, calls spent when it was known)`.
    pub iterates: Vec<(PromptSet, f64, u64)>,
    pub best: PromptSet,
    /// Optimization accuracy of `best` (None when the last iterate was returned unscored).
    pub best_opt_accuracy: Option<f64>,
    /// Optimizer calls (rollouts, critics, diagnosis, rewrites).
    pub calls: u64,
    pub tokens: u64,
    pub stop_reason: String,
    /// EMA alpha update trajectory `(round, alpha)`.
    pub ema_history: Vec<(usize, f64)>,
}

/// Outcome of the black-box baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlackBoxResult {
    /// Candidates in order: `(prompts, optimization accuracy, calls spent after it)`.
    pub candidates: Vec<(PromptSet, f64, u64)>,
    pub best: PromptSet,
    pub best_opt_accuracy: f64,
    pub calls: u64,
    pub tokens: u64,
    /// Proposals that could not be parsed into a prompt set.
    pub invalid_proposals: usize,
}

/// Everything the optimizer needs.
pub struct Optimizer {
    /// The debate's models, metered.
    pub models: ModelSet,
    /// Model for critics and rewrites, metered.
    pub optimizer_model: Arc<dyn ChatModel>,
    pub cfg: Arc<DebateConfig>,
    pub meter: Arc<UsageTracker>,
    /// Decoding seed of the run.
    pub seed: u64,
}

impl Optimizer {
    /// Build with a fresh meter around `models` (the optimizer model comes from
    /// `cfg.optimizer.model` or the default).
    pub fn new(models: &ModelSet, cfg: Arc<DebateConfig>, seed: u64) -> Result<Self, CreditError> {
        let meter = crate::debate::call_meter();
        let models = models.metered(&meter);
        let optimizer_model = models.get(cfg.optimizer.model.as_deref())?;
        Ok(Optimizer {
            models,
            optimizer_model,
            cfg,
            meter,
            seed,
        })
    }

    fn calls(&self) -> u64 {
        self.meter.total().answered()
    }

    fn budget_left(&self) -> bool {
        let o = &self.cfg.optimizer;
        o.max_calls.is_none_or(|m| self.calls() < m)
            && o.max_tokens.is_none_or(|m| self.meter.total().tokens() < m)
    }

    /// Roll out the debate on `questions` with `prompts`.
    pub async fn rollout(
        &self,
        prompts: &PromptSet,
        questions: &[Mcq],
    ) -> Result<Vec<DebateRun>, CreditError> {
        run_many(&self.models, &self.cfg, prompts, questions, self.seed).await
    }

    /// Critique runs: role utterances (AgentTurnEval + peer view) and/or aggregation outputs.
    pub async fn critique(
        &self,
        runs: &[DebateRun],
        roles: bool,
        aggregators: bool,
    ) -> Result<Vec<RunCritique>, CreditError> {
        let tasks = runs.iter().map(|run| {
            let (run, model, cfg) = (run.clone(), self.optimizer_model.clone(), self.cfg.clone());
            async move { critique_run(model.as_ref(), &cfg, &run, roles, aggregators).await }
        });
        crate::debate::run_ordered(self.cfg.concurrency, "critic", tasks).await
    }

    /// Run credit-guided BCD on the optimization set.
    pub async fn bcd(&self, opt_set: &[Mcq]) -> Result<BcdResult, CreditError> {
        let o = &self.cfg.optimizer;
        let mut st = BcdState {
            prompts: self.cfg.prompts(),
            ema: EmaCredit::new(self.cfg.rounds, o.ema_beta, o.tau, o.buffer_m),
            cached: None,
            observed: None,
        };
        let mut iterations = Vec::new();
        let mut iterates: Vec<(PromptSet, f64, u64)> = Vec::new();
        let mut best_acc = f64::NEG_INFINITY;
        let mut since_improved = 0usize;
        let mut stop_reason = format!("iteration cap ({})", o.iterations);
        for k in 0..o.iterations {
            if !self.budget_left() {
                stop_reason = "call / token budget spent".into();
                break;
            }
            let calls_before = self.calls();
            let runs = self
                .rollout_cached(&st.prompts, opt_set, &mut st.cached)
                .await?;
            let acc = accuracy(&runs);
            iterates.push((st.prompts.clone(), acc, self.calls()));
            if acc > best_acc + 1e-12 {
                best_acc = acc;
                since_improved = 0;
            } else {
                since_improved += 1;
            }
            if since_improved >= o.patience.max(1) {
                stop_reason =
                    format!("saturated: no improvement for {since_improved} iteration(s)");
                break;
            }
            if acc >= 1.0 {
                stop_reason = "saturated: optimization accuracy 1.0".into();
                break;
            }
            let rec = self
                .iteration(k + 1, &runs, acc, calls_before, opt_set, &mut st)
                .await?;
            iterations.push(rec);
        }
        let changed = iterates
            .last()
            .map(|(p, _, _)| p != &st.prompts)
            .unwrap_or(true)
            && !iterations.is_empty();
        let (best, best_opt_accuracy) = self
            .final_prompts(changed, opt_set, &mut st, &mut iterates)
            .await?;
        let total = self.meter.total();
        Ok(BcdResult {
            iterations,
            iterates,
            best,
            best_opt_accuracy,
            calls: total.answered(),
            tokens: total.tokens(),
            stop_reason,
            ema_history: st.ema.history.clone(),
        })
    }

    /// One outer iteration after its rollout `runs` (accuracy `acc`): Phase A (structural)
    /// then Phase B (temporal), as the configured blocks allow.
    async fn iteration(
        &self,
        iteration: usize,
        runs: &[DebateRun],
        acc: f64,
        calls_before: u64,
        opt_set: &[Mcq],
        st: &mut BcdState,
    ) -> Result<IterationRecord, CreditError> {
        let o = &self.cfg.optimizer;
        let mut rec = IterationRecord {
            iteration,
            prompts: st.prompts.clone(),
            opt_accuracy: acc,
            calls_before,
            calls_after: 0,
            credit: None,
            selected_roles: vec![],
            selected_rounds: vec![],
            ema_alpha: vec![],
            informative_failures: vec![],
            rewrites: vec![],
            utterance_labels: vec![],
        };
        let mut role_table: Option<CreditTable> = None;
        if o.blocks != Blocks::AggregatorsOnly && self.budget_left() {
            role_table = Some(
                self.structural_block(runs, &mut st.prompts, &mut rec)
                    .await?,
            );
        }
        if o.blocks != Blocks::RolesOnly && self.budget_left() {
            let agg_table = self.temporal_block(runs, opt_set, st, &mut rec).await?;
            let mut table = role_table.take().unwrap_or(agg_table.clone());
            table.round_credit = agg_table.round_credit;
            role_table = Some(table);
        }
        rec.credit = role_table;
        rec.calls_after = self.calls();
        tracing::info!(
            iteration,
            acc,
            calls = rec.calls_after,
            rewrites = rec.rewrites.len(),
            "BCD iteration"
        );
        Ok(rec)
    }

    /// Phase A: role credit from the critics, then rewrites of the selected roles' prompts.
    async fn structural_block(
        &self,
        runs: &[DebateRun],
        prompts: &mut PromptSet,
        rec: &mut IterationRecord,
    ) -> Result<CreditTable, CreditError> {
        let o = &self.cfg.optimizer;
        let roles = self.cfg.role_names();
        let crit = self.critique(runs, true, false).await?;
        let table = credit_table(&roles, self.cfg.rounds, &crit, o.lambda);
        rec.utterance_labels = utterance_labels(&crit, self.cfg.rounds);
        let selected = select_roles(&table.role_credit, o.role_selection);
        for &i in &selected {
            if !self.budget_left() {
                break;
            }
            if let Some(rw) = self.rewrite_role(i, prompts, runs, &crit).await? {
                prompts.roles[i] = rw.after.clone();
                rec.rewrites.push(rw);
            }
        }
        rec.selected_roles = selected.iter().map(|&i| roles[i].clone()).collect();
        Ok(table)
    }

    /// Phase B: the aggregators' round credit, the EMA over informative failures, then
    /// rewrites of the selected rounds' aggregator prompts. Returns the round-credit table.
    async fn temporal_block(
        &self,
        runs: &[DebateRun],
        opt_set: &[Mcq],
        st: &mut BcdState,
        rec: &mut IterationRecord,
    ) -> Result<CreditTable, CreditError> {
        let o = &self.cfg.optimizer;
        let (runs_b, source) = if o.rerollout_phase_b {
            let r = self
                .rollout_cached(&st.prompts, opt_set, &mut st.cached)
                .await?;
            (r, st.prompts.clone())
        } else {
            (runs.to_vec(), rec.prompts.clone())
        };
        let crit = self.critique(&runs_b, false, true).await?;
        // The prompts whose rollouts the EMA has already observed: a rollout served again from
        // the cache (prompts unchanged since, e.g. a Phase B that rewrote nothing) is the same
        // evidence and is not counted twice towards the decay or the `m` threshold.
        if st.observed.as_ref() != Some(&source) {
            observe_failures(&mut st.ema, &runs_b, &crit);
        }
        st.observed = Some(source);
        let agg_table = credit_table(&self.cfg.role_names(), self.cfg.rounds, &crit, o.lambda);
        let mut selected = select_rounds(&st.ema, &agg_table.round_credit, o.round_selection);
        // The one-round-at-a-time ablation: only that round's aggregator may change.
        selected.retain(|&t| o.only_round.is_none_or(|r| r == t + 1));
        rec.informative_failures = st.ema.failures.clone();
        rec.ema_alpha = st.ema.alpha.clone();
        for &t in &selected {
            if !self.budget_left() {
                break;
            }
            if let Some(rw) = self.rewrite_aggregator(t, &st.prompts, &st.ema).await? {
                st.prompts.aggregators[t] = rw.after.clone();
                rec.rewrites.push(rw);
            }
            st.ema.reset(t);
        }
        rec.selected_rounds = selected;
        Ok(agg_table)
    }

    /// The prompts BCD returns, with their optimization-set accuracy when scored: the best
    /// iterate under `select_best` (the last prompts scored first when they changed after the
    /// last rollout), else the last iterate as Algorithm 1 writes it.
    async fn final_prompts(
        &self,
        changed: bool,
        opt_set: &[Mcq],
        st: &mut BcdState,
        iterates: &mut Vec<(PromptSet, f64, u64)>,
    ) -> Result<(PromptSet, Option<f64>), CreditError> {
        if !self.cfg.optimizer.select_best {
            let scored = if changed {
                None
            } else {
                iterates.last().map(|x| x.1)
            };
            return Ok((st.prompts.clone(), scored));
        }
        if changed {
            let runs = self
                .rollout_cached(&st.prompts, opt_set, &mut st.cached)
                .await?;
            iterates.push((st.prompts.clone(), accuracy(&runs), self.calls()));
        }
        Ok(iterates
            .iter()
            .fold(None::<(PromptSet, f64)>, |acc, (p, a, _)| match acc {
                Some((bp, ba)) if ba > *a + 1e-12 => Some((bp, ba)),
                _ => Some((p.clone(), *a)),
            })
            .map(|(p, a)| (p, Some(a)))
            .unwrap_or((self.cfg.prompts(), None)))
    }

    async fn rollout_cached(
        &self,
        prompts: &PromptSet,
        questions: &[Mcq],
        cached: &mut Option<(PromptSet, Vec<DebateRun>)>,
    ) -> Result<Vec<DebateRun>, CreditError> {
        if let Some((p, runs)) = cached.as_ref() {
            if p == prompts {
                return Ok(runs.clone());
            }
        }
        let runs = self.rollout(prompts, questions).await?;
        *cached = Some((prompts.clone(), runs.clone()));
        Ok(runs)
    }

    async fn complete_text(
        &self,
        system: String,
        user: Rendered,
        dec: &Decoding,
        stage: String,
    ) -> Result<String, CreditError> {
        let mut req = ChatRequest::new(vec![Message::system(system), Message::user(user.text)])
            .max_tokens(dec.max_tokens)
            .temperature(dec.temperature)
            .stage(stage)
            .template(user.template);
        req.top_p = dec.top_p;
        req.seed = Some(self.seed);
        Ok(self.optimizer_model.complete(&req).await?.text)
    }

    /// Phase A for role i: AgentDiagnosis then RolePromptOptimize. `None` when the role has no
    /// labelled failures to diagnose or the rewrite came back empty.
    async fn rewrite_role(
        &self,
        i: usize,
        prompts: &PromptSet,
        runs: &[DebateRun],
        crit: &[RunCritique],
    ) -> Result<Option<Rewrite>, CreditError> {
        let role = &self.cfg.roles[i].name;
        let summary = failure_summary(i, runs, crit, self.cfg.optimizer.examples_per_label);
        if summary.n_failures == 0 {
            return Ok(None);
        }
        let dec = &self.cfg.optimizer.rewrite_decoding;
        let groups: Vec<serde_json::Value> = summary
            .groups
            .iter()
            .map(|g| {
                json!({
                    "label": g.label, "count": g.count,
                    "share": format!("{:.0}", 100.0 * g.count as f64 / summary.n_failures as f64),
                    "examples": g.examples.iter().map(|e| untrusted("example_explanation", e)).collect::<Vec<_>>(),
                })
            })
            .collect();
        let user = AGENT_DIAGNOSIS_INPUT.rendered(json!({
            "role": role, "n_evaluated": summary.n_evaluated, "n_failures": summary.n_failures, "groups": groups,
        }))?;
        let diagnosis = self
            .complete_text(
                AGENT_DIAGNOSIS.render(json!({}))?,
                user,
                dec,
                format!("optimizer/diagnosis/{role}"),
            )
            .await?;
        let user = ROLE_PROMPT_OPTIMIZE_INPUT.rendered(json!({
            "role": role,
            "prompt": untrusted("original_role_prompt", &prompts.roles[i]),
            "diagnosis": untrusted("failure_summary", diagnosis.trim()),
        }))?;
        let after = self
            .complete_text(
                ROLE_PROMPT_OPTIMIZE.render(json!({}))?,
                user,
                dec,
                format!("optimizer/role_rewrite/{role}"),
            )
            .await?;
        let after = clean_prompt(&after);
        if after.is_empty() {
            return Ok(None);
        }
        Ok(Some(Rewrite {
            target: format!("role:{role}"),
            before: prompts.roles[i].clone(),
            after,
            diagnosis: diagnosis.trim().to_string(),
        }))
    }

    /// Phase B for round t: rewrite psi_t from its buffered informative failures.
    async fn rewrite_aggregator(
        &self,
        t: usize,
        prompts: &PromptSet,
        ema: &EmaCredit,
    ) -> Result<Option<Rewrite>, CreditError> {
        let failures = failure_records(
            self.optimizer_model.as_ref(),
            &ema.buffer[t],
            self.cfg.optimizer.aggregator_rewrite_tokens,
        );
        if failures.is_empty() {
            return Ok(None);
        }
        let user = AGG_PROMPT_OPTIMIZE_INPUT.rendered(json!({
            "round": t + 1, "rounds": self.cfg.rounds,
            "prompt": untrusted("original_aggregation_prompt", &prompts.aggregators[t]),
            "alpha": format!("{:.2}", ema.alpha[t]), "n_failures": ema.failures[t], "failures": failures,
        }))?;
        let after = self
            .complete_text(
                AGG_PROMPT_OPTIMIZE.render(json!({}))?,
                user,
                &self.cfg.optimizer.rewrite_decoding,
                format!("optimizer/agg_rewrite/r{}", t + 1),
            )
            .await?;
        let after = clean_prompt(&after);
        if after.is_empty() {
            return Ok(None);
        }
        Ok(Some(Rewrite {
            target: format!("aggregator:round {}", t + 1),
            before: prompts.aggregators[t].clone(),
            after,
            diagnosis: format!(
                "{} informative failures, alpha {:.2}",
                ema.failures[t], ema.alpha[t]
            ),
        }))
    }

    /// The black-box baseline: OPRO-style propose-and-keep-best over all prompts, without
    /// credit, until `budget` calls are spent. A proposal is only started when the largest
    /// proposal cost (repair calls included) plus the largest rollout cost measured so far still
    /// fit; `calls` is what it really spent.
    pub async fn black_box(
        &self,
        opt_set: &[Mcq],
        budget: u64,
    ) -> Result<BlackBoxResult, CreditError> {
        let start = self.calls();
        let tokens_start = self.meter.total().tokens();
        let initial = self.cfg.prompts();
        let runs = self.rollout(&initial, opt_set).await?;
        let mut candidates = vec![(initial.clone(), accuracy(&runs), self.calls() - start)];
        // Costs as measured, never assumed: a proposal can take a repair call, and a rollout's
        // cost varies with the consensus early stop, so the guard uses the largest of each seen.
        let mut max_rollout = (self.calls() - start).max(1);
        let mut max_propose = 2u64; // one call and its possible repair
        let mut invalid = 0usize;
        let n_roles = self.cfg.roles.len();
        let rounds = self.cfg.rounds;
        let schema = json!({
            "type": "object", "required": ["roles", "aggregators"],
            "properties": {
                "roles": {"type": "array", "items": {"type": "string"}},
                "aggregators": {"type": "array", "items": {"type": "string"}}
            }
        });
        let mut step = 0u64;
        while self.calls() - start + max_propose + max_rollout <= budget {
            step += 1;
            let mut hist: Vec<&(PromptSet, f64, u64)> = candidates.iter().collect();
            hist.sort_by(|a, b| a.1.total_cmp(&b.1));
            let hist: Vec<serde_json::Value> = hist
                .iter()
                .rev()
                .take(4)
                .rev()
                .map(|(p, a, _)| {
                    let body = serde_json::to_string_pretty(&json!({"roles": p.roles, "aggregators": p.aggregators})).unwrap_or_default();
                    json!({"accuracy": format!("{:.1}", 100.0 * a), "prompts": untrusted("prompt_set", &body)})
                })
                .collect();
            let user = BLACKBOX_PROPOSE_INPUT.render(json!({
                "roles": self.cfg.role_names().join(", "), "rounds": rounds, "n_roles": n_roles, "history": hist,
            }))?;
            let dec = &self.cfg.optimizer.rewrite_decoding;
            let mut req = ChatRequest::new(vec![
                Message::system(BLACKBOX_PROPOSE.render(json!({}))?),
                Message::user(user),
            ])
            .max_tokens(dec.max_tokens.saturating_mul(2))
            .temperature(dec.temperature)
            .stage("blackbox/propose")
            .template(BLACKBOX_PROPOSE_INPUT.name);
            req.seed = Some(self.seed.wrapping_add(step));
            let before = self.calls();
            let out =
                complete_as::<ProposalAnswer>(self.optimizer_model.as_ref(), req, &schema).await?;
            max_propose = max_propose.max(self.calls() - before);
            let proposal = out.value.and_then(|v| {
                let clean = |l: Vec<String>| -> Vec<String> {
                    l.iter().map(String::as_str).map(clean_prompt).collect()
                };
                let roles = clean(v.roles?);
                let aggs = clean(v.aggregators?);
                (roles.len() == n_roles
                    && aggs.len() == rounds
                    && roles.iter().chain(&aggs).all(|s| !s.is_empty()))
                .then_some(PromptSet {
                    roles,
                    aggregators: aggs,
                })
            });
            let Some(p) = proposal else {
                invalid += 1;
                continue;
            };
            let before = self.calls();
            let runs = self.rollout(&p, opt_set).await?;
            max_rollout = max_rollout.max(self.calls() - before);
            candidates.push((p, accuracy(&runs), self.calls() - start));
        }
        let (best, best_opt_accuracy) = candidates
            .iter()
            .fold(None::<(PromptSet, f64)>, |acc, (p, a, _)| match acc {
                Some((bp, ba)) if ba >= *a => Some((bp, ba)),
                _ => Some((p.clone(), *a)),
            })
            .unwrap_or((initial, 0.0));
        Ok(BlackBoxResult {
            candidates,
            best,
            best_opt_accuracy,
            calls: self.calls() - start,
            tokens: self.meter.total().tokens() - tokens_start,
            invalid_proposals: invalid,
        })
    }
}

/// Critique one run.
pub async fn critique_run(
    model: &dyn ChatModel,
    cfg: &DebateConfig,
    run: &DebateRun,
    roles: bool,
    aggregators: bool,
) -> Result<RunCritique, CreditError> {
    let o = &cfg.optimizer;
    let dec = &o.critic_decoding;
    let mut c = RunCritique {
        question_id: run.question.id.clone(),
        turn: vec![Vec::new(); run.rounds_run],
        peer: vec![None; run.rounds_run],
        agg: vec![None; run.rounds_run],
    };
    for t in 0..run.rounds_run {
        let last = t + 1 == run.rounds_run;
        if roles && (o.critic_rounds == CriticRounds::All || last) {
            let mut evals = Vec::new();
            for u in &run.utterances[t] {
                let stage = format!("critic/turn/{}/r{}", u.role, t + 1);
                evals.push(Some(
                    turn_eval(
                        model,
                        Subject::Agent,
                        &run.question,
                        &u.text,
                        u.correct,
                        dec,
                        o.critic_repair,
                        &stage,
                    )
                    .await?,
                ));
            }
            c.turn[t] = evals;
            if o.lambda < 1.0 {
                c.peer[t] = Some(
                    peer_view(
                        model,
                        &run.question,
                        t,
                        &run.utterances[t],
                        dec,
                        &format!("critic/peer/r{}", t + 1),
                    )
                    .await?,
                );
            }
        }
        if aggregators {
            if let Some(s) = run.states.get(t) {
                let stage = format!("critic/agg/r{}", t + 1);
                c.agg[t] = Some(
                    turn_eval(
                        model,
                        Subject::Aggregator,
                        &run.question,
                        &s.text,
                        s.correct,
                        dec,
                        o.critic_repair,
                        &stage,
                    )
                    .await?,
                );
            }
        }
    }
    Ok(c)
}

/// One failure type in a role's error summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureGroup {
    pub label: String,
    pub count: usize,
    pub examples: Vec<String>,
}

/// A role's error summary for AgentDiagnosis: failure types by frequency with examples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureSummary {
    pub n_evaluated: usize,
    pub n_failures: usize,
    pub groups: Vec<FailureGroup>,
}

/// Group role i's labelled failures (abstentions excluded) by label, most frequent first.
pub fn failure_summary(
    i: usize,
    runs: &[DebateRun],
    crit: &[RunCritique],
    examples: usize,
) -> FailureSummary {
    let _ = runs;
    let mut groups: BTreeMap<String, FailureGroup> = BTreeMap::new();
    let mut n_evaluated = 0;
    let mut n_failures = 0;
    for c in crit {
        for round in &c.turn {
            let Some(Some(e)) = round.get(i) else {
                continue;
            };
            n_evaluated += 1;
            let Some(label) = e.label.as_deref().filter(|l| *l != NONE_LABEL) else {
                continue;
            };
            n_failures += 1;
            let g = groups
                .entry(label.to_string())
                .or_insert_with(|| FailureGroup {
                    label: label.to_string(),
                    count: 0,
                    examples: vec![],
                });
            g.count += 1;
            if g.examples.len() < examples && !e.explanation.trim().is_empty() {
                g.examples.push(e.explanation.trim().to_string());
            }
        }
    }
    let mut groups: Vec<FailureGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| b.count.cmp(&a.count).then(a.label.cmp(&b.label)));
    FailureSummary {
        n_evaluated,
        n_failures,
        groups,
    }
}

/// Utterance labels per round (`(unlabelled)` for abstentions on wrong answers).
pub fn utterance_labels(crit: &[RunCritique], rounds: usize) -> Vec<BTreeMap<String, usize>> {
    let mut out = vec![BTreeMap::new(); rounds];
    for c in crit {
        for (t, round) in c.turn.iter().enumerate().take(rounds) {
            for e in round.iter().flatten() {
                *out[t].entry(label_name(e)).or_insert(0) += 1;
            }
        }
    }
    out
}

/// Label of a verdict for tables.
pub fn label_name(e: &TurnEval) -> String {
    e.label
        .clone()
        .unwrap_or_else(|| "(unlabelled)".to_string())
}

/// The failure records the aggregator rewrite (Phase B) sees: question, options, gold, every
/// agent's message and the wrong aggregation output, and the critic's explanation. Messages and
/// states are given whole while the records fit in `budget` tokens (the model's count); beyond
/// it each message and state gets an equal share, cut at a character boundary and marked.
pub fn failure_records(
    model: &dyn ChatModel,
    failures: &VecDeque<InformativeFailure>,
    budget: usize,
) -> Vec<String> {
    let parts: usize = failures.iter().map(|f| f.messages.len() + 1).sum();
    let full: usize = failures
        .iter()
        .map(|f| {
            f.messages
                .iter()
                .map(|(_, m)| model.count_tokens(m))
                .sum::<usize>()
                + model.count_tokens(&f.state)
        })
        .sum();
    let share = (full > budget).then(|| (budget / parts.max(1)).max(16));
    let fit = |s: &str| match share {
        Some(n) => within_tokens(model, s.trim(), n),
        None => s.trim().to_string(),
    };
    failures
        .iter()
        .map(|f| {
            let msgs: Vec<String> = f
                .messages
                .iter()
                .map(|(r, m)| format!("{r}: {}", fit(m)))
                .collect();
            let body = format!(
                "Question: {}\nOptions:\n{}\nGold answer: {}\nAgents' messages:\n{}\nAggregation output (carried a wrong answer):\n{}\nCritic: {}",
                f.question.question,
                f.question.options_block(),
                f.question.answer,
                msgs.join("\n"),
                fit(&f.state),
                f.explanation
            );
            untrusted("failure_record", &body)
        })
        .collect()
}

/// `s` cut to at most `tokens` tokens of `model` (plus a ` [... cut]` marker when cut).
fn within_tokens(model: &dyn ChatModel, s: &str, tokens: usize) -> String {
    let mut n = model.count_tokens(s);
    if n <= tokens {
        return s.to_string();
    }
    let mut chars = s.chars().count();
    while n > tokens && chars > 0 {
        chars = chars * tokens / n.max(1);
        chars = chars.saturating_sub(1);
        let cut: String = s.chars().take(chars).collect();
        n = model.count_tokens(&cut);
        if n <= tokens {
            return format!("{} [... cut]", cut.trim_end());
        }
    }
    "[... cut]".to_string()
}

/// The black-box optimizer's proposal: one prompt per role and per round (strings only).
#[derive(Debug, serde::Deserialize)]
struct ProposalAnswer {
    #[serde(default, deserialize_with = "lenient::strings")]
    roles: Option<Vec<String>>,
    #[serde(default, deserialize_with = "lenient::strings")]
    aggregators: Option<Vec<String>>,
}

/// Clean a rewritten prompt: strip code fences, surrounding quotes and a leading label line.
pub fn clean_prompt(text: &str) -> String {
    let mut t = text.trim();
    if let Some(rest) = t.strip_prefix("```") {
        let rest = rest.split_once('\n').map(|x| x.1).unwrap_or("");
        t = rest.rsplit_once("```").map(|x| x.0).unwrap_or(rest).trim();
    }
    let t = t.trim_matches(|c| c == '"' || c == '\'' || c == '`').trim();
    let lower = t.to_ascii_lowercase();
    let t = if lower.starts_with("reconstructed")
        || lower.starts_with("new prompt")
        || lower.starts_with("role prompt:")
    {
        t.split_once(':').map(|x| x.1.trim()).unwrap_or(t)
    } else {
        t
    };
    t.chars().take(4000).collect::<String>().trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(message: &str, state: &str) -> InformativeFailure {
        InformativeFailure {
            question: Mcq {
                id: "q/1".into(),
                question: "Which?".into(),
                options: vec!["one".into(), "two".into()],
                answer: 'B',
                subject: None,
            },
            round: 0,
            messages: vec![
                ("analyst".into(), message.into()),
                ("skeptic".into(), "Answer: B".into()),
            ],
            state: state.into(),
            q_agg: 0.2,
            explanation: "carried A".into(),
        }
    }

    /// Issue 17 item 3: the aggregator rewrite sees the agents' messages and the wrong state,
    /// not their first lines cut at 300 characters; past the token budget they are cut evenly.
    #[test]
    fn aggregator_rewrite_sees_whole_messages_within_its_budget() {
        let model = maslens_llm::testing::ScriptedModel::new("scripted");
        let reasoning = format!(
            "Answer: A\n{}",
            "the second option fails because x. ".repeat(20)
        );
        let state = format!(
            "Answer: A\nSummary: {}",
            "analyst and skeptic disagree. ".repeat(15)
        );
        let buf: VecDeque<_> = [failure(&reasoning, &state)].into();
        let whole = failure_records(&model, &buf, 3000);
        assert!(whole[0].contains(reasoning.trim()), "{}", whole[0]);
        assert!(whole[0].contains(state.trim()), "{}", whole[0]);
        assert!(!whole[0].contains("[... cut]"));
        // A budget too small for both: each message and the state are cut to their share.
        let cut = failure_records(&model, &buf, 90);
        assert!(cut[0].contains("[... cut]"), "{}", cut[0]);
        assert!(cut[0].contains("skeptic: Answer: B"));
        assert!(model.count_tokens(&cut[0]) < model.count_tokens(&whole[0]));
    }

    #[test]
    fn cleans_prompts() {
        assert_eq!(clean_prompt("```\nBe careful.\n```"), "Be careful.");
        assert_eq!(clean_prompt("\"Check constraints.\""), "Check constraints.");
        assert_eq!(clean_prompt("Reconstructed role prompt: Think."), "Think.");
        assert_eq!(clean_prompt("   "), "");
    }

    #[test]
    fn failure_summary_groups_by_frequency() {
        let te = |label: Option<&str>, expl: &str| {
            Some(TurnEval {
                correct: label == Some("NONE"),
                label: label.map(str::to_string),
                explanation: expl.into(),
                score: 1,
                abstained: false,
                abstain_reason: None,
                calls: 1,
            })
        };
        let crit = vec![
            RunCritique {
                question_id: "a".into(),
                turn: vec![vec![
                    te(Some("KNOWLEDGE_DEFICIT"), "k1"),
                    te(Some("NONE"), ""),
                ]],
                peer: vec![None],
                agg: vec![None],
            },
            RunCritique {
                question_id: "b".into(),
                turn: vec![vec![te(Some("KNOWLEDGE_DEFICIT"), "k2"), te(None, "")]],
                peer: vec![None],
                agg: vec![None],
            },
            RunCritique {
                question_id: "c".into(),
                turn: vec![vec![te(Some("OVERGENERALIZATION"), "o1"), te(None, "")]],
                peer: vec![None],
                agg: vec![None],
            },
        ];
        let s = failure_summary(0, &[], &crit, 1);
        assert_eq!((s.n_evaluated, s.n_failures), (3, 3));
        assert_eq!(s.groups[0].label, "KNOWLEDGE_DEFICIT");
        assert_eq!(s.groups[0].count, 2);
        assert_eq!(s.groups[0].examples, vec!["k1".to_string()]);
        // role 1: one correct, two abstentions -> nothing to diagnose
        let s = failure_summary(1, &[], &crit, 2);
        assert_eq!((s.n_evaluated, s.n_failures), (3, 0));
        let labels = utterance_labels(&crit, 1);
        assert_eq!(labels[0].get("(unlabelled)"), Some(&2));
        assert_eq!(labels[0].get("NONE"), Some(&1));
    }
}
