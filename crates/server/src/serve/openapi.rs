//! The OpenAPI 3.1 document of `maslens serve`, built from the code: the route table below is
//! the one the tests walk against the router, and request shapes are the JSON Schemas schemars
//! derives from the handlers' own types.

use axum::Json;
use serde_json::{json, Value};

/// `(method, path, summary)` of every route.
pub const ROUTES: &[(&str, &str, &str)] = &[
    (
        "post",
        "/v1/traces",
        "OTLP/HTTP trace export (application/x-protobuf or application/json, gzip)",
    ),
    (
        "get",
        "/api/runs",
        "Runs, newest first, filtered; `next` is the cursor of the next page",
    ),
    (
        "post",
        "/api/runs",
        "Import a trace (maslens trace format) as a run",
    ),
    (
        "get",
        "/api/runs/{id}",
        "One run: summary, trace, diagnoses, jobs",
    ),
    (
        "post",
        "/api/jobs",
        "Queue a method (prior, locate, scan) on a run or on every run a filter matches",
    ),
    ("get", "/api/jobs/{id}", "One job"),
    ("get", "/api/status", "Counts of runs, jobs and write-backs"),
    (
        "get",
        "/api/modes",
        "Failure modes: failed runs grouped per system by responsible agent, implicit-failure type and reason",
    ),
    (
        "post",
        "/api/modes/propose",
        "Propose a fix for one failure mode: its agent's prompt rewritten from its example runs, stored on them and written back",
    ),
    ("get", "/openapi.json", "This document"),
    ("get", "/health", "Liveness (no token needed)"),
];

fn schema<T: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}

/// The document.
pub fn spec() -> Value {
    let mut paths = serde_json::Map::new();
    for (method, path, summary) in ROUTES {
        let mut op = json!({
            "summary": summary,
            "responses": {"200": {"description": "OK"}, "401": {"description": "Missing or wrong bearer token"}},
        });
        if path.contains("{id}") {
            op["parameters"] = json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
        }
        match (*method, *path) {
            ("get", "/api/runs") => {
                if let Some(props) = schema::<super::api::ListQuery>()["properties"].as_object() {
                    op["parameters"] = props
                        .iter()
                        .map(|(k, v)| json!({"name": k, "in": "query", "required": false, "schema": v}))
                        .collect();
                }
            }
            ("get", "/api/modes") => {
                if let Some(props) = schema::<super::modes::ModesQuery>()["properties"].as_object()
                {
                    op["parameters"] = props
                        .iter()
                        .map(|(k, v)| json!({"name": k, "in": "query", "required": false, "schema": v}))
                        .collect();
                }
                op["responses"]["400"] = json!({"description": "A parameter out of range"});
            }
            ("post", "/api/modes/propose") => {
                op["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": schema::<super::propose::ProposeRequest>()}}});
                op["responses"]["404"] = json!({"description": "No such system or mode"});
                op["responses"]["422"] = json!({"description": "The mode has no agent, no recorded prompt or no located example"});
                op["responses"]["502"] = json!({"description": "The model failed"});
            }
            ("post", "/api/jobs") => {
                op["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": schema::<super::api::StartJobs>()}}});
                op["responses"]["202"] = json!({"description": "Queued"});
            }
            ("post", "/api/runs") => {
                op["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": schema::<maslens_trace::Trace>()}}});
                op["responses"]["201"] = json!({"description": "Stored"});
            }
            ("post", "/v1/traces") => {
                op["requestBody"] = json!({"required": true, "content": {
                    "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
                    "application/json": {"schema": {"type": "object"}}}});
                op["responses"]["400"] = json!({"description": "Malformed body"});
                op["responses"]["413"] = json!({"description": "Body too large"});
                op["responses"]["415"] =
                    json!({"description": "Unsupported content type or encoding"});
                op["responses"]["503"] =
                    json!({"description": "Not stored; retry after Retry-After"});
            }
            _ => {}
        }
        let entry = paths.entry(path.to_string()).or_insert_with(|| json!({}));
        entry[*method] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "maslens serve", "version": env!("CARGO_PKG_VERSION")},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    })
}

pub async fn document() -> Json<Value> {
    Json(spec())
}
