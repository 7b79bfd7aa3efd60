//! `maslens completions SHELL`: shell completion script on stdout (clap_complete).

use crate::cmd::EXIT_OK;
use crate::Global;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The shell: bash, zsh, fish, elvish or powershell. Example:
    /// `maslens completions bash > ~/.local/share/bash-completion/completions/maslens`.
    pub shell: clap_complete::Shell,
}

pub fn run(args: Args, _global: &Global) -> anyhow::Result<ExitCode> {
    // Generated into memory first: clap_complete panics on a write error, and a closed pipe
    // (`maslens completions bash | head`) must end quietly.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut crate::command(), "maslens", &mut script);
    let text = String::from_utf8_lossy(&script);
    crate::outln!("{}", text.trim_end());
    Ok(ExitCode::from(EXIT_OK))
}
