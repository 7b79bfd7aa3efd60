//! `maslens locate` and `maslens eval locate` through the binary. Model answers come from the
//! fixture OpenAI-compatible server (`maslens_llm::testing::server::FakeServer`, hand-written
//! replies, **not a model**), or from prediction files; the embedded-model run is in
//! `locate_e2e.rs`.

mod common;
use common::*;

use maslens_llm::testing::server::{last_user, FakeServer, Handler, Reply};
use serde_json::{json, Value};
use std::sync::Arc;

/// Gold (agent, step) of every Who&When file, read from the raw data.
fn whowhen_gold() -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    for sub in ["Algorithm-Generated", "Hand-Crafted"] {
        for e in std::fs::read_dir(data(&format!("whowhen/{sub}"))).unwrap() {
            let p = e.unwrap().path();
            if p.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            let step: usize = v["mistake_step"]
                .as_str()
                .map(|s| s.parse().unwrap())
                .unwrap_or_else(|| v["mistake_step"].as_u64().unwrap() as usize);
            let id = format!("{sub}/{}", p.file_stem().unwrap().to_str().unwrap());
            out.push((id, v["mistake_agent"].as_str().unwrap().to_string(), step));
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_locate_scores_predictions_exact_versus_substring() {
    let dir = tempfile::tempdir().unwrap();
    let gold = whowhen_gold();
    // Right agent everywhere; single-digit gold step d predicted as "dd" ("10" for 0: wrong when
    // exact, right for the substring scorer); steps >= 10 predicted exactly; the first case left out (unparsed).
    let mut lines = Vec::new();
    for (id, agent, step) in gold.iter().skip(1) {
        let pred = match *step {
            0 => 10,
            s if s < 10 => s * 11,
            s => s,
        };
        lines.push(json!({"trace": id, "agent": agent, "step": pred.to_string()}).to_string());
    }
    let preds = dir.path().join("preds.jsonl");
    std::fs::write(&preds, lines.join("\n")).unwrap();
    let n = gold.len();
    let long = gold.iter().skip(1).filter(|g| g.2 >= 10).count();
    let ds = format!("whowhen:{}", data("whowhen").display());
    let out = dir.path().join("rep");
    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "eval",
            "locate",
            &ds,
            "--predictions",
            preds.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--db",
            dir.path().join("m.db").to_str().unwrap(),
        ],
    ))
    .await;
    let r = stdout_json(&o);
    assert_eq!(r["cases"], n);
    // `--db`: the same report stored in the store.
    let store = maslens_store::Store::open(&maslens_store::url_from_arg(
        dir.path().join("m.db").to_str().unwrap(),
    ))
    .await
    .unwrap();
    let reports = store
        .reports(maslens_store::diagnosis::ReportKind::Eval)
        .await
        .unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].3, r);
    assert_eq!(r["agent_accuracy"]["k"], n - 1);
    assert_eq!(r["step_accuracy"]["k"], long);
    assert_eq!(r["step_accuracy"]["n"], n);
    assert_eq!(r["abstentions"], 1);
    let ci = r["agent_accuracy"]["ci95"].as_array().unwrap();
    assert!(ci[0].as_f64().unwrap() <= r["agent_accuracy"]["value"].as_f64().unwrap());
    for b in ["random", "first-agent", "last-agent", "error-keyword"] {
        assert_eq!(r["baselines"][b]["agent_accuracy"]["n"], n, "{b}");
        assert_eq!(r["baselines"][b]["step_accuracy"]["n"], n, "{b}");
    }
    for k in [
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "calls",
        "seconds",
    ] {
        assert!(r["usage"].get(k).is_some());
    }
    assert!(r["tolerance"]["0"]["k"].as_u64().unwrap() >= long as u64);
    assert_eq!(r["subsets"]["Hand-Crafted"]["cases"], 31);
    for f in ["report.json", "report.md", "report.html", "verdicts.jsonl"] {
        assert!(out.join(f).exists(), "{f}");
    }

    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "eval",
            "locate",
            &ds,
            "--predictions",
            preds.to_str().unwrap(),
            "--compat-substring",
        ],
    ))
    .await;
    let r = stdout_json(&o);
    assert_eq!(
        r["step_accuracy"]["k"],
        n - 1,
        "\"d\" is a substring of \"dd\""
    );
    assert_eq!(
        r["step_accuracy"]["n"], n,
        "unparsed stays in the denominator"
    );
    assert_eq!(r["scorer"], "compat-substring");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_locate_aegis_pair_level_and_split() {
    let dir = tempfile::tempdir().unwrap();
    let sample = data("aegis/sample.jsonl");
    // Predict the first labelled faulty agent (lower-cased) with its error mode for every record.
    let mut lines = Vec::new();
    let text = std::fs::read_to_string(&sample).unwrap();
    let recs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (i, rec) in recs.iter().enumerate() {
        let fa = &rec["output"]["faulty_agents"][0];
        let mode = if i == 0 {
            "FM-9.9".to_string()
        } else {
            fa["error_type"].as_str().unwrap().to_string()
        };
        lines.push(json!({"trace": rec["id"], "agent": fa["agent_name"].as_str().unwrap().to_uppercase(), "error_mode": mode}).to_string());
    }
    let preds = dir.path().join("p.jsonl");
    std::fs::write(&preds, lines.join("\n")).unwrap();
    let ds = format!("aegis:{}", sample.display());
    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "eval",
            "locate",
            &ds,
            "--predictions",
            preds.to_str().unwrap(),
        ],
    ))
    .await;
    let r = stdout_json(&o);
    assert_eq!(r["cases"], 5);
    assert_eq!(r["agent_accuracy"]["k"], 5, "case-insensitive agent match");
    assert_eq!(r["pair_accuracy"]["k"], 4);
    assert!(r["step_accuracy"].is_null());
    // The random baseline scores 5/5 here: the report says that this is its chance level (the
    // sample labels most acting agents faulty: 70.8% expected), not skill.
    assert_eq!(r["baselines"]["random"]["agent_accuracy"]["k"], 5, "{r}");
    let chance = r["random_chance"].as_f64().expect("random_chance");
    assert!(chance > 0.5, "{chance}");
    let o = run(maslens(
        dir.path(),
        &[
            "eval",
            "locate",
            &ds,
            "--predictions",
            preds.to_str().unwrap(),
        ],
    ))
    .await;
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("a high `random` score is chance, not skill"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );

    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "eval",
            "locate",
            &ds,
            "--predictions",
            preds.to_str().unwrap(),
            "--split",
            "0.6",
            "--seed",
            "3",
        ],
    ))
    .await;
    let r = stdout_json(&o);
    assert_eq!(
        r["split"]["train"].as_u64().unwrap() + r["split"]["test"].as_u64().unwrap(),
        5
    );
    assert_eq!(r["cases"], r["split"]["test"]);
}

/// A reason that quotes the first words of step `n` as the prompt shows it (so it passes the
/// rationale check), or a plain one when the step is not shown.
fn quoting(u: &str, n: usize) -> String {
    let head = format!("Step {n} | agent:");
    let words: Vec<&str> = u
        .find(&head)
        .and_then(|i| u[i..].split_once('\n'))
        .map(|(_, rest)| {
            rest.split(|c: char| !c.is_alphanumeric())
                .filter(|w| w.len() >= 4)
                .take(5)
                .collect()
        })
        .unwrap_or_default();
    format!(
        "the fixture says \\\"{}\\\" is where the answer went astray",
        words.join(" ")
    )
}

/// Fixture replies keyed on the instructions in the last user message.
fn fixture_handler() -> Handler {
    Arc::new(|body: &Value, _| {
        let u = last_user(body);
        let text = if u.contains("Your task: predict how the run would go on") {
            // Counterfactual checking: the check accepts the corrected run.
            r#"{"continuation":"the product comes out right","solved":true,"confidence":0.8}"#
                .to_string()
        } else if u.contains("say how it should have been written") {
            // Counterfactual checking: the proposal, with its correction.
            format!(
                r#"{{"reason":"{}","agent":"x","step":2,"correction":"the right message","confidence":0.6}}"#,
                quoting(&u, 2)
            )
        } else if u.contains("You are analyst") || u.contains("by its opening words only") {
            // ECHO: the scout and the six analysts.
            format!(
                r#"{{"reason":"{}","agent":"x","step":2,"confidence":0.7}}"#,
                quoting(&u, 2)
            )
        } else if u.contains("1. Modes:") {
            // The taxonomy Judge: the modes seen, then the location with the decisive mode.
            format!(
                r#"{{"modes_seen":[{{"code":"FM-2.5","step":0}}],"reason":"{}","agent":"x","step":0,"confidence":0.6,"error_mode":"FM-2.5"}}"#,
                quoting(&u, 0)
            )
        } else if u.contains("2. Action:") {
            // A2P: the three stages, then the location.
            format!(
                r#"{{"abduction":"a cause","action":"a fix","prediction":"solved","resolves":true,"reason":"{}","agent":"x","step":2,"confidence":0.6}}"#,
                quoting(&u, 2)
            )
        } else if u.contains("Your task: read the whole trace") {
            format!(
                r#"{{"reason":"{}","agent":"WrongName","step":1,"confidence":0.7}}"#,
                quoting(&u, 1)
            )
        } else if u.contains("Your task: decide whether the action at step") {
            let decisive = u.contains("ends at step 2 ");
            format!(r#"{{"reason":"fixture step","decisive":{decisive},"confidence":0.6}}"#)
        } else if u.contains("Your task: decide which part contains") {
            r#"{"reason":"fixture half","part":"first","confidence":0.5}"#.to_string()
        } else if u.contains("Be concise") {
            format!(
                r#"{{"reason":"{}","agent":"x","step":2,"confidence":0.9}}"#,
                quoting(&u, 2)
            )
        } else if u.contains("independent evaluator") {
            format!(
                r#"{{"reason":"{}","agent":"x","step":1,"confidence":0.3}}"#,
                quoting(&u, 1)
            )
        } else {
            "not json".to_string()
        };
        Reply::Text(text)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locate_prints_verdicts_and_writes_back_labels() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(fixture_handler()).await.unwrap();
    let spec = format!("openai:fixture@{}", server.base_url());
    let trace = data("whowhen/Algorithm-Generated/1.json");
    let wb = dir.path().join("out.jsonl");
    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "locate",
            "--method",
            "llm",
            trace.to_str().unwrap(),
            "--model",
            &spec,
            "--out",
            wb.to_str().unwrap(),
        ],
    ))
    .await;
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap()).unwrap();
    // Vote: step 1 with 0.3 + 0.3 (base, evidence) vs step 2 with 0.9 (concise) -> step 2.
    assert_eq!(v["step"], 2);
    // The primary pair is coherent; the pipeline's own verdict is the payload.
    assert_eq!(v["agent"], v["payload"]["agent"]);
    let p = &v["payload"];
    assert_eq!(p["source"], "vote");
    assert_eq!(p["usage"]["calls"], 4);
    assert!(p["judge"]["finding"]["agent_mismatch"].as_bool().unwrap());
    assert!(p["step_excerpt"].as_str().is_some());
    assert_eq!(p["evaluators"].as_array().unwrap().len(), 3);
    assert!(p["agreement"].as_f64().unwrap() > 0.3);
    assert!(
        v["revision"].as_str().unwrap().starts_with("maslens "),
        "{v}"
    );
    let written = std::fs::read_to_string(&wb).unwrap();
    let t: Value = serde_json::from_str(written.lines().next().unwrap()).unwrap();
    assert_eq!(
        t["labels"]["verdicts"][0]["method"],
        "locate/all-at-once+3eval"
    );
    assert_eq!(t["labels"]["verdicts"][0]["payload"]["step"], 2);
    assert_eq!(
        t["labels"]["verdicts"][0]["step"], 2,
        "the label is the one verdict"
    );
    assert!(t["labels"]["decisive"].is_object(), "gold labels are kept");

    // Human-readable output names agent, step, excerpt and rationale.
    let o = run(maslens(
        dir.path(),
        &[
            "locate",
            "--method",
            "llm",
            trace.to_str().unwrap(),
            "--model",
            &spec,
            "--variant",
            "judge-only",
            "-q",
        ],
    ))
    .await;
    let s = String::from_utf8_lossy(&o.stdout);
    // The fixture Judge names step 1, the terminal's: the verdict blames the agent whose
    // call produced it (step 0) and shows the named step as an alternative.
    assert!(
        s.contains("Excel_Expert at step 0 (LLM pipeline")
            && s.contains("named step (not an acting agent's)")
            && s.contains("Computer_terminal at step 1"),
        "{s}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_locate_runs_every_protocol_and_exports_refinement() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(fixture_handler()).await.unwrap();
    let spec = format!("openai:fixture@{}", server.base_url());
    let ds = format!("whowhen:{}", data("whowhen").display());
    for (protocol, variant, want_step) in [
        ("all-at-once", "judge-only", 1),
        ("step-by-step", "judge-only", 2),
        ("binary-search", "judge-only", 0),
        ("a2p", "judge-only", 2),
        ("taxonomy", "judge-only", 0),
        ("echo", "judge-only", 2),
        ("counterfactual", "judge-only", 2),
        ("all-at-once", "full", 2),
    ] {
        let o = run(maslens(
            dir.path(),
            &[
                "--json",
                "eval",
                "locate",
                &ds,
                "--subset",
                "Algorithm-Generated/",
                "--limit",
                "3",
                "--method",
                "llm",
                "--model",
                &spec,
                "--pair-rule",
                "independent",
                "--protocol",
                protocol,
                "--variant",
                variant,
                "--cache-mode",
                "off",
            ],
        ))
        .await;
        let r = stdout_json(&o);
        assert_eq!(r["cases"], 3, "{protocol}");
        assert!(r["usage"]["calls"].as_u64().unwrap() >= 3, "{protocol}");
        assert!(r["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
        for c in r["per_case"].as_array().unwrap() {
            assert_eq!(c["pred"]["step"], want_step, "{protocol} {variant}");
            if protocol == "taxonomy" {
                assert_eq!(c["pred"]["error_mode"], "FM-2.5", "{c}");
            }
        }
        if protocol == "counterfactual" {
            // One proposal and one check per case: the check accepted the first step.
            assert_eq!(r["usage"]["calls"], 6, "{}", r["usage"]);
        }
    }
    // Refinement export on the train side of a split, disjoint from the evaluated cases.
    let rdir = dir.path().join("refine");
    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "eval",
            "locate",
            &ds,
            "--subset",
            "Algorithm-Generated/1",
            "--split",
            "0.5",
            "--seed",
            "7",
            "--limit",
            "1",
            "--model",
            &spec,
            "--variant",
            "judge-only",
            "--export-refinement",
            rdir.to_str().unwrap(),
        ],
    ))
    .await;
    let r = stdout_json(&o);
    let train = std::fs::read_to_string(rdir.join("train.jsonl")).unwrap();
    let insts = std::fs::read_to_string(rdir.join("instances.jsonl")).unwrap();
    assert_eq!(
        train.lines().count() as u64,
        r["split"]["train"].as_u64().unwrap()
    );
    let evaluated: Vec<&str> = r["per_case"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    for (line, inst) in train.lines().zip(insts.lines()) {
        let ex: Value = serde_json::from_str(line).unwrap();
        let roles: Vec<&str> = ex["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["system", "user", "assistant"]);
        let answer: Value =
            serde_json::from_str(ex["messages"][2]["content"].as_str().unwrap()).unwrap();
        assert_eq!(answer["step"], 2, "target = the Evaluator vote");
        let inst: Value = serde_json::from_str(inst).unwrap();
        assert!(
            !evaluated.contains(&inst["trace"].as_str().unwrap()),
            "refinement set is disjoint from evaluation"
        );
        assert_eq!(inst["evaluators"].as_array().unwrap().len(), 3);
    }
    let sh = std::fs::read_to_string(rdir.join("trl_sft.sh")).unwrap();
    // Issue 17 item 8: TRL gets prompt-completion examples (loss on the answer only) and a
    // --max_length that cuts no example, hence no answer.
    let max_length: usize = sh
        .split("--max_length ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("--max_length in trl_sft.sh");
    assert!(sh.contains("--completion_only_loss true"), "{sh}");
    assert!(
        sh.contains(&format!("--dataset_name {}/trl", rdir.display())),
        "{sh}"
    );
    let trl = std::fs::read_to_string(rdir.join("trl/train.jsonl")).unwrap();
    assert_eq!(trl.lines().count(), train.lines().count());
    let mut longest = 0;
    for line in trl.lines() {
        let ex: Value = serde_json::from_str(line).unwrap();
        let prompt = ex["prompt"].as_array().unwrap();
        let completion = ex["completion"].as_array().unwrap();
        assert_eq!(prompt.len(), 2);
        assert_eq!(completion[0]["role"], "assistant");
        let tokens: usize = prompt
            .iter()
            .chain(completion)
            .map(|m| maslens_llm::estimate_tokens(m["content"].as_str().unwrap()) + 8)
            .sum();
        longest = longest.max(tokens);
        assert!(
            tokens <= max_length,
            "{tokens} tokens > --max_length {max_length}"
        );
    }
    assert!(
        sh.contains(&format!("Longest example: {longest} tokens")),
        "{sh}"
    );
    assert!(
        sh.contains("--lora_r 64")
            && sh.contains("--lora_alpha 128")
            && sh.contains("--num_train_epochs 3")
    );
    // A2P trains no Judge: an export in it is refused before any call.
    let o = run(maslens(
        dir.path(),
        &[
            "eval",
            "locate",
            &ds,
            "--limit",
            "1",
            "--model",
            &spec,
            "--protocol",
            "a2p",
            "--export-refinement",
            rdir.to_str().unwrap(),
        ],
    ))
    .await;
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("train no Judge"),
        "{o:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_reported_and_the_rest_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(fixture_handler()).await.unwrap();
    let spec = format!("openai:fixture@{}", server.base_url());
    std::fs::write(dir.path().join("bad.json"), "{\"history\": [}").unwrap();
    let good = data("whowhen/Algorithm-Generated/1.json");
    std::fs::copy(&good, dir.path().join("good.json")).unwrap();
    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "locate",
            "--method",
            "llm",
            dir.path().to_str().unwrap(),
            "--model",
            &spec,
            "--variant",
            "judge-only",
        ],
    ))
    .await;
    assert_eq!(o.status.code(), Some(1), "problems exit code");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.json"), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1);

    // The inputs every trace-reading command shares: `--strict` makes the bad record fatal...
    let o = run(maslens(
        dir.path(),
        &[
            "locate",
            dir.path().to_str().unwrap(),
            "--method",
            "prior",
            "--strict",
        ],
    ))
    .await;
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("bad.json"), "{}", stderr(&o));
    // ...and `-` reads records from stdin (native JSONL from `maslens import`).
    let jsonl = dir.path().join("good.jsonl");
    let o = run(maslens(
        dir.path(),
        &[
            "import",
            good.to_str().unwrap(),
            "-o",
            jsonl.to_str().unwrap(),
        ],
    ))
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut cmd = maslens(dir.path(), &["--json", "locate", "-", "--method", "prior"]);
    cmd.stdin(std::fs::File::open(&jsonl).unwrap());
    let o = run(cmd).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["trace"], "Algorithm-Generated/1");
    assert_eq!(v["method"], "prior");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prior_method_and_prior_voter() {
    let dir = tempfile::tempdir().unwrap();
    let ds = format!("whowhen:{}", data("whowhen").display());
    // The learned prior alone (no LLM), scored like any method.
    let o = run(maslens(
        dir.path(),
        &[
            "--json", "eval", "locate", &ds, "--method", "prior", "--prior", "builtin",
        ],
    ))
    .await;
    let r = stdout_json(&o);
    assert_eq!(r["method"], "prior");
    assert_eq!(r["agent_accuracy"]["n"], 98);
    assert_eq!(r["abstentions"], 0);
    // A prior file as an extra voter: all mass on step 4 with weight 2 outweighs the Evaluators
    // (0.3 + 0.3 on step 1, 0.9 on step 2).
    let server = FakeServer::start(fixture_handler()).await.unwrap();
    let spec = format!("openai:fixture@{}", server.base_url());
    let trace = data("whowhen/Algorithm-Generated/1.json");
    let n_steps = {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
        v["history"].as_array().unwrap().len()
    };
    let mut probs = vec![0.0; n_steps];
    probs[4] = 1.0;
    let pf = dir.path().join("prior.jsonl");
    std::fs::write(
        &pf,
        json!({"trace": "Algorithm-Generated/1", "probs": probs}).to_string(),
    )
    .unwrap();
    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "locate",
            "--method",
            "llm",
            trace.to_str().unwrap(),
            "--model",
            &spec,
            "--prior",
            pf.to_str().unwrap(),
            "--prior-weight",
            "2",
        ],
    ))
    .await;
    let v: Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(v["step"], 4, "{}", String::from_utf8_lossy(&o.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prior_narrowing_replaces_windows_on_long_traces_and_prior_joins_the_baselines() {
    let dir = tempfile::tempdir().unwrap();
    // The fixture handler, recording every prompt's last user message.
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (inner, log) = (fixture_handler(), seen.clone());
    let handler: Handler = Arc::new(move |body: &Value, n| {
        log.lock().unwrap().push(last_user(body));
        inner(body, n)
    });
    let server = FakeServer::start(handler).await.unwrap();
    let spec = format!("openai:fixture@{}", server.base_url());
    let trace = data("whowhen/Hand-Crafted/10.json");
    let judge = |extra: &[&str]| {
        let mut args = vec![
            "--json",
            "locate",
            "--method",
            "llm",
            trace.to_str().unwrap(),
            "--model",
            &spec,
            "--variant",
            "judge-only",
            "--context-size",
            "3072",
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(String::from).collect::<Vec<String>>()
    };
    let go = |args: Vec<String>| {
        let dir = dir.path().to_path_buf();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = run(maslens(&dir, &args)).await;
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            serde_json::from_str::<Value>(
                String::from_utf8_lossy(&o.stdout).lines().next().unwrap(),
            )
            .unwrap()
        }
    };
    // Without a prior: windows over the trace, several calls.
    let plain = go(judge(&[])).await;
    assert_eq!(
        plain["payload"]["long_trace"]["judge"]["kind"], "windows",
        "{plain}"
    );
    assert!(plain["payload"]["usage"]["calls"].as_u64().unwrap() > 1);
    // With prior-guided narrowing: one call that sees every step, the prior's top step in full.
    let n_steps = {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
        v["history"].as_array().unwrap().len()
    };
    let mut probs = vec![0.001; n_steps];
    probs[7] = 0.9;
    let pf = dir.path().join("prior.jsonl");
    std::fs::write(
        &pf,
        json!({"trace": "Hand-Crafted/10", "probs": probs}).to_string(),
    )
    .unwrap();
    let guided = go(judge(&[
        "--prior-narrowing",
        "--prior",
        pf.to_str().unwrap(),
    ]))
    .await;
    let s = &guided["payload"]["long_trace"]["judge"];
    assert_eq!(s["kind"], "focused", "{guided}");
    assert!(s["steps_full"].as_u64().unwrap() >= 1);
    assert_eq!(guided["payload"]["usage"]["calls"], 1);
    assert_eq!(guided["step"], 1, "the fixture Judge's answer");
    let prompt = seen.lock().unwrap().last().cloned().unwrap();
    assert!(prompt.contains("abridged by maslens"), "{prompt}");
    assert!(
        !prompt.contains("characters of step 7 abridged"),
        "{prompt}"
    );

    // `eval locate --prior` shows the prior next to the trivial baselines.
    let ds = format!("whowhen:{}", data("whowhen/Algorithm-Generated").display());
    let pred = dir.path().join("preds.jsonl");
    std::fs::write(
        &pred,
        json!({"trace": "Algorithm-Generated/1", "agent": "x", "step": 0}).to_string(),
    )
    .unwrap();
    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "eval",
            "locate",
            &ds,
            "--predictions",
            pred.to_str().unwrap(),
            "--prior",
            pf.to_str().unwrap(),
        ],
    ))
    .await;
    let r = stdout_json(&o);
    let b = &r["baselines"]["prior"];
    assert_eq!(b["agent_accuracy"]["n"], r["cases"], "{r}");
    assert!(r["baselines"]["random"].is_object());
}

/// Issue 15 item 4: `maslens locate` without --method is the stacked localizer (the pipeline's
/// ballots and the prior combined). This fixture's ballots all name an agent who does not act at
/// their step: the generic weights drop such ballots and the prior answers (`prior-fallback`,
/// with the prior's evidence as rationale); weights that keep and trust them move the answer to
/// the ballots' step, with the model's rationale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locate_defaults_to_the_stacked_localizer_and_falls_back_to_the_prior() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(fixture_handler()).await.unwrap();
    let spec = format!("openai:fixture@{}", server.base_url());
    let trace = data("whowhen/Algorithm-Generated/1.json");
    let first_line = |o: &std::process::Output| -> Value {
        assert!(o.status.success(), "{}", stderr(o));
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap()).unwrap()
    };
    let args = |stack: &str| {
        vec![
            "--json".to_string(),
            "locate".into(),
            trace.to_str().unwrap().into(),
            "--model".into(),
            spec.clone(),
            "--stack".into(),
            stack.into(),
        ]
    };
    let go = |a: Vec<String>| {
        let d = dir.path().to_path_buf();
        async move {
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            run(maslens(&d, &a)).await
        }
    };
    let v = first_line(&go(args("generic")).await);
    assert_eq!(v["method"], "stacked", "{v}");
    let d = &v["payload"];
    assert_eq!(d["step_source"], "prior-fallback", "{v}");
    assert_eq!(d["pipeline"]["source"], "vote");
    assert_eq!(d["pipeline"]["step"], 2);
    assert_eq!(v["step"], d["prior"][1], "{v}");
    assert_eq!(d["rationale_from"], "prior");
    assert!(v["rationale"].as_str().unwrap().starts_with("Step "), "{v}");
    // weights that keep the incoherent ballots and trust the Evaluators
    let w = dir.path().join("w.json");
    let level = json!({"judge": 0.0, "evaluators": 1000.0, "drop_incoherent": false});
    std::fs::write(
        &w,
        json!({"format": "maslens-stack/v1", "model": null, "step": level, "agent": level})
            .to_string(),
    )
    .unwrap();
    let v = first_line(&go(args(w.to_str().unwrap())).await);
    assert_eq!(
        (v["step"].as_u64(), v["payload"]["step_source"].as_str()),
        (Some(2), Some("stack"))
    );
    assert_eq!(v["payload"]["rationale_from"], "llm", "{v}");
    assert_eq!(v["payload"]["coherent"], true);
    // the text says where the answer came from, why, and both single answers
    let mut a = args("generic");
    a.remove(0);
    let o = go(a).await;
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(
            "(the prior alone: every LLM answer named an agent who does not act at its step"
        ),
        "{out}"
    );
    assert!(out.contains("why (the prior's evidence): Step "), "{out}");
    assert!(out.contains("LLM pipeline alone: "), "{out}");
    // a weights file that is not one is a clear error
    std::fs::write(&w, "{}").unwrap();
    let o = go(args(w.to_str().unwrap())).await;
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("w.json"), "{}", stderr(&o));
}

/// Issue 15 item 1 / issue 40: `--method prior` never prints "AGENT at step N" for an agent that
/// does not act at step N: the primary pair is coherent, and where the prior's two heads disagree
/// the agent head's answer is an alternative, shown as such (JSON and text alike).
#[test]
fn prior_verdicts_never_pair_an_agent_with_a_step_it_does_not_act_at() {
    let dir = tempfile::tempdir().unwrap();
    let hc = data("whowhen/Hand-Crafted");
    let hc = hc.to_str().unwrap();
    let json = maslens(dir.path(), &["locate", hc, "--method", "prior", "--json"])
        .output()
        .unwrap();
    let text = maslens(dir.path(), &["locate", hc, "--method", "prior"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    let traces: Vec<maslens_trace::Trace> =
        maslens_trace::read_path(std::path::Path::new(hc), maslens_trace::Format::Auto)
            .filter_map(|r| r.ok().map(|i| i.trace))
            .collect();
    let mut separate = 0;
    for line in String::from_utf8_lossy(&json.stdout).lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let id = v["trace"].as_str().unwrap();
        let t = traces.iter().find(|t| t.id == id).unwrap();
        let (agent, step) = (v["agent"].as_str().unwrap(), v["step"].as_u64().unwrap());
        assert_eq!(t.actor_at(step as usize), Some(agent), "{id}");
        assert!(t.is_acting(agent), "{id}");
        let shown: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with(&format!("{id}:")))
            .take_while(|l| l.starts_with(&format!("{id}:")) || l.starts_with("  "))
            .collect();
        assert!(
            shown[0].starts_with(&format!("{id}: {agent} at step {step} (prior")),
            "{shown:?}"
        );
        let head = v["heads"]["agent"].as_str().unwrap();
        if head != agent {
            assert_eq!(v["payload"]["coherent"], false);
            assert!(
                shown
                    .iter()
                    .any(|l| l.starts_with("  alternative (agent-level answer")
                        && l.contains(&format!(": {head} at step "))),
                "{shown:?}"
            );
            separate += 1;
        }
    }
    assert!(
        separate > 0,
        "the shipped prior answers some cases with two heads apart"
    );
}

/// The served fine-tuned Judge, stood in for by a fixture server (hand-written replies, not a
/// model): it flags step 2 in step-by-step.
fn judge_ft_handler() -> Handler {
    Arc::new(|body: &Value, _| {
        let u = last_user(body);
        let decisive = u.contains("ends at step 2 ");
        Reply::Text(format!(
            r#"{{"reason":"fine-tuned","decisive":{decisive},"confidence":0.8}}"#
        ))
    })
}

/// Issue 17 items 6 and 7: AgentLocate's loop as files. The export writes examples in the
/// protocol that made them (step-by-step here: one per reviewed step, the target flagged) with
/// z_q in the target, a manifest, and the scripts; `evaluate.sh` then evaluates a served
/// Judge_ft as `--variant judge-ft` on the other side of the same split, and the report says
/// which output it gives and what the Judge was fine-tuned on. Training itself (TRL on a GPU)
/// is the one step not run here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judge_ft_loop_exports_protocol_examples_and_evaluates_the_served_adapter() {
    let dir = tempfile::tempdir().unwrap();
    let base = FakeServer::start(fixture_handler()).await.unwrap();
    let base_spec = format!("openai:fixture@{}", base.base_url());
    let ds = format!("whowhen:{}", data("whowhen").display());
    let rdir = dir.path().join("refine");
    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "eval",
            "locate",
            &ds,
            "--subset",
            "Algorithm-Generated/1",
            "--split",
            "0.5",
            "--seed",
            "7",
            "--limit",
            "1",
            "--model",
            &base_spec,
            "--protocol",
            "step-by-step",
            "--variant",
            "judge",
            "--export-refinement",
            rdir.to_str().unwrap(),
        ],
    ))
    .await;
    let r = stdout_json(&o);
    assert_eq!(r["config"]["variant"], "judge");
    assert!(r["config"]["output"]
        .as_str()
        .unwrap()
        .starts_with("Variant I (eq. 1)"));
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(rdir.join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["format_version"], 2);
    assert_eq!(manifest["protocol"], "step-by-step");
    let trained: Vec<String> = manifest["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    assert_eq!(trained.len() as u64, r["split"]["train"].as_u64().unwrap());
    // Every instance: the Judge flagged step 2, the vote chose step 2 (concise 0.9 against
    // 0.3 + 0.3 for step 1), so the examples are the step-by-step calls for steps 0, 1, 2.
    let train = std::fs::read_to_string(rdir.join("train.jsonl")).unwrap();
    let insts: Vec<Value> = std::fs::read_to_string(rdir.join("instances.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(insts.len(), trained.len());
    assert_eq!(
        train.lines().count(),
        insts
            .iter()
            .map(|i| i["examples"].as_u64().unwrap() as usize)
            .sum::<usize>()
    );
    let mut flags = Vec::new();
    for line in train.lines() {
        let ex: Value = serde_json::from_str(line).unwrap();
        let user = ex["messages"][1]["content"].as_str().unwrap();
        assert!(
            user.contains("Your task: decide whether the action at step"),
            "step-by-step prompt"
        );
        let a: Value =
            serde_json::from_str(ex["messages"][2]["content"].as_str().unwrap()).unwrap();
        flags.push(a["decisive"].as_bool().unwrap());
    }
    assert_eq!(flags, [false, false, true].repeat(insts.len()));
    for i in &insts {
        assert_eq!(
            (i["format_version"].as_u64(), i["protocol"].as_str()),
            (Some(2), Some("step-by-step"))
        );
        assert_eq!(i["step"], 2);
        // z_q: the Judge agreed with the verified step; the strongest dissent (step 1) is named.
        let reason = i["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("Step 2 (") && reason.contains("is decisive"),
            "{reason}"
        );
        assert!(reason.contains("Step 1 was also considered"), "{reason}");
    }
    let serve = std::fs::read_to_string(rdir.join("serve_adapter.sh")).unwrap();
    assert!(
        serve.contains("--enable-lora") && serve.contains("--max-lora-rank 64"),
        "{serve}"
    );
    assert!(serve.contains("convert_lora_to_gguf.py"), "{serve}");

    // The served Judge_ft, evaluated by the export's own script.
    let ft = FakeServer::start(judge_ft_handler()).await.unwrap();
    let ft_spec = format!("openai:judge-ft@{}", ft.base_url());
    let mut cmd = std::process::Command::new("sh");
    cmd.arg(rdir.join("evaluate.sh"))
        // The Judge_ft's own step, scored as Who&When scores it (the fixture's step 2 can be a
        // terminal's, which the coherent rule moves to the agent that called it).
        .args([
            ft_spec.as_str(),
            "--limit",
            "2",
            "--cache-mode",
            "off",
            "--pair-rule",
            "independent",
        ])
        .env("MASLENS", env!("CARGO_BIN_EXE_maslens"))
        .env("MASLENS_HOME", dir.path())
        .env("MASLENS_CACHE", dir.path().join("cache.sqlite"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("MASLENS_MODEL")
        .env_remove("MASLENS_CONFIG")
        .env("XDG_CONFIG_HOME", dir.path().join("xdg-config"));
    let o = run(cmd).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let rep: Value = serde_json::from_str(
        &std::fs::read_to_string(rdir.join("eval-round1/report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(rep["config"]["variant"], "judge-ft");
    assert_eq!(rep["config"]["pair_rule"], "independent");
    assert_eq!(rep["method"], "locate/step-by-step/judge-ft");
    assert!(
        rep["config"]["output"]
            .as_str()
            .unwrap()
            .starts_with("AgentLocate"),
        "{}",
        rep["config"]["output"]
    );
    let f = &rep["config"]["finetune"];
    assert_eq!(
        (f["targets"].as_str(), f["round"].as_u64()),
        (Some("verified"), Some(1))
    );
    assert_eq!(f["evaluated_in_refinement_data"], 0);
    assert_eq!(rep["cases"], 2);
    for c in rep["per_case"].as_array().unwrap() {
        assert!(!trained.contains(&c["id"].as_str().unwrap().to_string()));
        assert_eq!(
            c["pred"]["step"], 2,
            "the served Judge_ft's answer is the output"
        );
    }
    let md = std::fs::read_to_string(rdir.join("eval-round1/report.md")).unwrap();
    assert!(md.contains("- output: AgentLocate"), "{md}");

    // Evaluating on the refinement traces themselves is reported (exit 1), as is the
    // producing model passed as if it were fine-tuned.
    let o = run(maslens(
        dir.path(),
        &[
            "--json",
            "eval",
            "locate",
            &ds,
            "--subset",
            &trained[0],
            "--model",
            &base_spec,
            "--protocol",
            "step-by-step",
            "--variant",
            "iii",
            "--finetuned-on",
            rdir.to_str().unwrap(),
            "--cache-mode",
            "off",
        ],
    ))
    .await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("not held out") && err.contains("made the refinement data"),
        "{err}"
    );
    // --finetuned-on without the fine-tuned variant is refused before any call.
    let o = run(maslens(
        dir.path(),
        &[
            "eval",
            "locate",
            &ds,
            "--model",
            &base_spec,
            "--finetuned-on",
            rdir.to_str().unwrap(),
        ],
    ))
    .await;
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--variant judge-ft"));
}

/// `locate --out FILE` killed half-way leaves no half-written FILE (issue 16 item 11): the file
/// is written beside it and renamed once complete. The model here accepts the connection and
/// never answers, so the run is killed while it waits; before, FILE existed (empty) by then.
#[test]
fn killed_locate_leaves_no_partial_out_file() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Accept and hold the connections: no answer ever comes.
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept() {
            held.push(s);
            let _ = tx.send(());
        }
    });
    let out = dir.path().join("verdicts.jsonl");
    let model = format!("openai:silent@http://127.0.0.1:{port}/v1");
    let mut child = maslens(
        dir.path(),
        &[
            "locate",
            data("whowhen/Hand-Crafted/10.json").to_str().unwrap(),
            "--method",
            "llm",
            "--model",
            &model,
            "--request-timeout",
            "600",
            "--cache-mode",
            "off",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    // The run is waiting for its first model answer.
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("locate called the model");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!out.exists(), "a killed run left {}", out.display());
    // A complete run puts the file under its name, with the trace and its verdict.
    let o = maslens(
        dir.path(),
        &[
            "locate",
            data("whowhen/Hand-Crafted/10.json").to_str().unwrap(),
            "--method",
            "prior",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line = std::fs::read_to_string(&out).unwrap();
    let t: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    assert_eq!(t["labels"]["verdicts"][0]["method"], "prior");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("verdicts") && n != "verdicts.jsonl")
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}
