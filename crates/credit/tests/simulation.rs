//! The optimizer on the **simulated** multi-agent system (`maslens_credit::simulation`, not a
//! model): one deliberately weak role and one weak round. Credit-guided BCD must find and fix
//! both, and reach a higher held-out accuracy than the black-box baseline at the same number of
//! LLM calls.

use maslens_credit::data::split;
use maslens_credit::debate::{accuracy, run_many, ModelSet};
use maslens_credit::optimize::Optimizer;
use maslens_credit::simulation::{self, aggregator_noise, uncured, SimulatedMas, ROLE_FLAWS};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credit_guided_bcd_fixes_weak_role_and_round_and_beats_black_box() {
    let mut ours = Vec::new();
    let mut black = Vec::new();
    let mut base = Vec::new();
    for seed in [1u64, 2, 3, 4] {
        let qs = simulation::questions(240, seed);
        let sp = split(&qs, 40, Some(200), seed);
        // Weak role: "analyst" (index 0); weak round: round 1 (index 0).
        let cfg = Arc::new(simulation::config(2, 0, 0).unwrap());
        let models = ModelSet::single(Arc::new(SimulatedMas::new(&qs)));

        let opt = Optimizer::new(&models, cfg.clone(), seed).unwrap();
        let bcd = opt.bcd(&sp.optimization).await.unwrap();
        let first = &bcd.iterations[0];
        eprintln!(
            "seed {seed}: iteration 1: roles {:?} rounds {:?} credit {:?} ema {:?} failures {:?}",
            first.selected_roles,
            first.selected_rounds,
            first
                .credit
                .as_ref()
                .map(|c| (&c.role_credit, &c.round_credit)),
            first.ema_alpha,
            first.informative_failures
        );
        // Found: structural credit ranks the weak role last, temporal credit flags round 1 only.
        assert_eq!(
            first.selected_roles,
            vec!["analyst".to_string()],
            "seed {seed}"
        );
        assert_eq!(first.selected_rounds, vec![0], "seed {seed}");
        let credit = first.credit.as_ref().unwrap();
        let rc: Vec<f64> = credit.role_credit.iter().map(|c| c.unwrap()).collect();
        assert!(rc[0] < rc[1] && rc[0] < rc[2], "seed {seed}: {rc:?}");
        let tc: Vec<f64> = credit.round_credit.iter().map(|c| c.unwrap()).collect();
        assert!(tc[0] < tc[1], "seed {seed}: {tc:?}");
        // Fixed: the returned prompts have no uncured flaw in the weak role or the weak round.
        assert!(
            uncured(&bcd.best.roles[0], ROLE_FLAWS).is_empty(),
            "seed {seed}: {}",
            bcd.best.roles[0]
        );
        assert_eq!(
            aggregator_noise(&bcd.best.aggregators[0]),
            0.0,
            "seed {seed}: {}",
            bcd.best.aggregators[0]
        );
        // Strong components are left alone.
        assert_eq!(bcd.best.roles[1], cfg.roles[1].prompt);
        assert_eq!(bcd.best.aggregators[1], cfg.aggregators[1].prompt);

        // Black-box baseline with the same call budget.
        let bb_opt = Optimizer::new(&models, cfg.clone(), seed).unwrap();
        let bb = bb_opt.black_box(&sp.optimization, bcd.calls).await.unwrap();
        assert!(
            bb.calls <= bcd.calls,
            "seed {seed}: black-box used {} > {}",
            bb.calls,
            bcd.calls
        );
        assert!(
            bb.candidates.len() >= 2,
            "seed {seed}: the black box must get to propose"
        );

        // Held-out accuracy (the test split was not read during optimization).
        let eval = Optimizer::new(&models, cfg.clone(), seed).unwrap();
        let a_base = accuracy(
            &run_many(&eval.models, &eval.cfg, &cfg.prompts(), &sp.test, seed)
                .await
                .unwrap(),
        );
        let a_ours = accuracy(
            &run_many(&eval.models, &eval.cfg, &bcd.best, &sp.test, seed)
                .await
                .unwrap(),
        );
        let a_bb = accuracy(
            &run_many(&eval.models, &eval.cfg, &bb.best, &sp.test, seed)
                .await
                .unwrap(),
        );
        eprintln!(
            "seed {seed}: baseline {a_base:.3} | black-box {a_bb:.3} ({} calls, {} candidates) | ours {a_ours:.3} ({} calls, {} iterations, stop: {})",
            bb.calls,
            bb.candidates.len(),
            bcd.calls,
            bcd.iterations.len(),
            bcd.stop_reason
        );
        assert!(a_ours > a_base, "seed {seed}");
        base.push(a_base);
        ours.push(a_ours);
        black.push(a_bb);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    eprintln!(
        "mean: baseline {:.3} black-box {:.3} ours {:.3}",
        mean(&base),
        mean(&black),
        mean(&ours)
    );
    assert!(
        mean(&ours) > mean(&black),
        "ours {ours:?} vs black-box {black:?}"
    );
    assert!(
        ours.iter().zip(&black).all(|(o, b)| o >= b),
        "ours {ours:?} vs black-box {black:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ablations_and_budget() {
    use maslens_credit::config::Blocks;
    let qs = simulation::questions(80, 9);
    let sp = split(&qs, 40, Some(40), 9);
    let models = ModelSet::single(Arc::new(SimulatedMas::new(&qs)));
    let base = simulation::config(2, 0, 0).unwrap();
    for blocks in [Blocks::RolesOnly, Blocks::AggregatorsOnly] {
        let mut cfg = base.clone();
        cfg.optimizer.blocks = blocks;
        let cfg = Arc::new(cfg);
        let bcd = Optimizer::new(&models, cfg.clone(), 9)
            .unwrap()
            .bcd(&sp.optimization)
            .await
            .unwrap();
        let targets: Vec<String> = bcd
            .iterations
            .iter()
            .flat_map(|i| i.rewrites.iter().map(|r| r.target.clone()))
            .collect();
        assert!(!targets.is_empty(), "{blocks:?}");
        match blocks {
            Blocks::RolesOnly => {
                assert!(
                    targets.iter().all(|t| t.starts_with("role:")),
                    "{targets:?}"
                );
                assert_eq!(bcd.best.aggregators, cfg.prompts().aggregators);
            }
            _ => {
                assert!(
                    targets.iter().all(|t| t.starts_with("aggregator:")),
                    "{targets:?}"
                );
                assert_eq!(bcd.best.roles, cfg.prompts().roles);
            }
        }
    }
    // A call budget stops the optimizer between steps.
    let mut cfg = base.clone();
    cfg.optimizer.max_calls = Some(400);
    let bcd = Optimizer::new(&models, Arc::new(cfg), 9)
        .unwrap()
        .bcd(&sp.optimization)
        .await
        .unwrap();
    assert!(bcd.stop_reason.contains("budget"), "{}", bcd.stop_reason);
    // 320 rollout calls, then Phase A stops at the budget; the last prompts are scored once more.
    assert!(bcd.calls < 400 + 2 * 320, "{}", bcd.calls);
    assert_eq!(bcd.iterations.len(), 1);
}

/// Issue 17 item 1: a rollout served again from the cache (prompts unchanged: here no round
/// ever reaches `m`, so nothing is rewritten) is the same evidence, and the EMA counts it once.
/// Before the fix the second iteration observed the cached runs again and doubled the counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ema_counts_each_rollout_once() {
    use maslens_credit::config::Blocks;
    let qs = simulation::questions(80, 5);
    let sp = split(&qs, 40, Some(40), 5);
    let models = ModelSet::single(Arc::new(SimulatedMas::new(&qs)));
    let mut cfg = simulation::config(2, 0, 0).unwrap();
    cfg.optimizer.blocks = Blocks::AggregatorsOnly;
    cfg.optimizer.buffer_m = 100_000;
    cfg.optimizer.iterations = 3;
    cfg.optimizer.patience = 10;
    let bcd = Optimizer::new(&models, Arc::new(cfg), 5)
        .unwrap()
        .bcd(&sp.optimization)
        .await
        .unwrap();
    assert_eq!(bcd.iterations.len(), 3, "{}", bcd.stop_reason);
    let first = &bcd.iterations[0];
    assert!(first.rewrites.is_empty());
    assert!(
        first.informative_failures.iter().sum::<usize>() > 0,
        "the weak round must fail informatively: {:?}",
        first.informative_failures
    );
    for it in &bcd.iterations[1..] {
        assert_eq!(it.prompts, first.prompts);
        assert_eq!(
            it.informative_failures, first.informative_failures,
            "iteration {}",
            it.iteration
        );
        assert_eq!(it.ema_alpha, first.ema_alpha, "iteration {}", it.iteration);
    }
}

/// Answers every black-box proposal with something unparseable first, so each proposal takes
/// its repair call; everything else goes to the simulation.
struct NeedsRepair(SimulatedMas);

#[async_trait::async_trait]
impl maslens_llm::ChatModel for NeedsRepair {
    fn id(&self) -> &str {
        self.0.id()
    }
    async fn complete(
        &self,
        request: &maslens_llm::ChatRequest,
    ) -> Result<maslens_llm::ChatResponse, maslens_llm::LlmError> {
        let mut r = if request.stage == "blackbox/propose/repair" {
            // The repair answers what the simulation proposes for the original request.
            let mut original = request.clone();
            original
                .messages
                .truncate(request.messages.len().saturating_sub(2));
            original.stage = "blackbox/propose".into();
            original.template = "credit/blackbox_propose_input.v1".into();
            self.0.complete(&original).await?
        } else {
            self.0.complete(request).await?
        };
        if request.stage == "blackbox/propose" {
            r.text = "I would change the prompts.".into();
        }
        Ok(r)
    }
}

/// Issue 17 item 4: the black box is held to the calls it really spends (repairs included),
/// never more than the budget it is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_black_box_never_spends_more_than_its_budget() {
    let qs = simulation::questions(40, 3);
    let sp = split(&qs, 20, Some(20), 3);
    let models = ModelSet::single(Arc::new(NeedsRepair(SimulatedMas::new(&qs))));
    let cfg = Arc::new(simulation::config(2, 0, 0).unwrap());
    let first = Optimizer::new(&models, cfg.clone(), 3)
        .unwrap()
        .black_box(&sp.optimization, 0)
        .await
        .unwrap();
    let rollout = first.calls;
    let mut proposed = 0;
    for budget in rollout + 1..rollout * 4 {
        let bb = Optimizer::new(&models, cfg.clone(), 3)
            .unwrap()
            .black_box(&sp.optimization, budget)
            .await
            .unwrap();
        assert!(bb.calls <= budget, "budget {budget}: spent {}", bb.calls);
        assert_eq!(bb.invalid_proposals, 0, "every repaired proposal parses");
        proposed += bb.candidates.len() - 1;
    }
    assert!(proposed > 0, "the black box must get to propose");
}
