//! End to end with real components: agent frameworks (AutoGen AgentChat, LangGraph, the OpenAI
//! Agents SDK) instrumented by their OpenInference instrumentors, using `maslens serve-model` (the embedded SmolLM2-135M) as
//! their OpenAI-compatible model and exporting to `maslens serve`; Arize Phoenix (PyPI, its
//! default SQLite) receiving the same spans and maslens' diagnoses as span annotations. The venv
//! comes from `scripts/pyenv.sh --phoenix` (`.ci/run`). Slow: named `e2e_*`.
#![cfg(feature = "local")]

mod common;

use common::serve::{check_run, first_acts, poll, python, serve, start, venv};
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The run arrived whole: its agents in the order they first acted, one step per model call.
fn check(serve: &str, run_id: &str, agents: &[&str], summary: &Value) {
    let run = check_run(serve, run_id);
    let steps = run["trace"]["steps"].as_array().expect("steps");
    assert_eq!(
        Some(steps.len() as u64),
        summary["model_calls"].as_u64(),
        "{run_id}: one step per model call"
    );
    assert_eq!(first_acts(&run["trace"]), agents, "{run_id}");
}

#[test]
fn e2e_autogen_langgraph_and_openai_agents_live_runs_arrive_whole() {
    let Some(venv) = venv("bin/python") else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    let model = start(
        &[
            "serve-model",
            "--port",
            "0",
            "--threads",
            "2",
            "--served-name",
            "smollm2",
        ],
        None,
    );
    let db = home.path().join("m.db");
    let serve = serve(db.to_str().expect("utf-8"), home.path(), &[]);
    let endpoint = format!("{}/v1/traces", serve.url);
    let a = python(
        &venv,
        "autogen_run.py",
        &["--base-url", &model.url, "--endpoint", &endpoint],
    )
    .remove(0);
    let run = a["trace_ids"][0].as_str().expect("trace id");
    check(&serve.url, run, &["Solver", "Checker", "Reporter"], &a);
    let l = python(
        &venv,
        "langgraph_run.py",
        &[
            "--base-url",
            &model.url,
            "--endpoint",
            &endpoint,
            "--thread-id",
            "lg-e2e",
        ],
    )
    .remove(0);
    check(
        &serve.url,
        "lg-e2e",
        &["supervisor", "research_agent", "writer_agent"],
        &l,
    );
    // The OpenAI Agents SDK: Triage hands off to Researcher when the model calls the handoff
    // tool (the 135M model may not: then Triage alone acts, and answers).
    let o = python(
        &venv,
        "openai_agents_run.py",
        &["--base-url", &model.url, "--endpoint", &endpoint],
    )
    .remove(0);
    let run = o["trace_ids"][0].as_str().expect("trace id");
    let agents: &[&str] = if o["last_agent"] == "Researcher" {
        &["Triage", "Researcher"]
    } else {
        &["Triage"]
    };
    check(&serve.url, run, agents, &o);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
fn e2e_phoenix_receives_maslens_diagnoses_as_span_annotations() {
    let Some(venv) = venv("bin/phoenix") else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    let (port, grpc) = (free_port(), free_port());
    let phoenix = Command::new(venv.join("bin/phoenix"))
        .arg("serve")
        .env("PHOENIX_WORKING_DIR", home.path().join("phoenix"))
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_PORT", port.to_string())
        .env("PHOENIX_GRPC_PORT", grpc.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start phoenix");
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _phoenix = Kill(phoenix);
    let phoenix_url = format!("http://127.0.0.1:{port}");
    poll(
        &format!("{phoenix_url}/v1/projects"),
        |v| v["data"].is_array(),
        120,
    );
    let db = home.path().join("m.db");
    // A stub model for "Propose a fix" (below): it answers every call with one prompt.
    let (model_url, _) = common::stub_model_server_with(Duration::ZERO, Some(PROPOSED));
    let model = format!("openai:x@{model_url}");
    let serve = serve(
        db.to_str().expect("utf-8"),
        home.path(),
        &["--phoenix", &phoenix_url, "--model", &model],
    );
    // The same spans to both: Phoenix shows them, maslens says which one broke the run.
    python(
        &venv,
        "genai_run.py",
        &[
            "--endpoint",
            &format!("{phoenix_url}/v1/traces"),
            "--also-endpoint",
            &format!("{}/v1/traces", serve.url),
            "--conversation-id",
            "phoenix-e2e",
        ],
    );
    let run = check_run(&serve.url, "phoenix-e2e");
    let span = run["diagnoses"][0]["span_id"]
        .as_str()
        .expect("a span")
        .to_string();
    let annotations = poll(
        &format!("{phoenix_url}/v1/projects/default/span_annotations?span_ids={span}"),
        |v| v["data"].as_array().is_some_and(|d| !d.is_empty()),
        90,
    );
    let a = &annotations["data"][0];
    assert_eq!(a["name"], "maslens.decisive_error");
    assert_eq!(a["span_id"], span.as_str());
    assert_eq!(a["result"]["label"], "decisive_error");
    assert_eq!(a["metadata"]["maslens.method"], "prior");

    // "Propose a fix" for the run's failure mode: the proposal reaches the same span in Phoenix.
    let system = run["run"]["system"].as_str().expect("a system").to_string();
    let modes = common::serve::get(&format!(
        "{}/api/modes?outcome=any&system={system}",
        serve.url
    ));
    let mode = modes["systems"][0]["modes"][0]["id"]
        .as_str()
        .expect("a mode");
    let body = serde_json::json!({"system": system, "mode": mode, "outcome": "any"});
    let (status, text) = common::serve::post(
        &format!("{}/api/modes/propose", serve.url),
        &body.to_string(),
    );
    assert_eq!(status, 200, "{text}");
    let proposed = poll(
        &format!("{phoenix_url}/v1/projects/default/span_annotations?span_ids={span}"),
        |v| {
            v["data"]
                .as_array()
                .is_some_and(|d| d.iter().any(|a| a["name"] == "maslens.proposed_fix"))
        },
        90,
    );
    let a = proposed["data"]
        .as_array()
        .and_then(|d| d.iter().find(|a| a["name"] == "maslens.proposed_fix"))
        .expect("the proposal's annotation");
    assert_eq!(a["result"]["label"], "prompt_change");
    assert!(
        a["result"]["explanation"]
            .as_str()
            .is_some_and(|e| e.contains(PROPOSED)),
        "{a}"
    );
}

const PROPOSED: &str = "You are WebSurfer. Quote the page you found and its address.";
