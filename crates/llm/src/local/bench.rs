//! `maslens model bench`: prompt and generation throughput of the embedded backend, measured on
//! the path every command takes (chat template, tokenizer, prompt batches, sampling with the
//! grammar a JSON schema becomes, detokenizing), in the terms of llama.cpp's `llama-bench`:
//! `pp N` (tokens per second reading an N-token prompt from an empty cache) and `tg N`
//! (tokens per second generating N tokens after it). `bench/llama_bench.sh` runs llama-bench,
//! built from the same vendored llama.cpp, beside this and prints the ratios.

use super::engine::{EngineTimings, LocalModel};
use super::LocalOptions;
use crate::{ChatRequest, LlmError, Message};

/// One thing to measure: a plain completion, or one constrained by a JSON schema.
#[derive(Debug, Clone)]
pub struct BenchCase {
    /// Shown in the report (`raw`, `schema:locate`).
    pub name: String,
    pub json_schema: Option<serde_json::Value>,
}

#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Prompt length in tokens (the templated prompt; at most this many).
    pub prompt_tokens: usize,
    /// Tokens to generate (the model may end its answer earlier; the report says how many it
    /// generated).
    pub gen_tokens: u32,
    /// Measured repetitions after one warm-up run.
    pub reps: usize,
}

/// Mean and sample standard deviation of one measure over the repetitions.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Throughput {
    /// Tokens per repetition (mean).
    pub tokens: f64,
    pub tokens_per_s: f64,
    pub tokens_per_s_sd: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchRow {
    pub case: String,
    /// `pp`: reading the prompt; `tg`: generating.
    pub prompt: Throughput,
    pub generation: Throughput,
    pub reps: usize,
}

/// Run every case `reps` times (after a warm-up each) on a model opened without prefix reuse,
/// so that every repetition evaluates the whole prompt.
pub fn bench(
    model: &LocalModel,
    cases: &[BenchCase],
    opts: &BenchOptions,
    mut progress: impl FnMut(&str, usize),
) -> Result<Vec<BenchRow>, LlmError> {
    if opts.reps == 0 || opts.prompt_tokens < 16 || opts.gen_tokens == 0 {
        return Err(LlmError::InvalidRequest(
            "bench needs at least 1 repetition, a prompt of at least 16 tokens and 1 generated token"
                .into(),
        ));
    }
    let messages = counting_prompt(model, opts.prompt_tokens)?;
    let mut rows = Vec::new();
    for case in cases {
        let mut request = ChatRequest::new(messages.clone()).max_tokens(opts.gen_tokens);
        if let Some(schema) = &case.json_schema {
            request = request.json_schema(schema.clone());
        }
        request.stage = "bench".into();
        let mut samples: Vec<EngineTimings> = Vec::with_capacity(opts.reps);
        for rep in 0..=opts.reps {
            progress(&case.name, rep);
            let before = model.timings();
            model.complete_blocking(&request)?;
            let used = model.timings().since(&before);
            if rep > 0 {
                samples.push(used);
            }
        }
        rows.push(BenchRow {
            case: case.name.clone(),
            prompt: throughput(samples.iter().map(|t| (t.prompt_tokens, t.prompt_ns))),
            generation: throughput(
                samples
                    .iter()
                    .map(|t| (t.generated_tokens, t.generation_ns)),
            ),
            reps: samples.len(),
        });
    }
    Ok(rows)
}

/// What `maslens model bench` prints (`--json`: this, serialized).
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    pub model: String,
    pub threads: usize,
    pub prompt_tokens: usize,
    pub gen_tokens: u32,
    pub rows: Vec<BenchRow>,
}

impl BenchReport {
    /// The report as a few lines for a terminal.
    pub fn text(&self) -> String {
        let reps = self.rows.first().map_or(0, |r| r.reps);
        let mut out = format!(
            "{}, {} threads, {reps} runs each (mean ± sd)",
            self.model, self.threads
        );
        for r in &self.rows {
            out.push_str(&format!(
                "\n  {:<14} pp{:<5} {:>8.1} ± {:>5.1} tok/s   tg{:<4} {:>7.1} ± {:>5.1} tok/s ({:.0} tokens generated)",
                r.case,
                r.prompt.tokens.round(),
                r.prompt.tokens_per_s,
                r.prompt.tokens_per_s_sd,
                self.gen_tokens,
                r.generation.tokens_per_s,
                r.generation.tokens_per_s_sd,
                r.generation.tokens,
            ));
        }
        out
    }
}

/// Open `local:SPEC` without prefix reuse (every run reads its whole prompt, as llama-bench's pp
/// does) and bench it: plainly when `raw`, and with `schema` (name, JSON schema) when given.
pub fn bench_spec(
    spec: &str,
    threads: Option<usize>,
    raw: bool,
    schema: Option<(String, serde_json::Value)>,
    opts: &BenchOptions,
    progress: impl FnMut(&str, usize),
) -> Result<BenchReport, LlmError> {
    let local = LocalOptions {
        threads,
        prefix_reuse: false,
        ..Default::default()
    };
    let model = super::open_local_model(spec, &local)?;
    let mut cases = Vec::new();
    if raw {
        cases.push(BenchCase {
            name: "raw".into(),
            json_schema: None,
        });
    }
    if let Some((name, schema)) = schema {
        cases.push(BenchCase {
            name,
            json_schema: Some(schema),
        });
    }
    let rows = bench(&model, &cases, opts, progress)?;
    Ok(BenchReport {
        model: format!("local:{spec}"),
        threads: threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        prompt_tokens: opts.prompt_tokens,
        gen_tokens: opts.gen_tokens,
        rows,
    })
}

fn throughput(samples: impl Iterator<Item = (u64, u64)>) -> Throughput {
    let pairs: Vec<(f64, f64)> = samples
        .map(|(n, ns)| {
            let rate = if ns == 0 {
                0.0
            } else {
                n as f64 / (ns as f64 / 1e9)
            };
            (n as f64, rate)
        })
        .collect();
    let k = pairs.len().max(1) as f64;
    let tokens = pairs.iter().map(|p| p.0).sum::<f64>() / k;
    let mean = pairs.iter().map(|p| p.1).sum::<f64>() / k;
    let var = if pairs.len() > 1 {
        pairs.iter().map(|p| (p.1 - mean).powi(2)).sum::<f64>() / (k - 1.0)
    } else {
        0.0
    };
    Throughput {
        tokens,
        tokens_per_s: mean,
        tokens_per_s_sd: var.sqrt(),
    }
}

/// A user message whose templated prompt has at most `n` tokens and as close to `n` as the
/// text allows: a counting sequence the model continues (so a plain completion keeps
/// generating), then the instruction.
fn counting_prompt(model: &LocalModel, n: usize) -> Result<Vec<Message>, LlmError> {
    let make = |k: usize| {
        let numbers: Vec<String> = (1..=k).map(|i| i.to_string()).collect();
        vec![Message::user(format!(
            "Continue this sequence as far as you can, then explain it in JSON if asked: {},",
            numbers.join(", ")
        ))]
    };
    let len = |k: usize| -> Result<usize, LlmError> {
        let prompt = model.format_prompt(&make(k))?;
        Ok(model.tokenize(&prompt, true).len())
    };
    if len(1)? > n {
        return Err(LlmError::InvalidRequest(format!(
            "a {n}-token prompt is shorter than the bench's instruction"
        )));
    }
    // The length grows with k: the largest k that fits.
    let (mut lo, mut hi) = (1usize, n.max(2));
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        if len(mid)? <= n {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(make(lo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_is_the_mean_rate_with_its_spread() {
        // 100 tokens in 1 s and 100 tokens in 0.5 s: 100 and 200 tok/s.
        let t = throughput([(100, 1_000_000_000), (100, 500_000_000)].into_iter());
        assert_eq!(t.tokens, 100.0);
        assert!((t.tokens_per_s - 150.0).abs() < 1e-9);
        assert!((t.tokens_per_s_sd - 70.710_678).abs() < 1e-4);
        let none = throughput([(0, 0)].into_iter());
        assert_eq!(none.tokens_per_s, 0.0);
    }
}
