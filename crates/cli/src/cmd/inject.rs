//! `maslens inject`: fault injection into a debate's successful runs, writing the runs the fault
//! turned wrong as labelled failure traces (training data for `maslens prior train`; docs/inject.md).

use crate::cmd::{block_on, EXIT_OK};
use crate::debate_args::{debate_models, load_questions};
use crate::llm_args::LlmArgs;
use crate::Global;
use anyhow::{bail, Context};
use maslens_credit::config::DebateConfig;
use maslens_credit::data::Mcq;
use maslens_credit::inject::{inject_many, FaultKind, InjectOptions, InjectSummary};
use maslens_credit::simulation;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Debate configuration (TOML, as for `maslens optimize`). Optional with --simulation.
    pub config: Option<PathBuf>,
    /// Dataset: `mmlu:PATH` (CSV file or folder), `aqua:PATH`, `jsonl:PATH`, `medmcqa:PATH`,
    /// `medmcqa-hf:PATH`, `gpqa:PATH` (docs/credit.md); overrides [data].
    #[arg(long)]
    pub dataset: Option<String>,
    /// Questions to run (the dataset's first N in a seeded order).
    #[arg(long, default_value_t = 20)]
    pub questions: usize,
    /// Fault kinds, comma-separated: wrong-fact, dropped-instruction.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "wrong-fact,dropped-instruction"
    )]
    pub kinds: Vec<FaultKind>,
    /// Injected runs per successful clean run at most (positions in a seeded order).
    #[arg(long, default_value_t = 4)]
    pub per_run: usize,
    /// Seed of the question order, the positions, the wrong options and every run's decoding.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output folder: traces.jsonl (the labelled failure traces, native JSONL) and
    /// summary.json (every question: the clean answer, each injection and whether it flipped).
    #[arg(long, short)]
    pub out: PathBuf,
    /// Run the SIMULATED multi-agent system (a deterministic test environment, not a model)
    /// on synthetic questions instead of an LLM.
    #[arg(long)]
    pub simulation: bool,
    #[command(flatten)]
    pub llm: LlmArgs,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    if args.kinds.is_empty() {
        bail!("--kinds needs at least one fault kind");
    }
    let cfg: DebateConfig = match (&args.config, args.simulation) {
        (Some(p), _) => DebateConfig::from_path(p)?,
        (None, true) => simulation::config(2, 0, 0)?,
        (None, false) => bail!("a debate configuration file is required (or --simulation)"),
    };
    let (mut questions, dataset): (Vec<Mcq>, String) = if args.simulation && args.dataset.is_none()
    {
        (
            simulation::questions(args.questions, args.seed),
            "simulation".into(),
        )
    } else {
        load_questions(args.dataset.as_deref(), &cfg, args.config.as_deref())?
    };
    questions.sort_by_key(|q| maslens_trace::seeded_hash(args.seed, &q.id));
    questions.truncate(args.questions);
    let opts = InjectOptions {
        kinds: args.kinds.clone(),
        per_run: args.per_run,
        seed: args.seed,
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let traces_path = args.out.join("traces.jsonl");
    let mut traces_file = maslens_eval::atomic::AtomicFile::create(&traces_path)
        .with_context(|| format!("cannot create {}", traces_path.display()))?;
    let mut file = std::io::BufWriter::new(&mut traces_file);
    let run_id = format!("inject-{}", cfg.name);
    let (summary, outcomes) = block_on(async {
        let (models, stacks) =
            debate_models(&args.llm, &cfg, args.simulation.then_some(&questions[..])).await?;
        let prompts = cfg.prompts();
        let mut summary = InjectSummary::default();
        let mut outcomes = Vec::new();
        // `concurrency` questions at a time (the configuration's), reported after each batch.
        for batch in questions.chunks(cfg.concurrency.max(1)) {
            for o in inject_many(&models, &cfg, &prompts, batch, &opts, &run_id).await? {
                for t in &o.traces {
                    writeln!(file, "{}", serde_json::to_string(t)?)?;
                }
                summary.add(&o);
                if !global.quiet {
                    eprintln!(
                        "[{}/{}] {}: clean {} ({}), {} injected, {} labelled",
                        outcomes.len() + 1,
                        questions.len(),
                        o.question,
                        o.clean_answer.map_or("-".into(), |c| c.to_string()),
                        if o.clean_correct { "right" } else { "wrong" },
                        o.tried.len(),
                        o.traces.len()
                    );
                }
                outcomes.push(o);
            }
        }
        crate::debate_args::finish(&stacks, global.quiet);
        anyhow::Ok((summary, outcomes))
    })??;
    file.flush()?;
    drop(file);
    traces_file
        .commit()
        .with_context(|| format!("cannot write {}", traces_path.display()))?;
    let json = serde_json::json!({
        "dataset": dataset,
        "debate": cfg.name,
        "options": opts,
        "summary": summary,
        "questions": outcomes,
    });
    let summary_path = args.out.join("summary.json");
    crate::ui::write_atomic(
        &summary_path,
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    let mut out = std::io::stdout().lock();
    if global.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&json["summary"])?)?;
    } else {
        writeln!(
            out,
            "{} questions, {} answered right by the clean debate; {} injected runs, {} turned \
             wrong and written as labelled traces to {}",
            summary.questions,
            summary.clean_correct,
            summary.tried,
            summary.labelled,
            traces_path.display()
        )?;
        for (kind, (tried, flipped)) in &summary.by_kind {
            writeln!(
                out,
                "  {kind}: {flipped} of {tried} injected runs turned wrong"
            )?;
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}
