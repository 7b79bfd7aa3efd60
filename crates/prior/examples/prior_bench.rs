//! Scoring-throughput benchmark of the prior on a synthetic corpus.
//!
//! `cargo run --release -p maslens-prior --example prior_bench -- [TRACES] [MIN_STEPS] [MAX_STEPS] [SEED]`
//! (defaults 10000 50 500 7; `bench/prior_bench.sh` runs it). Traces are generated in batches with
//! a seeded ChaCha RNG (Magentic-One/AG2-like turns: orchestrator, workers, terminal output with
//! code, errors, numbers and URLs), so memory stays flat whatever the corpus size. Each batch is
//! timed under three methods on the same traces:
//!   1. baseline: the first-non-terminal-agent rule (one pass over the steps),
//!   2. features: per-step feature extraction alone,
//!   3. prior: `PriorModel::rank` with the shipped model (features + scoring + sorting).
//!
//! It prints steps/s and traces/s for each and the ratios prior/baseline and prior/features.

use maslens_prior::{extract, load_default};
use maslens_trace::{AgentKind, Step, Trace};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::{Duration, Instant};

const WORDS: &[&str] = &[
    "the",
    "result",
    "data",
    "search",
    "page",
    "value",
    "table",
    "python",
    "file",
    "check",
    "answer",
    "population",
    "revenue",
    "assume",
    "example",
    "error",
    "verified",
    "plan",
    "next",
    "please",
    "instead",
    "might",
    "found",
    "list",
    "year",
    "total",
    "count",
    "source",
    "web",
];

fn sentence(rng: &mut ChaCha8Rng, words: usize) -> String {
    let mut s = String::new();
    for i in 0..words {
        if i > 0 {
            s.push(' ');
        }
        if rng.gen_ratio(1, 12) {
            s.push_str(&rng.gen_range(10..100_000).to_string());
        } else {
            s.push_str(WORDS[rng.gen_range(0..WORDS.len())]);
        }
    }
    s.push('.');
    s
}

fn synthetic_trace(rng: &mut ChaCha8Rng, id: usize, min: usize, max: usize) -> Trace {
    let mut t = Trace::new(format!("bench/{id}"));
    t.task = sentence(rng, 25);
    t.ensure_agent("human", AgentKind::Human);
    t.ensure_agent("Orchestrator", AgentKind::Orchestrator);
    t.ensure_agent("WebSurfer", AgentKind::Worker);
    t.ensure_agent("Coder_Expert", AgentKind::Worker);
    t.ensure_agent("Verification_Expert", AgentKind::Worker);
    t.ensure_agent("Computer_terminal", AgentKind::Tool);
    let n = rng.gen_range(min..=max);
    let agents = [
        "Orchestrator",
        "WebSurfer",
        "Coder_Expert",
        "Verification_Expert",
    ];
    for i in 0..n {
        let (agent, content) = if i == 0 {
            ("human", t.task.clone())
        } else if rng.gen_ratio(1, 4) {
            let ok = rng.gen_bool(0.7);
            (
                "Computer_terminal",
                if ok {
                    format!(
                        "exitcode: 0 (execution succeeded)\nCode output: {}",
                        sentence(rng, 8)
                    )
                } else {
                    "exitcode: 1 (execution failed)\nTraceback (most recent call last): KeyError"
                        .into()
                },
            )
        } else {
            let a = agents[rng.gen_range(0..agents.len())];
            let mut c = String::new();
            for _ in 0..rng.gen_range(1..6) {
                let words = rng.gen_range(8..40);
                c.push_str(&sentence(rng, words));
                c.push(' ');
            }
            if rng.gen_ratio(1, 5) {
                c.push_str("\n```python\nimport pandas as pd\nprint(df.head())\n```\n");
            }
            if rng.gen_ratio(1, 10) {
                c.push_str(" See https://example.org/page.");
            }
            (a, c)
        };
        t.steps.push(Step {
            index: i,
            agent: agent.into(),
            speaker: agent.into(),
            content,
            ..Step::default()
        });
    }
    t
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (traces, min, max, seed) = (
        num(0, 10_000) as usize,
        num(1, 50) as usize,
        num(2, 500) as usize,
        num(3, 7),
    );
    let model = match load_default() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut t_base, mut t_feat, mut t_rank) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut steps, mut bytes, mut worst) = (0usize, 0usize, Duration::ZERO);
    let mut checksum = 0.0f64;
    let batch = 200;
    let mut done = 0;
    while done < traces {
        let k = batch.min(traces - done);
        let corpus: Vec<Trace> = (0..k)
            .map(|i| synthetic_trace(&mut rng, done + i, min, max))
            .collect();
        steps += corpus.iter().map(|t| t.steps.len()).sum::<usize>();
        bytes += corpus
            .iter()
            .flat_map(|t| &t.steps)
            .map(|s| s.content.len())
            .sum::<usize>();
        let s = Instant::now();
        for t in &corpus {
            let p = maslens_eval::baselines::run("first-agent", t, seed);
            checksum += p.map_or(0, |g| g.step) as f64;
        }
        t_base += s.elapsed();
        let s = Instant::now();
        for t in &corpus {
            checksum += extract(t).len() as f64;
        }
        t_feat += s.elapsed();
        for t in &corpus {
            let s = Instant::now();
            let r = model.rank(t);
            let e = s.elapsed();
            worst = worst.max(e);
            t_rank += e;
            checksum += r.first().map(|c| c.prob).unwrap_or(0.0);
        }
        done += k;
    }
    let per = |d: Duration| {
        (
            steps as f64 / d.as_secs_f64(),
            traces as f64 / d.as_secs_f64(),
        )
    };
    println!(
        "corpus: {traces} synthetic traces, {steps} steps ({min}-{max} per trace), {:.1} MB of step text, seed {seed}",
        bytes as f64 / 1e6
    );
    for (name, d) in [
        ("baseline first-non-terminal", t_base),
        ("feature extraction alone", t_feat),
        ("prior rank (features+score+sort)", t_rank),
    ] {
        let (sps, tps) = per(d);
        println!(
            "{name:34} {:8.3} s  {:>12.0} steps/s  {:>10.1} traces/s",
            d.as_secs_f64(),
            sps,
            tps
        );
    }
    println!(
        "ratios: prior rank takes {:.2}x the feature extraction time and {:.0}x the baseline's; slowest trace {:.2} ms",
        t_rank.as_secs_f64() / t_feat.as_secs_f64(),
        t_rank.as_secs_f64() / t_base.as_secs_f64().max(1e-9),
        worst.as_secs_f64() * 1e3
    );
    eprintln!("(checksum {checksum:.3})");
}
