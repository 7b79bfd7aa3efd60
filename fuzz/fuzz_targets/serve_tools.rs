//! Fuzz serve-model's function calling: tools, tool_choice, calls read from an answer: any bytes give a value or an error, never a panic.
//! The body is `maslens_fuzz::serve_tools` (fuzz/src/lib.rs), which the stable test
//! crates/cli/tests/fuzz_corpus.rs also runs over the seeds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| maslens_fuzz::serve_tools(data));
