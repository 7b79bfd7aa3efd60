//! Dependencies point down: every workspace crate may depend only on the crates of ours that the
//! map below allows. The same map is the table under "Dependencies point down" in
//! docs/ARCHITECTURE.md; change both together.
//!
//! Normal and build dependencies are checked against the map. Dev-dependencies are checked only
//! for the two crates at the top: nothing depends on `maslens` (the binary), and only `maslens`
//! depends on `maslens-server`.

use std::collections::BTreeMap;
use std::process::Command;

/// What a crate of ours may depend on.
enum May {
    /// Only these crates of ours.
    Only(&'static [&'static str]),
    /// Any crate of ours (the binary).
    Anything,
}

const TRACE: &str = "maslens-trace";
const OTLP: &str = "maslens-otlp";
const STORE: &str = "maslens-store";
const LLM: &str = "maslens-llm";
const RENDER: &str = "maslens-render";
const EVAL: &str = "maslens-eval";
const LOCATE: &str = "maslens-locate";
const IMPLICIT: &str = "maslens-implicit";
const CREDIT: &str = "maslens-credit";
const PRIOR: &str = "maslens-prior";
const CORE: &str = "maslens-core";
const SERVER: &str = "maslens-server";
const PYTHON: &str = "maslens-python";
const CLI: &str = "maslens";
const HACK: &str = "maslens-workspace-hack";

/// The dependency map. A crate listed here that does not exist (yet) is fine; a workspace crate
/// missing from it is an error, so every new crate gets a place.
const MAP: &[(&str, May)] = &[
    (TRACE, May::Only(&[])),
    (OTLP, May::Only(&[TRACE])),
    (STORE, May::Only(&[TRACE, OTLP])),
    (LLM, May::Only(&[])),
    (RENDER, May::Only(&[TRACE, LLM])),
    (EVAL, May::Only(&[TRACE, LLM])),
    // Method crates: never one another.
    (LOCATE, May::Only(&[TRACE, LLM, RENDER, EVAL])),
    (IMPLICIT, May::Only(&[TRACE, LLM, RENDER, EVAL])),
    (CREDIT, May::Only(&[TRACE, LLM, RENDER, EVAL])),
    (PRIOR, May::Only(&[TRACE, EVAL])),
    (
        CORE,
        May::Only(&[TRACE, LLM, RENDER, EVAL, LOCATE, IMPLICIT, CREDIT, PRIOR]),
    ),
    (
        SERVER,
        May::Only(&[
            TRACE, OTLP, STORE, LLM, RENDER, EVAL, LOCATE, IMPLICIT, CREDIT, PRIOR, CORE,
        ]),
    ),
    // The Python package's native module: a front end like the CLI, but never the server.
    (
        PYTHON,
        May::Only(&[
            TRACE, LLM, RENDER, EVAL, LOCATE, IMPLICIT, CREDIT, PRIOR, CORE, HACK,
        ]),
    ),
    // No code, only pinned features of outside crates (its Cargo.toml): the front ends use it.
    (HACK, May::Only(&[])),
    (CLI, May::Anything),
];

const SEE: &str = "see \"Dependencies point down\" in docs/ARCHITECTURE.md";

/// `cargo metadata` of the workspace (no dependencies resolved, offline).
fn metadata() -> serde_json::Value {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata writes JSON")
}

/// Workspace crates and their dependencies on other workspace crates: `(name, [(dep, kind)])`,
/// kind being `normal`, `build` or `dev`.
fn workspace() -> BTreeMap<String, Vec<(String, String)>> {
    let meta = metadata();
    let packages = meta["packages"].as_array().expect("packages list");
    let ours: Vec<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    packages
        .iter()
        .map(|p| {
            let name = p["name"].as_str().unwrap_or_default().to_string();
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| {
                    let dep = d["name"].as_str()?;
                    ours.iter().any(|o| o == dep).then(|| {
                        let kind = d["kind"].as_str().unwrap_or("normal").to_string();
                        (dep.to_string(), kind)
                    })
                })
                .collect();
            (name, deps)
        })
        .collect()
}

/// Every forbidden edge of `crates`, as one line each.
fn violations(crates: &BTreeMap<String, Vec<(String, String)>>) -> Vec<String> {
    let mut bad = Vec::new();
    for (name, deps) in crates {
        let Some((_, may)) = MAP.iter().find(|(n, _)| n == name) else {
            bad.push(format!(
                "workspace crate {name} is not in the dependency map: give it a place in the \
                 map of crates/cli/tests/architecture.rs and the table in docs/ARCHITECTURE.md"
            ));
            continue;
        };
        for (dep, kind) in deps {
            if dep == name {
                continue;
            }
            if dep == CLI {
                bad.push(format!(
                    "{name} -> {dep} ({kind} dependency): nothing depends on the binary crate"
                ));
                continue;
            }
            if dep == SERVER && name != CLI {
                bad.push(format!(
                    "{name} -> {dep} ({kind} dependency): only {CLI} depends on {SERVER}"
                ));
                continue;
            }
            if kind == "dev" {
                continue;
            }
            let allowed = match may {
                May::Anything => true,
                May::Only(list) => list.contains(&dep.as_str()),
            };
            if !allowed {
                let list = match may {
                    May::Only([]) => "none of ours".to_string(),
                    May::Only(list) => list.join(", "),
                    May::Anything => unreachable!(),
                };
                bad.push(format!(
                    "{name} -> {dep} ({kind} dependency) is forbidden: {name} may depend on {list}"
                ));
            }
        }
    }
    bad
}

#[test]
fn dependencies_point_down() {
    let crates = workspace();
    assert!(
        crates.contains_key(TRACE) && crates.contains_key(CLI),
        "cargo metadata lists the workspace: {:?}",
        crates.keys().collect::<Vec<_>>()
    );
    let bad = violations(&crates);
    assert!(bad.is_empty(), "{}\n({SEE})", bad.join("\n"));
}

/// The checker itself: forbidden edges, unknown crates and dev-dependencies are caught.
#[test]
fn the_check_catches_forbidden_edges() {
    let dep = |d: &str, k: &str| (d.to_string(), k.to_string());
    let mut crates = BTreeMap::new();
    crates.insert(TRACE.to_string(), vec![]);
    crates.insert(LOCATE.to_string(), vec![dep(TRACE, "normal")]);
    crates.insert(
        CLI.to_string(),
        vec![dep(SERVER, "normal"), dep(LOCATE, "normal")],
    );
    assert!(violations(&crates).is_empty(), "{:?}", violations(&crates));
    // A method crate on another method crate.
    crates.insert(LOCATE.to_string(), vec![dep(PRIOR, "normal")]);
    let v = violations(&crates);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("maslens-locate -> maslens-prior"), "{v:?}");
    // A build dependency counts; a dev-dependency below the top does not.
    crates.insert(
        LOCATE.to_string(),
        vec![dep(CREDIT, "build"), dep(PRIOR, "dev")],
    );
    assert_eq!(violations(&crates).len(), 1);
    // Nothing depends on the binary, even for tests; only the binary depends on the server.
    crates.insert(TRACE.to_string(), vec![dep(CLI, "dev")]);
    crates.insert(CORE.to_string(), vec![dep(SERVER, "dev")]);
    assert_eq!(violations(&crates).len(), 3);
    // A crate the map does not place.
    crates.insert("maslens-new".to_string(), vec![]);
    let v = violations(&crates);
    assert!(
        v.iter()
            .any(|l| l.contains("maslens-new is not in the dependency map")),
        "{v:?}"
    );
}

fn architecture_md() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ARCHITECTURE.md");
    std::fs::read_to_string(&p).expect("docs/ARCHITECTURE.md")
}

/// The table under "Dependencies point down" in docs/ARCHITECTURE.md is this file's map: a crate
/// row of the table names exactly the crates the map allows (`anything` for the binary).
#[test]
fn the_documented_dependency_table_is_the_map() {
    let doc = architecture_md();
    let short = |c: &str| c.strip_prefix("maslens-").unwrap_or(c).to_string();
    let mut rows = 0;
    for line in doc.lines().filter(|l| l.starts_with("| `maslens")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells[1]
            .trim_matches('`')
            .split_whitespace()
            .next()
            .unwrap_or_default();
        let name = name.trim_matches('`');
        let Some((_, may)) = MAP.iter().find(|(n, _)| *n == name) else {
            panic!("docs/ARCHITECTURE.md lists {name}, which the map does not know");
        };
        // The cell's crate names: the words before any parenthesis.
        let cell = cells[2].split('(').next().unwrap_or_default();
        let mut documented: Vec<String> = cell
            .split(',')
            .map(|w| w.trim().to_string())
            .filter(|w| !w.is_empty() && w != "none")
            .collect();
        documented.sort();
        match may {
            May::Anything => assert_eq!(documented, vec!["anything".to_string()], "{name}"),
            May::Only(list) => {
                let mut want: Vec<String> = list.iter().map(|c| short(c)).collect();
                want.sort();
                // "and anything below core" is the server's row: core's list plus otlp, store.
                if cells[2].contains("anything below core") {
                    documented.retain(|w| !w.contains("anything below core"));
                    documented.retain(|w| !w.starts_with("and "));
                    let mut below: Vec<String> = documented.clone();
                    if let Some((_, May::Only(core))) = MAP.iter().find(|(n, _)| *n == CORE) {
                        below.extend(core.iter().map(|c| short(c)));
                    }
                    below.sort();
                    below.dedup();
                    assert_eq!(below, want, "{name} row of docs/ARCHITECTURE.md");
                } else {
                    assert_eq!(documented, want, "{name} row of docs/ARCHITECTURE.md");
                }
            }
        }
        rows += 1;
    }
    assert_eq!(rows, MAP.len(), "one table row per crate of the map");
}

/// "Only `llm` (feature `local`) links llama.cpp": no other workspace crate depends on the
/// llama.cpp bindings.
#[test]
fn only_llm_links_llama_cpp() {
    assert!(architecture_md().contains("Only `llm` (feature `local`) links llama.cpp"));
    let meta = metadata();
    let linking: Vec<&str> = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            p["dependencies"].as_array().into_iter().flatten().any(|d| {
                d["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("llama-cpp"))
            })
        })
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(linking, vec![LLM]);
}

/// The artifact owners' version fields as the map states them.
#[test]
fn documented_artifact_versions_are_the_code_s() {
    let doc = architecture_md();
    let eval = format!(
        "`format_version` {} with provenance",
        maslens_eval::run::REPORT_FORMAT_VERSION
    );
    assert!(
        doc.contains(&eval),
        "docs/ARCHITECTURE.md should say {eval}"
    );
    let prior = format!(
        "prior report (`prior train/eval --report`): `maslens-prior` (`run.rs`, `format_version` {})",
        maslens_prior::run::REPORT_FORMAT_VERSION
    );
    assert!(
        doc.contains(&prior),
        "docs/ARCHITECTURE.md should say {prior}"
    );
    let trace = format!(
        "`format_version` {} on every trace",
        maslens_trace::FORMAT_VERSION
    );
    assert!(
        doc.contains(&trace),
        "docs/ARCHITECTURE.md should say {trace}"
    );
}
