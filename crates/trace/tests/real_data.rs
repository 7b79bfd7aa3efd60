//! Importers on the real data in ../shared/data (read in place, never copied).

use maslens_trace::import::{read_path, Format};
use maslens_trace::{AgentKind, Outcome, Severity};
use std::path::PathBuf;

fn data(rel: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/"
    ))
    .join(rel)
}

/// One line per trace: id, steps, agents with kinds, label, outcome, diagnostics.
fn summary(dir: &str, format: Format) -> (String, usize, usize) {
    let mut out = String::new();
    let (mut n, mut warnings) = (0, 0);
    for item in read_path(&data(dir), format) {
        let imp = item.unwrap_or_else(|e| panic!("import error: {e}"));
        n += 1;
        let t = &imp.trace;
        let agents: Vec<String> = t
            .agents
            .iter()
            .map(|a| format!("{}:{}", a.name, a.kind.as_str()))
            .collect();
        let label = t
            .labels
            .decisive
            .as_ref()
            .map(|d| format!("{}@{}", d.agent, d.step))
            .unwrap_or_default();
        let faulty: Vec<String> = t
            .labels
            .faulty_agents
            .iter()
            .map(|f| format!("{}/{}", f.agent, f.error_mode.as_deref().unwrap_or("-")))
            .collect();
        out.push_str(&format!(
            "{} steps={} outcome={} label={} faulty=[{}] agents=[{}]\n",
            t.id,
            t.steps.len(),
            t.outcome.as_str(),
            label,
            faulty.join(","),
            agents.join(",")
        ));
        for d in &imp.diagnostics {
            assert_ne!(d.severity, Severity::Error, "{}: {d}", t.id);
            if !d.message.contains("empty content") {
                out.push_str(&format!(
                    "  {}\n",
                    d.to_string()
                        .replace(&data("").display().to_string(), "DATA/")
                ));
            }
            warnings += 1;
        }
    }
    (out, n, warnings)
}

#[test]
fn whowhen_algorithm_generated_imports_without_errors() {
    let (s, n, _) = summary("whowhen/Algorithm-Generated", Format::Auto);
    assert_eq!(n, 67);
    insta::assert_snapshot!(s);
}

#[test]
fn whowhen_hand_crafted_imports_without_errors() {
    let (s, n, _) = summary("whowhen/Hand-Crafted", Format::WhoWhen);
    assert_eq!(n, 31);
    insta::assert_snapshot!(s);
}

#[test]
fn aegis_sample_imports_without_errors() {
    let (s, n, _) = summary("aegis/sample.jsonl", Format::Auto);
    assert_eq!(n, 5);
    insta::assert_snapshot!(s);
}

#[test]
fn whowhen_normalization_details() {
    let p = data("whowhen/Hand-Crafted/20.json");
    let imp = read_path(&p, Format::Auto).next().unwrap().unwrap();
    let t = &imp.trace;
    assert_eq!(t.id, "Hand-Crafted/20");
    assert_eq!(t.outcome, Outcome::Failure);
    assert_eq!(t.source.format, "whowhen");
    // `Orchestrator (-> WebSurfer)` acts as Orchestrator; the raw label is kept.
    assert_eq!(t.steps[3].agent, "Orchestrator");
    assert_eq!(t.steps[3].speaker, "Orchestrator (-> WebSurfer)");
    assert_eq!(t.agent_kind("Orchestrator"), AgentKind::Orchestrator);
    assert_eq!(t.agent_kind("human"), AgentKind::Human);
    // The label is kept as given (WebSurfer at step 3) and the mismatch is a warning.
    let d = t.labels.decisive.as_ref().unwrap();
    assert_eq!((d.agent.as_str(), d.step), ("WebSurfer", 3));
    let w: Vec<_> = imp
        .diagnostics
        .iter()
        .filter(|d| d.message.contains("does not act at step 3"))
        .collect();
    assert_eq!(w.len(), 1, "{:#?}", imp.diagnostics);
    assert_eq!(w[0].severity, Severity::Warning);
    assert!(w[0]
        .file
        .as_deref()
        .unwrap()
        .ends_with("Hand-Crafted/20.json"));

    let p = data("whowhen/Algorithm-Generated/1.json");
    let t = read_path(&p, Format::Auto).next().unwrap().unwrap().trace;
    assert_eq!(t.id, "Algorithm-Generated/1");
    assert_eq!(t.metadata.get("level"), Some(&serde_json::json!("2")));
    assert!(t.agent("Excel_Expert").unwrap().system_prompt.is_some());
    assert_eq!(t.agent_kind("Computer_terminal"), AgentKind::Tool);
}

#[test]
fn aegis_normalization_details() {
    let items: Vec<_> = read_path(&data("aegis/sample.jsonl"), Format::Aegis)
        .map(|r| r.unwrap())
        .collect();
    let dylan = &items[1].trace;
    assert_eq!(dylan.id, "GSM8K_gpt-4o-mini_dylan_7_005e5d50");
    assert_eq!(dylan.source.record.as_deref(), Some("line 2"));
    // `assistant1` in the labels is written in the conversation's spelling.
    assert_eq!(dylan.labels.faulty_agents[0].agent, "Assistant1");
    assert_eq!(
        dylan.labels.faulty_agents[0].error_mode.as_deref(),
        Some("FM-3.3")
    );
    assert_eq!(dylan.steps[0].index, 0);
    assert_eq!(dylan.metadata["source_steps"][0], serde_json::json!(1));
    assert_eq!(dylan.steps[0].phase.as_deref(), Some("reasoning"));
    assert_eq!(dylan.outcome, Outcome::Unknown);
    let macnet = &items[2].trace;
    assert!(macnet.agent("Node0").unwrap().role.is_some());
}
