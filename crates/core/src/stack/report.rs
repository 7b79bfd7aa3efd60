//! The seed table of `maslens eval stack --repeat-seeds` and the methods' names in it.

use super::*;

pub(crate) const STACKED_METHOD: &str = "stacked (nested)";
pub(crate) const PRIOR_METHOD: &str = "prior (nested)";
pub(crate) const LLM_METHOD: &str = "llm pipeline";

/// The per-seed table of [`SeedHits`] with the sums, as text (Markdown table).
pub fn render_seed_table(seeds: &[SeedHits]) -> String {
    let pair = |h: [usize; 2]| format!("{} / {}", h[0], h[1]);
    let mut out = String::from(
        "agent / step hits per fold seed (nested, grouped):\n\n| fold seed | cases | stacked | prior alone | pipeline alone |\n| --- | --- | --- | --- | --- |\n",
    );
    let mut sum = SeedHits {
        seed: 0,
        cases: 0,
        stacked: [0, 0],
        prior: [0, 0],
        llm: [0, 0],
    };
    for h in seeds {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            h.seed,
            h.cases,
            pair(h.stacked),
            pair(h.prior),
            pair(h.llm)
        ));
        sum.cases += h.cases;
        for (acc, x) in [
            (&mut sum.stacked, h.stacked),
            (&mut sum.prior, h.prior),
            (&mut sum.llm, h.llm),
        ] {
            acc[0] += x[0];
            acc[1] += x[1];
        }
    }
    out.push_str(&format!(
        "| sum of {} | {} | {} | {} | {} |",
        seeds.len(),
        sum.cases,
        pair(sum.stacked),
        pair(sum.prior),
        pair(sum.llm)
    ));
    out
}
