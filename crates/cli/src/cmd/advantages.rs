//! `maslens advantages`: IF-GRPO advantages (MASIF eq. 1-4) for groups of trajectories.
//!
//! Input JSONL lines `{"group","id","success":bool,"if_cost":number}`; output JSONL lines
//! `{"group","id","advantage"}` in input order. Lines that cannot be read are reported on
//! stderr (file, line, field), left out, and the exit code is 1.

use crate::ui::{exit_code, sink, warn_all, write_jsonl};
use crate::Global;
use maslens_core::implicit::advantages_from_jsonl;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input JSONL (`-` or absent: stdin).
    pub input: Option<PathBuf>,
    /// Output JSONL (default stdout).
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Stop with exit code 2 at the first bad line (nothing is written) instead of skipping it.
    #[arg(long)]
    pub strict: bool,
}

pub fn run(args: Args, _global: &Global) -> anyhow::Result<ExitCode> {
    let (name, reader) = crate::ui::jsonl_input(args.input.as_deref())?;
    let adv = advantages_from_jsonl(&name, reader)?;
    if let (true, Some(first)) = (args.strict, adv.warnings.first()) {
        anyhow::bail!("{first} (--strict: nothing was written)");
    }
    let problems = warn_all(&adv.warnings);
    let mut out = sink(args.out.as_deref())?;
    adv.value
        .iter()
        .try_for_each(|o| write_jsonl(&mut out, o))?;
    out.finish()?;
    Ok(exit_code(problems))
}
