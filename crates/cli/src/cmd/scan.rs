//! `maslens scan`: implicit failures (MASIF) over traces: detection, absorption, risk, and a
//! corpus report (prevalence and intensity by outcome, types, absorption).

use crate::cmd::{block_on, EXIT_ERROR, EXIT_OK, EXIT_PROBLEMS};
use crate::llm_args::LlmArgs;
use crate::Global;
use anyhow::Context;
use maslens_implicit::report::{corpus_report, markdown, CorpusReport};
use maslens_implicit::{scan_trace, ScanConfig, TraceScan, Weights};
use maslens_llm::{ChatModel, LlmError};
use maslens_trace::import::{read_paths, Format};
use maslens_trace::Trace;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trace files or directories (Who&When, Aegis, chat, native JSON/JSONL).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Input format (auto-detected per file by default).
    #[arg(long, default_value = "auto")]
    pub format: Format,
    /// Write the full result (report and per-trace scans) as JSON to this file; `select`
    /// and `repair` read it with `--scan`.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Write the Markdown report to this file (default: stdout unless --json).
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Severity weights override (TOML with [type] and [absorption] tables).
    #[arg(long)]
    pub weights: Option<PathBuf>,
    /// Further judge models for multi-judge mode (repeat the flag); `--model` is the first judge
    /// and also classifies absorption.
    #[arg(long = "judge", value_name = "SPEC")]
    pub judges: Vec<String>,
    /// Keep events reported by at least this many judges (multi-judge mode; default: majority).
    #[arg(long)]
    pub min_judges: Option<usize>,
    /// Skip absorption classification (IFs are then weighted as unknown absorption).
    #[arg(long)]
    pub no_absorption: bool,
    /// Count IFs whose evidence was not found in the trace (default: flagged, not counted).
    #[arg(long)]
    pub count_unsupported: bool,
    /// Scan at most this many traces.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Context window to plan windows for (default: the model's own).
    #[arg(long)]
    pub window_tokens: Option<usize>,
    /// Steps repeated between consecutive windows of a long trace.
    #[arg(long, default_value_t = 2)]
    pub overlap: usize,
    /// Completion token limit of the detector.
    #[arg(long, default_value_t = 1024)]
    pub detect_max_tokens: u32,
    /// Most IFs the detector may report per window.
    #[arg(long, default_value_t = 10)]
    pub max_events: usize,
    /// Completion token limit of the absorption classifier.
    #[arg(long, default_value_t = 256)]
    pub absorb_max_tokens: u32,
    /// Seed of the bootstrap intervals in the report.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub llm: LlmArgs,
}

/// What `scan --out` writes and `select` / `repair` read.
#[derive(Debug, Serialize, Deserialize)]
pub struct ScanFile {
    pub model: String,
    pub judges: Vec<String>,
    pub prompt_versions: Vec<String>,
    pub weights: Weights,
    pub report: CorpusReport,
    pub traces: Vec<TraceScan>,
    /// Traces that could not be read or scanned, with the reason.
    pub errors: Vec<String>,
}

/// Read a `scan --out` file (or JSONL of per-trace scans).
pub(crate) fn load_scans(path: &Path) -> anyhow::Result<Vec<TraceScan>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read scan file {}", path.display()))?;
    if let Ok(file) = serde_json::from_str::<ScanFile>(&text) {
        return Ok(file.traces);
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let s: TraceScan = serde_json::from_str(line).with_context(|| {
            format!(
                "{}: line {}: not a `maslens scan --out` file nor a JSONL line of trace scans",
                path.display(),
                i + 1
            )
        })?;
        out.push(s);
    }
    Ok(out)
}

/// Read all traces under `inputs`; unreadable records are reported on stderr and counted.
pub(crate) fn read_traces(
    inputs: &[PathBuf],
    format: Format,
    limit: Option<usize>,
) -> (Vec<Trace>, Vec<String>) {
    let mut traces = Vec::new();
    let mut errors = Vec::new();
    for item in read_paths(inputs, format) {
        if limit.is_some_and(|l| traces.len() >= l) {
            break;
        }
        match item {
            Ok(imp) => traces.push(imp.trace),
            Err(e) => {
                eprintln!("warning: skipped: {e}");
                errors.push(e.to_string());
            }
        }
    }
    (traces, errors)
}

pub(crate) fn write_output(path: Option<&Path>, text: &str) -> anyhow::Result<()> {
    match path {
        Some(p) => std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display())),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            if !text.ends_with('\n') {
                out.write_all(b"\n")?;
            }
            Ok(())
        }
    }
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let weights = match &args.weights {
        Some(p) => Weights::from_toml_file(p)?,
        None => Weights::default(),
    };
    let (traces, mut errors) = read_traces(&args.inputs, args.format, args.limit);
    if traces.is_empty() {
        anyhow::bail!(
            "no readable traces in {:?} ({} errors)",
            args.inputs,
            errors.len()
        );
    }
    let n_judges = 1 + args.judges.len();
    let cfg = ScanConfig {
        weights: weights.clone(),
        classify_absorption: !args.no_absorption,
        count_unsupported: args.count_unsupported,
        min_judges: args
            .min_judges
            .unwrap_or(n_judges / 2 + 1)
            .clamp(1, n_judges),
        detect: maslens_implicit::detect::DetectConfig {
            context_tokens: args.window_tokens,
            overlap_steps: args.overlap,
            max_tokens: args.detect_max_tokens,
            max_events: args.max_events.max(1),
            ..Default::default()
        },
        absorb: maslens_implicit::absorb::AbsorbConfig {
            context_tokens: args.window_tokens,
            max_tokens: args.absorb_max_tokens,
            ..Default::default()
        },
        ..Default::default()
    };
    let quiet = global.quiet;
    let result = block_on(async {
        let mut stacks = vec![args.llm.build().await?];
        for spec in &args.judges {
            let llm = LlmArgs {
                model: spec.clone(),
                ..args.llm.clone()
            };
            stacks.push(
                llm.build()
                    .await
                    .with_context(|| format!("judge model {spec}"))?,
            );
        }
        let models: Vec<Arc<dyn ChatModel>> = stacks.iter().map(|s| s.model.clone()).collect();
        let refs: Vec<&dyn ChatModel> = models.iter().map(|m| m.as_ref()).collect();
        let mut scans = Vec::new();
        let total = traces.len();
        for (i, t) in traces.iter().enumerate() {
            match scan_trace(&refs, t, &cfg).await {
                Ok(s) => {
                    if !quiet {
                        eprintln!(
                            "[{}/{}] {}: {} IF(s), {} flagged, risk {:.4}, {} tokens, {:.1}s",
                            i + 1,
                            total,
                            s.id,
                            s.events.len(),
                            s.flagged.len(),
                            s.risk,
                            s.usage.prompt_tokens + s.usage.completion_tokens,
                            s.seconds
                        );
                    }
                    scans.push(s);
                }
                Err(maslens_implicit::ImplicitError::Llm(LlmError::Budget(msg))) => {
                    eprintln!(
                        "budget exhausted at trace {} ({msg}); reporting the {} traces scanned",
                        t.id,
                        scans.len()
                    );
                    errors.push(format!("{}: budget exhausted: {msg}", t.id));
                    break;
                }
                Err(e) => {
                    eprintln!("warning: trace {}: {e}", t.id);
                    errors.push(format!("{}: {e}", t.id));
                }
            }
        }
        for s in &stacks {
            crate::llm_args::finish(s, quiet);
        }
        let judges: Vec<String> = models.iter().map(|m| m.id().to_string()).collect();
        anyhow::Ok((scans, judges))
    })??;
    let (scans, judges) = result;
    let report = corpus_report(&scans, args.seed);
    let md = markdown(&report, &scans);
    let file = ScanFile {
        model: judges.first().cloned().unwrap_or_default(),
        judges: if judges.len() > 1 { judges } else { Vec::new() },
        prompt_versions: vec![
            maslens_implicit::detect::DETECT_SYSTEM.name.into(),
            maslens_implicit::detect::DETECT_USER.name.into(),
            maslens_implicit::absorb::ABSORB_SYSTEM.name.into(),
            maslens_implicit::absorb::ABSORB_USER.name.into(),
        ],
        weights,
        report,
        traces: scans,
        errors,
    };
    let json = serde_json::to_string_pretty(&file)?;
    if let Some(p) = &args.out {
        write_output(Some(p), &json)?;
    }
    if let Some(p) = &args.markdown {
        write_output(Some(p), &md)?;
    }
    if global.json {
        write_output(None, &json)?;
    } else if args.markdown.is_none() {
        write_output(None, &md)?;
    }
    if file.traces.is_empty() {
        return Ok(ExitCode::from(EXIT_ERROR));
    }
    Ok(ExitCode::from(if file.errors.is_empty() {
        EXIT_OK
    } else {
        EXIT_PROBLEMS
    }))
}
