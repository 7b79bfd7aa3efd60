//! No code: see this crate's Cargo.toml. Its dependencies pin features so that the binary, the
//! wheel and the test build resolve one feature set and share one build.
