//! maslens-implicit: implicit failures (MASIF): detection, absorption, risk, selection, repair,
//! replay statistics and IF-GRPO advantages.
//!
//! - [`detect`]: listings 1-2, windows over long traces, evidence checks, duplicate merging;
//! - [`absorb`]: listings 3-4, outcome-blind by construction and by check ([`blind`]), tie-breaks;
//! - [`weights`]: tables 7-8, TOML overrides, cost C and risk r;
//! - [`group`]: repeated manifestations, multi-judge k-of-n agreement;
//! - [`scan`] and [`report`]: per-trace scans and corpus reports (tables 1-3 shapes);
//! - [`select`]: best-of-N with IF / PRM / PRM+IF / random scorers, weight sensitivity;
//! - [`repair`] and [`replay`]: listings 5-6 replay plans, SPR / RR / delta-RR statistics;
//! - [`grpo`]: IF-GRPO advantages (eq. 1-4);
//! - [`process`]: the process metrics of tables 6 and 9 (IF cost and count per task and per 1K
//!   tokens) and their comparison with Holm-adjusted paired permutation tests;
//! - [`steering`]: trace text that tried to steer the detector, and whether the events followed it;
//! - [`scan_file`]: the versioned scan file (`maslens scan --out`), read back by `select` / `repair`;
//! - [`settings`]: a scan's settings and weights; [`jsonl`]: JSON Lines input with warnings. The
//!   commands (scan, select, repair, replay-stats, advantages) start in `maslens_core`.

pub mod absorb;
pub mod blind;
pub mod detect;
pub mod evidence;
pub mod group;
pub mod grpo;
pub mod jsonl;
pub mod process;
pub mod render;
pub mod repair;
pub mod replay;
pub mod report;
pub mod scan;
pub mod scan_file;
pub mod select;
pub mod settings;
pub mod steering;
pub mod taxonomy;
pub mod weights;

pub use detect::ImplicitFailure;
pub use jsonl::WithWarnings;
pub use scan::{scan_trace, ScanConfig, TraceScan};
pub use scan_file::{
    read_trace_scans, read_trace_scans_skipping, ScanFile, ScanFileError, SCAN_FILE_VERSION,
};
pub use settings::{ScanOptions, ScanSettings};
pub use taxonomy::{Absorption, ErrorType, Level};
pub use weights::Weights;

/// Errors of the implicit-failure methods.
#[derive(Debug, thiserror::Error)]
pub enum ImplicitError {
    #[error(transparent)]
    Llm(#[from] maslens_llm::LlmError),
    #[error(transparent)]
    Prompt(#[from] maslens_llm::prompt::PromptError),
    #[error(transparent)]
    OutcomeLeak(#[from] blind::OutcomeLeak),
    #[error("weights file {file}: {message}")]
    Weights { file: String, message: String },
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    ScanFile(#[from] scan_file::ScanFileError),
    #[error("cannot read {file}: {message}")]
    Read { file: String, message: String },
    /// Input records that cannot be used together (e.g. a non-finite cost).
    #[error("{0}")]
    Input(String),
    /// Writing output (a callback's I/O error).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
