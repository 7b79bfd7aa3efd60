//! Failure modes across runs (`maslens modes`, `GET /api/modes`, the UI's "Failure modes" page,
//! `maslens.modes`): the failed runs of each system grouped into the few modes worth fixing.
//!
//! The grouping is deterministic and needs no model (docs/modes.md states it in full):
//!
//! 1. Runs are taken per **system** (`Trace.source`, OTel `service.name`).
//! 2. Within a system, runs with the same **responsible agent** (the latest localization) and the
//!    same **implicit-failure type** (the most severe event of the latest scan; none when the run
//!    was not scanned) form a bucket.
//! 3. Within a bucket, the **reasons** (the verdict's evidence in words) are split by text:
//!    TF-IDF vectors over the system's reasons, leader clustering at a cosine threshold
//!    ([`ModesOptions::similarity`]) with one reassignment pass ([`text::cluster`]).
//!
//! Each mode has its size, its share of the system's failed runs, its words (the heaviest TF-IDF
//! words, its label), a trend (runs per UTC day), example runs, and, when a model is configured,
//! a one-sentence summary ([`summarize`]). When the runs carry gold decisive agents (Who&When),
//! [`purity`] says how well the modes line up with them.

pub mod cases;
pub mod purity;
mod render;
pub mod summary;
pub mod text;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use cases::{case_of_trace, cases_of_traces, of_traces, Selection};
pub use purity::{purity, Purity};
pub use summary::summarize;

/// The version of [`ModesReport`]'s JSON.
pub const FORMAT_VERSION: u32 = 1;

/// What a front end knows of one failed run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FailureCase {
    pub run: String,
    pub system: Option<String>,
    /// When the run happened (ns since the epoch), when known.
    pub time_ns: Option<i64>,
    /// The responsible agent and decisive step of the latest localization, when there is one.
    pub agent: Option<String>,
    pub step: Option<usize>,
    /// Implicit-failure types of the latest scan, most severe first.
    #[serde(default)]
    pub failure_types: Vec<String>,
    /// The verdict's evidence in words (empty when it gave none).
    #[serde(default)]
    pub reason: String,
    /// The gold decisive agent, when the run carries one (for [`purity`] only; never grouped on).
    pub gold_agent: Option<String>,
    /// The built-in prior (alone or in the default stacked localizer) was trained on this trace,
    /// so its localization may be a fit to training data ([`crate::in_sample`]).
    #[serde(default)]
    pub in_sample: bool,
}

/// The knobs of the grouping.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModesOptions {
    /// Cosine threshold of the reason clustering (0..1; higher splits more).
    pub similarity: f64,
    /// Example runs kept per mode.
    pub examples: usize,
    /// Words kept as a mode's label.
    pub words: usize,
}

impl Default for ModesOptions {
    fn default() -> Self {
        ModesOptions {
            similarity: 0.3,
            examples: 3,
            words: 4,
        }
    }
}

impl ModesOptions {
    /// The options when they make sense: `similarity` in 0..1, `examples` at most 50 (more
    /// are cut to 50).
    pub fn checked(mut self) -> Result<ModesOptions, crate::CoreError> {
        if !(0.0..=1.0).contains(&self.similarity) {
            return Err(crate::CoreError::Invalid(format!(
                "similarity: {} is not between 0 and 1",
                self.similarity
            )));
        }
        self.examples = self.examples.min(50);
        self.words = self.words.clamp(1, 20);
        Ok(self)
    }
}

/// One failure mode of a system.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Mode {
    /// Stable while the mode's key and words stay the same (a hash of them).
    pub id: String,
    /// The responsible agent; none for runs not localized.
    pub agent: Option<String>,
    /// The most severe implicit-failure type; none when the runs were not scanned or had none.
    pub failure_type: Option<String>,
    /// The heaviest words of the mode's reasons.
    pub words: Vec<String>,
    pub runs: usize,
    /// `runs` over the system's failed runs.
    pub share: f64,
    pub examples: Vec<Example>,
    /// Runs per UTC day (`YYYY-MM-DD`), oldest first; empty when no run has a time.
    pub trend: Vec<DayCount>,
    pub first_ns: Option<i64>,
    pub last_ns: Option<i64>,
    /// Every member run (ids), in run-id order.
    pub members: Vec<String>,
    /// A model's one-sentence summary ([`summarize`]); none without a model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Why no fix can be proposed for this mode ([`crate::improve::propose::obstacle`]: no
    /// located agent, its prompt not recorded, no located step); none when one can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_proposal: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    pub run: String,
    pub step: Option<usize>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DayCount {
    pub day: String,
    pub runs: usize,
}

/// The modes of one system, largest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemModes {
    /// The system's name; `(unnamed)` for runs without one.
    pub system: String,
    pub failed_runs: usize,
    /// Failed runs with a localization.
    pub located_runs: usize,
    /// Failed runs with a scan.
    pub scanned_runs: usize,
    pub modes: Vec<Mode>,
}

/// `maslens modes`' report (JSON; Markdown by [`ModesReport::to_markdown`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModesReport {
    pub format_version: u32,
    /// The grouping rule in words.
    pub method: String,
    pub options: ModesOptions,
    pub systems: Vec<SystemModes>,
    /// How the modes line up with gold decisive agents, when runs carry them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purity: Option<Purity>,
    /// The model that wrote the summaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summaries_by: Option<String>,
    /// What a reader should know: runs left out by a limit, summaries that failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ModesReport {
    /// The mode `id` and its system (of `system` only, when given). An unknown id, or one that
    /// two systems share without `system` to choose, is an error naming the ids there are.
    pub fn find(&self, system: Option<&str>, id: &str) -> Result<(&str, &Mode), crate::CoreError> {
        let found: Vec<(&str, &Mode)> = self
            .systems
            .iter()
            .filter(|s| system.is_none_or(|want| s.system == want))
            .flat_map(|s| s.modes.iter().map(move |m| (s.system.as_str(), m)))
            .filter(|(_, m)| m.id == id)
            .collect();
        match found.as_slice() {
            [one] => Ok(*one),
            [] => Err(crate::CoreError::NotFound(format!(
                "no failure mode {id:?}{} (the modes report lists them)",
                system
                    .map(|s| format!(" of system {s:?}"))
                    .unwrap_or_default()
            ))),
            _ => Err(crate::CoreError::Invalid(format!(
                "failure mode {id:?} is in several systems: name one"
            ))),
        }
    }
}

/// The grouping rule, as reports state it.
pub const METHOD: &str = "per system: same responsible agent and most severe implicit-failure \
    type, then reasons split by TF-IDF cosine (leader clustering, one reassignment pass)";

/// The system name of runs without one.
pub const UNNAMED: &str = "(unnamed)";

/// Groups failed runs into modes (the module docs give the rule). The result depends only on the
/// set of cases and the options, not on their order: each system's cases are taken in run-id
/// order, so a store and the same traces read from files give the same modes.
pub fn group(cases: &[FailureCase], options: ModesOptions) -> ModesReport {
    let mut by_system: BTreeMap<String, Vec<&FailureCase>> = BTreeMap::new();
    for case in cases {
        let name = case.system.clone().unwrap_or_else(|| UNNAMED.to_string());
        by_system.entry(name).or_default().push(case);
    }
    for cases in by_system.values_mut() {
        cases.sort_by(|a, b| a.run.cmp(&b.run));
    }
    let systems: Vec<SystemModes> = by_system
        .into_iter()
        .map(|(system, cases)| system_modes(system, &cases, options))
        .collect();
    let purity = purity(&systems, cases);
    ModesReport {
        format_version: FORMAT_VERSION,
        method: METHOD.to_string(),
        options,
        systems,
        purity,
        summaries_by: None,
        notes: Vec::new(),
    }
}

fn system_modes(system: String, cases: &[&FailureCase], options: ModesOptions) -> SystemModes {
    let agents: BTreeSet<String> = cases
        .iter()
        .filter_map(|c| c.agent.as_deref())
        .flat_map(|a| text::words(a, &BTreeSet::new()))
        .collect();
    let docs: Vec<Vec<String>> = cases
        .iter()
        .map(|c| text::words(&c.reason, &agents))
        .collect();
    let vectors = text::tfidf(&docs);
    let forms = text::surface_forms(cases.iter().map(|c| c.reason.as_str()));
    let mut buckets: BTreeMap<(Option<&str>, Option<&str>), Vec<usize>> = BTreeMap::new();
    for (i, c) in cases.iter().enumerate() {
        let key = (
            c.agent.as_deref(),
            c.failure_types.first().map(String::as_str),
        );
        buckets.entry(key).or_default().push(i);
    }
    let total = cases.len();
    let mut modes = Vec::new();
    for ((agent, failure_type), members) in buckets {
        let local: Vec<text::Vector> = members.iter().map(|&i| vectors[i].clone()).collect();
        for group in text::cluster(&local, options.similarity) {
            let idx: Vec<usize> = group.iter().map(|&g| members[g]).collect();
            let words = text::top_words(&vectors, &idx, options.words)
                .into_iter()
                .map(|w| forms.get(&w).cloned().unwrap_or(w))
                .collect();
            let picked: Vec<&FailureCase> = idx.iter().map(|&i| cases[i]).collect();
            modes.push(mode(
                &system,
                agent,
                failure_type,
                words,
                &picked,
                total,
                options,
            ));
        }
    }
    modes.sort_by(|a, b| b.runs.cmp(&a.runs).then_with(|| a.id.cmp(&b.id)));
    SystemModes {
        located_runs: cases.iter().filter(|c| c.agent.is_some()).count(),
        scanned_runs: cases.iter().filter(|c| !c.failure_types.is_empty()).count(),
        failed_runs: total,
        system,
        modes,
    }
}

fn mode(
    system: &str,
    agent: Option<&str>,
    failure_type: Option<&str>,
    words: Vec<String>,
    cases: &[&FailureCase],
    total: usize,
    options: ModesOptions,
) -> Mode {
    let key = format!(
        "{system}\u{1f}{}\u{1f}{}\u{1f}{}",
        agent.unwrap_or(""),
        failure_type.unwrap_or(""),
        words.join(" ")
    );
    let times: Vec<i64> = cases.iter().filter_map(|c| c.time_ns).collect();
    let mut days: BTreeMap<String, usize> = BTreeMap::new();
    for &t in &times {
        *days.entry(utc_day(t)).or_default() += 1;
    }
    Mode {
        id: format!("{:016x}", maslens_trace::fnv1a(&key)),
        agent: agent.map(str::to_string),
        failure_type: failure_type.map(str::to_string),
        words,
        runs: cases.len(),
        share: cases.len() as f64 / total.max(1) as f64,
        examples: cases
            .iter()
            .take(options.examples)
            .map(|c| Example {
                run: c.run.clone(),
                step: c.step,
                reason: maslens_trace::excerpt_text(&c.reason, 240),
            })
            .collect(),
        trend: days
            .into_iter()
            .map(|(day, runs)| DayCount { day, runs })
            .collect(),
        first_ns: times.iter().min().copied(),
        last_ns: times.iter().max().copied(),
        members: cases.iter().map(|c| c.run.clone()).collect(),
        summary: None,
        no_proposal: None,
    }
}

/// `YYYY-MM-DD` (UTC) of a time in ns since the epoch (the civil-from-days rule of H. Hinnant).
pub fn utc_day(ns: i64) -> String {
    let days = ns.div_euclid(86_400 * 1_000_000_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests;
