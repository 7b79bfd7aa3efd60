//! maslens-trace: the one trace model every maslens method reads.
//!
//! A [`Trace`] is one execution of a multi-agent system on one task. Step indices are kept
//! exactly as in the source (0-based positions in the source's history), so that benchmark
//! labels such as Who&When's `mistake_step` line up with `steps[i]` without translation.
//!
//! Architecture invariants:
//! - this crate has no async and does no I/O beyond reading bytes from a `Read`/`BufRead`
//!   or a path handed to it;
//! - importers never panic: unreadable input is an [`ImportError`] naming the file, record and
//!   JSON path; odd but readable input becomes a [`Diagnostic`] next to the trace.
//!
//! ```no_run
//! use maslens_trace::import::{read_path, Format};
//! for item in read_path("../shared/data/whowhen/Hand-Crafted".as_ref(), Format::Auto) {
//!     match item {
//!         Ok(imported) => println!("{} ({} steps)", imported.trace.id, imported.trace.steps.len()),
//!         Err(e) => eprintln!("{e}"),
//!     }
//! }
//! ```

pub mod builder;
pub mod check;
pub mod concepts;
pub mod diag;
pub mod export;
pub mod import;
pub mod model;
pub mod names;
pub mod stats;
pub mod validate;
pub mod verdict;
pub mod warnings;

pub use builder::TraceBuilder;
pub use concepts::{fnv1a, seeded_hash, seeded_order, seeded_rng, Gold, INJECTION_KEY};
pub use diag::{Diagnostic, Severity};
pub use import::{read_path, read_trace, Format, ImportError, Imported};
pub use model::*;
pub use validate::validate;
pub use verdict::{excerpt_text, Answer, Heads, Pick, Resolved, ScoringRule};
pub use warnings::{RunWarning, WARNINGS_KEY};

impl model::Step {
    /// The raw speaker label, or the agent when the source gave none.
    pub fn speaker_or_agent(&self) -> &str {
        if self.speaker.is_empty() {
            &self.agent
        } else {
            &self.speaker
        }
    }
}
