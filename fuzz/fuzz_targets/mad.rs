//! Fuzz the MAD (MAST) importer: any bytes give a value or an error, never a panic.
//! The body is `maslens_fuzz::mad` (fuzz/src/lib.rs), which the stable test
//! crates/cli/tests/fuzz_corpus.rs also runs over the seeds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| maslens_fuzz::mad(data));
