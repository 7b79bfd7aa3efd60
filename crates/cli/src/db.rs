//! `--db`: the maslens store from the CLI (the one `maslens serve` uses). Trace-reading commands
//! read every assembled run from it when given no paths; `import` stores what it reads; `locate`
//! stores each verdict as a diagnosis beside the run.

use anyhow::Context;
use maslens_store::{NewDiagnosis, RunFilter, Store};
use maslens_trace::Trace;

/// Open the store named by a `--db` value (a `postgres://` / `sqlite:` URL or a SQLite file).
pub async fn open(db: &str) -> anyhow::Result<Store> {
    Store::open(&maslens_store::url_from_arg(db))
        .await
        .with_context(|| format!("opening the store {db}"))
}

/// Every assembled run's trace, newest first.
pub async fn all_traces(store: &Store) -> anyhow::Result<Vec<Trace>> {
    let mut out = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .list_runs(&RunFilter {
                limit: Some(1000),
                before: before.clone(),
                ..RunFilter::default()
            })
            .await?;
        let Some(last) = page.last() else { break };
        before = Some((last.received_ns, last.id.clone()));
        for r in &page {
            if let Some(t) = store.run(&r.id).await?.and_then(|r| r.trace) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

/// The stored version of `trace`: its hash when the store holds this run (imported or received),
/// else the hash of the imported copy.
pub async fn ensure(store: &Store, trace: &Trace) -> anyhow::Result<String> {
    if let Some(run) = store.run(&trace.id).await? {
        if run.trace.as_ref() == Some(trace) {
            if let Some(h) = run.trace_hash {
                return Ok(h);
            }
        }
    }
    Ok(store.put_trace(trace).await?)
}

/// Store a diagnosis of `trace`.
pub async fn add(store: &Store, d: &NewDiagnosis) -> anyhow::Result<String> {
    Ok(store.add_diagnosis(d).await?)
}
