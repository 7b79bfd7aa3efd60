//! `maslens config` (where the config file is, what is in force and why), a command reading its
//! model and budget from the file, and `maslens man`. No model is run.

mod common;
use common::*;

use serde_json::Value;
use std::path::Path;

fn row<'a>(show: &'a Value, setting: &str) -> &'a Value {
    show.as_array()
        .unwrap()
        .iter()
        .find(|r| r["setting"] == setting)
        .unwrap_or_else(|| panic!("no row {setting} in {show}"))
}

fn show(home: &Path, extra: &[&str], env: &[(&str, &str)]) -> Value {
    let mut args = vec!["config", "show", "--json"];
    args.extend_from_slice(extra);
    let mut c = maslens(home, &args);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    stdout_json(&o)
}

#[test]
fn init_then_show_names_each_source() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let expected = home.join("xdg-config/maslens/config.toml");
    let o = maslens(home, &["config", "path"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        expected.display().to_string()
    );
    // Nothing yet: every value is a default.
    let s = show(home, &[], &[]);
    assert_eq!(row(&s, "model")["value"], "local:smollm2-135m");
    assert_eq!(row(&s, "model")["source"], "default");
    // init writes the commented template, once.
    let o = maslens(home, &["config", "init"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&expected)
        .unwrap()
        .contains("[budget]"));
    let o = maslens(home, &["config", "init"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("exists"), "{}", stderr(&o));
    std::fs::write(
        &expected,
        "model = \"openai/gpt-4o-mini\"\nconcurrency = 3\n[budget]\nmax_cost = 2.5\n",
    )
    .unwrap();
    let s = show(home, &[], &[]);
    let from_file = format!("config {}", expected.display());
    assert_eq!(row(&s, "config file")["source"], "config directory");
    assert_eq!(row(&s, "model")["value"], "openai/gpt-4o-mini");
    assert_eq!(row(&s, "model")["source"], from_file.as_str());
    assert_eq!(row(&s, "concurrency")["value"], "3");
    assert_eq!(row(&s, "budget.max_cost")["value"], "2.5");
    assert_eq!(row(&s, "max_retries")["source"], "default");
    // The environment beats the file, a flag beats the environment.
    let env = [("MASLENS_MODEL", "anthropic/claude-3-5-haiku-latest")];
    let s = show(home, &[], &env);
    assert_eq!(row(&s, "model")["source"], "env MASLENS_MODEL");
    let s = show(
        home,
        &["--model", "local:smollm2-135m", "--concurrency", "1"],
        &env,
    );
    assert_eq!(row(&s, "model")["source"], "flag");
    assert_eq!(row(&s, "concurrency")["value"], "1");
    // MASLENS_CONFIG wins over the config directory.
    let other = home.join("other.toml");
    std::fs::write(&other, "max_retries = 9\n").unwrap();
    let s = show(home, &[], &[("MASLENS_CONFIG", other.to_str().unwrap())]);
    assert_eq!(row(&s, "config file")["source"], "env MASLENS_CONFIG");
    assert_eq!(row(&s, "max_retries")["value"], "9");
    assert_eq!(row(&s, "model")["source"], "default");
    // The text form has one line per setting.
    let o = maslens(home, &["config", "show"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("model") && l.contains("openai/gpt-4o-mini")),
        "{text}"
    );
}

#[test]
fn bad_config_files_are_named_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let o = maslens(home, &["config", "show"])
        .env("MASLENS_CONFIG", home.join("missing.toml"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("MASLENS_CONFIG") && stderr(&o).contains("missing.toml"),
        "{}",
        stderr(&o)
    );
    let bad = home.join("bad.toml");
    std::fs::write(&bad, "concurency = 4\n").unwrap();
    let o = maslens(home, &["config", "show", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("bad.toml") && e.contains("concurency"), "{e}");
}

#[test]
fn the_old_place_is_read_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    std::fs::write(home.join("llm.toml"), "concurrency = 2\n").unwrap();
    let o = maslens(home, &["config", "show", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("move it to"), "{}", stderr(&o));
    assert_eq!(row(&stdout_json(&o), "concurrency")["value"], "2");
}

#[test]
fn commands_take_their_model_and_budget_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let cfg = home.join("xdg-config/maslens");
    std::fs::create_dir_all(&cfg).unwrap();
    // The model: an embedded model that does not exist, so the error shows it was used.
    std::fs::write(cfg.join("config.toml"), "model = \"local:nosuch-model\"\n").unwrap();
    let o = maslens(
        home,
        &[
            "locate",
            "../../examples/whowhen-style.json",
            "--cache-mode",
            "off",
        ],
    )
    .current_dir(env!("CARGO_MANIFEST_DIR"))
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("nosuch-model"), "{}", stderr(&o));
    // The budget: zero calls allowed. One at a time, the first request is refused by the budget
    // and the rest are not started (without the budget both would reach the stub: 2 errors).
    let (base, calls) = stub_model_server();
    std::fs::write(
        cfg.join("config.toml"),
        format!("model = \"openai:x@{base}\"\n[budget]\nmax_calls = 0\n"),
    )
    .unwrap();
    let reqs =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/inputs/batch-requests.jsonl");
    let o = maslens(
        home,
        &[
            "batch",
            "run",
            reqs.to_str().unwrap(),
            "--cache-mode",
            "off",
            "--concurrency",
            "1",
            "--json",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v = stdout_json(&o);
    assert_eq!(v["summary"]["errors"], 1, "{v}");
    assert_eq!(v["summary"]["skipped_budget"], 1, "{v}");
    assert!(stderr(&o).contains("budget exhausted"), "{}", stderr(&o));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn man_pages_for_every_command_with_examples() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man");
    let o = maslens(dir.path(), &["man", "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    for page in [
        "maslens.1",
        "maslens-locate.1",
        "maslens-config-show.1",
        "maslens-eval-locate.1",
    ] {
        let text =
            std::fs::read_to_string(out.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}");
    }
    let locate = std::fs::read_to_string(out.join("maslens-locate.1")).unwrap();
    assert!(
        locate.contains("maslens locate examples/whowhen\\-style.json"),
        "{locate}"
    );
    let o = maslens(dir.path(), &["man"]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains(".TH"));
}

/// A budget stop is exit code 1 on every LLM-backed command (a rerun resumes from the cache),
/// never 0 and never 2, even when it stops before the first answer. The budget comes from the
/// config file; the model is a stub that counts every call past its preflight, and none may come.
#[test]
fn a_budget_stop_exits_1_on_every_llm_command() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let cfg = home.join("xdg-config/maslens");
    std::fs::create_dir_all(&cfg).unwrap();
    let (base, calls) = stub_model_server();
    std::fs::write(
        cfg.join("config.toml"),
        format!("model = \"openai:x@{base}\"\nmax_retries = 0\n[budget]\nmax_calls = 0\n"),
    )
    .unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let trace = root.join("examples/whowhen-style.json");
    let t = trace.to_str().unwrap();
    let dataset = format!("whowhen:{t}");
    for args in [
        vec!["locate", t],
        vec!["scan", t],
        vec!["credit", t],
        vec!["eval", "locate", dataset.as_str(), "-o", "ev"],
    ] {
        let o = maslens(home, &args).current_dir(home).output().unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert!(e.contains("budget"), "{args:?}: {e}");
        assert_eq!(
            calls.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{args:?} called the model: {e}"
        );
    }
}
