//! For tests and benchmarks of the store's users: a new, empty database on a PostgreSQL server,
//! and a store filled with synthetic runs.

use std::time::Duration;

use maslens_trace::{Outcome, Step, ToolCall, TraceBuilder};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sqlx::any::AnyPoolOptions;
use sqlx::Executor;

use crate::search::index_run;
use crate::{big, now_ns, q, redact, Backend, Result, Store, StoreError};

/// Create a uniquely named database on the server of `url` (a `postgres://` URL whose
/// user may create databases); returns the new database's URL.
pub async fn fresh_postgres(url: &str) -> Result<String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    sqlx::any::install_default_drivers();
    let name = format!(
        "maslens_test_{}_{}_{}",
        std::process::id(),
        now_ns() % 1_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    );
    let admin = AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(30))
        .connect(url)
        .await
        .map_err(|source| StoreError::Open {
            url: redact(url),
            source,
        })?;
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await
        .map_err(q("create database"))?;
    admin.close().await;
    let base = url.rsplit_once('/').map(|(b, _)| b).unwrap_or(url);
    Ok(format!("{base}/{name}"))
}

/// The systems of [`synthetic_runs`].
pub const SYNTHETIC_SYSTEMS: [&str; 5] = [
    "support-bot",
    "research-crew",
    "code-review",
    "travel-planner",
    "data-pipeline",
];

/// The agents of [`synthetic_runs`].
pub const SYNTHETIC_AGENTS: [&str; 8] = [
    "Planner",
    "Coder",
    "Critic",
    "Researcher",
    "Writer",
    "Tester",
    "Reviewer",
    "Executor",
];

/// Vocabulary size of [`synthetic_runs`]: words `w0` .. `w4999`, Zipf-distributed.
pub const SYNTHETIC_WORDS: usize = 5000;

/// The first synthetic received time: 2025-01-01T00:00:00Z in ns.
const BASE_NS: i64 = 1_735_689_600_000_000_000;
const DAYS_30_NS: i64 = 30 * 24 * 3600 * 1_000_000_000;

/// Fill `store` with `n` synthetic imported runs of `steps_per_run` steps each, the same for the
/// same `seed`, for benchmarks: ids `syn-000000` ..; systems [`SYNTHETIC_SYSTEMS`]; outcomes
/// success / failure / unknown; 2 to 4 of [`SYNTHETIC_AGENTS`] per run; a failed run is
/// localized to one of its agents; risk uniform in [0, 1); received over 30 days from
/// 2025-01-01. A step says 8 to 16 words `w0` .. `w4999` drawn by Zipf's law (draws of `w{k}`
/// are `1/(k+1)` as frequent as draws of `w0`: at 30 steps a run, `w0` is in about 3 steps of 4
/// and nearly every run, `w300` in 1 step of 230, `w4999` in 1 step of 3,600); every fifth step
/// calls a tool `search`; the word `needle` is in one step of every 10,000th run (`syn-000000`,
/// `syn-010000`, ...). Rows go in directly (with their search rows), in transactions of 1,000
/// runs; about 4 minutes for 100,000 runs of 30 steps on SQLite (2 cores), 3.5 on PostgreSQL.
pub async fn synthetic_runs(
    store: &Store,
    n: usize,
    steps_per_run: usize,
    seed: u64,
) -> Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Cumulative Zipf weights (s = 1).
    let mut cdf = Vec::with_capacity(SYNTHETIC_WORDS);
    let mut total = 0.0f64;
    for k in 0..SYNTHETIC_WORDS {
        total += 1.0 / (k as f64 + 1.0);
        cdf.push(total);
    }
    let outcomes = [Outcome::Success, Outcome::Failure, Outcome::Unknown];
    // SQLite: search keys given here (index_run would assign them with an extra row update).
    let first_key: i64 = match store.backend {
        Backend::Sqlite => sqlx::query_scalar("SELECT COALESCE(MAX(search_key), 0) FROM runs")
            .fetch_one(&store.pool)
            .await
            .map_err(q("search keys"))?,
        Backend::Postgres => 0,
    };
    let (key_col, key_val) = match store.backend {
        Backend::Sqlite => (", search_key", ", $13"),
        Backend::Postgres => ("", ""),
    };
    let insert = format!(
        "INSERT INTO runs (id, source, system, trace_json, trace_hash, task, outcome,
           n_steps, agents, received_ns, ingest_seq, assembled_seq, state, completed_ns,
           located_agent, located_step, risk{key_col})
         VALUES ($1, 'import', $2, $3, $4, $5, $6, $7, $8, $9, 0, 0, 'complete', $9,
           $10, $11, $12{key_val})"
    );
    let mut i = 0usize;
    while i < n {
        let end = (i + 1000).min(n);
        let mut tx = store.write_tx().await?;
        for r in i..end {
            let id = format!("syn-{r:06}");
            let system = SYNTHETIC_SYSTEMS[rng.gen_range(0..SYNTHETIC_SYSTEMS.len())];
            let outcome = outcomes[rng.gen_range(0..outcomes.len())];
            let n_agents = rng.gen_range(2..=4usize);
            let mut agents: Vec<&str> = Vec::new();
            while agents.len() < n_agents {
                let a = SYNTHETIC_AGENTS[rng.gen_range(0..SYNTHETIC_AGENTS.len())];
                if !agents.contains(&a) {
                    agents.push(a);
                }
            }
            let mut b = TraceBuilder::new(id.as_str())
                .task(format!("synthetic task {r}"))
                .outcome(outcome);
            let needle_step = r
                .is_multiple_of(10_000)
                .then(|| rng.gen_range(0..steps_per_run.max(1)));
            for s in 0..steps_per_run {
                let agent = agents[s % agents.len()];
                let words = rng.gen_range(8..=16usize);
                let mut content = String::new();
                for _ in 0..words {
                    let x = rng.gen::<f64>() * total;
                    let k = cdf.partition_point(|&c| c < x).min(SYNTHETIC_WORDS - 1);
                    if !content.is_empty() {
                        content.push(' ');
                    }
                    content.push_str(&format!("w{k}"));
                }
                if needle_step == Some(s) {
                    content.push_str(" needle");
                }
                let tool_calls = if s % 5 == 4 {
                    vec![ToolCall {
                        id: Some(format!("call-{s}")),
                        name: "search".into(),
                        arguments: format!("{{\"query\": \"w{}\"}}", rng.gen_range(0..100)),
                    }]
                } else {
                    Vec::new()
                };
                b = b.step_with(Step {
                    agent: agent.to_string(),
                    content,
                    tool_calls,
                    ..Step::default()
                });
            }
            let mut trace = b.build();
            trace.source.format = system.to_string();
            let (json, hash) = crate::trace_json(&trace)?;
            let received_ns = BASE_NS + rng.gen_range(0..DAYS_30_NS);
            let located = (outcome == Outcome::Failure)
                .then(|| agents[rng.gen_range(0..agents.len())].to_string());
            let located_step = located
                .as_ref()
                .map(|_| big(rng.gen_range(0..steps_per_run.max(1)) as u64));
            let risk: f64 = rng.gen();
            let mut sorted = agents.clone();
            sorted.sort_unstable();
            let mut query = sqlx::query(sqlx::AssertSqlSafe(insert.as_str()));
            query = query
                .bind(id.as_str())
                .bind(system)
                .bind(json)
                .bind(hash)
                .bind(trace.task.as_str())
                .bind(outcome.as_str())
                .bind(big(steps_per_run as u64))
                .bind(sorted.join(" "))
                .bind(received_ns)
                .bind(located)
                .bind(located_step)
                .bind(risk);
            if store.backend == Backend::Sqlite {
                query = query.bind(first_key + big(r as u64) + 1);
            }
            query
                .execute(&mut *tx)
                .await
                .map_err(q("insert synthetic run"))?;
            index_run(&mut tx, store.backend, &id, Some(&trace), received_ns).await?;
        }
        tx.commit().await.map_err(q("commit synthetic runs"))?;
        i = end;
    }
    Ok(())
}

/// A trace `id` of `steps` steps by five agents (Magentic-One's names), each step 3 to 27 lines
/// long (`3 + 7i mod 25`), failed: the long trace of the UI's page benchmark and browser tests.
pub fn long_trace(id: &str, steps: usize) -> maslens_trace::Trace {
    let agents = [
        "Orchestrator",
        "WebSurfer",
        "Coder",
        "ComputerTerminal",
        "FileSurfer",
    ];
    let mut b = TraceBuilder::new(id)
        .task("Find the population of the three largest cities and sum them.")
        .outcome(Outcome::Failure);
    for i in 0..steps {
        let lines = 3 + (i * 7) % 25;
        let content = (0..lines)
            .map(|l| {
                format!(
                    "step {i} line {l}: the agent reports intermediate findings, numbers {} and {}",
                    i * 31 + l,
                    l * 17
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        b = b.step(agents[i % agents.len()], content);
    }
    b.build()
}
