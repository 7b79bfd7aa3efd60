//! `maslens locate <trace|dir>...`: which agent and step decided the failure, and why
//! (`maslens_core::locate`).

use crate::inputs::{read_all, Inputs};
use crate::llm_args::LlmArgs;
use crate::locate_args::MethodArgs;
use crate::Global;
use anyhow::Context;
use maslens_core::locate::{LlmLocalizer, Method, Models, PriorLocalizer, PriorSource};
use maslens_core::stack::{StackWeights, StackedLocalizer, StackedVerdict};
use maslens_eval::run::Localizer;
use maslens_locate::LocateVerdict;
use std::io::Write;
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

fn print_verdict(v: &LocateVerdict) {
    match (&v.agent, v.step) {
        (Some(a), Some(s)) => {
            let agree = match (v.agreement, v.evaluators.len()) {
                (Some(x), n) if n > 0 => format!(
                    ", Evaluators agree {}/{}",
                    (x * n as f64).round() as usize,
                    n
                ),
                _ => String::new(),
            };
            // Everything from the trace or the model is escaped: a trace cannot move the
            // cursor, clear the screen or forge a line of this output.
            crate::outln!(
                "{}: {} at step {} (confidence {:.2}{agree})",
                crate::term::inline(&v.trace),
                crate::term::inline(a),
                s,
                v.confidence
            );
            if let Some(m) = &v.error_mode {
                crate::outln!("  error mode: {}", crate::term::inline(m));
            }
            if let Some(e) = &v.step_excerpt {
                crate::outln!("  step {s}: {}", crate::term::inline(&e.replace('\n', " ")));
            }
            if !v.rationale.is_empty() {
                crate::outln!(
                    "  why: {}",
                    crate::term::inline(&v.rationale.replace('\n', " "))
                );
            }
        }
        _ => crate::outln!(
            "{}: no location ({})",
            crate::term::inline(&v.trace),
            crate::term::inline(&v.abstain_reason.clone().unwrap_or_default())
        ),
    }
    if v.long_trace.strategy != maslens_locate::render::Strategy::Full {
        crate::outln!("  long trace: {}", v.long_trace.strategy.describe());
    }
    if let Some(n) = &v.note {
        crate::outln!("  note: {}", crate::term::inline(n));
    }
    print_steering(&v.steering);
}

/// The trace's attempts to steer the Judge or the Evaluators (issue 16), one line each.
fn print_steering(hits: &[maslens_locate::steering::SteeringHit]) {
    for h in hits {
        crate::outln!("  steering: {}", crate::term::inline(&h.describe()));
    }
}

fn print_stacked(v: &StackedVerdict, t: &maslens_trace::Trace) {
    use maslens_core::stack::StackSource;
    let from = match (v.step_source, &v.fallback) {
        (StackSource::PriorFallback, Some(why)) => format!("the prior alone: {why}"),
        (StackSource::LlmOnly, _) => "the LLM pipeline alone: no prior for this trace".into(),
        _ => "LLM pipeline + prior, stacked".to_string(),
    };
    crate::outln!(
        "{}: {} ({from})",
        crate::term::inline(&v.trace),
        crate::term::inline(&v.headline(t))
    );
    if let (Some(s), Some(e)) = (v.step, &v.step_excerpt) {
        crate::outln!("  step {s}: {}", crate::term::inline(&e.replace('\n', " ")));
    }
    if !v.rationale.is_empty() {
        let whose = if v.rationale_from == "llm" {
            "the model"
        } else {
            "the prior's evidence"
        };
        crate::outln!(
            "  why ({whose}): {}",
            crate::term::inline(&v.rationale.replace('\n', " "))
        );
    }
    let llm = match &v.pipeline {
        Some(p) => match (&p.agent, p.step) {
            (Some(a), Some(s)) => format!("{a} at step {s}"),
            _ => format!(
                "no location ({})",
                p.abstain_reason.clone().unwrap_or_default()
            ),
        },
        None => format!("failed ({})", v.pipeline_error.clone().unwrap_or_default()),
    };
    let prior = match &v.prior {
        Some((a, s)) => maslens_core::locate::prior_verdict_text(t, a, *s)
            .replace(" (the prior's two heads answer separately)", ""),
        None => "none".into(),
    };
    crate::outln!(
        "  LLM pipeline: {}; prior: {}",
        crate::term::inline(&llm),
        crate::term::inline(&prior)
    );
    if let Some(p) = &v.pipeline {
        print_steering(&p.steering);
    }
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let (mut traces, errors) = read_all(&args.input, global, "reading traces", None)?;
    let mut problems = errors.len();
    if traces.is_empty() {
        anyhow::bail!("{}", args.input.nothing_read(errors.len()));
    }
    let opts = args.method.options_or(Method::Stacked);
    let stack_weights = match opts.method {
        Method::Stacked => Some(StackWeights::load(
            opts.stack.as_deref().unwrap_or("builtin"),
        )?),
        _ => None,
    };
    let prior = match opts.prior_spec() {
        Some(spec) => {
            let (p, skipped) = PriorSource::load(spec)?;
            for s in &skipped {
                eprintln!("warning: {s}");
            }
            problems += skipped.len();
            Some(p)
        }
        None => None,
    };
    let any_aegis = traces.iter().any(|t| t.source.format == "aegis");
    let cfg = opts.config(opts.wants_error_modes(any_aegis));
    if opts.method == Method::Llm && !global.quiet && !global.json {
        // Which output this run gives (issue 17 item 6): the vote is not AgentLocate's output.
        let o = cfg.variant.output();
        eprintln!(
            "output ({}): {}, {}: {}",
            cfg.variant.as_str(),
            o.paper,
            o.equation,
            o.output
        );
    }
    let mut out = match &args.write_back {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => None,
    };
    let (quiet, json) = (global.quiet, global.json);
    let db = args.input.db.clone();
    // The prior's diagnosis for the store (the localizer owns its own copy).
    let prior_for_db = match (&db, opts.method, opts.prior_spec()) {
        (Some(_), Method::Prior, Some(spec)) => Some(PriorSource::load(spec)?.0),
        _ => None,
    };
    let problems = super::block_on(async {
        let store = match &db {
            Some(d) => Some(crate::db::open(d).await?),
            None => None,
        };
        let models;
        let llm;
        let prior_only;
        let stacked_localizer;
        type Chosen<'a, 'm> = (
            &'a dyn Localizer,
            Option<&'a LlmLocalizer<'m>>,
            Option<&'a StackedLocalizer<'m>>,
        );
        let (localizer, pipeline, stacked): Chosen = if opts.method == Method::Prior {
            prior_only = PriorLocalizer(prior.context("the prior did not load")?);
            (&prior_only, None, None)
        } else {
            let spec = args.llm.model()?;
            models = Models::open(&spec, &args.llm.options()?, &opts)
                .await
                .with_context(|| format!("opening model {spec}"))?;
            match stack_weights {
                Some(w) => {
                    let (weights, note) = w.for_model(models.judge.model.id());
                    if let (Some(n), false) = (note, quiet) {
                        eprintln!("note: {n}");
                    }
                    // The pipeline's prior-guided narrowing uses the stack's prior.
                    let narrowing = match opts.prior_spec() {
                        Some(spec) => Some(PriorSource::load(spec)?.0),
                        None => None,
                    };
                    stacked_localizer = StackedLocalizer {
                        llm: LlmLocalizer {
                            models: &models,
                            config: cfg,
                            styles: opts.evaluators.clone(),
                            prior: narrowing,
                        },
                        prior: prior.context("the prior did not load")?,
                        weights,
                    };
                    (&stacked_localizer, None, Some(&stacked_localizer))
                }
                None => {
                    llm = LlmLocalizer {
                        models: &models,
                        config: cfg,
                        styles: opts.evaluators.clone(),
                        prior,
                    };
                    (&llm, Some(&llm), None)
                }
            }
        };
        let pb = crate::progress::bar(traces.len(), quiet || json);
        let mut problems = problems;
        let mut steered_traces = 0usize;
        for t in traces.iter_mut() {
            pb.set_message(t.id.clone());
            let started = std::time::Instant::now();
            let hash = match &store {
                Some(s) => Some(crate::db::ensure(s, t).await?),
                None => None,
            };
            let mut diagnosis = None;
            let mut steered = false;
            let printed = match (pipeline, stacked) {
                (None, Some(s)) => s.verdict(t).await.map_err(|e| e.to_string()).map(|v| {
                    steered = v.pipeline.as_ref().is_some_and(|p| !p.steering.is_empty());
                    pb.suspend(|| match json {
                        true => crate::outln!(
                            "{}",
                            crate::term::json(&serde_json::to_string(&v).unwrap_or_default())
                        ),
                        false => print_stacked(&v, t),
                    });
                    if let (Some(h), Some(p)) = (&hash, v.as_pipeline_verdict()) {
                        diagnosis = Some(maslens_server::serve::pipeline::locate_to_diagnosis(
                            &p, &opts, t, h, started,
                        ));
                    }
                    t.labels.verdicts.push(v.to_label());
                }),
                (Some(p), _) => p.verdict(t).await.map_err(|e| e.to_string()).map(|v| {
                    steered = !v.steering.is_empty();
                    pb.suspend(|| match json {
                        true => crate::outln!(
                            "{}",
                            crate::term::json(&serde_json::to_string(&v).unwrap_or_default())
                        ),
                        false => print_verdict(&v),
                    });
                    if let Some(h) = &hash {
                        diagnosis = Some(maslens_server::serve::pipeline::locate_to_diagnosis(
                            &v, &opts, t, h, started,
                        ));
                    }
                    t.labels.verdicts.push(v.to_label());
                }),
                (None, None) => localizer
                    .localize(t)
                    .await
                    .map_err(|e| e.to_string())
                    .map(|l| {
                        if let (Some(h), Some(prior)) = (&hash, prior_for_db.as_ref()) {
                            diagnosis =
                                maslens_server::serve::pipeline::prior_to_diagnosis(prior, t, h);
                        }
                        let p = &l.prediction;
                        match (json, &p.agent, p.step) {
                            (true, _, _) => crate::outln!(
                                "{}",
                                crate::term::json(&l.verdict.unwrap_or_default().to_string())
                            ),
                            (false, Some(a), Some(s)) => {
                                crate::outln!(
                                    "{}: {} (prior)",
                                    crate::term::inline(&t.id),
                                    crate::term::inline(&maslens_core::locate::prior_verdict_text(
                                        t, a, s
                                    ))
                                );
                                if let Some(why) =
                                    l.verdict.as_ref().and_then(|v| v["rationale"].as_str())
                                {
                                    crate::outln!("  why: {}", crate::term::inline(why));
                                }
                            }
                            _ => crate::outln!("{}: no location (prior)", t.id),
                        }
                    }),
            };
            // A trace that tried to steer the judge is a problem to look at (exit 1), whatever
            // the verdict: the verdict says whether it followed.
            if steered {
                problems += 1;
                steered_traces += 1;
            }
            if let Err(e) = printed {
                pb.suspend(|| eprintln!("error: {e}"));
                problems += 1;
            }
            if let (Some(s), Some(d)) = (&store, &diagnosis) {
                crate::db::add(s, d).await?;
            }
            if let Some(w) = out.as_mut() {
                maslens_trace::export::write_jsonl(&mut *w, t).context("writing --out")?;
            }
            pb.inc(1);
        }
        pb.finish_and_clear();
        if let Some(p) = pipeline {
            crate::llm_args::finish(&p.models.judge, quiet);
        }
        if let Some(s) = stacked {
            crate::llm_args::finish(&s.llm.models.judge, quiet);
        }
        if steered_traces > 0 && !quiet {
            eprintln!(
                "{steered_traces} trace(s) tried to steer the judge: their verdicts list it under \
                 `steering` (and whether the answer followed it); check them by hand"
            );
        }
        anyhow::Ok(problems)
    })??;
    if let Some(mut w) = out {
        w.flush()?;
    }
    Ok(ExitCode::from(if problems > 0 {
        super::EXIT_PROBLEMS
    } else {
        super::EXIT_OK
    }))
}
