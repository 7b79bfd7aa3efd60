//! Run-level warnings computed at assembly: what maslens could not understand about a run, with
//! the fix when one is known. They go in the trace's metadata as `otel_warnings`
//! ([`maslens_trace::warnings`], absent when there is none): `no_steps` (no model call or tool
//! execution among the spans), `no_content` (steps, but no message text or tool call in any),
//! `no_output` (there is content, but some model steps record no output: LlamaIndex's own exporter
//! on streamed calls), `agents_from_service` (no span names an agent: every model step is
//! credited to the service).

use maslens_trace::{AgentKind, RunWarning, Trace};

/// The fix for a run whose spans carry no messages: each instrumentation's switch.
const CONTENT_FIX: &str = "turn message capture on: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true \
(Google ADK: SPAN_ONLY); for OpenInference, unset OPENINFERENCE_HIDE_INPUTS / OPENINFERENCE_HIDE_OUTPUTS; \
pydantic-ai: InstrumentationSettings(include_content=True)";

/// The fix for a run with no model or tool span: the instrumentation that emits them.
const STEPS_FIX: &str = "instrument the framework's model calls: its OpenInference instrumentor \
(openinference-instrumentation-<framework>) or its native GenAI instrumentation (docs/frameworks/)";

/// The fix for model calls whose output is not recorded. The one known cause is named; a model
/// can also answer with nothing.
const OUTPUT_FIX: &str = "if the spans come from LlamaIndex's own exporter (llama-index-observability-otel), \
it drops the answer of a streamed model call: FunctionAgent(..., streaming=False), or trace with OpenInference's \
LlamaIndexInstrumentor (openinference-instrumentation-llama-index; docs/frameworks/llamaindex.md); otherwise \
the model answered with nothing, or the instrumentation does not capture outputs (docs/frameworks/)";

/// The fix for agents that no span names.
const AGENTS_FIX: &str =
    "set gen_ai.agent.name on the model spans or trace agents with an instrumentor \
that emits invoke_agent / AGENT spans (docs/frameworks/)";

fn warning(code: &str, message: String, fix: &str) -> RunWarning {
    RunWarning {
        code: code.into(),
        message,
        fix: Some(fix.into()),
    }
}

/// The warnings of an assembled run of `spans` spans, `from_service` of whose model steps took
/// the service name (`service`) for want of an agent name.
pub(crate) fn run_warnings(
    trace: &Trace,
    spans: usize,
    from_service: usize,
    service: Option<&str>,
) -> Vec<RunWarning> {
    let mut out = Vec::new();
    if trace.steps.is_empty() {
        out.push(warning(
            "no_steps",
            format!("no model call or tool execution among {spans} span(s): nothing to diagnose"),
            STEPS_FIX,
        ));
        return out;
    }
    let silent = trace
        .steps
        .iter()
        .all(|s| s.content.trim().is_empty() && s.tool_calls.is_empty());
    let no_content = silent && trace.task.trim().is_empty();
    if no_content {
        out.push(warning(
            "no_content",
            format!(
                "{} step(s) but no message content: the instrumentation did not record prompts or outputs",
                trace.steps.len()
            ),
            CONTENT_FIX,
        ));
    }
    let model: Vec<_> = trace
        .steps
        .iter()
        .filter(|s| trace.agent_kind(&s.agent) != AgentKind::Tool)
        .collect();
    let model_steps = model.len();
    let no_output = model
        .iter()
        .filter(|s| s.content.trim().is_empty() && s.tool_calls.is_empty())
        .count();
    if !no_content && no_output > 0 {
        out.push(warning(
            "no_output",
            format!(
                "{no_output} of {model_steps} model step(s) record no output (no text, no tool call): \
                 what those calls answered is not in the spans"
            ),
            OUTPUT_FIX,
        ));
    }
    if from_service > 0 && from_service == model_steps {
        out.push(warning(
            "agents_from_service",
            format!(
                "no span names an agent: all {from_service} model step(s) credited to the service {:?}",
                service.unwrap_or("agent")
            ),
            AGENTS_FIX,
        ));
    }
    out
}
