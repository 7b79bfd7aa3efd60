//! Rendering trace steps for prompts, and the long-trace strategy: the shared step renderer of
//! `maslens-render`, re-exported so `maslens_locate::render::*` keeps working. The format, the
//! cut rules and the window planner are documented there.

pub use maslens_render::*;
