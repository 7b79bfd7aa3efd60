//! One module per subcommand; each exposes `Args` (clap) and `run`.

pub mod advantages;
pub mod batch;
pub mod cache;
pub mod completions;
pub mod config;
pub mod credit;
pub mod eval;
pub mod import;
pub mod improve;
pub mod inject;
pub mod locate;
pub mod man;
pub mod model;
pub mod modes;
pub mod optimize;
pub mod prior;
pub mod process_stats;
pub mod repair;
pub mod replay_stats;
pub mod scan;
pub mod schema;
pub mod select;
pub mod serve;
pub mod serve_model;
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
        Command::Model(args) => model::run(args, &global),
        Command::ServeModel(args) => serve_model::run(args, &global),
        Command::Serve(args) => serve::run(args, &global),
        Command::Batch(args) => batch::run(args, &global),
        Command::Cache(args) => cache::run(args, &global),
        Command::Locate(args) => locate::run(args, &global),
        Command::Eval(args) => eval::run(args, &global),
        Command::Prior(args) => prior::run(args, &global),
        Command::Scan(args) => scan::run(args, &global),
        Command::Select(args) => select::run(args, &global),
        Command::Repair(args) => repair::run(args, &global),
        Command::ReplayStats(args) => replay_stats::run(args, &global),
        Command::ProcessStats(args) => process_stats::run(args, &global),
        Command::Advantages(args) => advantages::run(args, &global),
        Command::Modes(args) => modes::run(args, &global),
        Command::Improve(args) => improve::run(args, &global),
        Command::Credit(args) => credit::run(args, &global),
        Command::Optimize(args) => optimize::run(args, &global),
        Command::Inject(args) => inject::run(args, &global),
        Command::Completions(args) => completions::run(args, &global),
        Command::Config(args) => config::run(args, &global),
        Command::Man(args) => man::run(args, &global),
    }
}

/// Run an async future on a fresh multi-threaded tokio runtime (LLM-backed commands).
pub fn block_on<F: std::future::Future>(fut: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    Ok(rt.block_on(fut))
}
