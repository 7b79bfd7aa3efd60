//! `maslens locate <trace|dir>...`: which agent and step decided the failure, and why
//! (`maslens_core::localize`).

use crate::inputs::{read_all, Inputs};
use crate::llm_args::LlmArgs;
use crate::locate_args::MethodArgs;
use crate::Global;
use anyhow::Context;
use maslens_core::localize::{LocateRun, Setup};
use maslens_core::locate::{Method, Models};
use maslens_eval::run::Progress;
use maslens_store::{NewDiagnosis, Provenance};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub input: Inputs,
    #[command(flatten)]
    pub method: MethodArgs,
    #[command(flatten)]
    pub llm: LlmArgs,
    /// Write every trace with its verdict appended to `labels.verdicts` as native JSONL to this file.
    #[arg(long = "out", short = 'o', alias = "write-back", value_name = "FILE")]
    pub write_back: Option<PathBuf>,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let (mut traces, errors) = read_all(&args.input, global, "reading traces", None)?;
    let problems = errors.len();
    if traces.is_empty() {
        anyhow::bail!("{}", args.input.nothing_read(errors.len()));
    }
    let opts = args.method.options();
    if opts.method == Method::Llm && !global.quiet && !global.json {
        // Which output this run gives (issue 17 item 6): the vote is not AgentLocate's output.
        let cfg = opts.config(false);
        let o = cfg.variant.output();
        eprintln!(
            "output ({}): {}, {}: {}",
            cfg.variant.as_str(),
            o.paper,
            o.equation,
            o.output
        );
    }
    // Written beside the path and renamed once complete: a killed run leaves no half file.
    let mut out = match &args.write_back {
        Some(p) => Some(crate::ui::sink(Some(p))?),
        None => None,
    };
    let (quiet, json) = (global.quiet, global.json);
    let db = args.input.db.clone();
    let any_aegis = traces.iter().any(|t| t.source.format == "aegis");
    let problems = super::block_on(async {
        let store = match &db {
            Some(d) => Some(crate::db::open(d).await?),
            None => None,
        };
        let models = match opts.method.needs_llm() {
            true => {
                let spec = args.llm.model()?;
                let m = Models::open(&spec, &args.llm.options()?, &opts).await;
                Some(m.with_context(|| format!("opening model {spec}"))?)
            }
            false => None,
        };
        let setup = Setup::new(&opts, models.as_ref(), any_aegis)?;
        for w in &setup.warnings {
            eprintln!("warning: {w}");
        }
        for n in setup.notes.iter().filter(|_| !quiet) {
            eprintln!("note: {n}");
        }
        let chosen = setup.localizer;
        let mut problems = problems + setup.warnings.len();
        // The one progress mechanism every corpus command uses (maslens_eval::run::Progress).
        let pb = crate::progress::Bar::new("locate", quiet);
        pb.start(traces.len());
        let mut steered_traces = 0usize;
        let mut each = LocateRun::new(&chosen);
        for t in traces.iter_mut() {
            pb.case(&t.id);
            let started = std::time::Instant::now();
            let hash = match &store {
                Some(s) => Some(crate::db::ensure(s, t).await?),
                None => None,
            };
            // After a stop (a spent budget) the remaining traces are still written to --out.
            let v = match each.verdict(t).await {
                Ok(v) => Some(v),
                // Export mode: its calls are in the batch file; the rerun answers it.
                Err(e) if e.is_deferred() => None,
                Err(e) => {
                    pb.error(&t.id, &e.to_string());
                    problems += 1;
                    None
                }
            };
            if let Some(v) = v {
                pb.suspend(|| match json {
                    true => crate::outln!("{}", crate::term::json(&v.to_json().to_string())),
                    // Everything from the trace or the model is escaped: a trace cannot move the
                    // cursor, clear the screen or forge a line of this output.
                    false => v
                        .text_lines(t)
                        .iter()
                        .for_each(|l| crate::outln!("{}", crate::term::inline(l))),
                });
                // A trace that tried to steer the judge is a problem to look at (exit 1), whatever
                // the verdict: the verdict says whether it followed.
                if let Some(why) = v.fell_back() {
                    pb.suspend(|| {
                        eprintln!(
                            "warning: {}: the LLM pipeline failed ({why}); answered by the prior \
                             alone (--fallback prior)",
                            t.id
                        )
                    });
                    problems += 1;
                }
                if !v.steering().is_empty() {
                    problems += 1;
                    steered_traces += 1;
                }
                // The same mapping `serve`'s jobs store (maslens_store::NewDiagnosis::from_verdict).
                if let (Some(s), Some(h)) = (&store, &hash) {
                    let p = Provenance::of(
                        chosen.diagnosis_kind(),
                        &opts,
                        &v.usage,
                        chosen.prompt_hashes(),
                        started.elapsed(),
                    );
                    crate::db::add(s, &NewDiagnosis::from_verdict(t, &v.verdict, h, p)).await?;
                }
                t.labels.verdicts.push(v.to_label());
            }
            if let Some(w) = out.as_mut() {
                maslens_trace::export::write_jsonl(&mut *w, t).context("writing --out")?;
            }
            pb.case_done();
        }
        pb.finish();
        if let Some(m) = chosen.models() {
            let windows = m.judge.model.context_size().is_some();
            let more =
                crate::locate_args::export_rounds_left(&opts, &m.judge.usage.report(), windows);
            crate::llm_args::finish_export(&m.judge, quiet, more);
        }
        if steered_traces > 0 && !quiet {
            eprintln!(
                "{} tried to steer the judge: their verdicts list it under \
                 `steering` (and whether the answer followed it); check them by hand",
                crate::words::count(steered_traces, "trace")
            );
        }
        anyhow::Ok(problems)
    })??;
    if let Some(w) = out {
        w.finish()?;
    }
    Ok(crate::ui::exit_code(problems))
}
