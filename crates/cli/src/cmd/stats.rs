//! `maslens stats`: corpus statistics (`maslens_trace::stats`), streamed; `--json` prints
//! [`CorpusStats`] (its keys are documented there).

use crate::inputs::{for_each_trace, Inputs};
use crate::outln;
use crate::words::noun_for;
use crate::Global;
use maslens_trace::stats::{top, CorpusStats, StatsBuilder};
use std::collections::BTreeMap;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub input: Inputs,
    /// How many agents to list in the text output (all of them are in `--json`).
    #[arg(long, default_value_t = 15)]
    pub top: usize,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let mut builder = StatsBuilder::new();
    let counts = for_each_trace(
        &args.input,
        global,
        "traces read",
        |imp| {
            builder.add(&imp.trace);
            Ok(())
        },
        |_| {},
    )?;
    let stats = builder.finish(counts.skipped, counts.warnings, counts.errors);
    if global.json {
        // serde_json leaves C1 and bidi characters raw: escaped for the terminal, still JSON.
        outln!(
            "{}",
            crate::term::json(&serde_json::to_string_pretty(&stats)?)
        );
    } else {
        print_text(&stats, args.top);
    }
    Ok(crate::ui::exit_code(counts.skipped as usize))
}

fn num(v: Option<f64>) -> String {
    match v {
        Some(f) if f.fract() == 0.0 => format!("{f:.0}"),
        Some(f) => format!("{f:.2}"),
        None => "-".into(),
    }
}

fn counts<K: std::fmt::Display>(m: &BTreeMap<K, u64>, count_first: bool) -> String {
    let v: Vec<String> = (m.iter())
        .map(|(k, c)| match count_first {
            true => format!("{c} {k}"),
            false => format!("{k} {c}"),
        })
        .collect();
    v.join(", ")
}

fn print_text(s: &CorpusStats, k: usize) {
    crate::outln_safe!(
        "traces:    {} ({} unreadable records skipped)",
        s.traces,
        s.skipped
    );
    let st = &s.steps;
    crate::outln_safe!(
        "steps:     min {}  median {}  mean {}  max {}  (total {})",
        num(st.min.map(|x| x as f64)),
        num(st.median),
        num(st.mean),
        num(st.max.map(|x| x as f64)),
        st.total
    );
    let o = &s.outcomes;
    crate::outln_safe!(
        "outcomes:  {} success, {} failure, {} unknown",
        o.success,
        o.failure,
        o.unknown
    );
    let a = &s.agents;
    crate::outln_safe!(
        "agents:    {} distinct ({})",
        a.distinct,
        counts(&a.by_kind, true)
    );
    for (name, c) in top(&a.traces_per_agent, k) {
        let steps = a.steps_per_agent.get(name).copied().unwrap_or(0);
        // Padded so that the columns line up: `in     1 trace,  ...` / `in     2 traces, ...`.
        let traces = format!("{},", noun_for(c, "trace"));
        let steps_noun = noun_for(steps, "step");
        crate::outln_safe!("  {name:<40} in {c:>5} {traces:<7} {steps:>6} {steps_noun}");
    }
    if s.labelled_traces > 0 {
        crate::outln_safe!(
            "decisive labels: {}",
            crate::words::count(s.labelled_traces, "trace")
        );
        crate::outln_safe!("  by agent kind: {}", counts(&s.labelled_kinds, true));
        for (name, c) in top(&s.labelled_agents, k) {
            crate::outln_safe!("  {name:<40} {c:>5}");
        }
        let lp = &s.label_position;
        let buckets: Vec<String> = (lp.buckets.iter())
            .map(|(k, c)| format!("{k}: {c}"))
            .collect();
        crate::outln_safe!(
            "  relative position (step/(n-1)): {}; mean {}; first step {}, last step {}",
            buckets.join(", "),
            num(lp.mean_relative),
            lp.first_step,
            lp.last_step
        );
        crate::outln_safe!(
            "  label agent is not the speaker at the label step: {}",
            s.label_speaker_mismatches
        );
    }
    if !s.faulty_agents.is_empty() {
        crate::outln_safe!("faulty-agent labels:");
        for (name, c) in top(&s.faulty_agents, k) {
            crate::outln_safe!("  {name:<40} {c:>5}");
        }
        crate::outln_safe!("  error modes: {}", counts(&s.error_modes, false));
    }
}
