//! Synthetic native JSONL corpus generator for the reading benchmark (bench/trace_read.sh).
//!
//! `cargo run --release -p maslens-trace --example gen_corpus -- OUT.jsonl SIZE_MB [SEED]`
//!
//! Writes traces until the file holds at least SIZE_MB megabytes (10^6 bytes). Deterministic for
//! a seed (ChaCha8). Traces look like real ones: 4-80 steps over a fixed pool of 16 agents
//! (workers, an orchestrator, a terminal, a human), contents of 40-4000 characters with
//! newlines, quotes, code and some non-ASCII text, a decisive label on most traces, tool calls
//! on some steps, metadata.

use maslens_trace::{
    export::write_jsonl, AgentKind, DecisiveLabel, FaultyAgent, Outcome, Source, Step, ToolCall,
    Trace,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::{BufWriter, Write};

const WORDS: &[&str] = &[
    "the",
    "agent",
    "plan",
    "search",
    "result",
    "verify",
    "answer",
    "page",
    "code",
    "error",
    "python",
    "data",
    "table",
    "value",
    "check",
    "step",
    "next",
    "file",
    "query",
    "found",
    "\"quoted\"",
    "x = 42;",
    "résumé",
    "naïve",
    "日本語",
    "→",
    "{\"k\": [1, 2]}",
    "https://example.org/a?b=c",
    "Traceback",
    "line",
    "return",
    "because",
    "therefore",
    "WebSurfer",
    "Orchestrator",
    "42.7",
];

const AGENTS: &[(&str, AgentKind)] = &[
    ("human", AgentKind::Human),
    ("Orchestrator", AgentKind::Orchestrator),
    ("Computer_terminal", AgentKind::Tool),
    ("WebSurfer", AgentKind::Worker),
    ("FileSurfer", AgentKind::Worker),
    ("Assistant", AgentKind::Worker),
    ("Verification_Expert", AgentKind::Worker),
    ("DataAnalysis_Expert", AgentKind::Worker),
    ("Python_Expert", AgentKind::Worker),
    ("Statistics_Expert", AgentKind::Worker),
    ("Planner", AgentKind::Worker),
    ("Critic", AgentKind::Worker),
    ("Solver", AgentKind::Worker),
    ("Evaluator", AgentKind::Worker),
    ("Node0", AgentKind::Worker),
    ("Node1", AgentKind::Worker),
];

fn text(rng: &mut ChaCha8Rng, min: usize, max: usize) -> String {
    let target = rng.gen_range(min..=max);
    let mut s = String::with_capacity(target + 16);
    while s.len() < target {
        let r: f64 = rng.gen();
        if r < 0.04 {
            s.push('\n');
        } else if r < 0.05 {
            s.push('\t');
        } else if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(WORDS[rng.gen_range(0..WORDS.len())]);
    }
    s
}

fn trace(rng: &mut ChaCha8Rng, i: u64) -> Trace {
    let mut t = Trace::new(format!("synthetic/{i}"));
    t.source = Source {
        format: "synthetic".into(),
        file: None,
        record: None,
    };
    t.task = text(rng, 80, 400);
    t.ground_truth = Some(format!("{}", rng.gen_range(0..1000)));
    t.outcome = if rng.gen_bool(0.7) {
        Outcome::Failure
    } else {
        Outcome::Success
    };
    let n_agents = rng.gen_range(3..=8);
    for (name, kind) in AGENTS.iter().take(n_agents) {
        let pos = t.ensure_agent(name, *kind);
        if rng.gen_bool(0.5) {
            t.agents[pos].system_prompt = Some(text(rng, 100, 600));
        }
    }
    let n_steps = rng.gen_range(4..=80);
    for index in 0..n_steps {
        let agent = t.agents[rng.gen_range(0..t.agents.len())].name.clone();
        let mut step = Step {
            index,
            speaker: if agent == "Orchestrator" && rng.gen_bool(0.5) {
                "Orchestrator (thought)".into()
            } else {
                agent.clone()
            },
            agent,
            content: text(rng, 40, 4000),
            ..Step::default()
        };
        if rng.gen_bool(0.1) {
            step.tool_calls.push(ToolCall {
                id: Some(format!("call_{index}")),
                name: "run_python".into(),
                arguments: format!("{{\"code\": \"print({})\"}}", rng.gen_range(0..100)),
            });
        }
        if rng.gen_bool(0.3) {
            step.tokens = Some(rng.gen_range(10..2000));
        }
        t.steps.push(step);
    }
    if rng.gen_bool(0.8) {
        let step = rng.gen_range(0..n_steps);
        t.labels.decisive = Some(DecisiveLabel {
            agent: t.steps[step].agent.clone(),
            step,
            reason: Some(text(rng, 40, 200)),
        });
    }
    if rng.gen_bool(0.2) {
        t.labels.faulty_agents.push(FaultyAgent {
            agent: t.agents[1].name.clone(),
            error_mode: Some(format!(
                "FM-{}.{}",
                rng.gen_range(1..=3),
                rng.gen_range(1..=6)
            )),
            strategy: Some("prompt_injection".into()),
            description: None,
        });
    }
    t.metadata
        .insert("level".into(), serde_json::json!(rng.gen_range(1..=3)));
    t.metadata
        .insert("score".into(), serde_json::json!(rng.gen::<f64>()));
    t
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: gen_corpus OUT.jsonl SIZE_MB [SEED]");
        std::process::exit(2);
    }
    let size_mb: u64 = match args[2].parse() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("SIZE_MB {:?}: {e}", args[2]);
            std::process::exit(2);
        }
    };
    let seed: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(7);
    let target = size_mb * 1_000_000;
    let file = match std::fs::File::create(&args[1]) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cannot create {}: {e}", args[1]);
            std::process::exit(2);
        }
    };
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut written, mut n) = (0u64, 0u64);
    let mut line = Vec::new();
    while written < target {
        line.clear();
        if let Err(e) = write_jsonl(&mut line, &trace(&mut rng, n)) {
            eprintln!("cannot serialize: {e}");
            std::process::exit(1);
        }
        if let Err(e) = out.write_all(&line) {
            eprintln!("cannot write {}: {e}", args[1]);
            std::process::exit(1);
        }
        written += line.len() as u64;
        n += 1;
    }
    if let Err(e) = out.flush() {
        eprintln!("cannot write {}: {e}", args[1]);
        std::process::exit(1);
    }
    eprintln!("wrote {n} traces, {written} bytes to {}", args[1]);
}
