//! Published multiple-choice layouts read as JSON lines: MedMCQA and GPQA (the credit paper's
//! other benchmarks), beside the generic layout of [`super::data::load_jsonl`].
//!
//! - **MedMCQA** (`medmcqa/medmcqa`; Hugging Face `openlifescienceai/medmcqa`): one record per
//!   line, `{"id", "question", "opa", "opb", "opc", "opd", "cop", "choice_type", "exp",
//!   "subject_name", "topic_name"}`. In the released files `cop` is the correct option
//!   numbered 1..4 (the Hugging Face loader subtracts 1); a `datasets` export of the Hugging Face
//!   copy numbers it 0..3, read with `medmcqa-hf:`. The test split carries no `cop`: such records
//!   are problems naming the field.
//! - **GPQA** (`Idavidrein/gpqa`): `{"Question", "Correct Answer", "Incorrect Answer 1",
//!   "Incorrect Answer 2", "Incorrect Answer 3", "Record ID"?, "Subdomain"?,
//!   "High-level domain"?}` (the CSV columns, one object per line). The correct answer is
//!   listed first in the source, so the four options are put in an order drawn from a ChaCha8
//!   stream seeded by the record's id: the same question always gets the same order, whatever
//!   the file order.

use super::data::{load_json_lines, DataError, Loaded, Mcq};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::Value;
use std::path::Path;

/// How MedMCQA's `cop` numbers the options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopBase {
    /// The released files: 1..4.
    One,
    /// A Hugging Face `datasets` export: 0..3.
    Zero,
}

type Rejection = (&'static str, String);

fn text<'a>(v: &'a Value, field: &'static str) -> Result<&'a str, Rejection> {
    v.get(field)
        .and_then(Value::as_str)
        .ok_or((field, "missing or not a string".into()))
}

fn id_of(v: &Value, field: &str) -> Option<String> {
    match v.get(field)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Load MedMCQA JSON lines; ids are `medmcqa/<id>` (`medmcqa/<line>` without one).
pub fn load_medmcqa(path: &Path, base: CopBase) -> Result<Loaded, DataError> {
    load_json_lines(path, |record, v| {
        let question = text(v, "question")?;
        let options = ["opa", "opb", "opc", "opd"]
            .into_iter()
            .map(|f| text(v, f).map(str::to_string))
            .collect::<Result<Vec<_>, _>>()?;
        let cop = v.get("cop").ok_or((
            "cop",
            "missing: the record has no correct option (the test split is unlabelled)".into(),
        ))?;
        let first = match base {
            CopBase::One => 1,
            CopBase::Zero => 0,
        };
        let answer = cop
            .as_i64()
            .and_then(|n| n.checked_sub(first))
            .filter(|i| (0..4).contains(i))
            .map(|i| (b'A' + i as u8) as char)
            .ok_or((
                "cop",
                format!(
                    "expected an option number {first}..{}, found {cop}",
                    first + 3
                ),
            ))?;
        let id = id_of(v, "id").unwrap_or_else(|| record.to_string());
        Ok(Mcq {
            id: format!("medmcqa/{id}"),
            question: question.to_string(),
            options,
            answer,
            subject: v
                .get("subject_name")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    })
}

/// Load GPQA JSON lines; ids are `gpqa/<Record ID>` (`gpqa/<line>` without one).
pub fn load_gpqa(path: &Path) -> Result<Loaded, DataError> {
    load_json_lines(path, |record, v| {
        let question = text(v, "Question")?;
        let correct = text(v, "Correct Answer")?.trim().to_string();
        let mut options = vec![correct.clone()];
        for f in [
            "Incorrect Answer 1",
            "Incorrect Answer 2",
            "Incorrect Answer 3",
        ] {
            options.push(text(v, f)?.trim().to_string());
        }
        let id = id_of(v, "Record ID").unwrap_or_else(|| record.to_string());
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(fnv1a(id.as_bytes()));
        options.shuffle(&mut rng);
        let pos = options.iter().position(|o| *o == correct).unwrap_or(0);
        Ok(Mcq {
            id: format!("gpqa/{id}"),
            question: question.trim().to_string(),
            options,
            answer: (b'A' + pos as u8) as char,
            subject: v
                .get("Subdomain")
                .or_else(|| v.get("High-level domain"))
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    })
}

/// FNV-1a: a fixed, platform-independent seed from a record id.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.jsonl");
        std::fs::write(&p, text).unwrap();
        (dir, p)
    }

    fn examples(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/inputs")
            .join(name)
    }

    #[test]
    fn medmcqa_sample_and_cop_bases() {
        let loaded = load_medmcqa(&examples("medmcqa-sample.jsonl"), CopBase::One).unwrap();
        // Line 3 is a test-split record without `cop`.
        assert_eq!(loaded.items.len(), 2);
        let got: Vec<_> = loaded
            .items
            .iter()
            .map(|q| {
                (
                    q.id.as_str(),
                    q.answer,
                    q.options.len(),
                    q.subject.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("medmcqa/mm-sample-1", 'C', 4, Some("Physiology")),
                ("medmcqa/mm-sample-2", 'A', 4, Some("Pharmacology")),
            ]
        );
        assert_eq!(loaded.problems.len(), 1);
        let p = &loaded.problems[0];
        assert_eq!((p.record, p.field.as_str()), (3, "cop"));
        assert!(p.file.ends_with("medmcqa-sample.jsonl"));

        // The same records read as a 0-based export shift by one.
        let zero = load_medmcqa(&examples("medmcqa-sample.jsonl"), CopBase::Zero).unwrap();
        assert_eq!(zero.items[0].answer, 'D');
        assert_eq!(zero.items[1].answer, 'B');
    }

    #[test]
    fn medmcqa_bad_records_name_the_field_and_the_rest_load() {
        let (_d, p) = file(
            "{\"id\":\"a\",\"question\":\"q\",\"opa\":\"1\",\"opb\":\"2\",\"opc\":\"3\",\"opd\":\"4\",\"cop\":5}\n\
             {\"id\":\"b\",\"question\":\"q\",\"opa\":\"1\",\"opb\":2,\"opc\":\"3\",\"opd\":\"4\",\"cop\":1}\n\
             not json\n\
             {\"id\":\"c\",\"question\":\"q\",\"opa\":\"1\",\"opb\":\"2\",\"opc\":\"3\",\"opd\":\"4\",\"cop\":4}\n",
        );
        let loaded = load_medmcqa(&p, CopBase::One).unwrap();
        assert_eq!(loaded.items.len(), 1);
        assert_eq!(loaded.items[0].answer, 'D');
        let fields: Vec<_> = loaded
            .problems
            .iter()
            .map(|p| (p.record, p.field.as_str()))
            .collect();
        assert_eq!(fields, [(1, "cop"), (2, "opb"), (3, "json")]);
        assert!(loaded.problems[0].message.contains("1..4"));
    }

    #[test]
    fn gpqa_sample_orders_options_by_record_id() {
        let loaded = load_gpqa(&examples("gpqa-sample.jsonl")).unwrap();
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        assert_eq!(loaded.items.len(), 3);
        for q in &loaded.items {
            assert_eq!(q.options.len(), 4);
            // The gold letter points at the source's correct answer.
            let v: Vec<Value> = std::fs::read_to_string(examples("gpqa-sample.jsonl"))
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let src = v
                .iter()
                .find(|r| format!("gpqa/{}", r["Record ID"].as_str().unwrap()) == q.id)
                .unwrap();
            assert_eq!(
                q.options[q.answer_index()],
                src["Correct Answer"].as_str().unwrap().trim()
            );
        }
        // Not always first: the source lists the correct answer first.
        assert!(loaded.items.iter().any(|q| q.answer != 'A'));
        // The order depends on the record id, not on the file order.
        let text = std::fs::read_to_string(examples("gpqa-sample.jsonl")).unwrap();
        let reversed: String = text.lines().rev().map(|l| format!("{l}\n")).collect();
        let (_d, p) = file(&reversed);
        let again = load_gpqa(&p).unwrap();
        let mut a = loaded.items.clone();
        let mut b = again.items.clone();
        a.sort_by(|x, y| x.id.cmp(&y.id));
        b.sort_by(|x, y| x.id.cmp(&y.id));
        assert_eq!(a, b);
    }

    #[test]
    fn gpqa_missing_distractor_is_a_problem_naming_it() {
        let (_d, p) = file(
            "{\"Question\":\"q\",\"Correct Answer\":\"a\",\"Incorrect Answer 1\":\"b\",\"Incorrect Answer 2\":\"c\",\"Record ID\":\"r1\"}\n\
             {\"Question\":\"q\",\"Correct Answer\":\"a\",\"Incorrect Answer 1\":\"b\",\"Incorrect Answer 2\":\"c\",\"Incorrect Answer 3\":\"d\"}\n",
        );
        let loaded = load_gpqa(&p).unwrap();
        assert_eq!(loaded.items.len(), 1);
        assert_eq!(loaded.items[0].id, "gpqa/2");
        assert_eq!(loaded.problems.len(), 1);
        assert_eq!(loaded.problems[0].field, "Incorrect Answer 3");
        assert_eq!(loaded.problems[0].record, 1);
    }

    #[test]
    fn dataset_specs_name_the_layouts() {
        use crate::data::load_spec;
        let gpqa = examples("gpqa-sample.jsonl");
        assert_eq!(
            load_spec(&format!("gpqa:{}", gpqa.display()))
                .unwrap()
                .items
                .len(),
            3
        );
        let mm = examples("medmcqa-sample.jsonl");
        let one = load_spec(&format!("medmcqa:{}", mm.display())).unwrap();
        let zero = load_spec(&format!("medmcqa-hf:{}", mm.display())).unwrap();
        assert_eq!((one.items[0].answer, zero.items[0].answer), ('C', 'D'));
    }
}
