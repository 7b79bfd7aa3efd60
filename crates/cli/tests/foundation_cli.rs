//! End-to-end tests of `maslens import | validate | show | stats | schema` on the real data in
//! ../shared/data (read in place) and on malformed fixtures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn maslens(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_maslens"))
        .args(args)
        .env_remove("MASLENS_LOG")
        .output()
        .expect("run maslens")
}

fn shared(rel: &str) -> String {
    format!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/{}"),
        rel
    )
}

fn fixture(rel: &str) -> String {
    format!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../trace/tests/fixtures/{}"),
        rel
    )
}

fn examples(rel: &str) -> String {
    format!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/{}"),
        rel
    )
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn stats_on_algorithm_generated_matches_an_independent_count() {
    let dir = shared("whowhen/Algorithm-Generated");
    let o = maslens(&["stats", "--json", &dir]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();

    // Recompute from the raw files with plain serde_json.
    let mut lens = Vec::new();
    let mut labelled = std::collections::BTreeMap::<String, u64>::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p: PathBuf = entry.unwrap().path();
        let raw: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        lens.push(raw["history"].as_array().unwrap().len());
        *labelled
            .entry(raw["mistake_agent"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    lens.sort();
    let n = lens.len();
    let median = if n % 2 == 1 {
        lens[n / 2] as f64
    } else {
        (lens[n / 2 - 1] + lens[n / 2]) as f64 / 2.0
    };
    let mean = lens.iter().sum::<usize>() as f64 / n as f64;

    assert_eq!(v["traces"], serde_json::json!(n));
    assert_eq!(n, 67);
    assert_eq!(v["skipped"], serde_json::json!(0));
    assert_eq!(v["steps"]["min"], serde_json::json!(lens[0]));
    assert_eq!(v["steps"]["max"], serde_json::json!(lens[n - 1]));
    assert_eq!(v["steps"]["median"].as_f64().unwrap(), median);
    assert!((v["steps"]["mean"].as_f64().unwrap() - mean).abs() < 1e-9);
    assert_eq!(
        v["labelled_agents"],
        serde_json::to_value(&labelled).unwrap()
    );
    assert_eq!(v["outcomes"]["failure"], serde_json::json!(67));
    assert_eq!(v["label_speaker_mismatches"], serde_json::json!(1));
    // Text output names the same figures.
    let o = maslens(&["stats", &dir]);
    let text = stdout(&o);
    assert!(text.contains("traces:    67"), "{text}");
    assert!(text.contains(&format!("min {}", lens[0])), "{text}");
}

#[test]
fn import_skips_bad_records_reports_them_and_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.jsonl");
    let o = maslens(&[
        "import",
        &fixture("mixed.jsonl"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "skipped records give exit code 1");
    let err = stderr(&o);
    assert!(
        err.contains("mixed.jsonl: line 2: at steps[0].index: not a valid maslens trace"),
        "{err}"
    );
    assert!(err.contains("line 3"), "{err}");
    assert!(
        err.contains("imported 2 traces, skipped 3 records"),
        "{err}"
    );
    let written = std::fs::read_to_string(&out).unwrap();
    assert_eq!(written.lines().count(), 2);

    // --strict: the first bad record is fatal.
    let o = maslens(&[
        "import",
        "--strict",
        &fixture("mixed.jsonl"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("line 2"), "{}", stderr(&o));

    // Real data -> native -> native again: identical bytes.
    let first = tmp.path().join("first.jsonl");
    let o = maslens(&[
        "import",
        &shared("whowhen"),
        &shared("aegis/sample.jsonl"),
        "-o",
        first.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("imported 103 traces, skipped 0 records"),
        "{}",
        stderr(&o)
    );
    let o = maslens(&["import", "--format", "native", first.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(o.stdout, std::fs::read(&first).unwrap());
}

#[test]
fn validate_reports_warnings_and_errors_with_exit_codes() {
    let o = maslens(&["validate", &shared("whowhen")]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(out.contains("Hand-Crafted/20.json: at labels.decisive: decisive label agent `WebSurfer` does not act at step 3"), "{out}");
    assert!(out.contains("Algorithm-Generated/14.json"), "{out}");
    assert!(out.contains("98 traces: 0 errors"), "{out}");

    let o = maslens(&["validate", "--deny-warnings", &shared("whowhen")]);
    assert_eq!(o.status.code(), Some(1));

    let o = maslens(&["--json", "validate", &fixture("whowhen_label_range.json")]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["errors"], serde_json::json!(1));
    assert!(v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["path"] == "labels.decisive.step" && d["severity"] == "error"));
}

#[test]
fn show_marks_the_decisive_step_and_truncates() {
    let file = shared("whowhen/Hand-Crafted/20.json");
    let o = maslens(&["show", "--color", "never", "--lines", "2", &file]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains('\x1b'), "no colour codes when asked");
    let marked: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("DECISIVE FAILURE"))
        .collect();
    assert_eq!(marked.len(), 1, "{out}");
    assert!(
        marked[0].starts_with("[  3] Orchestrator (-> WebSurfer)"),
        "{}",
        marked[0]
    );
    assert!(out.contains("more lines (--full)"));
    let full = stdout(&maslens(&["show", "--color", "never", "--full", &file]));
    assert!(!full.contains("more lines (--full)"));
    assert!(full.len() > out.len());

    let o = maslens(&["show", "--color", "always", &examples("groupchat.json")]);
    assert!(stdout(&o).contains("\x1b["), "colour when asked");

    let o = maslens(&[
        "show",
        "--id",
        "Hand-Crafted/12",
        &shared("whowhen/Hand-Crafted"),
    ]);
    assert!(
        stdout(&o).starts_with("Hand-Crafted/12\n"),
        "{}",
        stdout(&o)
    );
    let o = maslens(&["show", "--id", "nope", &shared("whowhen/Hand-Crafted")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no trace with id `nope`"));
}

#[test]
fn schema_is_json_schema_of_a_trace() {
    let o = maslens(&["schema", "trace"]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["title"], "Trace");
    assert!(v["properties"]["steps"].is_object());
    assert!(v["required"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("id")));
}

#[test]
fn unreadable_input_is_skipped_with_a_clear_message() {
    let o = maslens(&[
        "stats",
        "--json",
        &fixture("whowhen_bad_type.json"),
        &shared("whowhen/Hand-Crafted/12.json"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["traces"], serde_json::json!(1));
    assert_eq!(v["skipped"], serde_json::json!(1));
    let err = stderr(&o);
    assert!(
        err.contains("whowhen_bad_type.json: at history[1].role:"),
        "{err}"
    );
    assert!(err.contains("expected a string"), "{err}");
}

#[test]
fn stdin_and_json_summaries() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_maslens"))
        .args(["--json", "stats", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let native = std::fs::read(examples("native.jsonl")).unwrap();
    child.stdin.take().unwrap().write_all(&native).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["traces"], serde_json::json!(1));
    assert_eq!(v["outcomes"]["success"], serde_json::json!(1));

    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("a.jsonl");
    let o = maslens(&[
        "--json",
        "import",
        &shared("aegis/sample.jsonl"),
        "-o",
        out.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["traces"], serde_json::json!(5));
    assert_eq!(v["skipped"], serde_json::json!(0));

    let o = maslens(&["--json", "stats", out.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // 13 faulty-agent labels in the sample, names in the conversation's spelling.
    let total: u64 = v["faulty_agents"]
        .as_object()
        .unwrap()
        .values()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(total, 13);
    assert!(v["faulty_agents"].get("assistant1").is_none());
    assert_eq!(v["faulty_agents"]["Assistant1"], serde_json::json!(3));
    assert_eq!(v["error_modes"]["FM-2.2"], serde_json::json!(3));
    assert_eq!(v["outcomes"]["unknown"], serde_json::json!(5));
}

#[test]
fn otlp_exports_become_traces_for_every_command() {
    // examples/otlp/genai-run.jsonl: a hand-written OTLP/JSON export (one request per line, as the
    // OpenTelemetry Collector's file exporter writes) in the GenAI semantic conventions.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.jsonl");
    let src = examples("otlp/genai-run.jsonl");
    let o = maslens(&["import", "--otlp", &src, "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    let t: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(t["id"], "trip-0042");
    assert_eq!(t["outcome"], "failure");
    assert_eq!(t["task"], "How many museums in Oslo are open on Mondays?");
    let steps: Vec<(String, String)> = t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["agent"].as_str().unwrap().to_string(),
                s["span"]["span_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("Orchestrator".to_string(), "1a2b3c4d5e6f7081".to_string()),
            ("handoff_to_websurfer".into(), "2b3c4d5e6f708192".into()),
            ("WebSurfer".into(), "4d5e6f708192a3b4".into()),
            ("Orchestrator".into(), "5e6f708192a3b4c5".into()),
        ]
    );
    // Any trace-reading command takes the same flag: the learned prior localizes the run.
    let o = maslens(&["--json", "locate", "--otlp", &src, "--method", "prior"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).lines().next().unwrap()).unwrap();
    assert_eq!(v["trace"], "trip-0042");
    assert!(
        ["Orchestrator", "WebSurfer"].contains(&v["agent"].as_str().unwrap()),
        "{v}"
    );
    // A broken line is reported with file and line; the rest is read.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        format!(
            "{{\"resourceSpans\": 3}}\n{}",
            std::fs::read_to_string(&src).unwrap()
        ),
    )
    .unwrap();
    let o = maslens(&["stats", "--otlp", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("bad.jsonl: line 1"), "{}", stderr(&o));
}

#[test]
fn completions_for_each_shell() {
    for (shell, needle) in [
        ("bash", "_maslens()"),
        ("zsh", "#compdef maslens"),
        ("fish", "complete -c maslens"),
    ] {
        let o = maslens(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let s = stdout(&o);
        assert!(s.contains(needle), "{shell}: {}", &s[..s.len().min(300)]);
        assert!(s.contains("locate") && s.contains("otlp"), "{shell}");
    }
    assert_eq!(maslens(&["completions", "tcsh"]).status.code(), Some(2));
}

/// `maslens ... | head -1`: the reader goes away; the command ends quietly (exit 0), never with a
/// panic (exit 101) and a backtrace. The read end is closed before the command writes.
#[test]
fn a_closed_stdout_pipe_ends_quietly() {
    let home = tempfile::tempdir().expect("tempdir");
    maslens_llm::cache::Cache::open(home.path().join("cache.sqlite")).expect("an empty cache");
    let hc = shared("whowhen/Hand-Crafted");
    let grpo = format!(
        "{}/../../examples/inputs/grpo-groups.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    for args in [
        vec![
            "locate",
            hc.as_str(),
            "--method",
            "prior",
            "--prior",
            "builtin",
        ],
        vec!["prior", "rank", hc.as_str()],
        vec!["cache", "stats"],
        // Writers other than `outln!` (a JSONL sink): the error reaches main as an io error.
        vec!["advantages", &grpo],
        vec!["import", hc.as_str()],
        vec![
            "eval",
            "locate",
            "--method",
            "prior",
            &format!("whowhen:{hc}"),
        ],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_maslens"))
            .args(&args)
            .env("MASLENS_HOME", home.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// Issue 16 item 8: a trace id read twice is named where the second copy is, pointing back at
/// the first; `import` says so too and exits 1 (in a store the later copy would replace the first).
/// `dups.jsonl` in `dir`: traces `a`, `b`, `a` (one agent, one step each), with `extra` fields.
fn traces_with_a_duplicate_id(dir: &Path, extra: serde_json::Value) -> PathBuf {
    let file = dir.join("dups.jsonl");
    let rec = |id: &str, text: &str| {
        let mut r = serde_json::json!({"id": id, "task": "q", "agents": [{"name": "A"}],
                                       "steps": [{"index": 0, "agent": "A", "content": text}]});
        if let (Some(r), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
            r.extend(extra.clone());
        }
        r.to_string()
    };
    std::fs::write(
        &file,
        [rec("a", "x"), rec("b", "y"), rec("a", "z")].join("\n"),
    )
    .unwrap();
    file
}

#[test]
fn duplicate_trace_ids_are_named_at_the_second_copy() {
    let dir = tempfile::tempdir().unwrap();
    let file = traces_with_a_duplicate_id(dir.path(), serde_json::json!({}));
    let f = file.to_str().unwrap();
    let o = maslens(&["validate", f]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "{f}: line 3: at id: duplicate trace id `a` (first seen in {f}: line 1)"
        )),
        "{out}"
    );
    let o = maslens(&[
        "--json",
        "import",
        f,
        "-o",
        dir.path().join("out.jsonl").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{f}: line 3: duplicate trace id `a` (first seen in {f}: line 1)"
        )),
        "{err}"
    );
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["duplicate_ids"], 1);
    assert_eq!(summary["traces"], 3, "every record is still written");
}

/// Issue 16 item 8: `eval locate` scores one copy of a duplicated trace id and says so, with exit 1
/// (it dropped the copy silently: "2 cases", exit 0).
#[test]
fn eval_locate_names_duplicate_trace_ids_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let file = traces_with_a_duplicate_id(
        dir.path(),
        serde_json::json!({"labels": {"decisive": {"agent": "A", "step": 0}}}),
    );
    let o = maslens(&[
        "--json",
        "eval",
        "locate",
        file.to_str().unwrap(),
        "--method",
        "prior",
        "--prior",
        "builtin",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("a: trace id appears more than once; one copy kept"),
        "{err}"
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["agent_accuracy"]["n"], 2, "{r}");
}

/// Issue 16 item 10: a named input that does not exist stops the command with exit 2 ("could
/// not run"), for `validate` as for every trace reader (it was a skipped record and exit 1); a
/// pretty-printed JSON document on stdin is one trace (it was one error per line), with a
/// byte-order mark in front too.
#[test]
fn a_missing_input_is_exit_2_and_a_pretty_document_on_stdin_is_one_trace() {
    use std::io::Write;
    for cmd in ["validate", "stats", "show", "import"] {
        let o = maslens(&[cmd, "/nonexistent/traces.jsonl"]);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("/nonexistent/traces.jsonl: no such file or directory"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
    let first = std::fs::read_to_string(examples("native.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    let pretty = serde_json::to_vec_pretty(&first).unwrap();
    for input in [pretty.clone(), [&b"\xEF\xBB\xBF"[..], &pretty].concat()] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_maslens"))
            .args(["--json", "validate", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let o = child.wait_with_output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            (v["traces"].as_u64(), v["skipped"].as_u64()),
            (Some(1), Some(0)),
            "{v}\n{}",
            stderr(&o)
        );
    }
}
