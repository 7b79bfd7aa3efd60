//! `maslens credit`: structural (role) and temporal (round / phase / window) credit for traces
//! of any supported format, as a role x segment table (terminal / Markdown, JSON, HTML heatmap).

use crate::cmd::{block_on, EXIT_OK, EXIT_PROBLEMS};
use crate::llm_args::LlmArgs;
use crate::Global;
use anyhow::Context;
use maslens_credit::config::Decoding;
use maslens_credit::report::{credit_html, credit_markdown};
use maslens_credit::trace_credit::{
    corpus_table, trace_credit, Segmenting, TraceCredit, TraceCreditOptions,
};
use maslens_llm::ChatModel;
use maslens_trace::import::{read_paths, Format};
use maslens_trace::{Trace, Verdict};
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
    /// Trace files or directories (debate runs from `maslens optimize`, Who&When, Aegis, chat,
    /// native JSON/JSONL).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Input format (auto-detected per file by default).
    #[arg(long, default_value = "auto")]
    pub format: Format,
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
    #[arg(long)]
    pub write_verdicts: Option<PathBuf>,
    #[command(flatten)]
    pub llm: LlmArgs,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    if !(0.0..=1.0).contains(&args.lambda) {
        anyhow::bail!("--lambda must be in [0, 1]");
    }
    let mut traces: Vec<Trace> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    for item in read_paths(&args.inputs, args.format) {
        match item {
            Ok(imp) => traces.push(imp.trace),
            Err(e) => errors.push(e.to_string()),
        }
        if args.limit.is_some_and(|l| traces.len() >= l) {
            break;
        }
    }
    for e in &errors {
        eprintln!("warning: skipped {e}");
    }
    if traces.is_empty() {
        anyhow::bail!("no readable traces in {:?}", args.inputs);
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
    let concurrency = args.llm.concurrency.max(1);
    let (model_id, results) = block_on(async {
        let model: Arc<dyn ChatModel> = args.llm.build().await?.model;
        let sem = Arc::new(tokio::sync::Semaphore::new(concurrency));
        let mut set = tokio::task::JoinSet::new();
        for (i, t) in traces.iter().enumerate() {
            let (m, t, o, sem) = (model.clone(), t.clone(), opts.clone(), sem.clone());
            set.spawn(async move {
                let _p = sem.acquire_owned().await;
                (i, trace_credit(m.as_ref(), &t, &o).await)
            });
        }
        let mut out: Vec<Option<Result<TraceCredit, String>>> = vec![None; traces.len()];
        while let Some(j) = set.join_next().await {
            let (i, r) = j.context("credit task failed")?;
            out[i] = Some(r.map_err(|e| e.to_string()));
        }
        anyhow::Ok((model.id().to_string(), out))
    })??;
    let mut ok: Vec<TraceCredit> = Vec::new();
    for (t, r) in traces.iter().zip(results) {
        match r {
            Some(Ok(c)) => ok.push(c),
            Some(Err(e)) => errors.push(format!("{}: {e}", t.id)),
            None => errors.push(format!("{}: not scored", t.id)),
        }
    }
    let table = corpus_table(&ok);
    let title = format!(
        "Credit over {} trace(s), model {model_id} (cells: fused c; last row: temporal credit)",
        ok.len()
    );
    if let Some(p) = &args.out {
        let v = serde_json::json!({
            "model": model_id, "lambda": args.lambda, "table": table, "traces": ok, "errors": errors,
            "prompt_versions": ["credit/agent_turn_eval.v1", "credit/aggregator_eval.v1", "credit/peer_view_judge.v1",
                                "credit/generic_turn_eval.v1", "credit/generic_window_judge.v1"],
        });
        std::fs::write(p, serde_json::to_string_pretty(&v)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &args.html {
        std::fs::write(p, credit_html(&table, &title))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &args.write_verdicts {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        );
        for c in &ok {
            if let Some(t) = traces.iter().find(|t| t.id == c.trace_id) {
                let mut t = t.clone();
                t.labels.verdicts.push(Verdict {
                    method: "credit/role-segment".into(),
                    model: Some(model_id.clone()),
                    prompt_version: Some(
                        if c.mode == "debate-mcq" {
                            "credit/agent_turn_eval.v1"
                        } else {
                            "credit/generic_turn_eval.v1"
                        }
                        .into(),
                    ),
                    payload: serde_json::to_value(c)?,
                });
                writeln!(f, "{}", serde_json::to_string(&t)?)?;
            }
        }
    }
    let mut out = std::io::stdout().lock();
    if global.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"model": model_id, "table": table, "errors": errors})
            )?
        )?;
    } else {
        writeln!(out, "{}", credit_markdown(&table, &title))?;
        for e in &errors {
            writeln!(out, "problem: {e}")?;
        }
    }
    Ok(ExitCode::from(if errors.is_empty() {
        EXIT_OK
    } else {
        EXIT_PROBLEMS
    }))
}
