//! The red-team corpus (`tests/redteam/`, see its README): the steering detector reports exactly
//! what `expected.json` lists for each trace, and nothing for the traces that only attack the
//! terminal, the HTML views or nobody (the benign control).

use maslens_render::steering::detect;
use maslens_trace::import::{read_path, Format};
use serde_json::Value;
use std::path::PathBuf;

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/redteam")
}

#[test]
fn the_detector_finds_what_the_corpus_expects() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(corpus().join("expected.json")).unwrap())
            .unwrap();
    let expected = expected["traces"].as_object().unwrap();
    let mut seen = 0;
    for item in read_path(&corpus().join("traces.jsonl"), Format::Native) {
        let trace = item.unwrap().trace;
        let want = expected
            .get(&trace.id)
            .unwrap_or_else(|| panic!("{} has no entry in expected.json", trace.id))
            .as_array()
            .unwrap();
        let got = detect(&trace);
        let got: Vec<Value> = got
            .iter()
            .map(|h| {
                let mut v = serde_json::json!({"step": h.step, "kind": h.kind});
                if h.field != "content" {
                    v["field"] = h.field.clone().into();
                }
                if let Some(s) = h.asks_step {
                    v["asks_step"] = s.into();
                }
                if let Some(a) = &h.asks_agent {
                    v["asks_agent"] = a.clone().into();
                }
                if h.asks_nothing {
                    v["asks_nothing"] = true.into();
                }
                v
            })
            .collect();
        assert_eq!(&got, want, "{}", trace.id);
        seen += 1;
    }
    assert_eq!(
        seen,
        expected.len(),
        "every expected trace is in the corpus"
    );
}

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data")
        .join(rel)
}

/// The detector on the shipped data sets (Who&When, both subsets, and the Aegis sample): real
/// multi-agent text, none of it written to steer an evaluator. Every hit there is a false
/// alarm; the figure is in docs/security.md.
#[test]
fn the_detector_is_quiet_on_real_traces() {
    let mut traces = 0;
    let mut hits = Vec::new();
    for dir in [
        "whowhen/Hand-Crafted",
        "whowhen/Algorithm-Generated",
        "aegis/sample.jsonl",
    ] {
        for item in read_path(&data(dir), Format::Auto) {
            let t = item.unwrap().trace;
            traces += 1;
            for h in detect(&t) {
                hits.push(format!("{}: {}", t.id, h.describe()));
            }
        }
    }
    eprintln!("{traces} traces, {} hits", hits.len());
    for h in &hits {
        eprintln!("  {h}");
    }
    assert_eq!(
        traces,
        31 + 67 + 5,
        "Hand-Crafted, Algorithm-Generated, Aegis sample"
    );
    assert!(hits.is_empty(), "{hits:#?}");
}
