//! `maslens validate` (to be implemented).

use crate::Global;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input files or directories.
    pub inputs: Vec<std::path::PathBuf>,
}

pub fn run(_args: Args, _global: &Global) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not implemented yet")
}
