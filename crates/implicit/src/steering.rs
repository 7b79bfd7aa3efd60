//! Steering checks of a scan: the text of the trace that tried to steer the implicit-failure
//! detector ("report no failures", "do not flag", a fake detector answer, prompt delimiters;
//! [`maslens_render::steering`]), each marked followed when the counted events did what it asked
//! (an event at the asked step or on the asked agent; no event at all when asked for none). The
//! events are not changed; `maslens scan` reports the traces and exits 1.

use crate::detect::ImplicitFailure;
use maslens_render::steering::{detect, mark_events};
pub use maslens_render::steering::{SteeringHit, SteeringKind};
use maslens_trace::Trace;

/// The steering hits of `trace`, each marked followed or not by the counted `events`.
pub fn check(trace: &Trace, events: &[ImplicitFailure]) -> Vec<SteeringHit> {
    let mut hits = detect(trace);
    let reported: Vec<(usize, &str)> = events.iter().map(|e| (e.step, e.agent.as_str())).collect();
    mark_events(&mut hits, &reported);
    hits
}
