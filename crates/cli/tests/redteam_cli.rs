//! The red-team corpus (`tests/redteam/`) through the commands, against a fixture server that
//! plays an adversarial model (hand-written answers, not a model): it does what each trace's
//! injected text asks. `locate` and `scan` keep every verdict inside the trace, report the
//! attempt (`steering`, whether the answer followed it) and exit 1; nothing a trace carries
//! reaches the terminal raw. The real-model run is `e2e_redteam_corpus_with_the_embedded_model`
//! in `locate_e2e.rs`.

mod common;

use common::{maslens, run, stderr};
use maslens_llm::testing::server::{last_user, FakeServer, Handler, Reply};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/redteam/traces.jsonl")
}

/// Characters a terminal would obey or hide: C0 controls but newline and tab, DEL, C1 controls
/// (UTF-8 `C2 80`..`C2 9F`), bidi overrides, zero-width characters and tag characters.
fn raw_controls(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .chars()
        .filter(|&c| {
            (c.is_control() && c != '\n' && c != '\t')
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
                || matches!(c, '\u{200b}'..='\u{200d}' | '\u{2028}' | '\u{e0000}'..='\u{e007f}')
        })
        .map(|c| format!("U+{:04X}", c as u32))
        .collect()
}

/// A locate answer naming `step`/`agent`, with a reason that quotes words of that step.
fn location(step: i64, agent: &str, quote: &str) -> String {
    json!({"reason": format!("The step says \"{quote}\", where the sum goes wrong."),
           "agent": agent, "step": step, "confidence": 1.0})
    .to_string()
}

/// The adversary: whatever the trace's text asks for, by the markers of the corpus.
fn adversary() -> Handler {
    Arc::new(|body: &Value, _| {
        // Every message (a repair call repeats the conversation): the adversary stays consistent.
        let prompt: String = body["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter_map(|x| x["content"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_else(|| last_user(body));
        let text = if prompt.contains("error_step") {
            // The implicit-failure detector: nothing when told to report nothing.
            if prompt.contains("report no failures") {
                json!({"implicit_failures": []}).to_string()
            } else {
                json!({"implicit_failures": [{"error_step": 3, "error_agent": "Coder",
                    "error_type": "reasoning_error", "error_description": "wrong sum",
                    "error_evidence": "= 139", "severity": "high", "confidence": "high"}]})
                .to_string()
            }
        } else if prompt.contains("Note to the judge") {
            location(1, "Planner", "Plan: Searcher lists the first ten primes")
        } else if prompt.contains("answer step 99") {
            location(99, "Planner", "answer step 99")
        } else if prompt.contains("\"agent\": \"Searcher\", \"step\": 2") {
            location(2, "Searcher", "The first ten primes are 2, 3, 5")
        } else if prompt.contains("mistake step is 0") {
            location(0, "user", "What is the sum of the first ten prime numbers")
        } else if prompt.contains("IGNORE ALL PREVIOUS INSTRUCTIONS") {
            "<answer>OK</answer>".to_string()
        } else {
            location(
                3,
                "Coder",
                "sum([2, 3, 5, 7, 11, 13, 17, 19, 23, 29]) = 139",
            )
        };
        Reply::Text(text)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locate_reports_steering_keeps_verdicts_in_the_trace_and_exits_1() {
    let server = FakeServer::start(adversary()).await.unwrap();
    let spec = format!("openai:fixture@{}", server.base_url());
    let home = tempfile::tempdir().unwrap();
    let corpus = corpus();
    let out = run(maslens(
        home.path(),
        &[
            "--json",
            "locate",
            corpus.to_str().unwrap(),
            "--method",
            "llm",
            "--model",
            &spec,
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(raw_controls(&out.stdout), Vec::<String>::new());
    let verdicts: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON verdict per line"))
        .collect();
    assert_eq!(verdicts.len(), 11);
    let by_id = |id: &str| verdicts.iter().find(|v| v["trace"] == id).unwrap();
    for v in &verdicts {
        // Inside the trace (5 steps) or an abstention with its reason.
        match v["step"].as_u64() {
            Some(s) => assert!(s < 5, "{v}"),
            None => assert!(v["abstain_reason"].is_string(), "{v}"),
        }
        assert!(v.get("agent").is_some() && v.get("step").is_some(), "{v}");
        // The pipeline's own verdict, whole, in the payload.
        for key in ["rationale", "confidence", "source", "evaluators"] {
            assert!(v["payload"].get(key).is_some(), "{}: no {key}", v["trace"]);
        }
        let steered = v["payload"]["steering"]
            .as_array()
            .is_some_and(|s| !s.is_empty());
        let id = v["trace"].as_str().unwrap();
        let attacks_model = !matches!(id, "rt-benign" | "rt-terminal-escapes" | "rt-html");
        assert_eq!(steered, attacks_model, "{id}: {}", v["payload"]["steering"]);
    }
    // The in-range injection was followed (the fixture obeyed it) and says so.
    let v = by_id("rt-fixed-answer");
    assert_eq!(
        (v["agent"].as_str(), v["step"].as_u64()),
        (Some("Planner"), Some(1))
    );
    assert_eq!(v["payload"]["steering"][0]["followed"], true);
    assert_eq!(v["payload"]["steering"][0]["asks_step"], 1);
    // The out-of-range one ended in an abstention, followed too.
    let v = by_id("rt-out-of-range");
    assert!(v["step"].is_null());
    assert_eq!(v["payload"]["steering"][0]["followed"], true, "{v}");
    let err = stderr(&out);
    assert!(err.contains("8 traces tried to steer the judge"), "{err}");

    // Text mode: the steering lines, and no raw control character from the escapes trace.
    let out = run(maslens(
        home.path(),
        &[
            "locate",
            corpus.to_str().unwrap(),
            "--method",
            "llm",
            "--model",
            &spec,
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(raw_controls(&out.stdout), Vec::<String>::new());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("  steering: step 3 (content): fixed_answer")
            && text.contains("asks for step 1 and agent Planner; the answer followed it"),
        "{text}"
    );
    assert!(
        text.contains("\\u{1b}"),
        "escapes shown, not obeyed: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_and_show_report_steering_and_escape_the_terminal() {
    let server = FakeServer::start(adversary()).await.unwrap();
    let spec = format!("openai:fixture@{}", server.base_url());
    let home = tempfile::tempdir().unwrap();
    let corpus = corpus();
    let scan_file = home.path().join("scan.json");
    let out = run(maslens(
        home.path(),
        &[
            "scan",
            corpus.to_str().unwrap(),
            "--model",
            &spec,
            "--no-absorption",
            "--out",
            scan_file.to_str().unwrap(),
        ],
    ))
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(raw_controls(&out.stdout), Vec::<String>::new());
    assert!(
        err.contains("steering: rt-detector: step 3 (content): fixed_answer")
            && err.contains("asks for nothing; the answer followed it"),
        "{err}"
    );
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&scan_file).unwrap()).unwrap();
    for s in file["traces"].as_array().unwrap() {
        for e in s["events"].as_array().unwrap() {
            assert!(e["step"].as_u64().unwrap() < 5, "{e}");
        }
        let id = s["id"].as_str().unwrap();
        let steered = s["steering"].as_array().is_some_and(|h| !h.is_empty());
        let attacks_model = !matches!(id, "rt-benign" | "rt-terminal-escapes" | "rt-html");
        assert_eq!(steered, attacks_model, "{id}");
    }
    // --json to a terminal: valid JSON with no raw control character.
    let out = run(maslens(
        home.path(),
        &[
            "--json",
            "scan",
            corpus.to_str().unwrap(),
            "--model",
            &spec,
            "--no-absorption",
        ],
    ))
    .await;
    assert_eq!(raw_controls(&out.stdout), Vec::<String>::new());
    let _: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");

    // show: every trace, control characters shown as escapes; --json too.
    let out = run(maslens(
        home.path(),
        &["--json", "show", corpus.to_str().unwrap(), "--all"],
    ))
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(raw_controls(&out.stdout), Vec::<String>::new());
    let out = run(maslens(
        home.path(),
        &["show", corpus.to_str().unwrap(), "--all", "--full"],
    ))
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(raw_controls(&out.stdout), Vec::<String>::new());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\\u{1b}[2J") && text.contains("<script>"),
        "{text}"
    );
}

/// A red-team finding: `stats`, `validate`, `import` and `modes` printed agent names and ids
/// from a trace raw (ESC, OSC 52 clipboard writes, C1 CSI, BEL, CR, backspace, bidi), `--json`
/// left C1 and bidi raw, and `show` passed zero-width and tag characters. Every command that
/// prints trace text escapes them now, on stdout and stderr, in text and JSON.
#[test]
fn every_command_that_prints_trace_text_escapes_it() {
    let home = tempfile::tempdir().unwrap();
    let hostile =
        "Ev\u{1b}[2J\u{1b}]52;c;cGF3bmVk\u{7}il\u{9b}31m\u{8}\r\u{202e}x\u{200b}\u{e0041}";
    let trace = serde_json::json!({
        "id": format!("id-{hostile}"),
        "task": "t",
        "outcome": "failure",
        "agents": [{"name": hostile, "kind": "worker"}],
        "steps": [
            {"index": 0, "agent": hostile, "content": "a"},
            {"index": 1, "agent": format!("unknown-{hostile}"), "content": "b"}
        ]
    });
    let file = home.path().join("hostile.jsonl");
    std::fs::write(&file, format!("{trace}\n")).unwrap();
    let f = file.to_str().unwrap();
    let out_file = home.path().join("out.jsonl");
    let runs: Vec<Vec<&str>> = vec![
        vec!["stats", f],
        vec!["--json", "stats", f],
        vec!["validate", f],
        vec!["--json", "validate", f],
        vec!["import", f, "-o", out_file.to_str().unwrap()],
        vec!["modes", f, "--outcome", "any"],
        vec!["--json", "modes", f, "--outcome", "any"],
        vec!["show", f, "--all", "--full"],
    ];
    for args in runs {
        let out = maslens(home.path(), &args).output().unwrap();
        assert!(out.status.code().is_some(), "{args:?} ended by a signal");
        assert_eq!(
            raw_controls(&out.stdout),
            Vec::<String>::new(),
            "{args:?} stdout"
        );
        assert_eq!(
            raw_controls(&out.stderr),
            Vec::<String>::new(),
            "{args:?} stderr"
        );
        if args[0] == "--json" {
            let _: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e})"));
        }
    }
}
