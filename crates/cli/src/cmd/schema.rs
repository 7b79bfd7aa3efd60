//! `maslens schema`: print JSON Schemas of the native formats.

use crate::Global;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Which schema.
    #[arg(value_enum, default_value_t = Which::Trace)]
    pub which: Which,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum Which {
    /// One native trace (a JSON object; native JSONL holds one per line).
    Trace,
}

pub fn run(args: Args, _global: &Global) -> anyhow::Result<ExitCode> {
    let schema = match args.which {
        Which::Trace => schemars::schema_for!(maslens_trace::Trace),
    };
    crate::outln!("{}", serde_json::to_string_pretty(&schema)?);
    Ok(ExitCode::SUCCESS)
}
