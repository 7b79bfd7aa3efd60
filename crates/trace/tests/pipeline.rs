//! The parallel reader gives exactly the sequential reader's results, in file order.

use maslens_trace::export::to_jsonl_line;
use maslens_trace::import::{read_path, Format};
use maslens_trace::{AgentKind, Step, Trace};
use std::io::Write;

fn trace(i: usize) -> Trace {
    let mut t = Trace::new(format!("t{i}"));
    t.ensure_agent("a", AgentKind::Worker);
    for s in 0..(i % 7 + 1) {
        t.steps.push(Step {
            index: s,
            agent: "a".into(),
            content: format!(
                "step {s} of {i}: {}",
                "lorem ipsum \"quoted\"\n".repeat(i % 50)
            ),
            ..Step::default()
        });
    }
    t
}

#[test]
fn parallel_and_sequential_readers_agree() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut size = 0usize;
    let mut i = 0;
    // Past the 4 MB threshold, with bad and blank lines sprinkled in.
    while size < 6 << 20 {
        let line = match i % 997 {
            13 => "{\"id\": \"broken\", \"steps\": [".to_string(),
            14 => String::new(),
            _ => to_jsonl_line(&trace(i)).unwrap(),
        };
        size += line.len() + 1;
        writeln!(f, "{line}").unwrap();
        i += 1;
    }
    // A last line without a newline, and a CRLF line before it.
    write!(
        f,
        "{}\r\n",
        to_jsonl_line(&trace(7))
            .unwrap()
            .replace("\"t7\"", "\"crlf\"")
    )
    .unwrap();
    write!(
        f,
        "{}",
        to_jsonl_line(&trace(8))
            .unwrap()
            .replace("\"t8\"", "\"last\"")
    )
    .unwrap();
    drop(f);
    let summarize = |threads: usize| -> Vec<String> {
        read_path(&path, Format::Auto)
            .threads(threads)
            .map(|r| match r {
                Ok(imp) => format!(
                    "{} {} {}",
                    imp.trace.id,
                    imp.trace.steps.len(),
                    imp.diagnostics.len()
                ),
                Err(e) => format!("ERR {e}"),
            })
            .collect()
    };
    let seq = summarize(1);
    let par = summarize(3);
    assert!(seq.len() > 1000, "{}", seq.len());
    assert!(seq
        .iter()
        .any(|s| s.starts_with("ERR") && s.contains("line 14:")));
    assert_eq!(seq, par);
    assert!(
        seq[seq.len() - 2].starts_with("crlf "),
        "{:?}",
        &seq[seq.len() - 2..]
    );
    assert!(
        seq[seq.len() - 1].starts_with("last "),
        "{:?}",
        &seq[seq.len() - 2..]
    );
}

#[test]
fn dropping_a_parallel_reader_early_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for i in 0..3000 {
        writeln!(f, "{}", to_jsonl_line(&trace(i)).unwrap()).unwrap();
    }
    drop(f);
    let first: Vec<_> = read_path(&path, Format::Native)
        .threads(2)
        .take(3)
        .collect();
    assert_eq!(first.len(), 3);
    assert_eq!(first[2].as_ref().unwrap().trace.id, "t2");
}
