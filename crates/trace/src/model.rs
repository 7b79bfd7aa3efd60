//! Trace model types. These are the native on-disk format (JSON / JSONL), so they are a
//! stability boundary: fields are added, never renamed; `format_version` says which shape.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The native format version written in every trace.
pub const FORMAT_VERSION: u32 = 1;

fn format_version() -> u32 {
    FORMAT_VERSION
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// One execution of a multi-agent system on one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    /// Native format version (currently 1).
    #[serde(default = "format_version")]
    pub format_version: u32,
    /// Stable identifier, e.g. `Hand-Crafted/12` for Who&When, the record id for Aegis.
    pub id: String,
    /// Where the trace came from.
    #[serde(default, skip_serializing_if = "is_default")]
    pub source: Source,
    /// The task (user query) the system worked on.
    #[serde(default)]
    pub task: String,
    /// The reference answer, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ground_truth: Option<String>,
    /// Whether the system solved the task.
    #[serde(default)]
    pub outcome: Outcome,
    /// Agents taking part (normalized names).
    #[serde(default)]
    pub agents: Vec<Agent>,
    /// The steps, in source order. `steps[i].index == i` always holds for imported traces.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// Known labels and verdicts written back by methods.
    #[serde(default, skip_serializing_if = "is_default")]
    pub labels: Labels,
    /// Free metadata carried over from the source (e.g. Who&When `level`, Aegis `metadata`).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// Where a trace came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// Source format name: `whowhen`, `aegis`, `chat`, `native`, `debate`, ...
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub format: String,
    /// The file it was read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The record inside the file (line number, key), when the file holds several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<String>,
}

/// Task outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Success,
    Failure,
    #[default]
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Unknown => "unknown",
        }
    }
}

/// What kind of participant an agent is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    /// An LLM agent doing the work.
    #[default]
    Worker,
    /// An agent that plans and routes work to others (Magentic-One Orchestrator, managers).
    Orchestrator,
    /// A tool, code executor or terminal: it runs things, it does not reason.
    Tool,
    /// The human / user.
    Human,
}

impl AgentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Worker => "worker",
            AgentKind::Orchestrator => "orchestrator",
            AgentKind::Tool => "tool",
            AgentKind::Human => "human",
        }
    }
}

/// A participant in the trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// Normalized name; `Step::agent` refers to it.
    pub name: String,
    #[serde(default)]
    pub kind: AgentKind,
    /// Role description, when the source gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// System prompt, when the source gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
}

/// One step (turn) of the trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// 0-based position in the source history.
    pub index: usize,
    /// Normalized acting agent (a name in `Trace::agents`).
    pub agent: String,
    /// The raw speaker label as in the source, e.g. `Orchestrator (thought)`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub speaker: String,
    /// The message text.
    #[serde(default)]
    pub content: String,
    /// Tool calls made in this step, when known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result step: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Round number for round-based systems (debates), 0-based.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// Phase label, e.g. `reasoning`, `utterance`, `aggregation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Timestamp as given by the source (RFC 3339 preferred).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// Token count of the content, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// The OpenTelemetry span the step was read from (traces received over OTLP), so that a
    /// diagnosis can be written back onto that span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<SpanRef>,
}

/// An OpenTelemetry span: ids as lower-case hex, as OTLP/JSON and every tracing UI show them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpanRef {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits; none for a root span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
}

/// A tool call made by an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    /// Arguments as the source gave them (usually a JSON string).
    #[serde(default)]
    pub arguments: String,
}

/// Labels known for a trace (ground truth) and verdicts written back by methods.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Labels {
    /// The decisive failure (Who&When `mistake_agent`/`mistake_step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decisive: Option<DecisiveLabel>,
    /// Faulty agents with error modes (Aegis-Bench).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faulty_agents: Vec<FaultyAgent>,
    /// Implicit failures (MASIF).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub implicit: Vec<ImplicitLabel>,
    /// Verdicts written back by maslens methods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<Verdict>,
}

/// The decisive failure: the agent and earliest step whose error decided the failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisiveLabel {
    /// Normalized agent name, as labelled.
    pub agent: String,
    /// Step index into `Trace::steps`.
    pub step: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// An agent labelled faulty, with its error mode (Aegis-Bench).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultyAgent {
    pub agent: String,
    /// Error mode code, e.g. `FM-2.4` (MAST taxonomy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// An implicit failure: a local error that did not decide the outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImplicitLabel {
    pub step: usize,
    pub agent: String,
    /// Error type (one of the MASIF taxonomy's 8 types).
    pub error_type: String,
    /// Absorption label (one of MASIF's 6 labels), when classified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absorption: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A verdict written back by a maslens method, with its provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    /// Method that produced it, e.g. `locate/all-at-once`.
    pub method: String,
    /// Model spec, e.g. `local:smollm2-135m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Prompt template version(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_version: Option<String>,
    /// The primary answer: the responsible agent, which acts at `step` (crate::verdict's rule);
    /// `null` when the method gave no location.
    #[serde(default)]
    pub agent: Option<String>,
    /// The decisive step (source index) of the primary answer.
    #[serde(default)]
    pub step: Option<usize>,
    /// The method's probability for the primary pair, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
    /// Other (agent, step) answers, best first, each saying what it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<crate::verdict::Pick>,
    /// The method's agent-level and step-level answers apart (what the `independent` pair rule
    /// scores); absent for verdicts written before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heads: Option<crate::verdict::Heads>,
    /// The evidence for the primary answer in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    /// Why there is no primary answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abstain_reason: Option<String>,
    /// The maslens version (and git revision, when built from a checkout) that produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Method-specific payload.
    pub payload: serde_json::Value,
}

impl Verdict {
    /// A verdict with only its method, model, prompts and payload (no answer yet).
    pub fn new(method: impl Into<String>, payload: serde_json::Value) -> Verdict {
        Verdict {
            method: method.into(),
            model: None,
            prompt_version: None,
            agent: None,
            step: None,
            probability: None,
            alternatives: Vec::new(),
            heads: None,
            rationale: None,
            abstain_reason: None,
            revision: None,
            payload,
        }
    }

    /// Set the answer from [`Trace::resolve_answer`].
    pub fn with_answer(mut self, r: crate::verdict::Resolved) -> Verdict {
        if let Some(p) = r.primary {
            self.agent = Some(p.agent);
            self.step = Some(p.step);
            self.probability = p.probability;
        }
        self.alternatives = r.alternatives;
        self.heads = Some(r.heads);
        self
    }

    /// The verdict as JSON with the trace id (`trace`): what `maslens locate --json` prints, what
    /// `verdicts.jsonl` and a stored diagnosis' `result` hold.
    pub fn to_json(&self, trace: &str) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("trace".into(), trace.into());
        }
        v
    }

    /// The (agent, step) pair a report scores under `rule`: the primary pair, or the heads apart
    /// (falling back to the primary pair's part where a head is missing).
    pub fn scored(&self, rule: crate::verdict::ScoringRule) -> (Option<String>, Option<usize>) {
        match (rule, &self.heads) {
            (crate::verdict::ScoringRule::Independent, Some(h)) => (
                h.agent.clone().or_else(|| self.agent.clone()),
                h.step.or(self.step),
            ),
            _ => (self.agent.clone(), self.step),
        }
    }
}

impl Trace {
    /// A new empty trace with the given id.
    pub fn new(id: impl Into<String>) -> Self {
        Trace {
            format_version: FORMAT_VERSION,
            id: id.into(),
            source: Source::default(),
            task: String::new(),
            ground_truth: None,
            outcome: Outcome::Unknown,
            agents: Vec::new(),
            steps: Vec::new(),
            labels: Labels::default(),
            metadata: serde_json::Map::new(),
        }
    }

    /// The agent record for a name.
    pub fn agent(&self, name: &str) -> Option<&Agent> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// Kind of the named agent (Worker when unknown).
    pub fn agent_kind(&self, name: &str) -> AgentKind {
        self.agent(name).map(|a| a.kind).unwrap_or_default()
    }

    /// Add an agent if no agent of that name exists yet; returns its position.
    pub fn ensure_agent(&mut self, name: &str, kind: AgentKind) -> usize {
        if let Some(pos) = self.agents.iter().position(|a| a.name == name) {
            return pos;
        }
        self.agents.push(Agent {
            name: name.to_string(),
            kind,
            role: None,
            system_prompt: None,
        });
        self.agents.len() - 1
    }
}
