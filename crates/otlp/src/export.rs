//! OpenTelemetry out: diagnoses as `gen_ai.evaluation.result` events, the OpenTelemetry GenAI
//! semantic conventions' way to attach an evaluation to the span it judged. Each event is an OTLP
//! log record whose `event_name` is `gen_ai.evaluation.result`, whose trace and span ids are those
//! of the evaluated span, and whose attributes are `gen_ai.evaluation.name`,
//! `gen_ai.evaluation.score.value`, `gen_ai.evaluation.score.label` and
//! `gen_ai.evaluation.explanation` (plus `maslens.*` provenance). Sent as
//! `application/x-protobuf` to an OTLP/HTTP `/v1/logs` endpoint.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

/// The event name the GenAI conventions give evaluation results.
pub const EVALUATION_EVENT: &str = "gen_ai.evaluation.result";

/// One evaluation of one span.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evaluation {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// `gen_ai.evaluation.name`, e.g. `maslens.decisive_error`.
    pub name: String,
    pub score: Option<f64>,
    /// Low-cardinality label, e.g. `decisive_error`.
    pub label: Option<String>,
    pub explanation: Option<String>,
    /// Further string attributes (`maslens.method`, `maslens.model`, ...).
    pub attributes: Vec<(String, String)>,
    pub time_ns: u64,
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn hex_bytes(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap_or_default()
}

/// The OTLP logs request carrying `evals`, from the service `service` (`service.name`).
pub fn evaluation_request(evals: &[Evaluation], service: &str) -> ExportLogsServiceRequest {
    let records = evals
        .iter()
        .map(|e| {
            let mut attributes = vec![kv(
                "gen_ai.evaluation.name",
                any_value::Value::StringValue(e.name.clone()),
            )];
            if let Some(s) = e.score.filter(|s| s.is_finite()) {
                attributes.push(kv(
                    "gen_ai.evaluation.score.value",
                    any_value::Value::DoubleValue(s),
                ));
            }
            if let Some(l) = &e.label {
                attributes.push(kv(
                    "gen_ai.evaluation.score.label",
                    any_value::Value::StringValue(l.clone()),
                ));
            }
            if let Some(x) = &e.explanation {
                attributes.push(kv(
                    "gen_ai.evaluation.explanation",
                    any_value::Value::StringValue(x.clone()),
                ));
            }
            for (k, v) in &e.attributes {
                attributes.push(kv(k, any_value::Value::StringValue(v.clone())));
            }
            LogRecord {
                time_unix_nano: e.time_ns,
                observed_time_unix_nano: e.time_ns,
                severity_number: 9, // INFO
                severity_text: "INFO".into(),
                event_name: EVALUATION_EVENT.into(),
                trace_id: hex_bytes(&e.trace_id),
                span_id: hex_bytes(&e.span_id),
                attributes,
                ..Default::default()
            }
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![kv(
                    "service.name",
                    any_value::Value::StringValue(service.to_string()),
                )],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "maslens".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The request as an `application/x-protobuf` body.
pub fn encode(request: &ExportLogsServiceRequest) -> Vec<u8> {
    request.encode_to_vec()
}

/// Decode a logs request body (protobuf), e.g. in a receiver under test.
pub fn decode_logs(body: &[u8]) -> Result<ExportLogsServiceRequest, prost::DecodeError> {
    ExportLogsServiceRequest::decode(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluation_events_round_trip_with_their_span() {
        let e = Evaluation {
            trace_id: "5b8efff798038103d269b633813fc60c".into(),
            span_id: "eee19b7ec3c1b174".into(),
            name: "maslens.decisive_error".into(),
            score: Some(0.8),
            label: Some("decisive_error".into()),
            explanation: Some("WebSurfer misread the date".into()),
            attributes: vec![("maslens.method".into(), "prior".into())],
            time_ns: 7,
        };
        let body = encode(&evaluation_request(&[e], "maslens"));
        let back = decode_logs(&body).expect("decodes");
        let r = &back.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(r.event_name, EVALUATION_EVENT);
        assert_eq!(hex::encode(&r.trace_id), "5b8efff798038103d269b633813fc60c");
        assert_eq!(hex::encode(&r.span_id), "eee19b7ec3c1b174");
        let keys: Vec<&str> = r.attributes.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "gen_ai.evaluation.name",
                "gen_ai.evaluation.score.value",
                "gen_ai.evaluation.score.label",
                "gen_ai.evaluation.explanation",
                "maslens.method"
            ]
        );
    }
}
