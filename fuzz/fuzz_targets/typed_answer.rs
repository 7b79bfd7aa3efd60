//! Fuzz the structured-output parser (maslens_llm::typed) on the methods' answer types: any bytes give a value or an error, never a panic.
//! The body is `maslens_fuzz::typed_answer` (fuzz/src/lib.rs), which the stable test
//! crates/cli/tests/fuzz_corpus.rs also runs over the seeds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| maslens_fuzz::typed_answer(data));
