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

pub mod model;

pub use model::*;
