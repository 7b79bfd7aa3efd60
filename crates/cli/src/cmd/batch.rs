//! `maslens batch`: run a JSONL of chat requests through the model stack, export uncached
//! requests as OpenAI Batch JSONL, import batch output into the cache.

use crate::cmd::block_on;
use crate::llm_args::{finish, CacheMode, LlmArgs};
use crate::ui::exit_code;
use crate::Global;
use anyhow::Context;
use maslens_eval::atomic::AtomicFile;
use maslens_llm::batch::{import_output, line_error_report, read_requests, LineError};
use maslens_llm::batch_run::run_requests as run_batch;
use maslens_llm::cache::Cache;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: BatchCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum BatchCommand {
    /// Run a JSONL of chat requests (OpenAI Batch lines or maslens ChatRequest objects) through
    /// the configured model, cache and budget, with `--concurrency` calls in flight. A rerun
    /// answers completed calls from the cache, so an interrupted run resumes.
    Run {
        /// Requests, one JSON object per line.
        requests: PathBuf,
        /// Stop with exit code 2 at a bad request line instead of skipping it.
        #[arg(long)]
        strict: bool,
        /// Write one result per line here (`line`, `custom_id`, `text` or `error`, `usage`).
        #[arg(long = "out", short, alias = "output", value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        llm: LlmArgs,
    },
    /// Write the requests of a JSONL that are not in the cache as an OpenAI Batch input file
    /// (`custom_id` = cache key). Any other LLM command does the same with `--batch-export FILE`.
    Export {
        /// Requests, one JSON object per line.
        #[arg(long)]
        requests: PathBuf,
        /// Stop with exit code 2 at a bad request line instead of skipping it.
        #[arg(long)]
        strict: bool,
        /// The OpenAI Batch JSONL to write.
        #[arg(long = "out", short, alias = "output", value_name = "FILE")]
        output: PathBuf,
        #[command(flatten)]
        llm: LlmArgs,
    },
    /// Load an OpenAI Batch / `vllm run-batch` output file into the cache (any order; bad lines
    /// are reported with their number and skipped).
    Import {
        /// Batch output JSONL.
        output: PathBuf,
        /// Exit with code 2 when a line is bad (the good lines are still imported); without
        /// it, bad lines are reported, counted and the exit code is 1.
        #[arg(long)]
        strict: bool,
        /// Cache file (SQLite); default `$MASLENS_HOME/cache.sqlite`.
        #[arg(long, env = "MASLENS_CACHE")]
        cache: Option<PathBuf>,
    },
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    match args.command {
        BatchCommand::Run {
            requests,
            strict,
            output,
            llm,
        } => block_on(run_requests(requests, strict, output, llm, global))?,
        BatchCommand::Export {
            requests,
            strict,
            output,
            mut llm,
        } => {
            llm.batch_export = None;
            llm.cache_mode = CacheMode::Export(output);
            block_on(run_requests(requests, strict, None, llm, global))?
        }
        BatchCommand::Import {
            output,
            strict,
            cache,
        } => import(output, strict, cache, global),
    }
}

fn report_line_errors(file: &std::path::Path, errors: &[LineError]) {
    line_error_report(file, errors, 20)
        .iter()
        .for_each(|l| eprintln!("{l}"));
}

fn import(
    output: PathBuf,
    strict: bool,
    cache: Option<PathBuf>,
    global: &Global,
) -> anyhow::Result<ExitCode> {
    let path = cache.unwrap_or_else(Cache::default_path);
    let cache = Cache::open(&path)?;
    let report = import_output(&cache, &output)?;
    report_line_errors(&output, &report.errors);
    if let (true, Some(first)) = (strict, report.errors.first()) {
        anyhow::bail!(
            "{}:{}: {} (--strict; {} good line(s) were imported)",
            output.display(),
            first.line,
            first.message,
            report.imported
        );
    }
    if global.json {
        crate::outln!("{}", serde_json::to_string(&report)?);
    } else {
        crate::outln!("{}", report.line(&path));
    }
    Ok(exit_code(report.errors.len()))
}

async fn run_requests(
    requests: PathBuf,
    strict: bool,
    output: Option<PathBuf>,
    llm: LlmArgs,
    global: &Global,
) -> anyhow::Result<ExitCode> {
    let (reqs, bad) = read_requests(&requests)?;
    if let (true, Some(first)) = (strict, bad.first()) {
        anyhow::bail!(
            "{}:{}: {} (--strict: nothing was run)",
            requests.display(),
            first.line,
            first.message
        );
    }
    report_line_errors(&requests, &bad);
    let stack = llm.build().await?;
    // `-o FILE` is written beside FILE and renamed at the end (no half-written FILE).
    let mut tmp = output
        .as_deref()
        .map(|p| AtomicFile::create(p).with_context(|| format!("cannot create {}", p.display())))
        .transpose()?;
    let mut out = tmp.as_mut().map(std::io::BufWriter::new);
    // Without `-o` the answers are shown: the result lines on stdout (`--json`: in the JSON).
    let mut shown: Vec<serde_json::Value> = Vec::new();
    let mut summary = run_batch(
        stack.model.clone(),
        reqs,
        llm.concurrency()?,
        |line| match out.as_mut() {
            Some(out) => writeln!(out, "{line}"),
            None => {
                shown.push(line.clone());
                Ok(())
            }
        },
    )
    .await?;
    if let Some(out) = out.as_mut() {
        out.flush()?;
    }
    drop(out);
    if let (Some(tmp), Some(path)) = (tmp, &output) {
        tmp.commit()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    summary.bad_lines = bad.len();
    if let Some(c) = &stack.cache {
        summary.add_cache(c);
    }
    let report = stack.usage.report();
    summary.backend_calls = report.total.calls - report.total.cache_hits;
    if summary.skipped_budget > 0 {
        eprintln!(
            "budget exhausted: {} request(s) not started",
            summary.skipped_budget
        );
    }
    if global.json {
        let mut v = json!({"summary": summary, "usage": report});
        if output.is_none() {
            v["results"] = serde_json::Value::Array(shown);
        }
        crate::outln!("{v}");
    } else {
        // The result lines (JSON: no control characters) on stdout; the summary then goes to
        // stderr so that stdout stays a JSONL file of answers.
        for line in &shown {
            crate::outln!("{line}");
        }
        match output.is_some() {
            true => crate::outln!("{}", summary.line()),
            false => eprintln!("{}", summary.line()),
        }
    }
    finish(&stack, global.quiet || global.json);
    Ok(exit_code(summary.problems()))
}
