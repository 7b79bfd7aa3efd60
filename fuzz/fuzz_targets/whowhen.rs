//! Fuzz the WhoWhen importer: any bytes give a trace or an ImportError, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use maslens_trace::import::{parse_record, Format, RecordCtx};

fuzz_target!(|data: &[u8]| {
    if let Ok(imp) = parse_record(data, Format::WhoWhen, &RecordCtx::memory("fuzz")) {
        // Whatever an importer accepts must survive native export and import unchanged.
        let line = maslens_trace::export::to_jsonl_line(&imp.trace).expect("serializable");
        let back = parse_record(line.as_bytes(), Format::Native, &RecordCtx::memory("fuzz"))
            .expect("native output reads back");
        assert_eq!(back.trace, imp.trace);
    }
});
