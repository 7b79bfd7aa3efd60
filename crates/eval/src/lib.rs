//! maslens-eval: metrics, statistics and report writers shared by all methods.

pub mod atomic;
pub mod baselines;
pub mod html;
pub mod markdown;
pub mod metrics;
pub mod page;
pub mod plot;
pub mod report;
pub mod run;
pub mod stats;
mod view;
