//! Any byte string either parses or yields an error, for every importer; nothing panics.

use maslens_trace::import::{parse_record, read_path, Format, RecordCtx};
use proptest::prelude::*;
use std::io::Write;

const FORMATS: [Format; 6] = Format::ALL;

/// JSON-ish fragments that reach deep into each importer's code paths.
fn jsonish() -> impl Strategy<Value = Vec<u8>> {
    let atoms = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"history\"",
        "\"messages\"",
        "\"steps\"",
        "\"id\"",
        "\"input\"",
        "\"conversation_history\"",
        "\"mistake_step\"",
        "\"mistake_agent\"",
        "\"role\"",
        "\"name\"",
        "\"content\"",
        "\"tool_calls\"",
        "\"function\"",
        "\"step\"",
        "\"agent_name\"",
        "\"labels\"",
        "\"decisive\"",
        "\"index\"",
        "\"agent\"",
        "\"3\"",
        "-1",
        "1e400",
        "null",
        "true",
        "\"Orchestrator (thought)\"",
        "\"\\u0000\"",
        "\"\\ud800\"",
        "0",
        "18446744073709551616",
        "\"output\"",
        "\"faulty_agents\"",
        "\"mast_annotation\"",
        "\"trace\"",
        "\"trajectory\"",
        "\"1.1\"",
        "\"system_prompt\"",
        "\n",
        " ",
        "\"x\"",
    ]);
    prop::collection::vec(atoms, 0..40).prop_map(|v| v.concat().into_bytes())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        for f in FORMATS {
            let _ = parse_record(&bytes, f, &RecordCtx::memory("fuzz"));
        }
    }

    #[test]
    fn jsonish_bytes_never_panic(bytes in jsonish()) {
        for f in FORMATS {
            let _ = parse_record(&bytes, f, &RecordCtx::memory("fuzz"));
        }
    }

    #[test]
    fn mutated_real_records_never_panic(cut in 0usize..4000, flip in 0usize..4000, byte in any::<u8>()) {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/whowhen/Hand-Crafted/24.json");
        let mut bytes = std::fs::read(path).unwrap();
        if !bytes.is_empty() {
            let i = flip % bytes.len();
            bytes[i] = byte;
            bytes.truncate(cut.min(bytes.len()).max(1));
        }
        for f in FORMATS {
            let _ = parse_record(&bytes, f, &RecordCtx::memory("fuzz"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whole files (any bytes, any extension) through the streaming reader.
    #[test]
    fn arbitrary_files_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256), jsonl in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(if jsonl { "x.jsonl" } else { "x.json" });
        std::fs::File::create(&p).unwrap().write_all(&bytes).unwrap();
        for f in FORMATS {
            for item in read_path(dir.path(), f) {
                let _ = item;
            }
        }
    }
}
