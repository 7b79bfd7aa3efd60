//! Fuzz format detection and the streaming file reader: bytes written to a file (once as
//! `.json`, once as `.jsonl`) and read with `--format auto`; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use maslens_trace::import::{parse_record, read_path, Format, RecordCtx};
use std::io::Write;

fuzz_target!(|data: &[u8]| {
    let _ = parse_record(data, Format::Auto, &RecordCtx::memory("fuzz"));
    let dir = std::env::temp_dir().join(format!("maslens-fuzz-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    for name in ["in.json", "in.jsonl"] {
        let p = dir.join(name);
        if let Ok(mut f) = std::fs::File::create(&p) {
            if f.write_all(data).is_ok() {
                for item in read_path(&p, Format::Auto) {
                    let _ = item;
                }
            }
        }
    }
});
