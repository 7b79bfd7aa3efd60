//! Time the run list at scale: fill a SQLite store with synthetic runs (once; the file is kept)
//! and time list pages for a set of filters.
//!
//! `cargo run -p maslens-store --example list_pages -- [DB] [RUNS] [STEPS_PER_RUN] [CALLS]`
//! (defaults: /tmp/maslens-list-bench.db, 100000, 30, 200). DB is a SQLite path or a
//! `postgres://` URL; an empty store is filled first (SQLite takes about 4 minutes for 100,000
//! runs of 30 steps on 2 cores). Prints p50/p99 per filter and the plans.

use std::time::Instant;

use maslens_store::{testing, RunFilter, Store};

type BoxError = Box<dyn std::error::Error>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .cloned()
        .unwrap_or("/tmp/maslens-list-bench.db".into());
    let runs: usize = args
        .get(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    let steps: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(30);
    let calls: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(200);
    let url = maslens_store::url_from_arg(&path);
    let t = Instant::now();
    let store = Store::open(&url).await?;
    println!("open: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    if store.count_runs().await? == 0 {
        let t = Instant::now();
        testing::synthetic_runs(&store, runs, steps, 7).await?;
        println!(
            "generated {runs} runs x {steps} steps in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    // The run at row 90,000 (or 90 % of the way down a smaller store).
    let offset = (store.count_runs().await? * 9 / 10).min(89_999);
    let deep: (i64, String) = {
        use sqlx::Row;
        let row = sqlx::query(
            "SELECT received_ns, id FROM runs ORDER BY received_ns DESC, id DESC LIMIT 1 OFFSET $1",
        )
        .bind(offset)
        .fetch_one(store.pool())
        .await?;
        (row.try_get("received_ns")?, row.try_get("id")?)
    };
    let f = |edit: &dyn Fn(&mut RunFilter)| {
        let mut r = RunFilter::default();
        edit(&mut r);
        r
    };
    let shapes: Vec<(&str, RunFilter)> = vec![
        ("no filter", f(&|_| {})),
        ("outcome", f(&|r| r.outcome = Some("failure".into()))),
        ("agent", f(&|r| r.agent = Some("Tester".into()))),
        ("system", f(&|r| r.system = Some("code-review".into()))),
        (
            "system+outcome",
            f(&|r| {
                r.system = Some("code-review".into());
                r.outcome = Some("failure".into());
            }),
        ),
        (
            "agent+outcome",
            f(&|r| {
                r.agent = Some("Tester".into());
                r.outcome = Some("failure".into());
            }),
        ),
        (
            "located_agent",
            f(&|r| r.located_agent = Some("Coder".into())),
        ),
        ("min_risk 0.9", f(&|r| r.min_risk = Some(0.9))),
        ("q common (w0)", f(&|r| r.q = Some("w0".into()))),
        (
            "q common 2 words (w0 w1)",
            f(&|r| r.q = Some("w0 w1".into())),
        ),
        ("q medium (w300)", f(&|r| r.q = Some("w300".into()))),
        ("q less common (w4999)", f(&|r| r.q = Some("w4999".into()))),
        ("q rare (needle)", f(&|r| r.q = Some("needle".into()))),
        ("q none (zzzz)", f(&|r| r.q = Some("zzzz".into()))),
        (
            "q common+outcome",
            f(&|r| {
                r.q = Some("w0".into());
                r.outcome = Some("failure".into());
            }),
        ),
        (
            "q rare+agent",
            f(&|r| {
                r.q = Some("needle".into());
                r.agent = Some("Tester".into());
            }),
        ),
        (
            "q common+agent",
            f(&|r| {
                r.q = Some("w0".into());
                r.agent = Some("Tester".into());
            }),
        ),
        (
            "q medium+system",
            f(&|r| {
                r.q = Some("w300".into());
                r.system = Some("code-review".into());
            }),
        ),
        (
            "q less common+outcome",
            f(&|r| {
                r.q = Some("w4999".into());
                r.outcome = Some("failure".into());
            }),
        ),
        (
            "deep cursor (row 90,000)",
            f(&|r| r.before = Some(deep.clone())),
        ),
        (
            "deep cursor+outcome",
            f(&|r| {
                r.before = Some(deep.clone());
                r.outcome = Some("failure".into());
            }),
        ),
    ];
    println!(
        "{:<28} {:>9} {:>9} {:>6}",
        "list_runs (50 rows)", "p50 ms", "p99 ms", "rows"
    );
    for (name, filter) in &shapes {
        let mut times = Vec::with_capacity(calls);
        let mut rows = 0;
        for _ in 0..calls {
            let t = Instant::now();
            rows = store.list_runs(filter).await?.len();
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let (p50, p99) = percentiles(&mut times);
        println!("{name:<28} {p50:>9.2} {p99:>9.2} {rows:>6}");
    }
    for (name, filter) in &shapes {
        println!("plan {name}:");
        for line in store.explain_list(filter).await? {
            println!("    {line}");
        }
    }
    let extra_calls = calls.min(50);
    for cap in [10_000, 1_000] {
        for (name, filter) in [&shapes[0], &shapes[1], &shapes[8], &shapes[14], &shapes[12]] {
            let mut times = Vec::new();
            let mut got = (0, false);
            for _ in 0..extra_calls {
                let t = Instant::now();
                got = store.count_runs_capped(filter, cap).await?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let (p50, p99) = percentiles(&mut times);
            println!("count_runs_capped({cap}) {name:<20} p50 {p50:.2} p99 {p99:.2} -> {got:?}");
        }
    }
    let mut times = Vec::new();
    for i in 0..extra_calls {
        let t = Instant::now();
        store
            .step_matches(&format!("syn-{:06}", i * 7), "w0", 3)
            .await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (p50, p99) = percentiles(&mut times);
    println!("step_matches(w0, 3) p50 {p50:.2} p99 {p99:.2}");
    let t = Instant::now();
    let facets = store.facets().await?;
    println!(
        "facets: {:.1} ms ({} systems, {} located agents, {} agents)",
        t.elapsed().as_secs_f64() * 1e3,
        facets.systems.len(),
        facets.located_agents.len(),
        facets.agents.len()
    );
    Ok(())
}

fn percentiles(times: &mut [f64]) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    let at = |p: f64| times[((times.len() as f64 - 1.0) * p).round() as usize];
    (at(0.5), at(0.99))
}
