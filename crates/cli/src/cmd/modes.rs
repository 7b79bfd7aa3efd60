//! `maslens modes`: failure modes across runs. From a store (`--db`, what `maslens serve`
//! keeps) or from trace files written by `maslens locate -o`; Markdown on stdout (JSON with
//! `--json` or `-o`). `--summarize` asks the configured model for one sentence per mode.

use crate::cmd::{block_on, EXIT_OK, EXIT_PROBLEMS};
use crate::inputs::{read_all, Inputs};
use crate::llm_args::{finish, LlmArgs};
use crate::ui::write_output;
use crate::Global;
use maslens_core::modes::{self, ModesReport, Selection};
use maslens_server::serve::modes::{from_store, ModesError, ModesQuery};
use std::path::PathBuf;
use std::process::ExitCode;

#[path = "modes_propose.rs"]
mod propose;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub input: Inputs,
    /// Only this system's runs (`service.name`; the import format for imported traces).
    #[arg(long)]
    pub system: Option<String>,
    /// Which runs: `failure`, `unknown` (outcome not reported, as most OTel runs), `success`,
    /// or `any` (every run with a localization).
    #[arg(long, default_value = "failure",
          value_parser = clap::builder::PossibleValuesParser::new(modes::cases::OUTCOMES))]
    pub outcome: String,
    /// Cosine threshold of the reason clustering, 0..1 (higher splits more).
    #[arg(long, default_value_t = 0.3)]
    pub similarity: f64,
    /// Example runs per mode.
    #[arg(long, default_value_t = 3)]
    pub examples: usize,
    /// Score the modes against the traces' gold decisive agents (purity; Who&When labels).
    #[arg(long)]
    pub gold: bool,
    /// Runs read from the store at most, oldest first.
    #[arg(long, default_value_t = 10_000)]
    pub limit: i64,
    /// Write the report as JSON to this file.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Write the Markdown report to this file (default: stdout unless --json).
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Ask the model (`--model`, else the configured one) for a one-sentence summary of each
    /// mode; the grouping itself never calls a model.
    #[arg(long)]
    pub summarize: bool,
    /// With --summarize: summaries for at most this many modes per system, largest first.
    #[arg(long, default_value_t = 10)]
    pub summarize_top: usize,
    /// Propose a fix for this failure mode (its id in the report; `--system` when two systems
    /// share it): the model rewrites the mode's agent's prompt, as its traces record it, from
    /// up to 8 example runs (docs/modes.md). With --db it is stored on those runs, as `serve`
    /// stores it. Prints the proposal instead of the report.
    #[arg(long, value_name = "MODE")]
    pub propose: Option<String>,
    #[command(flatten)]
    pub llm: LlmArgs,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let query = ModesQuery {
        system: args.system.clone(),
        outcome: Some(args.outcome.clone()),
        gold: args.gold,
        similarity: Some(args.similarity),
        examples: Some(args.examples),
        limit: Some(args.limit),
    };
    let (mut report, mut problems, traces) = match (&args.input.db, args.input.inputs.is_empty()) {
        (Some(_), false) => anyhow::bail!("give trace files or --db, not both"),
        (Some(db), true) => (of_store(db, &query)?, 0, Vec::new()),
        (None, _) => {
            let (traces, errors) = read_all(&args.input, global, "reading traces", None)?;
            if traces.is_empty() {
                anyhow::bail!("{}", args.input.nothing_read(errors.len()));
            }
            let report = modes::of_traces(&traces, &selection(&args), query.options()?)?;
            (report, errors.len(), traces)
        }
    };
    if let Some(mode) = &args.propose {
        return propose::run(&args, global, &query, &report, mode, traces);
    }
    if args.summarize {
        let top = Some(args.summarize_top);
        let done = block_on(async {
            let stack = args.llm.build().await?;
            let done = modes::summarize(&mut report, stack.model.as_ref(), top).await;
            finish(&stack, global.quiet);
            anyhow::Ok(done?)
        })??;
        problems += done.failed.len() + usize::from(done.stopped.is_some());
    }
    if let Some(out) = &args.out {
        write_output(Some(out), &serde_json::to_string_pretty(&report)?)?;
    }
    // To the terminal, text from the runs (system names, ids, reasons) is escaped.
    if global.json {
        write_output(
            None,
            &crate::term::json(&serde_json::to_string_pretty(&report)?),
        )?;
    }
    match &args.markdown {
        Some(path) => write_output(Some(path), &report.to_markdown())?,
        None if !global.json => write_output(None, &crate::term::text(&report.to_markdown()))?,
        None => {}
    }
    for note in &report.notes {
        eprintln!("note: {note}");
    }
    let runs: usize = report.systems.iter().map(|s| s.failed_runs).sum();
    if runs == 0 {
        let hint = " (runs whose outcome is not reported: --outcome unknown or any)";
        let hint = if args.outcome == "failure" { hint } else { "" };
        eprintln!("no {} runs to group{hint}", args.outcome);
        return Ok(ExitCode::from(EXIT_PROBLEMS));
    }
    Ok(ExitCode::from(if problems == 0 {
        EXIT_OK
    } else {
        EXIT_PROBLEMS
    }))
}

fn selection(args: &Args) -> Selection {
    Selection {
        outcome: args.outcome.clone(),
        system: args.system.clone(),
        gold: args.gold,
    }
}

fn of_store(db: &str, query: &ModesQuery) -> anyhow::Result<ModesReport> {
    block_on(async {
        let store = crate::db::open(db).await?;
        let report = from_store(&store, query).await;
        store.close().await;
        report.map_err(|e| match e {
            ModesError::Invalid(m) => anyhow::anyhow!(m),
            e => anyhow::Error::new(e).context(format!("reading runs from {db}")),
        })
    })?
}
