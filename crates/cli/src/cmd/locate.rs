//! `maslens locate` (to be implemented).

use crate::Global;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Inputs.
    pub inputs: Vec<std::path::PathBuf>,
}

pub fn run(_args: Args, _global: &Global) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`maslens locate` is not implemented yet")
}
