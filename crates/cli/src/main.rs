//! The `maslens` binary: glue only. Parses flags, resolves them into typed config, calls the
//! library crates, renders their results. Nothing here decides a verdict.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// maslens: why a multi-agent system failed, what went wrong quietly, which agent or round to fix.
#[derive(Parser, Debug)]
#[command(name = "maslens", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by every command.
#[derive(clap::Args, Debug, Clone)]
pub struct Global {
    /// Machine-readable JSON output on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// More logging (-v info, -vv debug, -vvv trace). Logs go to stderr.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Hide progress bars.
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Convert any supported input into native maslens JSONL.
    Import(cmd::import::Args),
    /// Check traces for problems (unknown agents, labels out of range, ...).
    Validate(cmd::validate::Args),
    /// Show a trace in the terminal.
    Show(cmd::show::Args),
    /// Corpus statistics.
    Stats(cmd::stats::Args),
    /// Print a JSON Schema (native trace format).
    Schema(cmd::schema::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.global.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("MASLENS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match cmd::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(cmd::EXIT_ERROR)
        }
    }
}
