//! Markdown rendering of a [`LocateReport`] (terminal and pull requests).

use crate::metrics::Accuracy;
use crate::report::LocateReport;
use std::fmt::Write;

fn acc(a: &Option<Accuracy>) -> String {
    a.as_ref()
        .map(Accuracy::display)
        .unwrap_or_else(|| "n/a".into())
}

/// Escape a table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// Render the report as Markdown.
pub fn render(r: &LocateReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# {}\n", cell(&r.title));
    let _ = writeln!(o, "- method: `{}`", cell(&r.method));
    if let Some(m) = &r.model {
        let _ = writeln!(o, "- model: `{}`", cell(m));
    }
    let _ = writeln!(o, "- dataset: `{}` ({} cases)", cell(&r.dataset), r.cases);
    let scorer = match r.scorer {
        crate::metrics::Scorer::Exact => "exact (normalized agent names, integer steps)",
        crate::metrics::Scorer::CompatSubstring => "compat-substring (Who&When reference scorer: gold substring of prediction; unparsed = wrong)",
    };
    let _ = writeln!(o, "- scorer: {scorer}; bootstrap seed {}", r.seed);
    if let Some(s) = &r.split {
        let _ = writeln!(
            o,
            "- split: {:.0}% refinement / test, seed {} ({} train, {} test; metrics on test)",
            100.0 * s.fraction,
            s.seed,
            s.train,
            s.test
        );
    }
    let _ = writeln!(
        o,
        "- abstentions / unparsed: {} of {}; structured-output failures: {}",
        r.abstentions, r.cases, r.parse_failures
    );
    if !r.errors.is_empty() {
        let _ = writeln!(
            o,
            "- cases whose calls failed (counted as unparsed, so wrong; listed below): {}",
            r.errors.len()
        );
    }

    let _ = writeln!(
        o,
        "\n## Accuracy (method next to baselines on the same cases)\n"
    );
    let pair = r.pair_accuracy.is_some();
    let _ = writeln!(
        o,
        "| method | agent-level | step-level |{}",
        if pair { " pair-level |" } else { "" }
    );
    let _ = writeln!(o, "|---|---|---|{}", if pair { "---|" } else { "" });
    let _ = writeln!(
        o,
        "| **{}** | {} | {} |{}",
        cell(&r.method),
        acc(&r.agent_accuracy),
        acc(&r.step_accuracy),
        if pair {
            format!(" {} |", acc(&r.pair_accuracy))
        } else {
            String::new()
        }
    );
    for (name, b) in &r.baselines {
        let _ = writeln!(
            o,
            "| {} | {} | {} |{}",
            cell(name),
            acc(&b.agent_accuracy),
            acc(&b.step_accuracy),
            if pair { " n/a |" } else { "" }
        );
    }

    if !r.subsets.is_empty() {
        let _ = writeln!(o, "\n## By subset\n");
        let _ = writeln!(
            o,
            "| subset | cases | agent-level | step-level | best baseline (agent) |"
        );
        let _ = writeln!(o, "|---|---|---|---|---|");
        for (name, s) in &r.subsets {
            let best = s
                .baselines
                .iter()
                .filter_map(|(n, b)| b.agent_accuracy.map(|a| (n, a)))
                .max_by(|a, b| a.1.value.total_cmp(&b.1.value))
                .map(|(n, a)| format!("{n}: {}", a.display()))
                .unwrap_or_else(|| "n/a".into());
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} |",
                cell(name),
                s.cases,
                acc(&s.agent_accuracy),
                acc(&s.step_accuracy),
                best
            );
        }
    }

    if !r.tolerance.is_empty() {
        let _ = writeln!(o, "\n## Step accuracy within ±k steps\n");
        let _ = writeln!(o, "| k | accuracy |");
        let _ = writeln!(o, "|---|---|");
        let mut t: Vec<(&String, &Accuracy)> = r.tolerance.iter().collect();
        t.sort_by_key(|(k, _)| k.parse::<usize>().unwrap_or(usize::MAX));
        for (k, a) in t {
            let _ = writeln!(o, "| {k} | {} |", a.display());
        }
    }
    if !r.deviation_histogram.is_empty() {
        let _ = writeln!(o, "\n## Deviation |predicted - true step|\n");
        let _ = writeln!(o, "| deviation | cases |");
        let _ = writeln!(o, "|---|---|");
        for b in &r.deviation_histogram {
            let _ = writeln!(o, "| {} | {} |", b.bin, b.count);
        }
    }
    if let Some(sp) = &r.step_spread {
        let _ = writeln!(o, "\n{}", spread_line(sp));
    }
    if !r.by_length.is_empty() {
        let _ = writeln!(o, "\n## By trace length (token quartiles)\n");
        let _ = writeln!(o, "| quartile | tokens | agent-level | step-level |");
        let _ = writeln!(o, "|---|---|---|---|");
        for b in &r.by_length {
            let _ = writeln!(
                o,
                "| {} | {}-{} | {} | {} |",
                b.name,
                b.tokens[0],
                b.tokens[1],
                acc(&b.agent_accuracy),
                acc(&b.step_accuracy)
            );
        }
    }
    if !r.mislocalized.is_empty() {
        let _ = writeln!(o, "\n## Most often mislocalized agents\n");
        let _ = writeln!(o, "| agent | wrongly blamed | missed (true culprit) |");
        let _ = writeln!(o, "|---|---|---|");
        for m in &r.mislocalized {
            let _ = writeln!(
                o,
                "| {} | {} | {} |",
                cell(&m.agent),
                m.wrongly_blamed,
                m.missed
            );
        }
    }
    let u = &r.usage;
    let _ = writeln!(o, "\n## Usage\n");
    let _ = writeln!(o, "| | total | per case |");
    let _ = writeln!(o, "|---|---|---|");
    let _ = writeln!(
        o,
        "| prompt tokens | {} | {:.0} |",
        u.prompt_tokens, u.per_case.prompt_tokens
    );
    let _ = writeln!(
        o,
        "| cached prompt tokens | {} ({:.1}% prefix reuse) | {:.0} |",
        u.cached_tokens,
        100.0 * u.prefix_reuse,
        u.per_case.cached_tokens
    );
    let _ = writeln!(
        o,
        "| completion tokens | {} | {:.0} |",
        u.completion_tokens, u.per_case.completion_tokens
    );
    let _ = writeln!(o, "| calls | {} | {:.1} |", u.calls, u.per_case.calls);
    let _ = writeln!(
        o,
        "| seconds | {:.1} | {:.2} |",
        u.seconds, u.per_case.seconds
    );
    match (u.cost_usd, u.per_case.cost_usd) {
        (Some(c), Some(pc)) => {
            let _ = writeln!(o, "| cost (USD) | {c:.4} | {pc:.5} |");
        }
        _ => {
            let _ = writeln!(o, "| cost (USD) | n/a (no price given) | n/a |");
        }
    }
    if !r.errors.is_empty() {
        let _ = writeln!(o, "\n## Cases whose calls failed\n");
        for (id, e) in &r.errors {
            let _ = writeln!(o, "- `{}`: {}", cell(id), cell(e));
        }
    }
    o
}

/// One line on how concentrated the predicted steps are (shared with the HTML report).
pub fn spread_line(sp: &crate::metrics::StepSpread) -> String {
    format!(
        "Predicted steps: {} distinct over {} cases, most often step {} ({}/{}); gold: {} distinct, most often step {} ({}/{}).",
        sp.distinct,
        sp.predicted,
        sp.top_step,
        sp.top_count,
        sp.predicted,
        sp.gold_distinct,
        sp.gold_top_step,
        sp.gold_top_count,
        sp.gold_cases
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_all_sections() {
        let r = crate::report::tests::sample();
        let md = super::render(&r);
        for needle in [
            "| **m** | 1/3 (33.3%",
            "| last-agent | 3/3 (100.0%",
            "## By subset",
            "## Step accuracy within ±k steps",
            "| 1-2 | 1 |",
            // AG/1 -> 1, AG/2 -> 3, HC/1 abstained; gold 1, 2, 9.
            "Predicted steps: 2 distinct over 2 cases, most often step 1 (1/2); gold: 3 distinct, most often step 1 (1/3).",
            "## By trace length",
            "## Most often mislocalized agents",
            "40.0% prefix reuse",
            "- `AG/9`: boom",
        ] {
            assert!(md.contains(needle), "missing {needle:?} in\n{md}");
        }
    }
}
