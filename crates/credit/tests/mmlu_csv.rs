//! The MMLU CSV loader on the shared data, read in place: every split loads whole.

use maslens_credit::data::{load_mmlu, load_spec};
use std::path::PathBuf;

fn mmlu(rel: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/mmlu/"
    ))
    .join(rel)
}

#[test]
fn every_split_loads_without_problems() {
    for (split, n) in [("test", 14079), ("dev", 285), ("val", 1542)] {
        let l = load_mmlu(&mmlu(split)).unwrap();
        assert!(l.problems.is_empty(), "{split}: {:?}", l.problems);
        assert_eq!(l.items.len(), n, "{split}");
        // 57 subjects, in file-name order.
        let mut subjects: Vec<&str> = l
            .items
            .iter()
            .filter_map(|q| q.subject.as_deref())
            .collect();
        assert!(
            subjects.windows(2).all(|w| w[0] <= w[1]),
            "{split}: not in name order"
        );
        subjects.dedup();
        assert_eq!(subjects.len(), 57, "{split}");
    }
}

#[test]
fn quoted_multiline_questions_keep_their_text() {
    // Questions spanning several lines, inside quotes, with CRLF line ends in the text.
    let l = load_mmlu(&mmlu("val/college_physics_val.csv")).unwrap();
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    let q = l
        .items
        .iter()
        .find(|q| {
            q.question.starts_with(
                "Which of the following statements is (are) true for a Maxwell-Boltzmann",
            )
        })
        .expect("the multi-line question");
    assert!(
        q.question
            .contains("\r\nI. The average velocity of the atoms is zero.\r\n"),
        "{:?}",
        q.question
    );
    assert_eq!(q.options.len(), 4);
    // Ids count records, not lines.
    let n: usize = q.id.rsplit('/').next().unwrap().parse().unwrap();
    assert!(n <= l.items.len());
    assert_eq!(l.items[n - 1].id, q.id);
    // Through the dataset spec as well.
    let spec = format!("mmlu:{}", mmlu("dev").display());
    assert_eq!(load_spec(&spec).unwrap().items.len(), 285);
}
