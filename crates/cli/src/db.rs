//! `--db`: the maslens store from the CLI (the one `maslens serve` uses). Trace-reading commands
//! read every assembled run from it when given no paths (`Store::traces`); `import` stores what
//! it reads; `locate` and `scan` store their verdicts as diagnoses beside the run.

use anyhow::Context;
use maslens_store::{NewDiagnosis, Store};
use maslens_trace::Trace;

/// Open the store named by a `--db` value (a `postgres://` / `sqlite:` URL or a SQLite file).
pub async fn open(db: &str) -> anyhow::Result<Store> {
    Store::open(&maslens_store::url_from_arg(db))
        .await
        .with_context(|| format!("opening the store {db}"))
}

/// Store a credit table, an optimizer experiment or an eval report (`kind`) as JSON under `name`;
/// returns its id. What `credit`, `optimize` and `eval locate` do with `--db`.
pub fn add_report(
    db: &str,
    kind: maslens_store::diagnosis::ReportKind,
    name: &str,
    run_id: Option<&str>,
    body: &impl serde::Serialize,
) -> anyhow::Result<String> {
    let body = serde_json::to_value(body)?;
    crate::cmd::block_on(async {
        let store = open(db).await?;
        anyhow::Ok(store.add_report(kind, name, run_id, &body).await?)
    })?
}

/// The stored version of `trace`: its hash when the store holds this very trace (imported or
/// received), else the hash of the copy imported now.
pub async fn ensure(store: &Store, trace: &Trace) -> anyhow::Result<String> {
    let hash = maslens_store::trace_hash(trace)?;
    if let Some(run) = store.run_summary(&trace.id).await? {
        if run.trace_hash.as_deref() == Some(hash.as_str()) {
            return Ok(hash);
        }
    }
    Ok(store.put_trace(trace).await?)
}

/// Store a diagnosis of `trace`.
pub async fn add(store: &Store, d: &NewDiagnosis) -> anyhow::Result<String> {
    Ok(store.add_diagnosis(d).await?)
}

/// Store each trace's scan as a diagnosis with its events (`scan --db`), the trace first.
pub async fn add_scans(
    db: &str,
    scans: &[maslens_implicit::TraceScan],
    traces: &[Trace],
    model: &str,
    settings: &maslens_implicit::ScanSettings,
    started: std::time::Instant,
) -> anyhow::Result<()> {
    let store = open(db).await?;
    let params = serde_json::to_value(settings).unwrap_or_default();
    for s in scans {
        let Some(t) = traces.iter().find(|t| t.id == s.id) else {
            continue;
        };
        let hash = ensure(&store, t).await?;
        let d = maslens_server::serve::pipeline::scan_to_diagnosis(
            s, t, &hash, model, &params, started,
        );
        add(&store, &d).await?;
    }
    Ok(())
}

/// The store URL of `--db` (a path or a database URL), else the default store in
/// `$MASLENS_HOME` (created when missing).
pub fn url_or_default(db: Option<&str>) -> anyhow::Result<String> {
    Ok(match db {
        Some(db) => maslens_store::url_from_arg(db),
        None => {
            let home = maslens_llm::maslens_home();
            std::fs::create_dir_all(&home)
                .with_context(|| format!("cannot create {}", home.display()))?;
            maslens_store::default_url(&home)
        }
    })
}
