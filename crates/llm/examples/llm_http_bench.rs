//! Benchmark (b): HTTP backend overhead. Requests/s at concurrency 64 against the fixture
//! instant-answer server on 127.0.0.1 (same process, same runtime), for
//!   A. a minimal raw reqwest loop (baseline: POST a fixed body, read the bytes),
//!   B. the maslens `OpenAiModel` backend (body building, semaphore, retry loop, parsing),
//!   C. the full stack with the cache off (usage tracking on top),
//!   D. the full stack with the SQLite cache in read-write mode, every request new (one write each),
//!   E. the same requests again: all cache hits (no HTTP).
//! Usage: llm_http_bench [REQUESTS_PER_PHASE] (default 20000).

use maslens_llm::openai::{OpenAiConfig, OpenAiModel};
use maslens_llm::stack::{wrap, CacheMode, OpenOptions};
use maslens_llm::testing::server::FakeServer;
use maslens_llm::usage::PriceTable;
use maslens_llm::{ChatModel, ChatRequest, Message};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

const CONCURRENCY: usize = 64;

async fn drive<F, Fut>(n: usize, f: F) -> (f64, usize)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let (f, next, failed) = (f.clone(), next.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                if !f(i).await {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    (
        n as f64 / start.elapsed().as_secs_f64(),
        failed.load(Ordering::Relaxed),
    )
}

fn request(tag: &str, i: usize) -> ChatRequest {
    ChatRequest::new(vec![
        Message::system("You are a careful judge of multi-agent traces."),
        Message::user(format!("{tag} request {i}: which step failed?")),
    ])
    .max_tokens(64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let server = FakeServer::echo().await?;
        let url = format!("{}/chat/completions", server.base_url());
        println!(
            "HTTP backend overhead: {n} requests per phase, concurrency {CONCURRENCY}, {} tokio workers, \
             fixture server in-process on {}",
            std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1),
            server.addr()
        );

        // A. Baseline: minimal reqwest loop.
        let client = reqwest::Client::builder().pool_max_idle_per_host(CONCURRENCY).tcp_nodelay(true).build()?;
        let body = serde_json::to_vec(&maslens_llm::openai::chat_body(
            "fixture",
            &request("raw", 0),
            Default::default(),
        ))?;
        let body = Arc::new(body);
        // Warm-up (connections, allocator).
        let (c, u, b) = (client.clone(), url.clone(), body.clone());
        drive(n / 10, move |_| raw(c.clone(), u.clone(), b.clone())).await;
        let (c, u, b) = (client.clone(), url.clone(), body.clone());
        let (base, base_fail) = drive(n, move |_| raw(c.clone(), u.clone(), b.clone())).await;
        println!("A. raw reqwest loop (baseline)        {base:>9.0} req/s  failures {base_fail}");

        // B. maslens OpenAiModel.
        let mut cfg = OpenAiConfig::new("fixture", server.base_url());
        cfg.concurrency = CONCURRENCY;
        let backend = Arc::new(OpenAiModel::retrying(cfg)?);
        let b2 = backend.clone();
        let (rb, fb) = drive(n, move |i| {
            let b = b2.clone();
            async move { b.complete(&request("backend", i)).await.is_ok() }
        })
        .await;
        println!("B. maslens OpenAiModel                {rb:>9.0} req/s  failures {fb}  ({:.2}x baseline)", rb / base);

        // C. Full stack, cache off.
        let off = OpenOptions { cache_mode: CacheMode::Off, ..Default::default() };
        let stack = wrap(backend.clone(), &off, &PriceTable::defaults())?;
        let m = stack.model.clone();
        let (rc, fc) = drive(n, move |i| {
            let m = m.clone();
            async move { m.complete(&request("stack", i).stage("bench")).await.is_ok() }
        })
        .await;
        println!("C. stack, cache off                   {rc:>9.0} req/s  failures {fc}  ({:.2}x baseline)", rc / base);

        // D. Full stack, SQLite cache read-write, all misses.
        let dir = std::env::temp_dir().join(format!("maslens-bench-{}", std::process::id()));
        let rw = OpenOptions { cache_path: Some(dir.join("cache.sqlite")), ..Default::default() };
        let stack = wrap(backend.clone(), &rw, &PriceTable::defaults())?;
        let m = stack.model.clone();
        let (rd, fd) = drive(n, move |i| {
            let m = m.clone();
            async move { m.complete(&request("cached", i)).await.is_ok() }
        })
        .await;
        println!("D. stack, SQLite cache, all misses    {rd:>9.0} req/s  failures {fd}  ({:.2}x baseline)", rd / base);

        // E. Same requests: all hits.
        let m = stack.model.clone();
        let (re, fe) = drive(n, move |i| {
            let m = m.clone();
            async move { m.complete(&request("cached", i)).await.map(|r| r.from_cache).unwrap_or(false) }
        })
        .await;
        println!("E. stack, SQLite cache, all hits      {re:>9.0} req/s  failures {fe}");
        let counters = stack.cache.as_ref().map(|c| c.counters()).unwrap_or_default();
        println!(
            "server answered {} requests; cache writes {}, hits {}",
            server.counts.answered.load(Ordering::Relaxed),
            counters.writes,
            counters.hits
        );
        let _ = std::fs::remove_dir_all(&dir);
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

async fn raw(client: reqwest::Client, url: String, body: Arc<Vec<u8>>) -> bool {
    let resp = client
        .post(&url)
        .header("content-type", "application/json")
        .body(body.as_ref().clone())
        .send()
        .await;
    match resp {
        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
        Err(_) => false,
    }
}
