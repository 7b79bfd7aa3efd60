//! `maslens credit`: structural (role) and temporal (round / phase / window) credit for traces
//! of any supported format, as a role x segment table (terminal / Markdown, JSON, HTML heatmap).

use crate::cmd::block_on;
use crate::inputs::{read_all, Inputs};
use crate::llm_args::LlmArgs;
use crate::Global;
use maslens_core::credit::credit_traces;
use maslens_credit::config::Decoding;
use maslens_credit::trace_credit::{Segmenting, TraceCreditOptions};
use maslens_llm::ChatModel;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentArg {
    Auto,
    Rounds,
    Phases,
    Windows,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub input: Inputs,
    /// Segments: rounds, phases, fixed windows of steps, or auto (first that the trace has).
    #[arg(long, value_enum, default_value = "auto")]
    pub segment: SegmentArg,
    /// Steps per window when segmenting by windows.
    #[arg(long, default_value_t = 5)]
    pub window: usize,
    /// Fusion weight lambda (c = lambda*q + (1-lambda)*p).
    #[arg(long, default_value_t = 0.5)]
    pub lambda: f64,
    /// Completion token limit of the critics.
    #[arg(long, default_value_t = 128)]
    pub critic_max_tokens: u32,
    /// Characters of each step shown to the critics.
    #[arg(long, default_value_t = 1500)]
    pub max_step_chars: usize,
    /// Score at most this many traces.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Write the full result (corpus table and per-trace credit) as JSON.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Write a self-contained HTML report with the heatmap.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Write the traces back (native JSONL) with a `credit/role-segment` verdict each.
    #[arg(long = "traces-out", alias = "write-verdicts", value_name = "FILE")]
    pub write_verdicts: Option<PathBuf>,
    #[command(flatten)]
    pub llm: LlmArgs,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    if !(0.0..=1.0).contains(&args.lambda) {
        anyhow::bail!("--lambda must be in [0, 1]");
    }
    let (traces, read_errors) = read_all(&args.input, global, "reading traces", args.limit)?;
    if traces.is_empty() {
        anyhow::bail!("{}", args.input.nothing_read(read_errors.len()));
    }
    let opts = TraceCreditOptions {
        lambda: args.lambda,
        segmenting: match args.segment {
            SegmentArg::Auto => Segmenting::Auto,
            SegmentArg::Rounds => Segmenting::Rounds,
            SegmentArg::Phases => Segmenting::Phases,
            SegmentArg::Windows => Segmenting::Windows,
        },
        window: args.window.max(1),
        decoding: Decoding {
            temperature: 0.0,
            max_tokens: args.critic_max_tokens,
            top_p: None,
        },
        repair: true,
        max_step_chars: args.max_step_chars,
    };
    let concurrency = args.llm.concurrency()?;
    let (mut run, stack) = block_on(async {
        let stack = args.llm.build().await?;
        let model: Arc<dyn ChatModel> = stack.model.clone();
        let bar = crate::progress::Bar::new("credit", global.quiet);
        let run = credit_traces(model, &traces, &opts, concurrency, &bar).await;
        anyhow::Ok((run, stack))
    })??;
    // Unreadable records first, then traces the critics could not score: all in the file.
    run.errors.splice(0..0, read_errors);
    if stack.exporter.is_some() {
        // Export mode: the deferred traces wait for their answers, so no table until the rerun.
        for e in &run.errors {
            eprintln!("problem: {e}");
        }
        crate::llm_args::finish(&stack, global.quiet);
        return Ok(crate::ui::exit_code(run.errors.len()));
    }
    let (table, title, model_id, errors) = (&run.table, run.title(), &run.model, &run.errors);
    if let Some(p) = &args.out {
        crate::ui::write_atomic(p, serde_json::to_string_pretty(&run)?.as_bytes())?;
    }
    // `--db`: the credit run (table and per-trace credit) is stored beside the runs it scored.
    if let Some(db) = &args.input.db {
        let run_id = (traces.len() == 1).then(|| traces[0].id.clone());
        let id = crate::db::add_report(
            db,
            maslens_store::diagnosis::ReportKind::Credit,
            &title,
            run_id.as_deref(),
            &run,
        )?;
        eprintln!("credit table stored in {db} as {id}");
    }
    if let Some(p) = &args.html {
        crate::ui::write_atomic(p, run.html().as_bytes())?;
    }
    if let Some(p) = &args.write_verdicts {
        // Written beside the path and renamed once complete (crate::ui::sink).
        let mut f = crate::ui::sink(Some(p))?;
        for t in run.with_verdicts(&traces)? {
            writeln!(f, "{}", serde_json::to_string(&t)?)?;
        }
        f.finish()?;
    }
    let mut out = std::io::stdout().lock();
    if global.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "model": model_id, "table": table, "systems": run.systems, "errors": errors
            }))?
        )?;
    } else {
        write!(out, "{}", run.markdown())?;
        for e in errors {
            writeln!(out, "problem: {e}")?;
        }
    }
    Ok(crate::ui::exit_code(errors.len()))
}
