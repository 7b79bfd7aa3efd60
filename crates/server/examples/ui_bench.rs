//! Web UI page latency at scale (run by `bench/ui_pages.sh`): a store with 100,000 synthetic runs
//! (`maslens_store::testing::synthetic_runs`, 30 steps each) plus one 130-step trace with a prior
//! and a locate diagnosis, `maslens serve`'s router on a real socket, and sequential keep-alive
//! requests per page shape. Prints p50/p95/p99 per shape and, measured in the same run, three
//! baselines with their ratios:
//! - the deep list page by keyset cursor vs the same page by `OFFSET` (what a naive pager does);
//! - a rare-word search through the full-text index vs a `LIKE '%word%'` scan of the step text;
//! - the 130-step trace page (HTML) vs the same run from the JSON API (`/api/runs/{id}`).
//!
//! usage: ui_bench [--db URL_OR_PATH] [--runs N] [--steps N] [--requests N] [--out FILE]
//! The SQLite file is kept and reused when it already holds the runs (generation takes minutes).

use std::time::{Duration, Instant};

use maslens_server::serve::{self, AppState, Policy, ServeConfig};
use maslens_store::{testing, Store};
use serde_json::json;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Stat {
    p50: f64,
    p95: f64,
    p99: f64,
    max: f64,
}

fn stat(mut ms: Vec<f64>) -> Stat {
    ms.sort_by(|a, b| a.total_cmp(b));
    Stat {
        p50: pct(&ms, 0.50),
        p95: pct(&ms, 0.95),
        p99: pct(&ms, 0.99),
        max: ms.last().copied().unwrap_or(f64::NAN),
    }
}

async fn time_get(http: &reqwest::Client, url: &str, n: usize) -> Result<Stat, BoxError> {
    // Two warm-up requests (page cache, prepared statements), then n timed.
    for _ in 0..2 {
        let r = http.get(url).send().await?;
        if !r.status().is_success() {
            return Err(format!("{url}: {}", r.status()).into());
        }
        r.bytes().await?;
    }
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = http.get(url).send().await?;
        let ok = r.status().is_success();
        r.bytes().await?;
        if !ok {
            return Err(format!("{url}: failed during timing").into());
        }
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(stat(ms))
}

async fn time_sql(
    store: &Store,
    sql: &str,
    bind: Option<&str>,
    n: usize,
) -> Result<Stat, BoxError> {
    let mut ms = Vec::with_capacity(n);
    for i in 0..n + 2 {
        let t = Instant::now();
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()));
        if let Some(b) = bind {
            q = q.bind(b.to_string());
        }
        q.fetch_all(store.pool()).await?;
        if i >= 2 {
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(stat(ms))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let db = arg(&args, "--db").unwrap_or_else(|| "/tmp/maslens-ui-bench.db".into());
    let runs: usize = arg(&args, "--runs")
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    let steps: usize = arg(&args, "--steps")
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(30);
    let n: usize = arg(&args, "--requests")
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(1000);
    let out = arg(&args, "--out");

    let store = Store::open(&maslens_store::url_from_arg(&db)).await?;
    let have = store.count_runs().await?;
    if have < runs as i64 {
        if have > 0 {
            return Err(
                format!("{db} holds {have} runs, fewer than {runs}: remove it first").into(),
            );
        }
        let t = Instant::now();
        testing::synthetic_runs(&store, runs, steps, 7).await?;
        eprintln!(
            "generated {runs} runs x {steps} steps in {:.0} s",
            t.elapsed().as_secs_f64()
        );
    }
    let trace = maslens_store::testing::long_trace("bench-130", 130);
    let hash = store.put_trace(&trace).await?;
    let config = ServeConfig {
        policy: Policy::Off,
        ..ServeConfig::default()
    };
    let state = AppState::new(store.clone(), config)?;
    if store.diagnoses(&trace.id).await?.is_empty() {
        if let Some(d) = serve::pipeline::prior_to_diagnosis(&state.prior, &trace, &hash) {
            store.add_diagnosis(&d).await?;
        }
    }
    if store.backend() == maslens_store::Backend::Sqlite {
        sqlx::query("ANALYZE").execute(store.pool()).await?;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let app = serve::router(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(30))
        .build()?;

    // The row at depth 90,000 for the deep page.
    use sqlx::Row;
    let depth = (store.count_runs().await? * 9 / 10).min(90_000);
    let row = sqlx::query(
        "SELECT received_ns, id FROM runs ORDER BY received_ns DESC, id DESC LIMIT 1 OFFSET $1",
    )
    .bind(depth)
    .fetch_one(store.pool())
    .await?;
    let cursor = format!(
        "{}:{}",
        row.try_get::<i64, _>("received_ns")?,
        row.try_get::<String, _>("id")?
    );

    let shapes: Vec<(&str, String)> = vec![
        ("list, no filter", "/ui/traces".into()),
        ("list, outcome=failure", "/ui/traces?outcome=failure".into()),
        ("list, agent=Coder", "/ui/traces?agent=Coder".into()),
        (
            "list, system+outcome",
            format!(
                "/ui/traces?system={}&outcome=success",
                testing::SYNTHETIC_SYSTEMS[0]
            ),
        ),
        ("list, min_risk=0.9", "/ui/traces?min_risk=0.9".into()),
        ("list, min_risk=0.999", "/ui/traces?min_risk=0.999".into()),
        ("list, search common word (w0)", "/ui/traces?q=w0".into()),
        (
            "list, search common word + outcome",
            "/ui/traces?q=w0&outcome=failure".into(),
        ),
        (
            "list, search rare word (needle)",
            "/ui/traces?q=needle".into(),
        ),
        (
            "list, keyset page at row 90,000",
            format!("/ui/traces?before={}", serve::ui::urlencode(&cursor)),
        ),
        ("trace page, 130 steps", "/ui/traces/bench-130".into()),
        ("API run JSON, 130 steps", "/api/runs/bench-130".into()),
    ];
    let mut rows = Vec::new();
    println!(
        "{:<36} {:>9} {:>9} {:>9} {:>9}",
        "page", "p50 ms", "p95 ms", "p99 ms", "max ms"
    );
    for (name, path) in &shapes {
        let s = time_get(&http, &format!("{base}{path}"), n).await?;
        println!(
            "{name:<36} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            s.p50, s.p95, s.p99, s.max
        );
        rows.push(json!({"page": name, "path": path, "p50_ms": s.p50, "p95_ms": s.p95, "p99_ms": s.p99, "max_ms": s.max}));
    }

    // Baselines, same store, same run.
    let offset_sql =
        format!("SELECT id FROM runs ORDER BY received_ns DESC, id DESC LIMIT 51 OFFSET {depth}");
    let base_n = n.min(200);
    let offset = time_sql(&store, &offset_sql, None, base_n).await?;
    let like = time_sql(
        &store,
        "SELECT DISTINCT run_id FROM step_text WHERE content LIKE $1 LIMIT 51",
        Some("%needle%"),
        base_n.min(50),
    )
    .await?;
    let p99 = |name: &str| {
        rows.iter()
            .find(|r| r["page"] == name)
            .and_then(|r| r["p99_ms"].as_f64())
            .unwrap_or(f64::NAN)
    };
    let deep = p99("list, keyset page at row 90,000");
    let rare = p99("list, search rare word (needle)");
    let page130 = p99("trace page, 130 steps");
    let api130 = p99("API run JSON, 130 steps");
    println!();
    println!("baselines (same store, same run; p99):");
    println!(
        "  OFFSET {depth} (SQL only)          {:>9.2} ms   keyset page (whole HTTP page) {deep:.2} ms   ratio {:.1}x",
        offset.p99,
        offset.p99 / deep
    );
    println!(
        "  LIKE '%needle%' scan (SQL only)    {:>9.2} ms   full-text page (whole HTTP page) {rare:.2} ms   ratio {:.1}x",
        like.p99,
        like.p99 / rare
    );
    println!(
        "  130-step trace: HTML page {page130:.2} ms vs API JSON {api130:.2} ms   ratio {:.2}x",
        page130 / api130
    );
    let worst = rows
        .iter()
        .filter(|r| r["page"] != "API run JSON, 130 steps")
        .map(|r| r["p99_ms"].as_f64().unwrap_or(f64::NAN))
        .fold(0.0_f64, f64::max);
    println!("worst UI page p99: {worst:.2} ms (target < 100 ms)");
    let report = json!({
        "runs": store.count_runs().await?, "steps_per_run": steps, "requests": n,
        "backend": format!("{:?}", store.backend()),
        "pages": rows,
        "baselines": {
            "offset_p99_ms": offset.p99, "keyset_page_p99_ms": deep,
            "like_scan_p99_ms": like.p99, "fts_page_p99_ms": rare,
            "trace_html_p99_ms": page130, "trace_api_p99_ms": api130,
        },
        "worst_ui_p99_ms": worst,
    });
    if let Some(path) = out {
        if let Some(dir) = std::path::Path::new(&path).parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}
