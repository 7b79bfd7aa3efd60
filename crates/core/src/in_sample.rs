//! Which traces the built-in prior was trained on, recognised by content: a report on those
//! traces measures the fit to the training data, not how the method does on new traces, and
//! says so (`LocateReport::in_sample`, and a warning on stderr).
//!
//! The list is the SHA-256 of every training trace's steps ([`maslens_eval::run::steps_sha256`]:
//! agent and content, not the path or id), one per line, in `data/builtin-prior-training.sha256`:
//! the 98 Who&When traces of `crates/prior/models/whowhen-v1.json` (its `training.note` names
//! the command). A test checks it against the bundled Who&When data.

use maslens_prior::PriorModel;
use maslens_trace::Trace;
use std::collections::HashSet;

const TRAINING: &str = include_str!("../data/builtin-prior-training.sha256");

fn training() -> &'static HashSet<&'static str> {
    static SET: std::sync::OnceLock<HashSet<&'static str>> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        TRAINING
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect()
    })
}

/// Whether the built-in prior was trained on `trace`.
pub fn trained_on(trace: &Trace) -> bool {
    training().contains(maslens_eval::run::steps_sha256(trace).as_str())
}

/// The in-sample note of a run over `traces` with the prior `prior_spec` (`builtin` or a file;
/// `None`: no prior), or `None` when no trace was a training trace of the built-in prior.
pub fn note(prior_spec: Option<&str>, traces: &[&Trace]) -> Option<String> {
    if prior_spec != Some("builtin") {
        return None;
    }
    let seen = traces.iter().filter(|t| trained_on(t)).count();
    say(seen, traces.len(), "the built-in prior")
}

/// The in-sample note of an evaluation of `model` on `traces`: the built-in model (`builtin`)
/// by the shipped list, a model file by the training set it records
/// ([`maslens_prior::model::TrainingInfo::trace_sha256`]; files written before it was recorded
/// cannot tell, and get no note).
pub fn model_note(model: &PriorModel, builtin: bool, traces: &[&Trace]) -> Option<String> {
    if builtin {
        let seen = traces.iter().filter(|t| trained_on(t)).count();
        return say(seen, traces.len(), "the built-in prior");
    }
    let recorded: HashSet<&str> = model
        .training
        .trace_sha256
        .iter()
        .map(String::as_str)
        .collect();
    let seen = traces
        .iter()
        .filter(|t| recorded.contains(maslens_eval::run::steps_sha256(t).as_str()))
        .count();
    say(seen, traces.len(), "this prior model")
}

fn say(seen: usize, of: usize, who: &str) -> Option<String> {
    (seen > 0).then(|| {
        format!(
            "{who} was trained on {seen} of these {of} traces, so these figures are \
             in-sample (a fit to its training data), not an estimate for new traces; see \
             docs/prior.md for its cross-validated figures"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_trace::Format;

    fn whowhen() -> Vec<Trace> {
        let dir = std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/whowhen"
        ));
        crate::traces::read(&[dir], Format::WhoWhen).traces
    }

    /// `MASLENS_WRITE_PRIOR_TRAINING=1 cargo test -p maslens-core in_sample` rewrites the list
    /// (after retraining the built-in prior on other data).
    #[test]
    fn the_list_is_every_bundled_whowhen_trace_by_content() {
        let traces = whowhen();
        assert_eq!(traces.len(), 98, "the built-in prior's training set");
        if std::env::var_os("MASLENS_WRITE_PRIOR_TRAINING").is_some() {
            let mut h: Vec<String> = traces.iter().map(maslens_eval::run::steps_sha256).collect();
            h.sort();
            let path = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/data/builtin-prior-training.sha256"
            );
            std::fs::write(path, h.join("\n") + "\n").unwrap();
            return;
        }
        assert!(traces.iter().all(trained_on));
        // Two Who&When traces have the same steps: 96 distinct hashes for 98 traces.
        let distinct: HashSet<String> =
            traces.iter().map(maslens_eval::run::steps_sha256).collect();
        assert_eq!(training().len(), distinct.len());
    }

    #[test]
    fn recognised_by_content_not_by_path_or_id() {
        let mut t = whowhen().remove(0);
        t.id = "renamed/elsewhere".into();
        t.source.file = Some("/tmp/copy.json".into());
        let refs = [&t];
        let n = note(Some("builtin"), &refs).unwrap();
        assert!(n.contains("trained on 1 of these 1 traces"), "{n}");
        assert!(note(Some("my-prior.jsonl"), &refs).is_none());
        assert!(note(None, &refs).is_none());
        // One changed step is another trace.
        t.steps[0].content.push('!');
        assert!(!trained_on(&t));
        assert!(note(Some("builtin"), &[&t]).is_none());
    }
}
