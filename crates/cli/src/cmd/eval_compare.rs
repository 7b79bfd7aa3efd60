//! `maslens eval compare DATASET --methods ...`: several localizers on the same cases with the
//! same model and cache, in one report with paired tests (`maslens_core::eval_compare`).

use super::{exit_code, finish_problems};
use crate::locate_args::CaseArgs;
use crate::Global;
use anyhow::Context;
use maslens_core::eval_compare::{eval_compare, CompareMethod, CompareOptions};
use maslens_locate::{Protocol, Variant};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub cases: CaseArgs,
    /// The methods, in the report's order: prior, stacked, agentlocate (alias llm), all-at-once,
    /// step-by-step, binary-search, a2p, taxonomy, echo, counterfactual. Each sets its own --method, --protocol
    /// and --variant.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "prior,stacked,agentlocate,all-at-once,step-by-step,binary-search,a2p,taxonomy,echo,counterfactual"
    )]
    pub methods: Vec<String>,
    /// Seed of the random baseline, the bootstrap intervals and the paired bootstrap.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Step tolerances for the tolerance columns.
    #[arg(long, value_delimiter = ',', default_value = "0,1,3")]
    pub tolerances: Vec<usize>,
    /// Run each method that prompts a model twice, without and with the reference answer in
    /// its prompts (Who&When's two settings), as rows NAME and NAME+gt of one table with paired
    /// tests between them.
    #[arg(long, conflicts_with = "with_ground_truth")]
    pub both_ground_truth: bool,
    /// Directory for compare.json, compare.md and one `eval locate` report directory per method.
    #[arg(long, short, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub fn run(a: CompareArgs, global: &Global) -> anyhow::Result<ExitCode> {
    if a.cases.method.method.is_some()
        || a.cases.method.protocol != Protocol::AllAtOnce
        || a.cases.method.variant != Variant::Verified
    {
        anyhow::bail!(
            "eval compare sets --method, --protocol and --variant per method: choose methods \
             with --methods"
        );
    }
    let methods = a
        .methods
        .iter()
        .map(|m| CompareMethod::parse(m))
        .collect::<Result<Vec<_>, _>>()?;
    let opts = CompareOptions {
        base: a.cases.options(a.seed, &a.tolerances)?,
        methods,
        both_ground_truth: a.both_ground_truth,
    };
    let bar = crate::progress::Bar::new("compare", global.quiet);
    let out = crate::cmd::block_on(eval_compare(&opts, &bar))??;
    finish_problems(&out.problems);
    if let Some(dir) = &a.out {
        out.write(dir)
            .with_context(|| format!("writing reports to {}", dir.display()))?;
    }
    if global.json {
        crate::outln!("{}", serde_json::to_string_pretty(&out.report)?);
    } else {
        crate::outln!("{}", out.report.to_markdown());
    }
    for m in &out.report.methods {
        if let Some(why) = &m.stopped_early {
            eprintln!("warning: {} stopped early: {why}", m.name);
        }
        if m.errors > 0 {
            eprintln!(
                "warning: {}: {} case(s) failed (scored as wrong)",
                m.name, m.errors
            );
        }
    }
    Ok(exit_code(out.has_problems()))
}
