//! `maslens man`: man pages (roff, clap_mangen), one per command, with each command's examples.

use crate::cmd::EXIT_OK;
use crate::Global;
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Write `maslens.1` and `maslens-COMMAND.1` for every command into this folder (created if
    /// missing); without it, print `maslens.1` on stdout.
    #[arg(long, short, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let cmd = crate::command().version(env!("CARGO_PKG_VERSION"));
    match &args.out {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut page)?;
            crate::outln!("{}", String::from_utf8_lossy(&page).trim_end());
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let written = write_pages(cmd, dir, "maslens")?;
            if global.json {
                crate::outln!("{}", serde_json::to_string(&written)?);
            } else {
                eprintln!("wrote {} man pages to {}", written.len(), dir.display());
            }
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// Write the page of `cmd` (named `name`) and of every subcommand, recursively; returns the
/// file names written. Each page is written to a temporary file and renamed.
fn write_pages(cmd: clap::Command, dir: &Path, name: &str) -> anyhow::Result<Vec<String>> {
    let mut cmd = cmd.name(name.to_string());
    cmd.build();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    let file = format!("{name}.1");
    let path = dir.join(&file);
    crate::ui::write_atomic(&path, &page)?;
    let mut written = vec![file];
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        let sub_name = format!("{name}-{}", sub.get_name());
        written.extend(write_pages(sub.clone(), dir, &sub_name)?);
    }
    Ok(written)
}
