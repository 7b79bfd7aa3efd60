//! Loaders on the shared data, read in place, and the example configurations.

use maslens_credit::data::{load_aqua, load_jsonl, load_mmlu, load_spec, split};
use maslens_credit::DebateConfig;
use std::path::PathBuf;

fn shared(rel: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/"
    ))
    .join(rel)
}

fn example(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/")).join(name)
}

#[test]
fn mmlu_csv_file_and_folder() {
    let one = load_mmlu(&shared("mmlu/test/abstract_algebra_test.csv")).unwrap();
    assert_eq!(one.items.len(), 100);
    assert!(one.problems.is_empty(), "{:?}", one.problems);
    let q = &one.items[0];
    assert_eq!(q.options.len(), 4);
    assert_eq!(q.answer, 'B');
    assert!(q.question.starts_with("Find the degree"));
    assert_eq!(q.subject.as_deref(), Some("abstract_algebra"));
    // Quoted fields with commas stay whole.
    assert!(one
        .items
        .iter()
        .any(|q| q.options.iter().any(|o| o == "0,1")));
    let dev = load_mmlu(&shared("mmlu/dev")).unwrap();
    assert_eq!(dev.items.len(), 57 * 5);
    assert!(dev.problems.is_empty());
}

#[test]
fn aqua_jsonl_five_options() {
    let a = load_aqua(&shared("aqua/test.json")).unwrap();
    assert_eq!(a.items.len() + a.problems.len(), 254);
    assert!(a.items.len() >= 250, "{:?}", a.problems);
    assert!(a.items.iter().all(|q| q.options.len() == 5));
    assert_eq!(a.items[0].answer, 'A');
    assert_eq!(a.items[0].options[0], "5(√3 + 1)");
    assert_eq!(
        load_spec(&format!("aqua:{}", shared("aqua/dev.json").display()))
            .unwrap()
            .items[0]
            .id,
        "aqua/dev/1"
    );
}

#[test]
fn generic_jsonl_and_bad_records() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.jsonl");
    std::fs::write(
        &p,
        concat!(
            "{\"id\":\"x1\",\"question\":\"2+2?\",\"options\":[\"3\",\"4\"],\"answer\":\"B\"}\n",
            "{\"question\":\"Pick\",\"options\":{\"A\":\"a\",\"B\":\"b\",\"C\":\"c\"},\"answer\":2}\n",
            "not json\n",
            "{\"question\":\"q\",\"options\":[\"a\",\"b\"],\"answer\":\"E\"}\n",
            "{\"options\":[\"a\",\"b\"],\"answer\":\"A\"}\n"
        ),
    )
    .unwrap();
    let l = load_jsonl(&p).unwrap();
    assert_eq!(l.items.len(), 2);
    assert_eq!(l.items[1].answer, 'C');
    assert_eq!(l.items[1].options, vec!["a", "b", "c"]);
    let fields: Vec<(usize, &str)> = l
        .problems
        .iter()
        .map(|p| (p.record, p.field.as_str()))
        .collect();
    assert_eq!(fields, vec![(3, "json"), (4, "answer"), (5, "question")]);
    assert!(l.problems[1]
        .to_string()
        .contains("q.jsonl: record 4: field answer"));
    // A bad MMLU row is reported with file, record and field; the rest loads.
    let csv = dir.path().join("m_test.csv");
    std::fs::write(&csv, "q1,a,b,c,d,A\nq2,a,b,c,d,Z\nq3,a,b\n").unwrap();
    let m = load_mmlu(&csv).unwrap();
    assert_eq!(m.items.len(), 1);
    assert_eq!(
        m.problems
            .iter()
            .map(|p| p.field.as_str())
            .collect::<Vec<_>>(),
        vec!["answer", "columns"]
    );
    assert!(load_spec(dir.path().join("missing.jsonl").to_str().unwrap()).is_err());
}

#[test]
fn default_split_sizes_on_mmlu() {
    let all = load_mmlu(&shared("mmlu/test/high_school_geography_test.csv"))
        .unwrap()
        .items;
    let s = split(&all, 100, None, 0);
    assert_eq!(s.optimization.len(), 100);
    assert_eq!(s.test.len(), all.len() - 100);
}

#[test]
fn example_configs_parse() {
    for name in ["debate.toml", "debate-smoke.toml"] {
        let cfg = DebateConfig::from_path(&example(name)).unwrap();
        assert_eq!(cfg.roles.len(), 3, "{name}");
        assert_eq!(cfg.aggregators.len(), cfg.rounds, "{name}");
    }
}
