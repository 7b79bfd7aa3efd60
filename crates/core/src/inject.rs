//! `maslens inject` as every front end starts it: the questions (the dataset's first N in a
//! seeded order), the clean and injected debates of each (`maslens_credit::inject`, at most the
//! configuration's `concurrency` questions at a time), progress per question, and the output
//! folder: `traces.jsonl` (the runs a fault turned wrong, as labelled failure traces) and
//! `summary.json` (every question: the clean answer, each injection and whether it flipped).
//! Both files are written atomically: an interrupted run leaves the last complete ones, and a
//! rerun resumes through the LLM cache without repeating paid calls (docs/inject.md).

use crate::CoreError;
use maslens_credit::config::DebateConfig;
use maslens_credit::data::Mcq;
use maslens_credit::debate::ModelSet;
use maslens_credit::inject::{inject_many, InjectOptions, InjectSummary, QuestionOutcome};
use maslens_eval::atomic::{write_atomic, AtomicFile};
use maslens_eval::run::Progress;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The first `n` of `questions` in the order of their seeded hash: the same questions for the
/// same seed whatever the file's order.
pub fn pick_questions(mut questions: Vec<Mcq>, seed: u64, n: usize) -> Vec<Mcq> {
    questions.sort_by_key(|q| maslens_trace::seeded_hash(seed, &q.id));
    questions.truncate(n);
    questions
}

/// The questions of an injection run and where they came from.
#[derive(Debug, Clone)]
pub struct Questions {
    pub items: Vec<Mcq>,
    /// The dataset spec read, or `simulation`.
    pub dataset: String,
    /// Records of the dataset that could not be read (file, record and why), for the caller
    /// to report.
    pub skipped: Vec<String>,
}

/// The questions of an injection run, as every front end picks them: with `simulation` and no
/// `dataset`, `n` synthetic questions of the simulated system; else the dataset's
/// ([`crate::optimize::load_questions`]: `dataset`, else the configuration's `[data]`). Then the
/// first `n` in the seeded order ([`pick_questions`]).
pub fn questions(
    dataset: Option<&str>,
    cfg: &DebateConfig,
    config_path: Option<&Path>,
    simulation: bool,
    n: usize,
    seed: u64,
) -> Result<Questions, CoreError> {
    let (items, dataset, skipped) = if simulation && dataset.is_none() {
        let items = maslens_credit::simulation::questions(n, seed);
        (items, "simulation".to_string(), Vec::new())
    } else {
        let (loaded, spec) = crate::optimize::load_questions(dataset, cfg, config_path)?;
        let skipped = loaded.problems.iter().map(ToString::to_string).collect();
        (loaded.items, spec, skipped)
    };
    Ok(Questions {
        items: pick_questions(items, seed, n),
        dataset,
        skipped,
    })
}

/// A finished injection run.
#[derive(Debug, Clone)]
pub struct InjectRun {
    /// The dataset spec read (or `simulation`).
    pub dataset: String,
    /// The debate configuration's name.
    pub debate: String,
    pub options: InjectOptions,
    pub summary: InjectSummary,
    /// One per question, in question order.
    pub outcomes: Vec<QuestionOutcome>,
    /// The files written.
    pub traces_path: PathBuf,
    pub summary_path: PathBuf,
}

impl InjectRun {
    /// `summary.json`: dataset, debate, options, totals and every question's outcome.
    pub fn to_json(&self) -> Value {
        json!({
            "dataset": self.dataset,
            "debate": self.debate,
            "options": self.options,
            "summary": self.summary,
            "questions": self.outcomes,
        })
    }

    /// The totals for a person: questions, clean answers right, injected runs, labelled ones,
    /// then one line per fault kind.
    pub fn text(&self) -> String {
        let s = &self.summary;
        let mut out = format!(
            "{} questions, {} answered right by the clean debate; {} injected runs, {} turned \
             wrong and written as labelled traces to {}\n",
            s.questions,
            s.clean_correct,
            s.tried,
            s.labelled,
            self.traces_path.display()
        );
        for (kind, (tried, flipped)) in &s.by_kind {
            out.push_str(&format!(
                "  {kind}: {flipped} of {tried} injected runs turned wrong\n"
            ));
        }
        out
    }
}

/// One line about a finished question, for the progress log.
fn outcome_line(o: &QuestionOutcome) -> String {
    format!(
        "{}: clean {} ({}), {} injected, {} labelled",
        o.question,
        o.clean_answer.map_or("-".into(), |c| c.to_string()),
        if o.clean_correct { "right" } else { "wrong" },
        o.tried.len(),
        o.traces.len()
    )
}

fn io(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> CoreError {
    CoreError::io(format!("{what} {}", path.display()))
}

/// Run the injections on `questions` and write `dir/traces.jsonl` and `dir/summary.json`.
/// `dataset` names the questions' source in the summary. The first backend error stops the
/// run (nothing is written then; a rerun resumes through the cache).
pub async fn inject_to(
    dir: &Path,
    models: &ModelSet,
    cfg: &DebateConfig,
    questions: &[Mcq],
    opts: &InjectOptions,
    dataset: &str,
    progress: &dyn Progress,
) -> Result<InjectRun, CoreError> {
    if opts.kinds.is_empty() {
        return Err(CoreError::Invalid(
            "at least one fault kind is needed".into(),
        ));
    }
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let traces_path = dir.join("traces.jsonl");
    let mut traces_file = AtomicFile::create(&traces_path).map_err(io("creating", &traces_path))?;
    let run_id = format!("inject-{}", cfg.name);
    let prompts = cfg.prompts();
    let mut summary = InjectSummary::default();
    let mut outcomes = Vec::with_capacity(questions.len());
    progress.start(questions.len());
    {
        let mut file = std::io::BufWriter::new(&mut traces_file);
        // `concurrency` questions at a time (the configuration's), reported after each batch.
        for batch in questions.chunks(cfg.concurrency.max(1)) {
            for o in inject_many(models, cfg, &prompts, batch, opts, &run_id).await? {
                progress.case(&o.question);
                for t in &o.traces {
                    let line = serde_json::to_string(t)
                        .map_err(|e| CoreError::Invalid(format!("trace of {}: {e}", o.question)))?;
                    // The error is built only when one happens (one line per trace).
                    writeln!(file, "{line}").map_err(|e| io("writing", &traces_path)(e))?;
                }
                summary.add(&o);
                progress.summary(&o.question, &outcome_line(&o));
                progress.case_done();
                outcomes.push(o);
            }
        }
        file.flush().map_err(io("writing", &traces_path))?;
    }
    progress.finish();
    traces_file.commit().map_err(io("writing", &traces_path))?;
    let run = InjectRun {
        dataset: dataset.to_string(),
        debate: cfg.name.clone(),
        options: opts.clone(),
        summary,
        outcomes,
        traces_path,
        summary_path: dir.join("summary.json"),
    };
    let text = serde_json::to_string_pretty(&run.to_json())
        .map_err(|e| CoreError::Invalid(format!("summary: {e}")))?;
    write_atomic(&run.summary_path, text).map_err(io("writing", &run.summary_path))?;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_credit::inject::FaultKind;
    use maslens_credit::simulation::{self, SimulatedMas};
    use std::sync::Mutex;

    #[derive(Default)]
    struct Heard(Mutex<Vec<String>>);

    impl Progress for Heard {
        fn start(&self, cases: usize) {
            self.0.lock().unwrap().push(format!("start {cases}"));
        }
        fn summary(&self, id: &str, line: &str) {
            assert!(line.starts_with(id), "{line}");
            self.0.lock().unwrap().push(line.to_string());
        }
        fn case_done(&self) {
            self.0.lock().unwrap().push("done".into());
        }
        fn finish(&self) {
            self.0.lock().unwrap().push("finish".into());
        }
    }

    fn simulated(dir: &Path, concurrency: usize) -> (InjectRun, Vec<String>) {
        let mut cfg = simulation::config(2, 0, 0).unwrap();
        cfg.concurrency = concurrency;
        let questions = pick_questions(simulation::questions(6, 1), 1, 4);
        let models = SimulatedMas::models(&questions);
        let opts = InjectOptions {
            kinds: vec![FaultKind::WrongFact, FaultKind::DroppedInstruction],
            per_run: 2,
            seed: 1,
        };
        let heard = Heard::default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let run = rt
            .block_on(inject_to(
                dir,
                &models,
                &cfg,
                &questions,
                &opts,
                "simulation",
                &heard,
            ))
            .unwrap();
        (run, heard.0.into_inner().unwrap())
    }

    #[test]
    fn writes_both_files_and_reports_each_question() {
        let dir = tempfile::tempdir().unwrap();
        let (run, heard) = simulated(dir.path(), 1);
        assert_eq!(run.summary.questions, 4);
        assert!(run.summary.labelled > 0, "{:?}", run.summary);
        assert_eq!(heard.first().map(String::as_str), Some("start 4"));
        assert_eq!(heard.last().map(String::as_str), Some("finish"));
        assert_eq!(heard.iter().filter(|h| *h == "done").count(), 4);
        let lines = std::fs::read_to_string(&run.traces_path).unwrap();
        assert_eq!(lines.lines().count(), run.summary.labelled);
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(&run.summary_path).unwrap()).unwrap();
        assert_eq!(
            summary,
            serde_json::from_str::<Value>(&run.to_json().to_string()).unwrap()
        );
        assert_eq!(summary["questions"].as_array().map(Vec::len), Some(4));
        assert!(run.text().starts_with("4 questions, "), "{}", run.text());
        // The same files whatever the concurrency.
        let other = tempfile::tempdir().unwrap();
        let (again, _) = simulated(other.path(), 3);
        assert_eq!(std::fs::read_to_string(&again.traces_path).unwrap(), lines);
    }

    #[test]
    fn no_fault_kind_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let cfg = simulation::config(2, 0, 0).unwrap();
        let questions = simulation::questions(2, 0);
        let models = SimulatedMas::models(&questions);
        let opts = InjectOptions {
            kinds: Vec::new(),
            ..InjectOptions::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let r = rt.block_on(inject_to(
            &out,
            &models,
            &cfg,
            &questions,
            &opts,
            "simulation",
            &Heard::default(),
        ));
        assert!(matches!(r, Err(CoreError::Invalid(_))), "{r:?}");
        assert!(!out.exists());
    }
}
