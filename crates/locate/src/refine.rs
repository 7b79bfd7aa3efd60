//! Adaptive Judge improvement (section 3.3): refinement instances z_q (eq. 5) and their export
//! as fine-tuning data.
//!
//! `z_q = {tau, q, i_hat, t_hat, {i_h, t_h, r_h, c_h}_h, i_eval, t_eval}` is kept as a
//! [`RefinementInstance`] (written to `instances.jsonl`, with the protocol that produced it).
//!
//! **Training examples** ([`protocol_examples`]): the Judge is taught in the protocol that
//! produced the instance, with that protocol's prompts exactly as at inference. The Judge's own
//! code runs against a teacher model (`Teacher`) that answers every call with what the verified
//! location implies: all-at-once one answer `{"reason", "agent": i_eval, "step": t_eval,
//! "confidence"}` (or one per window on traces too long for one prompt: outside the target's
//! window `in_window: false`); step-by-step one answer per reviewed step, `decisive: false` up to
//! t_eval and `true` at it; binary search one answer per round, the half holding t_eval. Each
//! call with its answer is one `{"messages": [system, user, assistant]}` example, and the run
//! must end at t_eval (checked). The teacher never calls the model; it only counts tokens and
//! reports the context window as the Judge model does, so long traces are cut as at inference.
//!
//! **What z_q puts into the target**: the reason of the decisive answer ([`zq_reason`]) tells
//! the Judge's hypothesis and the critiques as a check the Judge makes itself: "At first sight
//! step 5 (WebSurfer) looks decisive, but re-checking the earlier steps shows the mistake at
//! step 3: <the supporting Evaluators' rationales>. Step 7 was also considered: <the strongest
//! dissent>." (at most [`MAX_REASON_CHARS`], the Judge's own reason limit), naming only steps
//! the prompt shows (a step-by-step prefix never hears of later steps); step-by-step's answer at
//! a step the hypothesis or an Evaluator chose before t_eval says it looks wrong but does not
//! yet make the failure unavoidable. The confidence is the winner's share of the support. Eq. 6 runs the fine-tuned Judge
//! on (p, tau, q) alone, so the prompt stays the inference prompt: z_q goes into the answer.
//!
//! Files: `train.jsonl` with one `{"messages": [...]}` object per line (TRL's conversational
//! format; OpenAI fine-tuning), `trl/train.jsonl` (prompt-completion), `instances.jsonl` with
//! the z_q, `manifest.json`, and scripts. Variant III uses the gold labels instead of the
//! Evaluators ([`RefinementInstance::from_gold`]).

use crate::judge::{Protocol, Settings};
use crate::pipeline::LocateVerdict;
use crate::render::{self, MIN_STEP_CHARS};
use crate::{prompts, LocateError};
use maslens_llm::{ChatModel, ChatRequest, ChatResponse, LlmError, Usage};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::ops::Range;
use std::sync::Mutex;

/// Format of the exported refinement data (`manifest.json` and every line of
/// `instances.jsonl`). Version 1 (no `format_version`): one all-at-once example per instance
/// whose reason was the winners' rationales. Version 2: examples in the protocol that produced
/// the instance (several per instance for step-by-step and binary search), the Judge's
/// hypothesis and the critiques in the target's reason, `protocol` and `examples` on every
/// instance, `manifest.json`.
pub const EXPORT_FORMAT_VERSION: u32 = 2;

/// One Evaluator's part of z_q.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluatorRecord {
    pub style: String,
    pub agent: Option<String>,
    pub step: Option<usize>,
    pub rationale: String,
    pub confidence: f64,
}

fn format_v1() -> u32 {
    1
}

fn all_at_once() -> Protocol {
    Protocol::AllAtOnce
}

/// A refinement instance z_q plus the training target derived from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefinementInstance {
    /// [`EXPORT_FORMAT_VERSION`] of the export that wrote it (1 when absent).
    #[serde(default = "format_v1")]
    pub format_version: u32,
    pub trace: String,
    pub task: String,
    /// The Judge protocol that produced (i_hat, t_hat); the training examples use its prompts.
    #[serde(default = "all_at_once")]
    pub protocol: Protocol,
    /// Judge hypothesis (i_hat, t_hat), when the Judge gave one.
    pub judge_agent: Option<String>,
    pub judge_step: Option<usize>,
    pub evaluators: Vec<EvaluatorRecord>,
    /// (i_eval, t_eval), or the gold label for variant III.
    pub agent: String,
    pub step: usize,
    /// The target's reason: z_q's hypothesis and critiques ([`zq_reason`]).
    pub reason: String,
    pub confidence: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_mode: Option<String>,
    /// `verified` (Evaluator vote) or `gold` (variant III).
    pub target: String,
    /// Refinement round that produced it (1-based).
    pub round: u32,
    /// Training examples made from it (one per Judge call of its protocol).
    #[serde(default)]
    pub examples: usize,
}

/// Most characters kept in a target's reason (the Judge's own reason limit).
pub const MAX_REASON_CHARS: usize = crate::judge::REASON_MAX_CHARS;

/// `text` cut to at most `max` characters, with `...` when cut.
fn clip(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max.saturating_sub(3)).collect();
    s.push_str("...");
    s
}

/// A trailing full stop, unless the text ends in punctuation already.
fn sentence(text: &str) -> String {
    let t = text.trim();
    if t.is_empty() || t.ends_with(['.', '!', '?', ':', ')', '"']) {
        t.to_string()
    } else {
        format!("{t}.")
    }
}

/// The reason of the decisive answer, built from z_q: the Judge's hypothesis and how the
/// verification judged it, the rationales of the Evaluators that voted for (agent, step)
/// (highest confidence first, at most two, deduplicated), and the strongest dissent, within
/// [`MAX_REASON_CHARS`]. Written as the Judge's own check ("At first sight ... but ..."), since
/// the fine-tuned Judge answers without z_q (eq. 6).
///
/// `shown` is the range of step indices the prompt shows (`None`: the whole trace): the
/// hypothesis and the dissent are named only when their step is shown, so a step-by-step prefix
/// or a binary-search range never hears of steps it cannot see.
pub fn zq_reason(
    agent: &str,
    step: usize,
    hypothesis: Option<(&str, usize)>,
    evaluators: &[EvaluatorRecord],
    shown: Option<std::ops::RangeInclusive<usize>>,
) -> String {
    let visible = |t: usize| shown.as_ref().is_none_or(|r| r.contains(&t));
    let hypothesis = hypothesis.filter(|h| visible(h.1));
    let mut ranked: Vec<&EvaluatorRecord> = evaluators.iter().collect();
    ranked.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
    let mut support: Vec<&str> = Vec::new();
    for e in ranked
        .iter()
        .filter(|e| e.step == Some(step) && e.agent.as_deref() == Some(agent))
    {
        let r = e.rationale.trim();
        if !r.is_empty() && !support.contains(&r) && support.len() < 2 {
            support.push(r);
        }
    }
    let dissent = ranked.iter().find(|e| {
        e.step.is_some_and(|t| t != step && visible(t)) && !e.rationale.trim().is_empty()
    });
    let head = match hypothesis {
        Some((_, t)) if t == step => format!("Step {step} ({agent}) is decisive, and re-checking the steps before it finds no earlier mistake"),
        Some((a, t)) if t > step => format!("At first sight step {t} ({a}) looks decisive, but re-checking the earlier steps shows the mistake already at step {step} ({agent})"),
        Some((a, t)) => format!("At first sight step {t} ({a}) looks decisive, but it is not yet a mistake that makes the failure unavoidable; that happens at step {step} ({agent})"),
        None => format!("The decisive mistake is at step {step} ({agent})"),
    };
    let explanation = support
        .iter()
        .map(|r| sentence(r))
        .collect::<Vec<_>>()
        .join(" ");
    let mut dissent_text = dissent
        .map(|e| {
            format!(
                " Step {} was also considered: {}",
                e.step.unwrap_or_default(),
                e.rationale.trim()
            )
        })
        .unwrap_or_default();
    let mut room = MAX_REASON_CHARS.saturating_sub(head.chars().count() + 2);
    // The dissent gets at most a third of what the explanation leaves.
    let dissent_room = if explanation.is_empty() {
        room
    } else {
        (room / 3).min(dissent_text.chars().count())
    };
    dissent_text = if dissent_room >= 40 {
        sentence(&clip(&dissent_text, dissent_room))
    } else {
        String::new()
    };
    if !dissent_text.is_empty() {
        dissent_text.insert(0, ' ');
    }
    room = room.saturating_sub(dissent_text.chars().count());
    let reason = if explanation.is_empty() {
        format!("{}.{dissent_text}", head)
    } else {
        format!(
            "{head}: {}{dissent_text}",
            sentence(&clip(&explanation, room))
        )
    };
    clip(&reason, MAX_REASON_CHARS)
}

impl RefinementInstance {
    /// z_q from a verdict of the Verified variant; `None` when the vote produced no location.
    pub fn from_verdict(trace: &Trace, v: &LocateVerdict, round: u32) -> Option<Self> {
        let vote = v.vote.as_ref()?;
        let (agent, step) = vote.winner.clone()?;
        let judge = v.judge.as_ref().map(|j| &j.finding);
        let evaluators: Vec<EvaluatorRecord> = v
            .evaluators
            .iter()
            .map(|e| EvaluatorRecord {
                style: e.style.as_str().to_string(),
                agent: e.finding.agent.clone(),
                step: e.finding.step,
                rationale: e.finding.rationale.clone(),
                confidence: e.finding.confidence,
            })
            .collect();
        let reason = zq_reason(
            &agent,
            step,
            judge.and_then(|f| f.location()),
            &evaluators,
            None,
        );
        Some(RefinementInstance {
            format_version: EXPORT_FORMAT_VERSION,
            trace: trace.id.clone(),
            task: trace.task.clone(),
            protocol: v.protocol,
            judge_agent: judge.and_then(|f| f.agent.clone()),
            judge_step: judge.and_then(|f| f.step),
            evaluators,
            agent,
            step,
            reason,
            confidence: (vote.winner_share() * 100.0).round() / 100.0,
            error_mode: v.error_mode.clone(),
            target: "verified".into(),
            round,
            examples: 0,
        })
    }

    /// Variant III: the gold label as target (Who&When `decisive`, or the first Aegis faulty agent
    /// at its first step with its error mode), taught in `protocol`. `None` without labels.
    pub fn from_gold(trace: &Trace, protocol: Protocol, round: u32) -> Option<Self> {
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
            format_version: EXPORT_FORMAT_VERSION,
            trace: trace.id.clone(),
            task: trace.task.clone(),
            protocol,
            judge_agent: None,
            judge_step: None,
            evaluators: Vec::new(),
            agent,
            step,
            reason: clip(&reason, MAX_REASON_CHARS),
            confidence: 1.0,
            error_mode,
            target: "gold".into(),
            round,
            examples: 0,
        })
    }

    /// The all-at-once answer: the JSON the Judge is asked for, keys in the schema's order
    /// (reason first, as the backends write them).
    pub fn answer(&self) -> String {
        let mut fields = vec![
            ("reason", json!(self.reason)),
            ("agent", json!(self.agent)),
            ("step", json!(self.step)),
            ("confidence", json!(self.confidence)),
        ];
        if let Some(m) = &self.error_mode {
            fields.push(("error_mode", json!(m)));
        }
        ordered(&fields)
    }
}

/// A JSON object with its keys in the given order (serde_json's maps sort them).
fn ordered(fields: &[(&str, Value)]) -> String {
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", json!(k)))
        .collect();
    format!("{{{}}}", body.join(","))
}

/// Window budget of the all-at-once Judge (its `NOTES_RESERVE` of 400 tokens kept free for the
/// carried summaries); the teacher plans the same windows to know which one holds the target.
const WINDOW_NOTES_RESERVE: usize = 400;

/// The teacher: answers every Judge call of a protocol with what the instance's target implies
/// and records each call with its answer as a chat example. Token counts and the context window
/// are the Judge model's, so the prompts are cut exactly as at inference.
struct Teacher<'a> {
    model: &'a dyn ChatModel,
    trace: &'a Trace,
    inst: &'a RefinementInstance,
    settings: &'a Settings,
    /// Position of the target step in `trace.steps`.
    target: usize,
    state: Mutex<TeacherState>,
}

#[derive(Default)]
struct TeacherState {
    step_calls: usize,
    window_calls: usize,
    windows: Option<Vec<Range<usize>>>,
    range: Option<(usize, usize)>,
    last_answer: String,
    examples: Vec<Value>,
}

impl Teacher<'_> {
    fn excerpt(&self, pos: usize, max: usize) -> String {
        let text = self.trace.steps[pos].content.replace(['\n', '"'], " ");
        clip(&text, max)
    }

    /// The target's reason for a prompt showing the steps `shown` (indices).
    fn reason(&self, shown: std::ops::RangeInclusive<usize>) -> String {
        let i = self.inst;
        if i.target == "gold" {
            return i.reason.clone();
        }
        let hyp = i.judge_agent.as_deref().zip(i.judge_step);
        zq_reason(&i.agent, i.step, hyp, &i.evaluators, Some(shown))
    }

    fn location(&self, pos: usize, reason: &str, confidence: f64) -> Vec<(&'static str, Value)> {
        let s = &self.trace.steps[pos];
        let mut f = vec![
            ("reason", json!(reason)),
            ("agent", json!(s.agent)),
            ("step", json!(s.index)),
            ("confidence", json!(confidence)),
        ];
        if !self.settings.error_modes.is_empty() {
            if let Some(m) = &self.inst.error_mode {
                f.push(("error_mode", json!(m)));
            }
        }
        f
    }

    fn answer(&self, request: &ChatRequest, st: &mut TeacherState) -> Result<String, String> {
        let t = &request.template;
        let target = self.target;
        let trace = self.trace;
        let conf = self.inst.confidence;
        if t == prompts::JUDGE_ALL_AT_ONCE.name {
            return Ok(self.inst.answer());
        }
        if t == prompts::JUDGE_STEP.name {
            let pos = st.step_calls;
            st.step_calls += 1;
            let s = trace
                .steps
                .get(pos)
                .ok_or("more step-by-step calls than steps")?;
            let (reason, decisive) = if pos == target {
                (self.reason(trace.steps[0].index..=s.index), true)
            } else {
                let voiced = self.inst.judge_step == Some(s.index)
                    || self.inst.evaluators.iter().any(|e| e.step == Some(s.index));
                let why = if voiced {
                    format!(
                        "Step {} ({}) looks wrong (\"{}\"), but on re-checking it does not yet make the failure unavoidable.",
                        s.index,
                        s.agent,
                        self.excerpt(pos, 160)
                    )
                } else {
                    format!(
                        "Step {} ({}) does not make the failure unavoidable: \"{}\"",
                        s.index,
                        s.agent,
                        self.excerpt(pos, 200)
                    )
                };
                (clip(&why, MAX_REASON_CHARS), false)
            };
            return Ok(ordered(&[
                ("reason", json!(reason)),
                ("decisive", json!(decisive)),
                ("confidence", json!(conf)),
            ]));
        }
        if t == prompts::JUDGE_BINARY.name {
            let (lo, hi) = st.range.unwrap_or((0, trace.steps.len().saturating_sub(1)));
            if lo >= hi || target < lo || target > hi {
                return Err(format!("binary search range {lo}..={hi} lost the target"));
            }
            let mid = lo + (hi - lo) / 2;
            let first = target <= mid;
            st.range = Some(if first { (lo, mid) } else { (mid + 1, hi) });
            let (a, b) = if first { (lo, mid) } else { (mid + 1, hi) };
            let reason = clip(
                &format!(
                    "The decisive mistake lies in steps {} to {}. {}",
                    trace.steps[a].index,
                    trace.steps[b].index,
                    self.reason(trace.steps[lo].index..=trace.steps[hi].index)
                ),
                MAX_REASON_CHARS,
            );
            return Ok(ordered(&[
                ("reason", json!(reason)),
                ("part", json!(if first { "first" } else { "second" })),
                ("confidence", json!(conf)),
            ]));
        }
        if t == prompts::JUDGE_WINDOW.name {
            let windows = st.windows.get_or_insert_with(|| {
                let n = trace.steps.len();
                let budget = crate::judge::budget(self.model, trace, self.settings)
                    .unwrap_or(usize::MAX)
                    .saturating_sub(WINDOW_NOTES_RESERVE)
                    .max(64);
                render::windows(self.model, trace, 0..n, budget, MIN_STEP_CHARS)
                    .into_iter()
                    .map(|(r, _)| r)
                    .collect()
            });
            let k = st.window_calls;
            st.window_calls += 1;
            let range = windows
                .get(k)
                .cloned()
                .ok_or("more window calls than windows")?;
            let (lo, hi) = (
                trace.steps[range.start].index,
                trace.steps[range.end - 1].index,
            );
            let inside = range.contains(&target);
            let mut f = if inside {
                self.location(target, &self.reason(lo..=hi), conf)
            } else {
                let pos = range.end - 1;
                let why = format!(
                    "No step from {lo} to {hi} makes the failure unavoidable; the closest candidate is step {} (\"{}\").",
                    trace.steps[pos].index,
                    self.excerpt(pos, 160)
                );
                self.location(pos, &clip(&why, MAX_REASON_CHARS), 0.0)
            };
            f.push(("in_window", json!(inside)));
            let summary = if inside {
                format!(
                    "Steps {lo}-{hi}: the decisive mistake is at step {}.",
                    self.inst.step
                )
            } else {
                format!("Steps {lo}-{hi}: no decisive mistake.")
            };
            f.push(("summary", json!(summary)));
            return Ok(ordered(&f));
        }
        if t == maslens_llm::typed::REPAIR.name {
            // The answer parser's one repair call (its check doubted the answer): the same
            // answer again, which the parser keeps; only first answers become examples.
            return Ok(st.last_answer.clone());
        }
        Err(format!("no teacher answer for template {t:?}"))
    }
}

#[async_trait::async_trait]
impl ChatModel for Teacher<'_> {
    fn id(&self) -> &str {
        self.model.id()
    }
    fn context_size(&self) -> Option<usize> {
        self.model.context_size()
    }
    fn count_tokens(&self, text: &str) -> usize {
        self.model.count_tokens(text)
    }
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let mut st = self
            .state
            .lock()
            .map_err(|_| LlmError::Other("refinement teacher: poisoned state".into()))?;
        let text = self.answer(request, &mut st).map_err(|e| {
            LlmError::Other(format!("refinement teacher, trace {}: {e}", self.trace.id))
        })?;
        if request.template != maslens_llm::typed::REPAIR.name {
            let mut messages: Vec<Value> = request
                .messages
                .iter()
                .map(|m| json!({"role": m.role, "content": m.content}))
                .collect();
            messages.push(json!({"role": "assistant", "content": text}));
            st.examples.push(json!({ "messages": messages }));
            st.last_answer = text.clone();
        }
        Ok(ChatResponse {
            text,
            finish_reason: "stop".into(),
            usage: Usage::default(),
            latency_ms: 0,
            from_cache: false,
            queue: Default::default(),
        })
    }
}

/// The training examples of an instance: every Judge call of `inst.protocol` on `trace`, with
/// the prompts exactly as the Judge sends them with `model`'s context window and `settings`,
/// answered with what the target implies (module docs). Each example is
/// `{"messages": [system, user, assistant]}`. Fails when the protocol's run does not end at
/// the target (it always should).
pub async fn protocol_examples(
    model: &dyn ChatModel,
    trace: &Trace,
    inst: &RefinementInstance,
    settings: &Settings,
) -> Result<Vec<Value>, LocateError> {
    let target = trace
        .position_of(inst.step)
        .ok_or_else(|| LocateError::Llm {
            trace: trace.id.clone(),
            source: LlmError::Other(format!("target step {} is not in the trace", inst.step)),
        })?;
    let teacher = Teacher {
        model,
        trace,
        inst,
        settings,
        target,
        state: Mutex::new(TeacherState::default()),
    };
    let result = crate::judge::judge(&teacher, trace, inst.protocol, settings).await?;
    if result.finding.step != Some(inst.step) {
        return Err(LocateError::Llm {
            trace: trace.id.clone(),
            source: LlmError::Other(format!(
                "the {} examples end at step {:?}, not at the target step {}",
                inst.protocol.as_str(),
                result.finding.step,
                inst.step
            )),
        });
    }
    let st = teacher.state.into_inner().map_err(|_| LocateError::Llm {
        trace: trace.id.clone(),
        source: LlmError::Other("refinement teacher: poisoned state".into()),
    })?;
    Ok(st.examples)
}

/// `manifest.json` of a refinement export: what the data is, how it was made, and what a
/// fine-tuned Judge must be evaluated on to stay disjoint from it (`traces`). Read back by
/// `maslens eval locate --variant judge-ft --finetuned-on DIR`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefinementManifest {
    /// [`EXPORT_FORMAT_VERSION`].
    pub format_version: u32,
    pub maslens_version: String,
    pub round: u32,
    /// `verified` (AgentLocate) or `gold` (the paper's Variant III).
    pub targets: String,
    /// The Judge protocol of the examples (and of the evaluation that matches them).
    pub protocol: Protocol,
    /// The model that produced the data (the Judge before fine-tuning; its tokenizer counted).
    pub judge_model: String,
    /// Its context window, when known: the prompts were cut to fit it, and `evaluate.sh` passes
    /// it on (`--context-size`) so the fine-tuned Judge's prompts are cut the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_size: Option<usize>,
    /// The base model named in the training command.
    pub base_model: String,
    /// Where the training command writes the adapter.
    pub adapter_dir: String,
    /// The dataset spec, split, seed and subset of the run that exported the data.
    pub dataset: String,
    pub split: Option<f64>,
    pub seed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset: Option<String>,
    /// Settings the prompts were rendered with (reference answer, error modes, answer tokens).
    pub settings: Settings,
    pub instances: usize,
    pub examples: usize,
    pub longest_example_tokens: usize,
    pub max_length: usize,
    /// Ids of the refinement traces: an evaluation of the fine-tuned Judge must not include them.
    pub traces: Vec<String>,
}

impl RefinementManifest {
    /// Read `DIR/manifest.json`; errors name the file and what is wrong.
    pub fn read(dir: &std::path::Path) -> Result<Self, String> {
        let path = dir.join("manifest.json");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "{}: {e} (a directory written by `maslens eval locate --export-refinement`, format 2 or later)",
                path.display()
            )
        })?;
        let m: RefinementManifest = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a refinement manifest: {e}", path.display()))?;
        if m.format_version > EXPORT_FORMAT_VERSION {
            return Err(format!(
                "{}: format_version {} is newer than this maslens reads ({EXPORT_FORMAT_VERSION})",
                path.display(),
                m.format_version
            ));
        }
        Ok(m)
    }

    /// Which of the paper's outputs a Judge fine-tuned on this data gives.
    pub fn paper_output(&self) -> &'static str {
        if self.targets == "gold" {
            "Variant III (the Judge fine-tuned on the gold labels)"
        } else {
            "AgentLocate (the Judge fine-tuned on the Evaluator-verified instances, eq. 6)"
        }
    }
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
    use crate::test_support::{long_trace, trace, ContextFixture};
    use crate::{LocateConfig, Locator, Style};
    use maslens_llm::testing::ScriptedModel;
    use maslens_trace::DecisiveLabel;

    fn verified_instance(t: &Trace) -> (ScriptedModel, RefinementInstance) {
        let m = ScriptedModel::new("fixture")
            .on(
                "locate/judge_all_at_once",
                r#"{"reason":"the message gives no total for the task","agent":"A1","step":3,"confidence":0.7}"#,
            )
            .on(
                "locate/evaluator_base",
                r#"{"reason":"the message plans without checking the data","agent":"A0","step":2,"confidence":0.6}"#,
            )
            .on(
                "locate/evaluator_concise",
                r#"{"reason":"the message skips the needed total","agent":"A0","step":2,"confidence":0.9}"#,
            )
            .on(
                "locate/evaluator_evidence",
                r#"{"reason":"the message repeats an earlier guess","agent":"A1","step":3,"confidence":0.5}"#,
            );
        let v =
            block_on(Locator::new(&m, &Style::defaults(), LocateConfig::default()).locate(t, None))
                .unwrap();
        let inst = RefinementInstance::from_verdict(t, &v, 1).unwrap();
        (m, inst)
    }

    /// Runs a future to completion on a fresh current-thread runtime (the fixtures are sync).
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn answer_of(ex: &Value) -> Value {
        let msgs = ex["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[2]["role"], "assistant");
        serde_json::from_str(msgs[2]["content"].as_str().unwrap()).unwrap()
    }

    #[test]
    fn instance_from_verdict_puts_the_hypothesis_and_critiques_into_the_target() {
        let t = trace(5);
        let (m, inst) = verified_instance(&t);
        assert_eq!((inst.agent.as_str(), inst.step), ("A0", 2));
        assert_eq!(
            (inst.judge_agent.as_deref(), inst.judge_step),
            (Some("A1"), Some(3))
        );
        assert_eq!(
            (inst.format_version, inst.protocol),
            (2, Protocol::AllAtOnce)
        );
        // Issue 17 item 7: z_q's hypothesis, the supporting rationales and the dissent, not
        // only the winners' rationales ("step 2 wrong plan was wrong" before).
        assert_eq!(
            inst.reason,
            "At first sight step 3 (A1) looks decisive, but re-checking the earlier steps shows \
             the mistake already at step 2 (A0): the message skips the needed total. the message \
             plans without checking the data. Step 3 was also considered: the message repeats an \
             earlier guess."
        );
        assert_eq!(inst.evaluators.len(), 3);
        assert!((inst.confidence - 0.75).abs() < 1e-9); // 1.5 / 2.0
        let ex = block_on(protocol_examples(&m, &t, &inst, &Settings::default())).unwrap();
        assert_eq!(ex.len(), 1, "all-at-once: one call");
        let text = ex[0]["messages"][2]["content"].as_str().unwrap();
        assert!(text.starts_with(r#"{"reason":"#), "schema order: {text}");
        let answer = answer_of(&ex[0]);
        assert_eq!(
            (answer["step"].as_u64(), answer["agent"].as_str()),
            (Some(2), Some("A0"))
        );
        // The user prompt is the inference prompt of the all-at-once Judge.
        assert_eq!(
            ex[0]["messages"][1]["content"],
            json!(m.calls.lock().unwrap()[0].messages[1].content)
        );
        assert_eq!(
            ex[0].as_object().unwrap().len(),
            1,
            "only `messages` (OpenAI rejects extra keys)"
        );
    }

    #[test]
    fn zq_reason_names_only_the_steps_a_prompt_shows_and_stays_within_the_limit() {
        let evals = vec![
            EvaluatorRecord {
                style: "base".into(),
                agent: Some("A0".into()),
                step: Some(2),
                rationale: "x".repeat(900),
                confidence: 0.9,
            },
            EvaluatorRecord {
                style: "concise".into(),
                agent: Some("A1".into()),
                step: Some(5),
                rationale: "the answer was never checked".into(),
                confidence: 0.4,
            },
        ];
        let all = zq_reason("A0", 2, Some(("A1", 5)), &evals, None);
        assert!(all.chars().count() <= MAX_REASON_CHARS, "{}", all.len());
        assert!(
            all.starts_with("At first sight step 5 (A1)")
                && all.contains("Step 5 was also considered")
        );
        let prefix = zq_reason("A0", 2, Some(("A1", 5)), &evals, Some(0..=2));
        assert!(
            !prefix.contains("step 5") && !prefix.contains("Step 5"),
            "{prefix}"
        );
        assert!(prefix.starts_with("The decisive mistake is at step 2 (A0)"));
    }

    #[test]
    fn step_by_step_examples_are_the_judges_own_calls_up_to_the_target() {
        let t = trace(6);
        let (_, mut inst) = verified_instance(&t);
        inst.protocol = Protocol::StepByStep;
        let model = ScriptedModel::new("fixture");
        let ex = block_on(protocol_examples(&model, &t, &inst, &Settings::default())).unwrap();
        // Steps 0, 1 reviewed and cleared, step 2 flagged: three calls, three examples.
        let decisive: Vec<bool> = ex
            .iter()
            .map(|e| answer_of(e)["decisive"].as_bool().unwrap())
            .collect();
        assert_eq!(decisive, [false, false, true]);
        // The prompts are the step-by-step Judge's: replay them through the real protocol.
        let no = r#"{"reason":"fine","decisive":false,"confidence":0.9}"#;
        let yes = r#"{"reason":"bad","decisive":true,"confidence":0.9}"#;
        let judge = ScriptedModel::new("fixture").then(no).then(no).then(yes);
        block_on(crate::judge::judge(
            &judge,
            &t,
            Protocol::StepByStep,
            &Settings::default(),
        ))
        .unwrap();
        let calls = judge.calls.lock().unwrap();
        for (e, c) in ex.iter().zip(calls.iter()) {
            assert_eq!(e["messages"][0]["content"], json!(c.messages[0].content));
            assert_eq!(e["messages"][1]["content"], json!(c.messages[1].content));
        }
        // The flagged step's reason never names the later hypothesis (step 3) the prefix hides.
        let reason = answer_of(&ex[2])["reason"].as_str().unwrap().to_string();
        assert!(
            !reason.contains("step 3") && !reason.contains("Step 3"),
            "{reason}"
        );
    }

    #[test]
    fn binary_search_examples_follow_the_halves_that_hold_the_target() {
        let t = trace(8);
        let (_, mut inst) = verified_instance(&t);
        inst.protocol = Protocol::BinarySearch;
        let model = ScriptedModel::new("fixture");
        let ex = block_on(protocol_examples(&model, &t, &inst, &Settings::default())).unwrap();
        // 0..=7 (mid 3) -> first 0..=3 (mid 1) -> second 2..=3 (mid 2) -> first: step 2.
        let parts: Vec<String> = ex
            .iter()
            .map(|e| answer_of(e)["part"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(parts, ["first", "second", "first"]);
        assert!(ex[2]["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("\"first\": steps 2 to 2"));
    }

    #[test]
    fn window_examples_flag_only_the_window_that_holds_the_target() {
        // 40 long steps in a 2,048-token window: all-at-once runs over windows.
        let mut t = long_trace(40, 1200);
        t.labels.decisive = Some(DecisiveLabel {
            agent: "A1".into(),
            step: 31,
            reason: Some("the lookup used the wrong table".into()),
        });
        let inst = RefinementInstance::from_gold(&t, Protocol::AllAtOnce, 1).unwrap();
        let model = ContextFixture::new(ScriptedModel::new("fixture"), 2048);
        let ex = block_on(protocol_examples(&model, &t, &inst, &Settings::default())).unwrap();
        assert!(
            ex.len() > 1,
            "windows expected, got {} example(s)",
            ex.len()
        );
        let flags: Vec<bool> = ex
            .iter()
            .map(|e| answer_of(e)["in_window"].as_bool().unwrap())
            .collect();
        assert_eq!(flags.iter().filter(|f| **f).count(), 1);
        assert!(
            *flags.last().unwrap(),
            "the run stops at the target's window"
        );
        let last = answer_of(ex.last().unwrap());
        assert_eq!(last["step"], 31);
        for e in &ex {
            let toks: usize = e["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| model.count_tokens(m["content"].as_str().unwrap()))
                .sum();
            assert!(
                toks <= 2048,
                "every example fits the window as at inference: {toks}"
            );
        }
    }

    #[test]
    fn gold_instance_and_trl_command() {
        let mut t = trace(4);
        assert!(RefinementInstance::from_gold(&t, Protocol::AllAtOnce, 1).is_none());
        t.labels.decisive = Some(DecisiveLabel {
            agent: "A1".into(),
            step: 3,
            reason: Some("wrong".into()),
        });
        let g = RefinementInstance::from_gold(&t, Protocol::StepByStep, 1).unwrap();
        assert_eq!(g.protocol, Protocol::StepByStep);
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
