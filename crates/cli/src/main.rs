//! The `maslens` binary: glue only. Parses flags, resolves them into typed config, calls the
//! library crates, renders their results. Nothing here decides a verdict.

mod cmd;
#[cfg(test)]
mod conventions;
mod db;
mod debate_args;
mod examples;
mod inputs;
mod llm_args;
mod locate_args;
mod progress;
mod term;
mod ui;
mod words;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
    /// Print a JSON Schema of a native format.
    Schema(cmd::schema::Args),
    /// Manage embedded models (pull, list).
    Model(cmd::model::Args),
    /// Serve the embedded model behind an OpenAI-compatible endpoint on loopback.
    ServeModel(cmd::serve_model::Args),
    /// Receive OpenTelemetry traces (OTLP/HTTP), store and diagnose them, write diagnoses back.
    Serve(cmd::serve::Args),
    /// Export uncached requests as OpenAI Batch JSONL, import batch output into the cache.
    Batch(cmd::batch::Args),
    /// Inspect the LLM call cache.
    Cache(cmd::cache::Args),
    /// Failure localization: which agent and step decided the failure.
    Locate(cmd::locate::Args),
    /// Benchmark a method with exact metrics, baselines and confidence intervals.
    Eval(cmd::eval::Args),
    /// Learned localizer without an LLM: train, evaluate.
    Prior(cmd::prior::Args),
    /// Implicit failures: detect, classify absorption, score risk over traces.
    Scan(cmd::scan::Args),
    /// Best-of-N trace selection by IF risk, PRM or both.
    Select(cmd::select::Args),
    /// Counterfactual repair: corrected steps and replay plans for implicit failures.
    Repair(cmd::repair::Args),
    /// SPR, RR and delta-RR with paired task-cluster bootstrap from replay outcomes.
    ReplayStats(cmd::replay_stats::Args),
    /// MASIF's process metrics (IFs per task and per 1K tokens), and two runs compared with
    /// Holm-adjusted paired permutation tests.
    ProcessStats(cmd::process_stats::Args),
    /// IF-shaped GRPO advantages for groups of traces.
    Advantages(cmd::advantages::Args),
    /// Failure modes across runs: failed runs grouped per system by responsible agent,
    /// implicit-failure type and reason.
    Modes(cmd::modes::Args),
    /// The improvement loop on a Python system: localize failures, rewrite the blamed agents'
    /// prompts, keep what helps on held-out tasks (runs `python -m maslens.improve`).
    Improve(cmd::improve::Args),
    /// Structural (role) and temporal (round) credit for traces.
    Credit(cmd::credit::Args),
    /// Credit-guided prompt optimization of a multi-role debate (verbalized BCD).
    Optimize(cmd::optimize::Args),
    /// Fault injection: labelled failure traces from a debate's successful runs.
    Inject(cmd::inject::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::completions::Args),
    /// Write man pages (roff), one per command.
    Man(cmd::man::Args),
    /// The config file: where it is, what is in force and where each value came from.
    Config(cmd::config::Args),
}

/// The command line definition with every command's examples attached (what `--help`, the
/// man pages and the completions show).
pub fn command() -> clap::Command {
    examples::attach(Cli::command())
}

fn main() -> ExitCode {
    let cli = match Cli::from_arg_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let level = match cli.global.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("MASLENS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: a log file or a CI job gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cmd::run(cli) {
        Ok(code) => code,
        // A closed pipe (`maslens advantages FILE | head -1`) ends the output, not the command
        // with an error: writers that are not `outln!` report it as an io error.
        Err(err) if closed_pipe(&err) => ExitCode::from(cmd::EXIT_OK),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(cmd::EXIT_ERROR)
        }
    }
}

/// Whether the error is (caused by) writing to a closed pipe.
fn closed_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
