//! Adaptive Judge improvement (section 3.3): refinement instances z_q (eq. 5) and their export
//! as chat-format fine-tuning data.
//!
//! `z_q = {tau, q, i_hat, t_hat, {i_h, t_h, r_h, c_h}_h, i_eval, t_eval}` is kept as a
//! [`RefinementInstance`] (written to `instances.jsonl`). The training example is the Judge's
//! all-at-once prompt for the trace (exactly as at inference: same system message, context and
//! instructions), and as the assistant answer the aggregated verdict
//! `{"reason", "agent": i_eval, "step": t_eval, "confidence"}`, whose reason is distilled from the
//! Evaluators that voted for (i_eval, t_eval) (highest confidence first, at most two, deduplicated)
//! and whose confidence is the winner's share of the total support.
//!
//! Files: `train.jsonl` with one `{"messages": [...]}` object per line, which TRL's SFTTrainer
//! (conversational format) and OpenAI fine-tuning both accept; `instances.jsonl` with the z_q;
//! `trl_sft.sh` with the paper's LoRA settings. Variant III uses the gold labels instead of the
//! Evaluators ([`RefinementInstance::from_gold`]).

use crate::judge::Settings;
use crate::pipeline::LocateVerdict;
use crate::render::{self, MIN_STEP_CHARS};
use crate::{prompts, LocateError};
use maslens_llm::ChatModel;
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One Evaluator's part of z_q.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluatorRecord {
    pub style: String,
    pub agent: Option<String>,
    pub step: Option<usize>,
    pub rationale: String,
    pub confidence: f64,
}

/// A refinement instance z_q plus the training target derived from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefinementInstance {
    pub trace: String,
    pub task: String,
    /// Judge hypothesis (i_hat, t_hat), when the Judge gave one.
    pub judge_agent: Option<String>,
    pub judge_step: Option<usize>,
    pub evaluators: Vec<EvaluatorRecord>,
    /// (i_eval, t_eval), or the gold label for variant III.
    pub agent: String,
    pub step: usize,
    /// Distilled rationale of the target.
    pub reason: String,
    pub confidence: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_mode: Option<String>,
    /// `verified` (Evaluator vote) or `gold` (variant III).
    pub target: String,
    /// Refinement round that produced it (1-based).
    pub round: u32,
}

/// Most characters kept in a distilled rationale.
pub const MAX_REASON_CHARS: usize = 600;

impl RefinementInstance {
    /// z_q from a Full-variant verdict; `None` when the vote produced no location.
    pub fn from_verdict(trace: &Trace, v: &LocateVerdict, round: u32) -> Option<Self> {
        let vote = v.vote.as_ref()?;
        let (agent, step) = vote.winner.clone()?;
        let mut supporters: Vec<_> = v
            .evaluators
            .iter()
            .filter(|e| e.finding.location() == Some((agent.as_str(), step)))
            .collect();
        supporters.sort_by(|a, b| b.finding.confidence.total_cmp(&a.finding.confidence));
        let mut parts: Vec<&str> = Vec::new();
        for e in &supporters {
            let r = e.finding.rationale.trim();
            if !r.is_empty() && !parts.contains(&r) && parts.len() < 2 {
                parts.push(r);
            }
        }
        let mut reason: String = parts.join(" ").chars().take(MAX_REASON_CHARS).collect();
        if reason.is_empty() {
            reason = format!("The decisive mistake is made by {agent} at step {step}.");
        }
        let judge = v.judge.as_ref().map(|j| &j.finding);
        Some(RefinementInstance {
            trace: trace.id.clone(),
            task: trace.task.clone(),
            judge_agent: judge.and_then(|f| f.agent.clone()),
            judge_step: judge.and_then(|f| f.step),
            evaluators: v
                .evaluators
                .iter()
                .map(|e| EvaluatorRecord {
                    style: e.style.as_str().to_string(),
                    agent: e.finding.agent.clone(),
                    step: e.finding.step,
                    rationale: e.finding.rationale.clone(),
                    confidence: e.finding.confidence,
                })
                .collect(),
            agent,
            step,
            reason,
            confidence: (vote.winner_share() * 100.0).round() / 100.0,
            error_mode: v.error_mode.clone(),
            target: "verified".into(),
            round,
        })
    }

    /// Variant III: the gold label as target (Who&When `decisive`, or the first Aegis faulty agent
    /// at its first step with its error mode). `None` without labels.
    pub fn from_gold(trace: &Trace, round: u32) -> Option<Self> {
        let (agent, step, reason, error_mode) = if let Some(d) = &trace.labels.decisive {
            (
                d.agent.clone(),
                d.step,
                d.reason.clone().unwrap_or_default(),
                None,
            )
        } else {
            let f = trace.labels.faulty_agents.first()?;
            let pos = trace
                .steps
                .iter()
                .position(|s| s.agent.eq_ignore_ascii_case(&f.agent))?;
            (
                trace.steps[pos].agent.clone(),
                trace.steps[pos].index,
                f.description.clone().unwrap_or_default(),
                f.error_mode.clone(),
            )
        };
        let reason = if reason.trim().is_empty() {
            format!("The decisive mistake is made by {agent} at step {step}.")
        } else {
            reason
        };
        Some(RefinementInstance {
            trace: trace.id.clone(),
            task: trace.task.clone(),
            judge_agent: None,
            judge_step: None,
            evaluators: Vec::new(),
            agent,
            step,
            reason: reason.chars().take(MAX_REASON_CHARS).collect(),
            confidence: 1.0,
            error_mode,
            target: "gold".into(),
            round,
        })
    }

    /// The assistant answer: the JSON the Judge is asked for.
    pub fn answer(&self) -> Value {
        let mut a = json!({"reason": self.reason, "agent": self.agent, "step": self.step, "confidence": self.confidence});
        if let Some(m) = &self.error_mode {
            a["error_mode"] = json!(m);
        }
        a
    }
}

/// The chat-format training example `{"messages": [system, user, assistant]}` for an instance:
/// the all-at-once Judge prompt exactly as at inference with `model`'s context window.
pub fn chat_example(
    model: &dyn ChatModel,
    trace: &Trace,
    inst: &RefinementInstance,
    settings: &Settings,
) -> Result<Value, LocateError> {
    let n = trace.steps.len();
    let budget = crate::judge::budget(model, trace, settings);
    // Same rendering as the all-at-once Judge; traces too long even for truncation are
    // exported with the minimum cap (the fine-tuning framework's max length applies).
    let text = match render::fit(model, trace, 0..n, budget, MIN_STEP_CHARS) {
        Some(f) => f.text,
        None => render::render_steps(trace, 0..n, Some(MIN_STEP_CHARS)).0,
    };
    let ctx = prompts::context(trace, &text, None, settings.with_ground_truth)?;
    let instr = prompts::JUDGE_ALL_AT_ONCE.rendered(json!({"criterion": prompts::criterion()?, "error_modes": crate::error_mode_lines(&settings.error_modes)}))?;
    let req = prompts::request(&ctx, &instr, settings.max_answer_tokens, "refine")?;
    let mut messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    messages.push(json!({"role": "assistant", "content": inst.answer().to_string()}));
    Ok(json!({"messages": messages}))
}

/// LoRA settings of the paper (section 4.1): rank 64, alpha 128, dropout 0.05, 3 epochs,
/// effective batch 16 (= per-device 4 x gradient accumulation 4 on one device).
pub const LORA_R: u32 = 64;
pub const LORA_ALPHA: u32 = 128;
pub const LORA_DROPOUT: f64 = 0.05;
pub const EPOCHS: u32 = 3;
pub const PER_DEVICE_BATCH: u32 = 4;
pub const GRAD_ACCUM: u32 = 4;

/// The TRL form of a chat example: `{"prompt": [system, user], "completion": [assistant]}`.
/// On a prompt-completion dataset TRL's SFTTrainer computes the loss on the completion only
/// (`completion_only_loss`, its default), so the Judge learns the answer, not the trace.
pub fn trl_example(chat: &Value) -> Value {
    let msgs = chat["messages"].as_array().cloned().unwrap_or_default();
    let (prompt, completion) = msgs.split_at(msgs.len().saturating_sub(1));
    json!({"prompt": prompt, "completion": completion})
}

/// Tokens of a chat example as `model` counts them (messages' contents plus 8 per message for
/// the chat template's role markers).
pub fn example_tokens(model: &dyn ChatModel, chat: &Value) -> usize {
    chat["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|x| model.count_tokens(x["content"].as_str().unwrap_or("")) + 8)
                .sum()
        })
        .unwrap_or(0)
}

/// `--max_length` for examples of at most `longest` tokens: 10% margin (the base model's
/// tokenizer is not the one that counted), rounded up to a multiple of 256, never below TRL's
/// default of 1024. TRL cuts longer examples from the end, which would cut the answer off.
pub fn max_length_for(longest: usize) -> usize {
    (longest + longest / 10).div_ceil(256).max(4) * 256
}

/// A ready-to-run `trl sft` command over a directory holding the prompt-completion
/// `train.jsonl` ([`trl_example`]), with `--max_length` from the data ([`max_length_for`]).
pub fn trl_command(
    dataset_dir: &str,
    base_model: &str,
    output_dir: &str,
    max_length: usize,
) -> String {
    format!(
        "trl sft \\\n  --model_name_or_path {base_model} \\\n  --dataset_name {dataset_dir} \\\n  --max_length {max_length} \\\n  --completion_only_loss true \\\n  --use_peft \\\n  --lora_r {LORA_R} \\\n  --lora_alpha {LORA_ALPHA} \\\n  --lora_dropout {LORA_DROPOUT} \\\n  --lora_target_modules all-linear \\\n  --num_train_epochs {EPOCHS} \\\n  --per_device_train_batch_size {PER_DEVICE_BATCH} \\\n  --gradient_accumulation_steps {GRAD_ACCUM} \\\n  --learning_rate 2e-4 \\\n  --output_dir {output_dir}\n"
    )
}

/// OpenAI fine-tuning equivalent (hyperparameters as close as the platform allows).
pub fn openai_command(train_file: &str, base_model: &str) -> String {
    format!(
        "# upload, then create the job (OpenAI platform; LoRA rank is not exposed there)\n\
         openai api files.create -f {train_file} -p fine-tune\n\
         # then: POST /v1/fine_tuning/jobs {{\"model\": \"{base_model}\", \"training_file\": \"<file id>\", \"hyperparameters\": {{\"n_epochs\": {EPOCHS}, \"batch_size\": {}}}}}\n",
        PER_DEVICE_BATCH * GRAD_ACCUM
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::trace;
    use crate::{LocateConfig, Locator, Style};
    use maslens_llm::testing::ScriptedModel;
    use maslens_trace::DecisiveLabel;

    #[tokio::test]
    async fn instance_from_verdict_distils_supporting_rationales() {
        let t = trace(5);
        let m = ScriptedModel::new("fixture")
            .on(
                "locate/judge_all_at_once",
                r#"{"reason":"j","agent":"A1","step":3,"confidence":0.7}"#,
            )
            .on(
                "locate/evaluator_base",
                r#"{"reason":"plan was wrong","agent":"A0","step":2,"confidence":0.6}"#,
            )
            .on(
                "locate/evaluator_concise",
                r#"{"reason":"step 2 wrong","agent":"A0","step":2,"confidence":0.9}"#,
            )
            .on(
                "locate/evaluator_evidence",
                r#"{"reason":"late","agent":"A1","step":3,"confidence":0.5}"#,
            );
        let v = Locator::new(&m, &Style::defaults(), LocateConfig::default())
            .locate(&t, None)
            .await
            .unwrap();
        let inst = RefinementInstance::from_verdict(&t, &v, 1).unwrap();
        assert_eq!((inst.agent.as_str(), inst.step), ("A0", 2));
        assert_eq!(
            (inst.judge_agent.as_deref(), inst.judge_step),
            (Some("A1"), Some(3))
        );
        assert_eq!(inst.reason, "step 2 wrong plan was wrong");
        assert_eq!(inst.evaluators.len(), 3);
        assert!((inst.confidence - 0.75).abs() < 1e-9); // 1.5 / 2.0
        let ex = chat_example(&m, &t, &inst, &Settings::default()).unwrap();
        let msgs = ex["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[0]["role"], "system");
        assert_eq!(msgs[2]["role"], "assistant");
        let answer: Value = serde_json::from_str(msgs[2]["content"].as_str().unwrap()).unwrap();
        assert_eq!(answer["step"], 2);
        // The user prompt is the inference prompt of the all-at-once Judge.
        assert_eq!(
            msgs[1]["content"],
            json!(m.calls.lock().unwrap()[0].messages[1].content)
        );
        assert_eq!(
            ex.as_object().unwrap().len(),
            1,
            "only `messages` (OpenAI rejects extra keys)"
        );
    }

    #[test]
    fn gold_instance_and_trl_command() {
        let mut t = trace(4);
        assert!(RefinementInstance::from_gold(&t, 1).is_none());
        t.labels.decisive = Some(DecisiveLabel {
            agent: "A1".into(),
            step: 3,
            reason: Some("wrong".into()),
        });
        let g = RefinementInstance::from_gold(&t, 1).unwrap();
        assert_eq!(
            (g.agent.as_str(), g.step, g.target.as_str()),
            ("A1", 3, "gold")
        );
        let cmd = trl_command("out/round1", "Qwen/Qwen2.5-7B-Instruct", "out/lora1", 4096);
        assert!(cmd.contains("--max_length 4096") && cmd.contains("--completion_only_loss true"));
        assert_eq!(max_length_for(100), 1024);
        assert_eq!(max_length_for(3000), 3328);
        let ex = json!({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]});
        let trl = trl_example(&ex);
        assert_eq!(trl["prompt"].as_array().unwrap().len(), 2);
        assert_eq!(trl["completion"][0]["role"], "assistant");
        for flag in [
            "--lora_r 64",
            "--lora_alpha 128",
            "--lora_dropout 0.05",
            "--num_train_epochs 3",
            "--per_device_train_batch_size 4",
            "--gradient_accumulation_steps 4",
            "--use_peft",
        ] {
            assert!(cmd.contains(flag), "{flag}");
        }
    }
}
