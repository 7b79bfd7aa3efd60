//! KV-cache slots: the context's sequences, which one a prompt goes to, how much of its
//! cached prefix is kept, and taking the context (recovering from a poisoned lock).

use super::Inner;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::token::LlamaToken;
use std::sync::MutexGuard;

/// One KV-cache sequence and the tokens it currently holds.
#[derive(Default)]
pub(super) struct Slot {
    pub(super) tokens: Vec<LlamaToken>,
    last_used: u64,
}

/// The context and its slots, behind the engine's lock.
pub(super) struct State {
    pub(super) ctx: LlamaContext<'static>,
    pub(super) slots: Vec<Slot>,
    tick: u64,
    /// Microseconds the last call to hold the context spent from its last check for
    /// cancellation to handing the context over ([`crate::QueueWait::holder_last_step_us`]).
    pub(super) last_step_us: u64,
}

impl State {
    /// A context divided into `slots` empty sequences.
    pub(super) fn new(ctx: LlamaContext<'static>, slots: usize) -> State {
        State {
            ctx,
            slots: (0..slots).map(|_| Slot::default()).collect(),
            tick: 0,
            last_step_us: 0,
        }
    }

    /// Forget everything in the KV cache (after a failure left it in an unknown state).
    fn reset(&mut self) {
        self.ctx.clear_kv_cache();
        for slot in &mut self.slots {
            slot.tokens.clear();
        }
    }

    /// Take a slot for a prompt of `tokens` (see [`pick_slot`]) and trim its cache to the
    /// prefix kept; returns the slot and how many of the prompt's tokens its cache holds (always
    /// fewer than all: the last one is evaluated to get logits for the first sampled token).
    pub(super) fn claim(&mut self, tokens: &[LlamaToken], reuse: bool) -> (usize, usize) {
        self.tick += 1;
        let tick = self.tick;
        let (seq, mut common) = pick_slot(&self.slots, tokens, reuse);
        // At least one token must be evaluated to get logits for the first sampled token.
        common = common.min(tokens.len() - 1);
        let seq_id = seq as i32;
        let slot_len = self.slots[seq].tokens.len();
        if common < slot_len {
            let trimmed = self
                .ctx
                .kv_cache_seq_rm(seq_id, Some(common as u32), None)
                .is_ok();
            if !trimmed {
                // Some caches (recurrent models) cannot drop a suffix: start the sequence over.
                tracing::debug!("cannot trim sequence {seq_id} at {common}; clearing it");
                let _ = self.ctx.kv_cache_seq_rm(seq_id, None, None);
                common = 0;
            }
        }
        self.slots[seq].tokens.truncate(common);
        self.slots[seq].last_used = tick;
        (seq, common)
    }

    /// Forget what slot `seq` holds (after a failed call left its cache in an unknown state).
    pub(super) fn forget(&mut self, seq: usize) {
        let _ = self.ctx.kv_cache_seq_rm(seq as i32, None, None);
        self.slots[seq].tokens.clear();
    }
}

impl Inner {
    /// The context, and whether another call held it when asked (so this one waited).
    pub(super) fn lock_state(&self) -> (MutexGuard<'_, State>, bool) {
        let (taken, contended) = match self.state.try_lock() {
            Ok(g) => (Ok(g), false),
            Err(std::sync::TryLockError::WouldBlock) => (self.state.lock(), true),
            Err(std::sync::TryLockError::Poisoned(p)) => (Err(p), false),
        };
        match taken {
            Ok(g) => (g, contended),
            Err(poisoned) => {
                // A panic mid-call leaves the KV cache in an unknown state: start clean.
                self.state.clear_poison();
                let mut g = poisoned.into_inner();
                g.reset();
                (g, contended)
            }
        }
    }
}

/// Choose the KV slot for a prompt and how many of its tokens can be kept.
///
/// A slot that shares a prefix covering at least half of what it holds is reused (the longest
/// such prefix wins). Otherwise the prompt goes to an empty slot, else to the least recently used
/// one, so a short accidental match (the chat template's opening tokens) does not evict another
/// trace's cached prefix while a slot is free.
fn pick_slot(slots: &[Slot], tokens: &[LlamaToken], reuse: bool) -> (usize, usize) {
    let lru = || {
        (0..slots.len())
            .min_by_key(|&i| (!slots[i].tokens.is_empty(), slots[i].last_used))
            .unwrap_or(0)
    };
    if !reuse {
        return (lru(), 0);
    }
    let commons: Vec<usize> = slots
        .iter()
        .map(|s| common_prefix(&s.tokens, tokens))
        .collect();
    let good = (0..slots.len())
        .filter(|&i| commons[i] > 0 && commons[i] * 2 >= slots[i].tokens.len())
        .max_by_key(|&i| (commons[i], std::cmp::Reverse(slots[i].last_used)));
    match good {
        Some(i) => (i, commons[i]),
        None => {
            let i = lru();
            (i, commons[i])
        }
    }
}

fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(tokens: &[i32], last_used: u64) -> Slot {
        Slot {
            tokens: tokens.iter().map(|&t| LlamaToken(t)).collect(),
            last_used,
        }
    }
    fn toks(t: &[i32]) -> Vec<LlamaToken> {
        t.iter().map(|&t| LlamaToken(t)).collect()
    }
    #[test]
    fn slot_choice_reuses_long_prefixes_and_protects_other_traces() {
        let slots = vec![slot(&[1, 2, 3, 4, 5, 6], 1), slot(&[], 0)];
        // Shares most of slot 0: reuse it.
        assert_eq!(pick_slot(&slots, &toks(&[1, 2, 3, 4, 5, 9]), true), (0, 5));
        // Shares only the template's first token: take the empty slot.
        assert_eq!(pick_slot(&slots, &toks(&[1, 7, 7, 7]), true), (1, 0));
        // No free slot: the least recently used one, keeping whatever prefix it shares.
        let full = vec![slot(&[1, 2, 3, 4], 5), slot(&[1, 8, 8, 8], 2)];
        assert_eq!(pick_slot(&full, &toks(&[1, 9, 9]), true), (1, 1));
        // Reuse off: nothing kept.
        assert_eq!(pick_slot(&full, &toks(&[1, 2, 3, 4, 5]), false), (1, 0));
        // The longest good prefix wins.
        let two = vec![slot(&[1, 2, 3], 1), slot(&[1, 2, 3, 4, 5], 2)];
        assert_eq!(pick_slot(&two, &toks(&[1, 2, 3, 4, 5, 6]), true), (1, 5));
    }
}
