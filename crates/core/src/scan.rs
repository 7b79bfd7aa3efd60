//! `maslens scan` as one call: implicit failures (MASIF) over a corpus, trace after trace, with
//! progress, per-trace failures kept, a budget stop that keeps what was scanned, and the scan
//! file (`maslens_implicit::ScanFile`). The CLI and the Python package call [`scan_traces`]; the
//! method itself (one trace) is `maslens_implicit::scan_trace`.

use maslens_eval::run::Progress;
use maslens_implicit::report::{corpus_report, CorpusReport};
use maslens_implicit::scan_file::{prompt_versions, ScanFile, SCAN_FILE_VERSION};
use maslens_implicit::{scan_trace, ImplicitError, ScanOptions, ScanSettings, TraceScan};
use maslens_llm::{ChatModel, LlmError};
use maslens_trace::Trace;

/// `[2/10] t7: 3 IF(s), 1 flagged, risk 0.4210, 5120 tokens, 12.3s`: a scanned trace as
/// `maslens scan` prints it on stderr (the progress summary of [`scan_traces`]).
pub fn scan_line(done: usize, total: usize, s: &TraceScan) -> String {
    format!(
        "[{done}/{total}] {}: {} IF(s), {} flagged, risk {:.4}, {} tokens, {:.1}s",
        s.id,
        s.events.len(),
        s.flagged.len(),
        s.risk,
        s.usage.prompt_tokens + s.usage.completion_tokens,
        s.seconds
    )
}

/// Scan every trace (`models[0]` also classifies absorption; more models are a judge panel) and
/// build the scan file: corpus report, per-trace scans, and the traces that failed in `errors`.
/// A budget stop ends the scan early and keeps what was scanned. Errors only without a model.
pub async fn scan_traces(
    models: &[&dyn ChatModel],
    traces: &[Trace],
    opts: &ScanOptions,
    progress: &dyn Progress,
) -> Result<ScanFile, ImplicitError> {
    let Some(first) = models.first() else {
        return Err(ImplicitError::Config("no model given".into()));
    };
    let cfg = opts.settings.scan_config(&opts.weights, models.len());
    let mut scans = Vec::new();
    let mut errors = Vec::new();
    progress.start(traces.len());
    for (i, t) in traces.iter().enumerate() {
        progress.case(&t.id);
        // A run with nothing to read is not scanned: its warning says why.
        if let Some(w) = t.not_understood() {
            let why = format!("not scanned, the run was not understood: {}", w.line());
            progress.error(&t.id, &why);
            progress.case_done();
            errors.push(format!("{}: {why}", t.id));
            continue;
        }
        match scan_trace(models, t, &cfg).await {
            Ok(s) => {
                progress.case_done();
                progress.summary(&t.id, &scan_line(i + 1, traces.len(), &s));
                scans.push(s);
            }
            Err(ImplicitError::Llm(LlmError::Budget(msg))) => {
                progress.stopped(
                    &t.id,
                    &format!(
                        "budget exhausted ({msg}); reporting the {} traces scanned",
                        scans.len()
                    ),
                );
                errors.push(format!("{}: budget exhausted: {msg}", t.id));
                break;
            }
            Err(e) => {
                match &e {
                    ImplicitError::Llm(LlmError::Deferred { .. }) => progress.deferred(&t.id),
                    e => progress.error(&t.id, &e.to_string()),
                }
                progress.case_done();
                errors.push(format!("{}: {e}", t.id));
            }
        }
    }
    progress.finish();
    let judges: Vec<String> = models.iter().map(|m| m.id().to_string()).collect();
    Ok(ScanFile {
        format_version: SCAN_FILE_VERSION,
        maslens_version: Some(env!("CARGO_PKG_VERSION").into()),
        model: first.id().to_string(),
        judges: if judges.len() > 1 { judges } else { Vec::new() },
        prompt_versions: prompt_versions(),
        weights: opts.weights.clone(),
        config: Some(ScanSettings {
            min_judges: Some(cfg.min_judges),
            ..opts.settings.clone()
        }),
        report: CorpusReport {
            counting: Some(
                opts.settings
                    .counting
                    .describe(opts.settings.events_per_window()),
            ),
            ..corpus_report(&scans, opts.settings.seed)
        },
        traces: scans,
        errors,
    })
}

#[cfg(test)]
mod tests;
