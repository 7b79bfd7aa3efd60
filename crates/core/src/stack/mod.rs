//! The default localizer (`maslens locate`, `--method stacked`): the LLM pipeline's ballots (the
//! Judge's answer and each Evaluator's) and the learned prior's distributions combined by a small
//! linear model whose weights are chosen by cross-validation (stacking). The agent-level and the
//! step-level answers are chosen apart, each by its own weights, and a verdict whose two answers
//! disagree shows them as two answers (the agent need not act at the step).
//!
//! Score of a step position `s` and of an agent `a`:
//!
//! ```text
//! step(s)  = ln p_prior(s) + w_judge * [Judge's step = s] + w_eval * sum_h c_h [Evaluator h's step = s]
//! agent(a) = ln q_prior(a) + v_judge * [Judge's agent = a] + v_eval * sum_h c_h [Evaluator h's agent = a]
//! ```
//!
//! (`c_h` the Evaluator's confidence; a ballot whose named agent does not act at its step is
//! dropped when the level's `drop_incoherent` is set.) The answer is each level's argmax. With no
//! usable ballot the prior answers alone (the model abstained or answered incoherently); with no
//! prior distribution the ballots decide. The weights depend on the model: `maslens eval stack`
//! measures the combination by nested cross-validation and fits the weights for a user's model
//! and traces; the built-in weights were fit for the embedded model ([`builtin`]).

mod combine;
mod eval;
mod fit;
mod report;
#[cfg(test)]
mod tests;
mod verdict;
mod weights;

pub use combine::*;
pub use eval::*;
pub use fit::*;
pub use report::*;
pub use verdict::*;
pub use weights::*;
