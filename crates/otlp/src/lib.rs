//! maslens-otlp: OpenTelemetry traces in. An OTLP/HTTP body (protobuf or JSON, optionally gzip)
//! is decoded with the published `opentelemetry-proto` definitions ([`decode`]), flattened into
//! span records with every unplaceable span rejected with a reason ([`span`]), and the spans of
//! one run are assembled into a maslens [`maslens_trace::Trace`] ([`assemble`]) under the
//! OpenTelemetry GenAI semantic conventions or OpenInference; export files are read by [`file`].
//! Diagnoses go back out as `gen_ai.evaluation.result` log events ([`export`]).
//! No async: `maslens serve` and every trace-reading command (`--otlp`) call it.
//!
//! ```
//! let body = br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{
//!   "traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"chat",
//!   "startTimeUnixNano":"1000","endTimeUnixNano":"2000","attributes":[
//!     {"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},
//!     {"key":"gen_ai.agent.name","value":{"stringValue":"Planner"}},
//!     {"key":"gen_ai.output.messages","value":{"stringValue":
//!       "[{\"role\":\"assistant\",\"parts\":[{\"type\":\"text\",\"content\":\"Plan: search.\"}]}]"}}]}]}]}]}"#;
//! let req = maslens_otlp::decode::decode_request(body, maslens_otlp::Encoding::Json, None, 1 << 20).unwrap();
//! let traces = maslens_otlp::assemble::traces(&maslens_otlp::span::flatten(&req).spans);
//! assert_eq!(traces[0].steps[0].agent, "Planner");
//! assert_eq!(traces[0].steps[0].content, "Plan: search.");
//! ```

pub mod assemble;
pub mod decode;
pub mod export;
pub mod file;
pub mod span;
mod tree;
mod warnings;

pub use decode::{DecodeError, Encoding};
pub use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
