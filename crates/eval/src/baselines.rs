//! The trivial baselines: one set, one definition each, computed on the same cases as every
//! method so reports (`maslens eval locate`, `maslens prior eval`) show them side by side.
//! "Acting" is [`Trace::is_acting`] (neither a tool / code executor / terminal nor the human).
//!
//! - `random`: a uniformly drawn step among the acting agents' steps (all steps when there are
//!   none), from the trace's seeded draw [`maslens_trace::seeded_rng`]`(seed, trace id)`;
//! - `first-agent`: the first step an acting agent took;
//! - `last-agent`: the last step an acting agent took;
//! - `error-keyword`: the first step whose text contains an error keyword (error, exception,
//!   traceback, failed, ...); a hit inside a terminal/tool step is attributed to the closest
//!   earlier acting step (whose action produced it); no hit: `last-agent`.

use maslens_trace::Trace;
use rand::Rng;

/// A baseline's prediction for one trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guess {
    pub agent: String,
    pub step: usize,
}

/// Names of the baselines in report order.
pub const NAMES: [&str; 4] = ["random", "first-agent", "last-agent", "error-keyword"];

/// Error keywords (lower case) for the keyword heuristic.
pub const ERROR_KEYWORDS: [&str; 12] = [
    "error",
    "exception",
    "traceback",
    "failed",
    "failure",
    "not found",
    "unable to",
    "cannot",
    "can't",
    "incorrect",
    "invalid",
    "exitcode: 1",
];

fn guess(trace: &Trace, pos: usize) -> Guess {
    Guess {
        agent: trace.steps[pos].agent.clone(),
        step: trace.steps[pos].index,
    }
}

fn candidates(trace: &Trace) -> Vec<usize> {
    let c = trace.acting_positions();
    if c.is_empty() {
        (0..trace.steps.len()).collect()
    } else {
        c
    }
}

/// Seeded random step among non-terminal agents' steps.
pub fn random(trace: &Trace, seed: u64) -> Option<Guess> {
    let c = candidates(trace);
    if c.is_empty() {
        return None;
    }
    let mut rng = maslens_trace::seeded_rng(seed, &trace.id);
    Some(guess(trace, c[rng.gen_range(0..c.len())]))
}

/// First step of a non-terminal agent.
pub fn first_agent(trace: &Trace) -> Option<Guess> {
    candidates(trace).first().map(|&p| guess(trace, p))
}

/// Last step of a non-terminal agent.
pub fn last_agent(trace: &Trace) -> Option<Guess> {
    candidates(trace).last().map(|&p| guess(trace, p))
}

/// First step with an error keyword (see module docs).
pub fn error_keyword(trace: &Trace) -> Option<Guess> {
    for (pos, step) in trace.steps.iter().enumerate() {
        let text = step.content.to_lowercase();
        if !ERROR_KEYWORDS.iter().any(|k| text.contains(k)) {
            continue;
        }
        if trace.is_acting(&step.agent) {
            return Some(guess(trace, pos));
        }
        if let Some(p) = (0..pos)
            .rev()
            .find(|&p| trace.is_acting(&trace.steps[p].agent))
        {
            return Some(guess(trace, p));
        }
    }
    last_agent(trace)
}

/// The prediction a baseline's guess stands for (no guess: an abstention).
pub fn prediction(g: Option<Guess>) -> crate::metrics::Prediction {
    match g {
        Some(g) => crate::metrics::Prediction {
            agent: Some(g.agent),
            step: Some(g.step),
            ..Default::default()
        },
        None => crate::metrics::Prediction {
            abstained: true,
            ..Default::default()
        },
    }
}

/// The chance that [`random`] names a right agent on `trace`: the share of its candidate steps
/// taken by a labelled agent (a faulty one for Aegis, the decisive one for Who&When); `None`
/// without an agent label or steps.
pub fn random_agent_chance(trace: &Trace, gold: &maslens_trace::Gold) -> Option<f64> {
    use crate::metrics::norm_agent;
    let labelled: Vec<String> = match (&gold.faulty[..], &gold.agent) {
        ([], Some(a)) => vec![norm_agent(a)],
        ([], None) => return None,
        (faulty, _) => faulty.iter().map(|(a, _)| norm_agent(a)).collect(),
    };
    let c = candidates(trace);
    if c.is_empty() {
        return None;
    }
    let right = c
        .iter()
        .filter(|&&p| labelled.contains(&norm_agent(&trace.steps[p].agent)))
        .count();
    Some(right as f64 / c.len() as f64)
}

/// Run a baseline by name.
pub fn run(name: &str, trace: &Trace, seed: u64) -> Option<Guess> {
    match name {
        "random" => random(trace, seed),
        "first-agent" => first_agent(trace),
        "last-agent" => last_agent(trace),
        "error-keyword" => error_keyword(trace),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_trace::{AgentKind, Step};

    fn t() -> Trace {
        let mut t = Trace::new("x/1");
        t.ensure_agent("Computer_terminal", AgentKind::Tool);
        let rows = [
            ("human", "please solve"),
            ("Planner", "plan"),
            ("Coder", "code"),
            ("Computer_terminal", "Traceback: NameError"),
            ("Checker", "looks fine"),
            ("Computer_terminal", "exitcode: 0"),
        ];
        for (i, (a, c)) in rows.iter().enumerate() {
            t.steps.push(Step {
                index: i,
                agent: a.to_string(),
                content: c.to_string(),
                ..Default::default()
            });
        }
        t
    }

    #[test]
    fn first_last_keyword() {
        let t = t();
        assert_eq!(
            first_agent(&t),
            Some(Guess {
                agent: "Planner".into(),
                step: 1
            })
        );
        assert_eq!(
            last_agent(&t),
            Some(Guess {
                agent: "Checker".into(),
                step: 4
            })
        );
        // The traceback is in the terminal's step 3: blamed on the Coder at step 2.
        assert_eq!(
            error_keyword(&t),
            Some(Guess {
                agent: "Coder".into(),
                step: 2
            })
        );
    }

    #[test]
    fn random_chance_is_the_labelled_share_of_acting_steps() {
        let t = t();
        // Acting steps: Planner, Coder, Checker (the human and the terminal are not candidates).
        let gold = |agent: Option<&str>, faulty: &[&str]| maslens_trace::Gold {
            agent: agent.map(String::from),
            step: None,
            faulty: faulty.iter().map(|a| (a.to_string(), None)).collect(),
        };
        let chance = |g| random_agent_chance(&t, &g).unwrap();
        assert!((chance(gold(Some("coder"), &[])) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(chance(gold(None, &["Planner", "Coder", "Checker"])), 1.0);
        assert_eq!(chance(gold(None, &["Computer_terminal"])), 0.0);
        assert_eq!(random_agent_chance(&t, &gold(None, &[])), None);
    }

    #[test]
    fn random_is_seeded_and_never_terminal() {
        let t = t();
        let a = random(&t, 7).unwrap();
        assert_eq!(Some(a.clone()), random(&t, 7));
        for seed in 0..50 {
            let g = random(&t, seed).unwrap();
            assert!(t.is_acting(&g.agent));
        }
        let distinct: std::collections::BTreeSet<usize> =
            (0..50).map(|s| random(&t, s).unwrap().step).collect();
        assert!(distinct.len() > 1);
    }

    #[test]
    fn keyword_falls_back_to_last_agent() {
        let mut t = t();
        t.steps[3].content = "ok".into();
        assert_eq!(error_keyword(&t), last_agent(&t));
    }
}
