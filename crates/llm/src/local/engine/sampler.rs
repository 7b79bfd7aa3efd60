//! Sampling: the sampler chain a request asks for, and grammar-constrained sampling that
//! masks the vocabulary only when the unconstrained choice is rejected.

use super::Inner;
use crate::{ChatRequest, LlmError};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::LlamaToken;

impl Inner {
    pub(super) fn sampler(&self, request: &ChatRequest) -> Result<Sampler, LlmError> {
        // Checked before llama.cpp sees them: a schema or grammar that admits nothing would
        // leave the grammar no token to allow (see `Sampler::sample` for the guard behind this).
        let grammar = match (&request.grammar, &request.json_schema) {
            (Some(g), _) => {
                crate::schema_check::check_grammar(g).map_err(LlmError::InvalidRequest)?;
                Some(g.clone())
            }
            (None, Some(schema)) => {
                crate::schema_check::check_schema(schema).map_err(LlmError::InvalidRequest)?;
                // A narrowing of the schema (maslens_llm::schema_budget): strings sized so the
                // answer ends inside max_tokens (a looping model would otherwise write until the
                // budget cuts the JSON), bounded numbers as a grid llama.cpp's grammar can hold.
                let fitted = crate::schema_budget::for_grammar(schema, request.max_tokens);
                Some(schema_to_grammar(fitted.as_ref().unwrap_or(schema))?)
            }
            (None, None) => None,
        };
        let grammar = grammar
            .map(|g| {
                LlamaSampler::grammar(self.model, &g, "root").map_err(|e| {
                    LlmError::InvalidRequest(format!("llama.cpp rejected the grammar: {e}"))
                })
            })
            .transpose()?;
        let greedy = request.temperature <= 0.0;
        let mut chain = Vec::new();
        if greedy {
            chain.push(LlamaSampler::greedy());
        } else {
            if let Some(p) = request.top_p.filter(|p| *p > 0.0 && *p < 1.0) {
                chain.push(LlamaSampler::top_p(p, 1));
            }
            chain.push(LlamaSampler::temp(request.temperature));
            let seed = request.seed.unwrap_or(0);
            chain.push(LlamaSampler::dist((seed ^ (seed >> 32)) as u32));
        }
        Ok(Sampler {
            grammar,
            rest: LlamaSampler::chain_simple(chain),
            greedy,
            all: Vec::new(),
            one: Vec::with_capacity(1),
        })
    }
}

/// Grammar-constrained sampling without masking the whole vocabulary at every token (the
/// technique of llama.cpp's `common_sampler`): the token is drawn from the raw logits first and
/// only checked against the grammar; only when the grammar rejects it are all logits masked by
/// the grammar and the token drawn again. Masking a 49K-token vocabulary with a JSON grammar
/// costs more than the forward pass of a small model, and the check almost always passes. With
/// greedy decoding the result is identical to masking first (the argmax of the raw logits, when
/// allowed, is the argmax of the masked ones).
///
/// Per token nothing is allocated and the vocabulary is not copied: greedy decoding takes the
/// argmax straight from llama.cpp's logits (what llama.cpp's greedy sampler computes, first maximum
/// wins), and the candidate arrays the grammar and the sampler chain need are buffers kept across
/// tokens, filled only when used.
pub(super) struct Sampler {
    grammar: Option<LlamaSampler>,
    rest: LlamaSampler,
    /// Temperature 0: the chain is llama.cpp's greedy sampler, which `argmax` replaces.
    greedy: bool,
    /// One candidate per vocabulary token, reused (masking, non-greedy chains).
    all: Vec<LlamaTokenData>,
    /// The one-candidate array of the grammar check, reused.
    one: Vec<LlamaTokenData>,
}

/// Index of the first maximal logit, NaN skipped (llama.cpp's greedy sampler's choice).
fn argmax<I: IntoIterator<Item = (usize, f32)>>(logits: I) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (i, l) in logits {
        if l.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map(|(i, _)| i)
}

impl Sampler {
    /// All logits as candidates, in the reused buffer (handed back with `restore`).
    fn candidates(&mut self, logits: &[f32]) -> LlamaTokenDataArray {
        let mut data = std::mem::take(&mut self.all);
        data.clear();
        data.extend(
            logits
                .iter()
                .enumerate()
                .map(|(i, &l)| LlamaTokenData::new(LlamaToken(i as i32), l, 0.0)),
        );
        LlamaTokenDataArray::new(data, false)
    }

    fn restore(&mut self, array: LlamaTokenDataArray) {
        self.all = array.data;
    }

    /// Whether the grammar allows `token` next (checked on a one-candidate array).
    fn allows(&mut self, token: LlamaToken) -> bool {
        let Some(grammar) = self.grammar.as_mut() else {
            return true;
        };
        let mut data = std::mem::take(&mut self.one);
        data.clear();
        data.push(LlamaTokenData::new(token, 1.0, 0.0));
        let mut one = LlamaTokenDataArray::new(data, false);
        one.apply_sampler(grammar);
        let ok = one.data.first().is_some_and(|d| d.logit().is_finite());
        self.one = one.data;
        ok
    }

    /// Sample the next token from output `idx` of the last evaluation and accept it.
    pub(super) fn sample(&mut self, ctx: &LlamaContext<'_>, idx: i32) -> Option<LlamaToken> {
        if self.grammar.is_none() && !self.greedy {
            return Some(self.rest.sample(ctx, idx));
        }
        let logits = ctx.get_logits_ith(idx);
        // The unconstrained choice first.
        let mut token = if self.greedy {
            argmax(logits.iter().copied().enumerate()).map(|i| LlamaToken(i as i32))
        } else {
            let mut all = self.candidates(logits);
            all.apply_sampler(&mut self.rest);
            let t = all.selected_token();
            self.restore(all);
            t
        };
        if let Some(t) = token.filter(|_| self.grammar.is_some()) {
            if !self.allows(t) {
                token = self.masked(logits);
            }
        }
        let token = token?;
        if let Some(grammar) = self.grammar.as_mut() {
            grammar.accept(token);
        }
        if !self.greedy {
            self.rest.accept(token);
        }
        Some(token)
    }

    /// The choice among the tokens the grammar allows (all logits masked by the grammar).
    /// Never hands the grammar a token it rejected: llama.cpp throws from inside `accept` (an
    /// empty stack), and a C++ exception through the C API aborts the process. When the grammar
    /// allows no token at all, the answer ends here (`None`).
    fn masked(&mut self, logits: &[f32]) -> Option<LlamaToken> {
        let mut all = self.candidates(logits);
        if let Some(grammar) = self.grammar.as_mut() {
            all.apply_sampler(grammar);
        }
        let allowed = |d: &LlamaTokenData| d.logit().is_finite();
        let token = if self.greedy {
            // No allowed token: no maximum, `None`.
            argmax(
                all.data
                    .iter()
                    .enumerate()
                    .filter(|(_, d)| allowed(d))
                    .map(|(i, d)| (i, d.logit())),
            )
            .map(|i| all.data[i].id())
        } else if !all.data.iter().any(allowed) {
            None
        } else {
            all.apply_sampler(&mut self.rest);
            all.selected_token().filter(|t| {
                all.data
                    .iter()
                    .any(|d| d.id() == *t && d.logit().is_finite())
            })
        };
        self.restore(all);
        token
    }
}

/// GBNF for a JSON schema, by llama.cpp's own converter.
fn schema_to_grammar(schema: &serde_json::Value) -> Result<String, LlmError> {
    // Properties in `required` order: the grammar makes the model write keys in text order.
    let text = crate::schema_order::to_string(schema);
    llama_cpp_2::json_schema_to_grammar(&text).map_err(|e| {
        LlmError::InvalidRequest(format!(
            "the JSON schema uses something llama.cpp's grammar converter does not support ({e})"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_is_llama_cpp_greedy_choice() {
        let at = |v: &[f32]| argmax(v.iter().copied().enumerate());
        assert_eq!(at(&[0.1, 3.0, 3.0, -1.0]), Some(1), "first maximum wins");
        assert_eq!(at(&[f32::NAN, 2.0, 1.0]), Some(1), "NaN skipped");
        assert_eq!(at(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), Some(0));
        assert_eq!(at(&[]), None);
    }
    #[test]
    fn grammar_asks_for_keys_in_required_order() {
        // The prompts ask for the reason before the verdict; the grammar must not reorder them
        // alphabetically (serde_json sorts object keys).
        let schema = serde_json::json!({"type": "object", "required": ["reason", "decisive", "confidence"],
            "properties": {"reason": {"type": "string"}, "decisive": {"type": "boolean"},
                           "confidence": {"type": "number"}}});
        let g = schema_to_grammar(&schema).unwrap();
        let root = g.lines().find(|l| l.starts_with("root ")).unwrap();
        let at = |k: &str| root.find(&format!("{k}-kv")).unwrap();
        assert!(
            at("reason") < at("decisive") && at("decisive") < at("confidence"),
            "{root}"
        );
    }
}
