//! maslens-eval: metrics, statistics and report writers shared by all methods.

pub mod stats;
