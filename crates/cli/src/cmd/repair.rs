//! `maslens repair`: corrected replacement steps for implicit failures (MASIF listings 5-6) and
//! matched no-op / fix replay plans as JSONL for the user's own system to resume from.

use crate::cmd::scan::{load_scans, read_traces};
use crate::cmd::{block_on, EXIT_OK, EXIT_PROBLEMS};
use crate::llm_args::LlmArgs;
use crate::Global;
use anyhow::Context;
use maslens_implicit::repair::{repair_event, RepairConfig};
use maslens_trace::import::Format;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The traces that were scanned (files or directories).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Their scan result (`maslens scan --out FILE`).
    #[arg(long)]
    pub scan: PathBuf,
    #[arg(long, default_value = "auto")]
    pub format: Format,
    /// Replay plans (JSONL, one `noop` and one `fix` line per IF); default stdout.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Repair at most this many IFs per trace.
    #[arg(long)]
    pub max_per_trace: Option<usize>,
    /// Completion token limit of the repair call.
    #[arg(long, default_value_t = 512)]
    pub max_tokens: u32,
    #[command(flatten)]
    pub llm: LlmArgs,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let scans = load_scans(&args.scan)?;
    let by_id: HashMap<&str, &maslens_implicit::TraceScan> =
        scans.iter().map(|s| (s.id.as_str(), s)).collect();
    let (traces, read_errors) = read_traces(&args.inputs, args.format, None);
    let mut problems = read_errors.len();
    let mut sink: Box<dyn Write> = match &args.out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    let cfg = RepairConfig {
        max_tokens: args.max_tokens,
        ..Default::default()
    };
    let quiet = global.quiet;
    let written = block_on(async {
        let stack = args.llm.build().await?;
        let mut written = 0usize;
        for t in &traces {
            let Some(scan) = by_id.get(t.id.as_str()) else {
                continue;
            };
            let events = scan
                .events
                .iter()
                .take(args.max_per_trace.unwrap_or(usize::MAX));
            for (i, e) in events.enumerate() {
                let (plans, _) = repair_event(stack.model.as_ref(), t, i, e, &cfg).await?;
                match plans {
                    Ok(pair) => {
                        for p in pair {
                            writeln!(sink, "{}", serde_json::to_string(&p)?)?;
                            written += 1;
                        }
                    }
                    Err(why) => {
                        eprintln!("warning: {why}");
                        problems += 1;
                    }
                }
            }
        }
        sink.flush()?;
        crate::llm_args::finish(&stack, quiet);
        anyhow::Ok(written)
    })??;
    let unmatched = scans
        .iter()
        .filter(|s| !traces.iter().any(|t| t.id == s.id))
        .count();
    if unmatched > 0 {
        eprintln!("warning: {unmatched} scanned trace(s) were not found among the inputs");
        problems += 1;
    }
    if !quiet {
        eprintln!("wrote {written} replay plan line(s)");
    }
    Ok(ExitCode::from(if problems == 0 {
        EXIT_OK
    } else {
        EXIT_PROBLEMS
    }))
}
