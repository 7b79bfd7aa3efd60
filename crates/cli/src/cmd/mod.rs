//! One module per subcommand; each exposes `Args` (clap) and `run`.

pub mod import;
pub mod schema;
pub mod show;
pub mod stats;
pub mod validate;

use crate::{Cli, Command};
use std::process::ExitCode;

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: the command ran but found problems (validation errors, skipped records).
pub const EXIT_PROBLEMS: u8 = 1;
/// Exit code: the command could not run (bad arguments, unreadable input, backend failure).
pub const EXIT_ERROR: u8 = 2;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = cli.global;
    match cli.command {
        Command::Import(args) => import::run(args, &global),
        Command::Validate(args) => validate::run(args, &global),
        Command::Show(args) => show::run(args, &global),
        Command::Stats(args) => stats::run(args, &global),
        Command::Schema(args) => schema::run(args, &global),
    }
}
