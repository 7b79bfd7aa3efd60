//! The generate loop: one request from prompt to answer, on the context's KV cache
//! (prefix reuse, batched prompt evaluation, streaming, stop strings, cancellation).

use super::sampler::Sampler;
use super::slots::State;
use super::Inner;
use crate::{ChatRequest, ChatResponse, LlmError, QueueWait, Usage};
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Inner {
    /// Run one request to completion (blocking).
    pub(super) fn generate(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.generate_with(request, &mut |_| {}, &|| false)
    }

    /// Run one request to completion (blocking), handing out the answer text piece by piece.
    /// `cancelled` is asked before every prompt batch and every generated token; once it says
    /// yes, the call ends with [`LlmError::Cancelled`] and frees the context for the next one.
    pub(super) fn generate_with(
        &self,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let tokens = self.request_tokens(request)?;
        let mut sampler = self.sampler(request)?;

        let waiting = Instant::now();
        let (mut guard, contended) = self.lock_state();
        let queue = QueueWait {
            waited_us: waiting.elapsed().as_micros() as u64,
            holder_last_step_us: contended.then_some(guard.last_step_us),
        };
        let state = &mut *guard;
        let (seq, common) = state.claim(&tokens, self.prefix_reuse);

        // When `cancelled` last said no: what is left of the call after it is one step.
        let last_check = std::cell::Cell::new(Instant::now());
        let checked = || {
            let gone = cancelled();
            if !gone {
                last_check.set(Instant::now());
            }
            gone
        };
        let result = self.run(
            state,
            seq,
            &tokens,
            common,
            &mut sampler,
            request,
            on_text,
            &checked,
        );
        if result
            .as_ref()
            .is_err_and(|e| !matches!(e, LlmError::Cancelled(_)))
        {
            // The cache may hold part of a batch: forget this sequence. (A cancelled call stops
            // between decodes, so the slot's tokens are exactly what the cache holds: kept.)
            state.forget(seq);
        }
        state.last_step_us = last_check.get().elapsed().as_micros() as u64;
        drop(guard);
        let (text, finish_reason, completion_tokens) = result?;

        let usage = Usage {
            prompt_tokens: tokens.len() as u64,
            completion_tokens,
            cached_tokens: common as u64,
        };
        self.count(&usage);
        let latency_ms = started.elapsed().as_millis() as u64;
        tracing::debug!(
            model = %self.id,
            prompt = usage.prompt_tokens,
            cached = usage.cached_tokens,
            completion = usage.completion_tokens,
            latency_ms,
            "local completion"
        );
        Ok(ChatResponse {
            text,
            finish_reason,
            usage,
            latency_ms,
            from_cache: false,
            queue,
        })
    }

    /// The request's prompt as tokens: templated, tokenized, and checked to leave room for the
    /// answer in one slot's context.
    fn request_tokens(&self, request: &ChatRequest) -> Result<Vec<LlamaToken>, LlmError> {
        let prompt = self.format_prompt(&request.messages)?;
        let tokens = self
            .tokenize_prompt(&prompt, self.n_ctx as usize)
            .map_err(|counted| {
                LlmError::Local(format!(
                    "prompt of more than {counted} tokens ({} messages) does not fit the context of {} tokens of {} \
                     (leave room for the answer: shorten the input or raise the context size)",
                    request.messages.len(),
                    self.n_ctx,
                    self.id
                ))
            })?;
        if tokens.is_empty() {
            return Err(LlmError::Local(
                "the prompt is empty after tokenization".into(),
            ));
        }
        if tokens.len() >= self.n_ctx as usize {
            return Err(LlmError::Local(format!(
                "prompt of {} tokens does not fit the context of {} tokens of {} (leave room for the answer: \
                 shorten the input or raise the context size)",
                tokens.len(),
                self.n_ctx,
                self.id
            )));
        }
        Ok(tokens)
    }

    /// Add a finished call to the counters.
    fn count(&self, usage: &Usage) {
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.prompt_tokens
            .fetch_add(usage.prompt_tokens, Ordering::Relaxed);
        c.cached_tokens
            .fetch_add(usage.cached_tokens, Ordering::Relaxed);
        c.completion_tokens
            .fetch_add(usage.completion_tokens, Ordering::Relaxed);
    }

    /// Evaluate the uncached part of the prompt, then sample until a stop condition.
    #[allow(clippy::too_many_arguments)] // private: the pieces of one call, all needed
    fn run(
        &self,
        state: &mut State,
        seq: usize,
        tokens: &[LlamaToken],
        common: usize,
        sampler: &mut Sampler,
        request: &ChatRequest,
        on_text: &mut dyn FnMut(&str),
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(String, String, u64), LlmError> {
        let seq_id = seq as i32;
        let (mut batch, mut pos, mut last_idx) =
            self.evaluate_prompt(state, seq, &tokens[common..], common, cancelled)?;
        let generation_started = Instant::now();

        let vocab = self.model.vocab();
        let mut bytes: Vec<u8> = Vec::new();
        let mut generated = 0u64;
        let mut finish = "length";
        let mut text_end: Option<usize> = None;
        // Streaming: bytes handed out so far; text that may still turn into a stop string is held back.
        let mut emitted = 0usize;
        let hold = request
            .stop
            .iter()
            .map(|s| s.len())
            .max()
            .unwrap_or(0)
            .saturating_sub(1);
        while generated < u64::from(request.max_tokens) {
            if pos >= self.n_ctx as usize {
                break; // context full: "length"
            }
            if cancelled() {
                return Err(gone());
            }
            let Some(token) = sampler.sample(&state.ctx, last_idx) else {
                finish = "stop";
                break;
            };
            if vocab.is_eog(token) {
                finish = "stop";
                break;
            }
            generated += 1;
            let before = bytes.len();
            bytes.extend_from_slice(&vocab.token_to_piece(token, false, None));
            // Only a stop string that ends in the new piece can be new: search the tail.
            if let Some(cut) = find_stop(&bytes, before, &request.stop) {
                text_end = Some(cut);
                finish = "stop";
                break;
            }
            emitted += stream_new(&bytes, emitted, hold, on_text);
            batch.clear();
            batch
                .add(token, pos as i32, &[seq_id], true)
                .map_err(|e| LlmError::Local(format!("batch: {e}")))?;
            state.ctx.decode(&mut batch).map_err(|e| {
                LlmError::Local(format!(
                    "llama.cpp failed to evaluate generated token at {pos}: {e}"
                ))
            })?;
            state.slots[seq].tokens.push(token);
            pos += 1;
            last_idx = 0;
        }
        self.counters
            .generation_ns
            .fetch_add(nanos(generation_started), Ordering::Relaxed);
        if let Some(cut) = text_end {
            bytes.truncate(cut);
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(rest) = text.get(emitted..).filter(|r| !r.is_empty()) {
            on_text(rest);
        }
        Ok((text, finish.to_string(), generated))
    }

    /// Evaluate `todo`, the prompt tokens after the `common` ones the slot's cache holds, in
    /// batches; the last token's logits are kept. Returns the batch (reused for generation),
    /// the next position and the index of the logits to sample from.
    fn evaluate_prompt(
        &self,
        state: &mut State,
        seq: usize,
        todo: &[LlamaToken],
        common: usize,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(LlamaBatch<'static>, usize, i32), LlmError> {
        let seq_id = seq as i32;
        let prompt_started = Instant::now();
        let mut batch = LlamaBatch::new(self.batch_size as usize, 1);
        let mut pos = common;
        let mut last_idx = 0;
        for (n, chunk) in todo.chunks(self.batch_size as usize).enumerate() {
            if cancelled() {
                return Err(gone());
            }
            batch.clear();
            let last_chunk = (n + 1) * self.batch_size as usize >= todo.len();
            for (j, &t) in chunk.iter().enumerate() {
                let want_logits = last_chunk && j + 1 == chunk.len();
                batch
                    .add(t, (pos + j) as i32, &[seq_id], want_logits)
                    .map_err(|e| LlmError::Local(format!("batch: {e}")))?;
            }
            state.ctx.decode(&mut batch).map_err(|e| {
                LlmError::Local(format!(
                    "llama.cpp failed to evaluate the prompt at token {pos}: {e}"
                ))
            })?;
            pos += chunk.len();
            state.slots[seq].tokens.extend_from_slice(chunk);
            last_idx = batch.n_tokens() - 1;
        }
        let c = &self.counters;
        c.evaluated_tokens
            .fetch_add(todo.len() as u64, Ordering::Relaxed);
        c.prompt_ns
            .fetch_add(nanos(prompt_started), Ordering::Relaxed);
        Ok((batch, pos, last_idx))
    }
}

/// The error of a call whose caller stopped waiting.
fn gone() -> LlmError {
    LlmError::Cancelled("the caller stopped waiting for the answer".into())
}

/// Hand out the new valid text of `bytes` after the `emitted` ones (always on a char boundary:
/// only what follows is validated), holding back the last `hold` bytes; returns how many bytes
/// were handed out.
fn stream_new(bytes: &[u8], emitted: usize, hold: usize, on_text: &mut dyn FnMut(&str)) -> usize {
    let tail = &bytes[emitted..];
    let valid_len = match std::str::from_utf8(tail) {
        Ok(_) => tail.len(),
        Err(e) => e.valid_up_to(),
    };
    let valid = std::str::from_utf8(&tail[..valid_len]).unwrap_or("");
    let end = stream_boundary(valid, 0, hold);
    match valid.get(..end).filter(|p| !p.is_empty()) {
        Some(piece) => {
            on_text(piece);
            end
        }
        None => 0,
    }
}

fn nanos(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Where the first stop string ends the text, given that only `bytes[new_from..]` is new: an
/// occurrence that was not there before must end in the new bytes, so only the last
/// `len - 1` old bytes plus the new ones are searched (no rescan of the whole answer per token).
/// Returns the byte offset where the earliest such stop string starts.
fn find_stop(bytes: &[u8], new_from: usize, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .map(String::as_bytes)
        .filter(|s| !s.is_empty() && s.len() <= bytes.len())
        .filter_map(|s| {
            let from = new_from.saturating_sub(s.len() - 1);
            bytes[from..]
                .windows(s.len())
                .position(|w| w == s)
                .map(|p| from + p)
        })
        .min()
}

/// How far streamed text may go: all of the valid text but the last `hold` bytes (a stop string
/// could still start there), on a char boundary, never backwards.
fn stream_boundary(valid: &str, emitted: usize, hold: usize) -> usize {
    let mut end = valid.len().saturating_sub(hold);
    while end > emitted && !valid.is_char_boundary(end) {
        end -= 1;
    }
    end.max(emitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_are_found_in_the_tail_only_once_new() {
        let stops = vec!["\n\n".to_string(), "END".to_string()];
        // "EN" then "D": the stop string straddles the old and the new bytes.
        assert_eq!(find_stop(b"abc EN", 4, &stops), None);
        assert_eq!(find_stop(b"abc END", 6, &stops), Some(4));
        // The earliest of several stop strings in the new part.
        assert_eq!(find_stop(b"x\n\nEND", 1, &stops), Some(1));
        // Longer than the text so far, or empty: ignored.
        assert_eq!(find_stop(b"E", 0, &stops), None);
        assert_eq!(find_stop(b"abc", 0, &[String::new()]), None);
        // Same answer as a search of the whole text, for every split point.
        let text = b"one two END three\n\n";
        for cut in 0..text.len() {
            let whole = stops
                .iter()
                .filter_map(|s| {
                    text[..=cut]
                        .windows(s.len())
                        .position(|w| w == s.as_bytes())
                })
                .min();
            let mut first = None;
            for end in 0..=cut {
                if let Some(c) = find_stop(&text[..=end], end, &stops) {
                    first = Some(c);
                    break;
                }
            }
            assert_eq!(first, whole, "prefix of {} bytes", cut + 1);
        }
    }
    #[test]
    fn streamed_text_holds_back_possible_stop_strings_and_split_chars() {
        assert_eq!(stream_boundary("hello world", 0, 0), 11);
        assert_eq!(stream_boundary("hello world", 0, 3), 8);
        assert_eq!(stream_boundary("hello", 4, 3), 4, "never backwards");
        // "é" is 2 bytes: a boundary inside it moves back to its start.
        assert_eq!(stream_boundary("abé", 0, 1), 2);
    }
}
