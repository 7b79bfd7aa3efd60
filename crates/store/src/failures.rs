//! Failed runs as failure modes read them (`maslens modes --db`, `GET /api/modes`, the UI's
//! "Failure modes" page): each run's latest localization (agent, step, reason) and the event
//! types of its latest scan, in one query plus one per 500 scans for the events.

use std::collections::BTreeMap;

use maslens_trace::Trace;
use serde_json::Value;

use crate::{col, json_col, q, Result, Store};

/// What the failure-mode grouping needs of one run.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct FailedRun {
    pub run: String,
    pub system: Option<String>,
    /// The run's first span start, else when the store received it (ns since the epoch).
    pub time_ns: Option<i64>,
    /// The latest localization (`locate` or `prior` diagnosis), when there is one.
    pub agent: Option<String>,
    pub step: Option<i64>,
    /// Its evidence in words (`rationale`, else `abstain_reason`), empty when it has none.
    pub reason: String,
    /// Error types of the latest scan's events, most severe first.
    pub failure_types: Vec<String>,
    /// The trace ([`FailedRunFilter::gold`] only: its gold labels are read by the caller).
    #[serde(skip)]
    pub trace: Option<Trace>,
}

/// Which runs [`Store::failed_runs`] reads.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FailedRunFilter {
    /// Only this system's runs.
    pub system: Option<String>,
    /// `failure` (the default), `unknown`, `success`, or `any` (every run with a localization).
    pub outcome: String,
    /// Also load each run's trace (for its gold labels).
    pub gold: bool,
    /// At most this many runs, oldest first (default 10,000).
    pub limit: i64,
}

impl Default for FailedRunFilter {
    fn default() -> Self {
        FailedRunFilter {
            system: None,
            outcome: "failure".into(),
            gold: false,
            limit: 10_000,
        }
    }
}

/// The outcomes [`FailedRunFilter::outcome`] accepts.
pub const OUTCOMES: &[&str] = &["failure", "unknown", "success", "any"];

impl Store {
    /// The runs `filter` selects with their latest localization and scan, oldest first, and
    /// whether more runs matched than `filter.limit`.
    pub async fn failed_runs(&self, filter: &FailedRunFilter) -> Result<(Vec<FailedRun>, bool)> {
        if !OUTCOMES.contains(&filter.outcome.as_str()) {
            return Err(crate::StoreError::Invalid(format!(
                "outcome {:?}: expected one of {}",
                filter.outcome,
                OUTCOMES.join(", ")
            )));
        }
        let limit = filter.limit.clamp(1, 1_000_000);
        let trace_col = if filter.gold { ", r.trace_json" } else { "" };
        let located = "SELECT d.result FROM diagnoses d WHERE d.run_id = r.id \
             AND d.method IN ('locate', 'prior') ORDER BY d.created_ns DESC, d.id DESC LIMIT 1";
        let scan = "SELECT d.id FROM diagnoses d WHERE d.run_id = r.id AND d.method = 'scan' \
             ORDER BY d.created_ns DESC, d.id DESC LIMIT 1";
        let sql = format!(
            "SELECT r.id, r.system, COALESCE(r.first_ns, r.received_ns) AS time_ns, \
             ({located}) AS located, ({scan}) AS scan_id{trace_col} FROM runs r \
             WHERE r.trace_json IS NOT NULL AND ($1 = 'any' OR COALESCE(r.outcome, 'unknown') = $1) \
             AND ($2 = '' OR r.system = $2) ORDER BY r.received_ns, r.id LIMIT {}",
            limit + 1
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(filter.outcome.as_str())
            .bind(filter.system.as_deref().unwrap_or(""))
            .fetch_all(&self.pool)
            .await
            .map_err(q("failed runs"))?;
        let more = rows.len() as i64 > limit;
        let mut runs = Vec::new();
        let mut scans: BTreeMap<String, usize> = BTreeMap::new();
        for row in rows.iter().take(limit as usize) {
            let id: String = col(row, "id")?;
            let located: Option<String> = col(row, "located")?;
            if filter.outcome == "any" && located.is_none() {
                continue;
            }
            let mut run = FailedRun {
                system: col(row, "system")?,
                time_ns: col(row, "time_ns")?,
                ..FailedRun::default()
            };
            if let Some(text) = located {
                let v: Value = json_col(&text, || format!("diagnosis of run {id} field result"))?;
                run.agent = v.get("agent").and_then(Value::as_str).map(str::to_string);
                run.step = v.get("step").and_then(Value::as_i64);
                run.reason = ["rationale", "abstain_reason"]
                    .iter()
                    .find_map(|k| v.get(*k).and_then(Value::as_str))
                    .unwrap_or_default()
                    .to_string();
            }
            if filter.gold {
                let json: Option<String> = col(row, "trace_json")?;
                if let Some(j) = json {
                    run.trace = Some(json_col(&j, || format!("trace of run {id}"))?);
                }
            }
            if let Some(scan_id) = col::<Option<String>>(row, "scan_id")? {
                scans.insert(scan_id, runs.len());
            }
            run.run = id;
            runs.push(run);
        }
        self.add_event_types(&mut runs, &scans).await?;
        Ok((runs, more))
    }

    /// Fills `failure_types` from the events of the scans (`scan id -> index into runs`).
    async fn add_event_types(
        &self,
        runs: &mut [FailedRun],
        scans: &BTreeMap<String, usize>,
    ) -> Result<()> {
        let ids: Vec<&String> = scans.keys().collect();
        for chunk in ids.chunks(500) {
            let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT diagnosis_id, error_type FROM implicit_events WHERE diagnosis_id IN ({}) \
                 AND error_type IS NOT NULL \
                 ORDER BY diagnosis_id, COALESCE(severity, 0) DESC, ordinal",
                marks.join(", ")
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(id.as_str());
            }
            let rows = query
                .fetch_all(&self.pool)
                .await
                .map_err(q("implicit events of failed runs"))?;
            for row in &rows {
                let scan: String = col(row, "diagnosis_id")?;
                let kind: String = col(row, "error_type")?;
                if let Some(run) = scans.get(&scan).and_then(|&i| runs.get_mut(i)) {
                    if !run.failure_types.contains(&kind) {
                        run.failure_types.push(kind);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
