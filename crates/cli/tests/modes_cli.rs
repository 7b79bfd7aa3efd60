//! `maslens modes` (issue 39 item 1): failure modes from a store and from `locate -o` files give
//! the same answer, and `serve`'s `GET /api/modes` and `/ui/modes` give it too; bad options
//! name themselves; `--summarize` calls the model once per summarized mode.

mod common;

use common::{data, maslens, stderr, stdout_json};
use serde_json::Value;
use std::path::Path;

fn run_ok(home: &Path, args: &[&str]) -> std::process::Output {
    let o = maslens(home, args).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{args:?}\n{}", stderr(&o));
    o
}

/// The report without the times (files carry none; the store has when it received a run).
fn timeless(mut report: Value) -> Value {
    for s in report["systems"].as_array_mut().unwrap() {
        for m in s["modes"].as_array_mut().unwrap() {
            let m = m.as_object_mut().unwrap();
            for k in ["trend", "first_ns", "last_ns"] {
                m.remove(k);
            }
        }
    }
    report
}

/// A store and a `locate -o` file over Who&When's hand-crafted traces, located by the prior.
fn located_whowhen(home: &Path) -> (String, String) {
    let hc = data("whowhen/Hand-Crafted");
    let hc = hc.to_str().unwrap();
    let db = home.join("ww.db").display().to_string();
    let file = home.join("located.jsonl").display().to_string();
    run_ok(home, &["import", hc, "--db", &db, "-q"]);
    run_ok(
        home,
        &["locate", "--db", &db, "--method", "prior", "-q", "--json"],
    );
    run_ok(
        home,
        &[
            "locate", hc, "--method", "prior", "-q", "--json", "-o", &file,
        ],
    );
    (db, file)
}

#[test]
fn a_store_its_files_and_serve_give_the_same_modes() {
    let home = tempfile::tempdir().unwrap();
    let (db, file) = located_whowhen(home.path());
    let of_store = stdout_json(&run_ok(
        home.path(),
        &["--json", "-q", "modes", "--db", &db, "--gold"],
    ));
    let of_files = stdout_json(&run_ok(
        home.path(),
        &["--json", "-q", "modes", &file, "--gold"],
    ));
    assert_eq!(timeless(of_store.clone()), timeless(of_files));

    let systems = of_store["systems"].as_array().unwrap();
    assert_eq!(systems.len(), 1);
    let failed = systems[0]["failed_runs"].as_u64().unwrap();
    let sizes: u64 = systems[0]["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["runs"].as_u64().unwrap())
        .sum();
    assert_eq!(sizes, failed, "every failed run is in exactly one mode");
    let purity = &of_store["purity"];
    assert_eq!(purity["runs_with_gold"].as_u64(), Some(failed));
    // The built-in prior located them and was trained on every one: the report says in-sample.
    assert_eq!(purity["in_sample_runs"].as_u64(), Some(failed));
    let md = String::from_utf8(run_ok(home.path(), &["-q", "modes", "--db", &db, "--gold"]).stdout)
        .unwrap();
    assert!(
        md.contains("> In-sample: the built-in prior was trained on"),
        "{md}"
    );
    assert!(md.contains("| these modes |"), "{md}");

    let serve = common::serve::serve(&db, home.path(), &[]);
    let api = common::serve::get(&format!("{}/api/modes?gold=true", serve.url));
    assert_eq!(timeless(api), timeless(of_store.clone()));
    let page = std::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            &format!("{}/ui/modes?gold=true", serve.url),
        ])
        .output()
        .unwrap();
    let page = String::from_utf8_lossy(&page.stdout);
    let first = of_store["systems"][0]["modes"][0]["id"].as_str().unwrap();
    assert!(page.contains(&format!("id=\"mode-{first}\"")), "{page}");
    assert!(page.contains("In-sample: the built-in prior"), "{page}");
    let bad = common::serve::get(&format!("{}/api/modes?similarity=2", serve.url));
    assert!(
        bad["error"]
            .as_str()
            .unwrap_or_default()
            .contains("similarity"),
        "{bad}"
    );
}

#[test]
fn bad_requests_name_what_is_wrong() {
    let home = tempfile::tempdir().unwrap();
    let ww = data("whowhen/Hand-Crafted/10.json");
    let ww = ww.to_str().unwrap();
    let o = maslens(home.path(), &["modes", ww, "--similarity", "2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("similarity: 2 is not between 0 and 1"),
        "{}",
        stderr(&o)
    );
    let o = maslens(home.path(), &["modes", ww, "--db", "x.db"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not both"), "{}", stderr(&o));
    // Who&When runs all failed: asking for successes groups nothing, and says so (exit 1).
    let o = maslens(home.path(), &["modes", ww, "--outcome", "success"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no success runs to group"),
        "{}",
        stderr(&o)
    );
    // A trace without a verdict is grouped as "not located", and the command says why.
    let o = maslens(home.path(), &["modes", ww]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("note: 1 of 1 traces carry no verdict (locate them first"),
        "{}",
        stderr(&o)
    );
}

/// `maslens --json -q modes FILE --summarize --summarize-top TOP --model MODEL`.
fn summarize_args(file: &str, top: &str, model: &str) -> Vec<String> {
    [
        "--json",
        "-q",
        "modes",
        file,
        "--summarize",
        "--summarize-top",
        top,
        "--model",
        model,
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn summaries_call_the_model_once_per_summarized_mode() {
    let home = tempfile::tempdir().unwrap();
    let (_db, file) = located_whowhen(home.path());
    let (url, calls) = common::stub_model_server_with(
        std::time::Duration::ZERO,
        Some("The WebSurfer clicks the wrong link."),
    );
    let model = format!("openai:x@{url}");
    let args = summarize_args(&file, "2", &model);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let report = stdout_json(&run_ok(home.path(), &args));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    let modes = report["systems"][0]["modes"].as_array().unwrap();
    assert_eq!(modes[0]["summary"], "The WebSurfer clicks the wrong link.");
    assert_eq!(modes[2].get("summary"), None);
    assert!(
        report["summaries_by"]
            .as_str()
            .is_some_and(|m| m.contains('x')),
        "{report}"
    );

    // A budget of one call (cache off: the first run cached both answers): the second summary
    // is not asked for, the report says so, exit 1.
    let mut budget = args.to_vec();
    budget.extend(["--max-calls", "1", "--cache-mode", "off"]);
    let o = maslens(home.path(), &budget).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert!(
        stderr(&o).contains("note: summaries stopped"),
        "{}",
        stderr(&o)
    );
    let report = stdout_json(&o);
    assert!(
        report["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("summaries stopped"),
        "{report}"
    );
}

/// The summaries with the embedded model (`scripts/fetch-model.sh`): the pipeline runs end to end
/// against a real model; a 135M model's sentence says nothing about quality.
#[cfg(feature = "local")]
#[test]
fn e2e_modes_summarize_with_the_embedded_model() {
    let home = tempfile::tempdir().unwrap();
    let (_db, file) = located_whowhen(home.path());
    // The user's MASLENS_HOME (where the model was fetched), a cache of the test's own.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_maslens"))
        .env("MASLENS_CACHE", home.path().join("e2e-cache.sqlite"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("MASLENS_MODEL")
        .args(summarize_args(&file, "1", "local:smollm2-135m"))
        .args(["--threads", "2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report = stdout_json(&o);
    let summary = report["systems"][0]["modes"][0]["summary"]
        .as_str()
        .unwrap_or_default();
    assert!(!summary.trim().is_empty(), "{report}");
    assert_eq!(report["summaries_by"], "local:smollm2-135m");
}

/// Issue 39 item 5: "Propose a fix" on a failure mode. The server's model (a stub answering one
/// prompt) rewrites the mode's agent's prompt as the Who&When traces record it, from the mode's
/// example runs; the proposal is stored on each example (the run's API lists it, the UI shows the
/// diff); a mode that does not exist, a bad body and a failing model are answered, not served.
#[test]
fn a_failure_mode_gets_a_proposed_fix_stored_on_its_examples() {
    const ANSWER: &str = "You check every page against the task before you report it.";
    let home = tempfile::tempdir().unwrap();
    // Algorithm-Generated: its traces record each agent's system prompt.
    let ag = data("whowhen/Algorithm-Generated");
    let db = home.path().join("ag.db").display().to_string();
    run_ok(
        home.path(),
        &["import", ag.to_str().unwrap(), "--db", &db, "-q"],
    );
    run_ok(
        home.path(),
        &["locate", "--db", &db, "--method", "prior", "-q", "--json"],
    );
    let (url, calls) = common::stub_model_server_with(std::time::Duration::ZERO, Some(ANSWER));
    let model = format!("openai:x@{url}");
    let serve = common::serve::serve(&db, home.path(), &["--model", &model]);
    let modes = common::serve::get(&format!("{}/api/modes", serve.url));
    let system = modes["systems"][0]["system"].as_str().unwrap().to_string();
    let propose = format!("{}/api/modes/propose", serve.url);
    let mut done = None;
    let listed = modes["systems"][0]["modes"].as_array().unwrap();
    let blocked = listed
        .iter()
        .filter(|m| m["no_proposal"].is_string())
        .count();
    assert!(
        blocked > 0 && blocked < listed.len(),
        "some modes can get a proposal, some cannot: {modes}"
    );
    for m in listed {
        // The report says beforehand which modes the proposal refuses, and why.
        let body = serde_json::json!({"system": system, "mode": m["id"]}).to_string();
        if let Some(why) = m["no_proposal"].as_str() {
            let (status, text) = common::serve::post(&propose, &body);
            assert_eq!(status, 422, "{text}");
            assert!(text.contains(&why[..40]), "{text} / {why}");
            continue;
        }
        let agent = m["agent"]
            .as_str()
            .expect("a mode open to a proposal has an agent");
        let (status, text) = common::serve::post(&propose, &body);
        assert_eq!(status, 200, "{text}");
        done = Some((
            agent.to_string(),
            serde_json::from_str::<Value>(&text).unwrap(),
        ));
        break;
    }
    let (agent, answer) = done.expect("a mode whose agent's prompt the traces record");
    let p = &answer["proposal"];
    assert_eq!(p["agent"], agent.as_str());
    assert_eq!(p["rewrite"]["prompt"], ANSWER);
    assert!(!p["before"].as_str().unwrap().is_empty());
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    let ids = answer["diagnoses"].as_array().unwrap();
    assert_eq!(ids.len(), p["examples"].as_array().unwrap().len());
    let example = p["examples"][0].as_str().unwrap();
    let url = format!("{}/api/runs/{}", serve.url, example.replace('/', "%2F"));
    let run = common::serve::get(&url);
    assert!(run["diagnoses"].is_array(), "{example}: {run}");
    let stored = run["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["method"] == "propose")
        .expect("the proposal is stored on the example run");
    assert_eq!(
        stored["agent"],
        Value::Null,
        "a proposal is not a localization"
    );
    assert!(stored["result"]["note"].as_str().unwrap().contains(ANSWER));
    let page = curl(&[&format!(
        "{}/ui/proposals/{}",
        serve.url,
        ids[0].as_str().unwrap()
    )]);
    assert!(
        page.contains(&format!("A fix proposed for {agent}")),
        "{page}"
    );
    assert!(
        page.contains(ANSWER) && page.contains("no write-back target is configured"),
        "{page}"
    );
    let page = curl(&[&format!("{}/ui/modes", serve.url)]);
    assert_eq!(
        page.matches(">Propose a fix</button>").count(),
        listed.len() - blocked,
        "a button on each mode that can get a proposal"
    );
    assert_eq!(page.matches("No proposal: ").count(), blocked, "{page}");
    // The UI's button: a form post answered with the proposal's page.
    let mode = p["mode"].as_str().unwrap();
    let form = format!(
        "system={}&mode={mode}&outcome=failure&similarity=0.3",
        system.replace(' ', "+")
    );
    let redirect = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{redirect_url}",
        "--data",
        &form,
        &format!("{}/ui/modes/propose", serve.url),
    ]);
    assert!(
        redirect.starts_with("303 ") && redirect.contains("/ui/proposals/"),
        "{redirect}"
    );

    let body = serde_json::json!({"system": system, "mode": "m999"}).to_string();
    let (status, text) = common::serve::post(&propose, &body);
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("no failure mode \\\"m999\\\""), "{text}");
    let (status, text) = common::serve::post(&propose, r#"{"system": 1}"#);
    assert_eq!(status, 400, "{text}");
    assert!(curl(&[&format!("{}/ui/proposals/nope", serve.url)]).contains("no proposal"));

    // The CLI: the same proposal from the store (stored again) and from `locate -o` files.
    let o = run_ok(
        home.path(),
        &[
            "--json",
            "-q",
            "modes",
            "--db",
            &db,
            "--propose",
            mode,
            "--model",
            &model,
        ],
    );
    let cli = stdout_json(&o);
    assert_eq!(cli["proposal"]["rewrite"], p["rewrite"]);
    assert_eq!(cli["proposal"]["examples"], p["examples"]);
    assert_eq!(cli["diagnoses"].as_array().map(Vec::len), Some(ids.len()));
    let file = home.path().join("ag.jsonl").display().to_string();
    let ag = data("whowhen/Algorithm-Generated");
    run_ok(
        home.path(),
        &[
            "locate",
            ag.to_str().unwrap(),
            "--method",
            "prior",
            "-q",
            "--json",
            "-o",
            &file,
        ],
    );
    // The files' modes are marked as the store's are.
    let o = run_ok(home.path(), &["--json", "-q", "modes", &file]);
    let marks = |r: &Value| -> Vec<(String, bool)> {
        r["systems"][0]["modes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["id"].to_string(), m["no_proposal"].is_null()))
            .collect()
    };
    assert_eq!(marks(&stdout_json(&o)), marks(&modes));
    let o = run_ok(
        home.path(),
        &["-q", "modes", &file, "--propose", mode, "--model", &model],
    );
    let md = String::from_utf8(o.stdout).unwrap();
    assert!(
        md.contains(&format!("# A fix proposed for {agent}")) && md.contains(ANSWER),
        "{md}"
    );
    let o = maslens(
        home.path(),
        &["modes", &file, "--propose", "m999", "--model", &model],
    )
    .output()
    .unwrap();
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("no failure mode \"m999\""),
        "{}",
        stderr(&o)
    );

    // A model that fails: 502 with its error (another home: no cached answer).
    let (bad, _) = common::stub_model_server();
    let fresh = tempfile::tempdir().unwrap();
    let bad = format!("openai:x@{bad}");
    let serve = common::serve::serve(&db, fresh.path(), &["--model", &bad, "--max-retries", "0"]);
    let body = serde_json::json!({"system": system, "mode": mode}).to_string();
    let (status, text) = common::serve::post(&format!("{}/api/modes/propose", serve.url), &body);
    assert_eq!(status, 502, "{text}");
}

fn curl(args: &[&str]) -> String {
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `maslens improve --db` stores the report the loop wrote (`--out DIR/report.json`) under its
/// system's name; without `--out` it is refused before the loop runs, and a report the loop did
/// not write this time (a loop that failed left an older one) is not stored. The "Python" here
/// is a shell script standing in for the loop (the real loop with --db:
/// `python/tests/test_improve.py`).
#[test]
fn improve_stores_the_loops_report_with_db() {
    let home = tempfile::tempdir().unwrap();
    let fake = home.path().join("fake-python");
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$1\" = -c ] && exit 0\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n\
         [ -n \"$WRITE\" ] && mkdir -p \"$out\" && printf '{\"system\": \"team:system\", \"format_version\": 2}' > \"$out/report.json\"\nexit 0\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let db = home.path().join("s.db");
    let out = home.path().join("out");
    let (db, out, python) = (
        db.to_str().unwrap(),
        out.to_str().unwrap(),
        fake.to_str().unwrap(),
    );
    let run = |write: bool, args: &[&str]| {
        let mut all = vec![
            "improve",
            "--db",
            db,
            "--python",
            python,
            "team:system",
            "--tasks",
            "t",
        ];
        all.extend(args);
        let mut c = maslens(home.path(), &all);
        if write {
            c.env("WRITE", "1");
        }
        c.output().unwrap()
    };
    let o = run(true, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("give --out"), "{}", stderr(&o));
    let o = run(true, &["--out", out]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("improvement report of team:system stored in"),
        "{}",
        stderr(&o)
    );
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let o = run(false, &[&format!("--out={out}")]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("wrote no report this time"),
        "{}",
        stderr(&o)
    );
    let reports = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = maslens_store::Store::open(&format!("sqlite:{db}"))
            .await
            .unwrap();
        store
            .reports(maslens_store::diagnosis::ReportKind::Improve)
            .await
            .unwrap()
    });
    assert_eq!(reports.len(), 1, "the stale report was not stored again");
    assert_eq!(reports[0].1, "team:system");
}
