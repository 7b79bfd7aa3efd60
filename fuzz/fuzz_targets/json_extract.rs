//! Fuzz the JSON extractor of maslens-llm (a JSON answer in a model's text): any bytes give a value or an error, never a panic.
//! The body is `maslens_fuzz::json_extract` (fuzz/src/lib.rs), which the stable test
//! crates/cli/tests/fuzz_corpus.rs also runs over the seeds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| maslens_fuzz::json_extract(data));
