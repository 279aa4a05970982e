//! End-to-end timing, the way `llama-bench -fa 1` measures it.
//!
//! llama-bench (`tools/llama-bench/llama-bench.cpp`), per test: one warm-up run, then `reps`
//! runs, each after `llama_memory_clear`; a `pp N` run submits the prompt in `llama_decode`
//! calls of at most `n_batch` tokens (llama.cpp splits each into ubatches of `n_ubatch`) and
//! then `llama_synchronize`s; a `tg N` run decodes N single tokens, synchronising after each.
//! Tokens are random ids. Here the same, with the wall time of each run in milliseconds.

use std::time::Instant;

use tally_ledger::rng::SplitMix64;
use tally_ledger::subject::RunOutcome;

use crate::ffi::Context;
use crate::{LlamaPeer, PeerError};

/// FNV-1a over the bytes of the logits: equal digests mean bit-identical outputs.
pub fn digest(logits: &[f32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in logits {
        for b in v.to_bits().to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// One prefill from a cleared state: `llama_decode` per `n_batch` chunk, synchronise; returns
/// the wall time (ms) and the digest of the last token's logits.
pub(crate) fn run_prefill(
    ctx: &mut Context,
    tokens: &[u32],
    n_batch: u32,
    n_vocab: u32,
) -> Result<(f64, u64), PeerError> {
    if tokens.is_empty() {
        return Err(PeerError::Param("a prefill needs at least 1 token".into()));
    }
    check_ids(tokens, n_vocab)?;
    restore_context(ctx, &[], n_batch, n_vocab, 0)?;
    run_batch(ctx, tokens, 0, n_batch, n_vocab)
}

fn check_ids(tokens: &[u32], n_vocab: u32) -> Result<(), PeerError> {
    match tokens.iter().find(|&&t| t >= n_vocab) {
        Some(&bad) => Err(PeerError::Param(format!(
            "token id {bad} is outside the vocabulary of {n_vocab}"
        ))),
        None => Ok(()),
    }
}

/// Clears the state and prefills `context` (no logits), untimed, so that the next batch runs
/// at position `context.len()`: the state a decode step at that depth starts from. An empty
/// context leaves a cleared state (as llama-bench's `llama_memory_clear` before each rep).
pub(crate) fn restore_context(
    ctx: &mut Context,
    context: &[u32],
    n_batch: u32,
    n_vocab: u32,
    one_token_tail: usize,
) -> Result<(), PeerError> {
    check_ids(context, n_vocab)?;
    ctx.clear_memory();
    let chunk = n_batch.max(1) as usize;
    // The last `one_token_tail` tokens go one at a time (the same cache contents either way).
    let split = context.len().saturating_sub(one_token_tail);
    for (i, part) in context[..split].chunks(chunk).enumerate() {
        ctx.decode(part, (i * chunk) as u32, false)?;
    }
    // With logits, as the timed step has them: a decode without outputs is another graph
    // (no output rows, no head), so warm-up decodes without them left the timed step the first
    // of its shape, i.e. a cold step that pays ggml-cuda's graph warm-up again.
    for (i, t) in context[split..].iter().enumerate() {
        ctx.decode(std::slice::from_ref(t), (split + i) as u32, true)?;
    }
    ctx.synchronize();
    Ok(())
}

/// One-token decodes that end the (untimed) context restore before a timed one-token step.
/// llama.cpp's CUDA backend runs a graph directly, without its CUDA graph, until two calls in a
/// row have the same node properties (ggml-cuda's graph warm-up), so the first one-token step
/// after a prefill batch is a cold one and costs a capture; llama-bench's tg decodes steadily.
/// Decoding the context's last tokens one at a time, each with its logits as the timed step
/// has, makes the timed step a steady-state step,
/// as tally's (whose decode graph is captured once per plan) already is. On the CPU it only
/// changes how the untimed context is built, not its contents.
pub(crate) const STEP_WARMUP: usize = 3;

/// Runs `tokens` at positions `n_past..` (after [`restore_context`] of `n_past` tokens):
/// `llama_decode` per `n_batch` chunk, synchronise; returns the wall time (ms) and the digest
/// of the last token's logits.
pub(crate) fn run_batch(
    ctx: &mut Context,
    tokens: &[u32],
    n_past: usize,
    n_batch: u32,
    n_vocab: u32,
) -> Result<(f64, u64), PeerError> {
    if tokens.is_empty() {
        return Err(PeerError::Param("a batch needs at least 1 token".into()));
    }
    check_ids(tokens, n_vocab)?;
    let chunk = n_batch.max(1) as usize;
    let t0 = Instant::now();
    let n_chunks = tokens.len().div_ceil(chunk);
    for (i, part) in tokens.chunks(chunk).enumerate() {
        ctx.decode(part, (n_past + i * chunk) as u32, i + 1 == n_chunks)?;
    }
    ctx.synchronize();
    let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    let logits = ctx.last_logits(n_vocab)?;
    Ok((wall_ms, digest(&logits)))
}

/// Samples of a llama-bench style test.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchResult {
    /// `pp512`, `tg128`.
    pub test: String,
    /// Tokens per run.
    pub n_tokens: usize,
    /// Wall time of each measured run (the warm-up run excluded).
    pub samples_ms: Vec<f64>,
}

impl BenchResult {
    /// Tokens per second of each run.
    pub fn tokens_per_s(&self) -> Vec<f64> {
        self.samples_ms
            .iter()
            .map(|ms| self.n_tokens as f64 / (ms / 1e3))
            .collect()
    }
}

impl LlamaPeer {
    fn random_tokens(&self, n: usize, rng: &mut SplitMix64) -> Vec<u32> {
        let v = u64::from(self.config().n_vocab.max(1));
        (0..n).map(|_| rng.below(v) as u32).collect()
    }

    /// `pp n_prompt`: warm-up run, then `reps` prefills of fresh random prompts (plain context).
    pub fn bench_pp(
        &mut self,
        n_prompt: usize,
        reps: usize,
        seed: u64,
    ) -> Result<BenchResult, PeerError> {
        let mut rng = SplitMix64::new(seed);
        let mut samples_ms = Vec::with_capacity(reps);
        for rep in 0..=reps {
            let tokens = self.random_tokens(n_prompt, &mut rng);
            let (n_batch, n_vocab) = (self.params().n_batch, self.config().n_vocab);
            let (ms, _) = run_prefill(
                self.context_for(false, n_prompt)?,
                &tokens,
                n_batch,
                n_vocab,
            )?;
            if rep > 0 {
                samples_ms.push(ms);
            }
        }
        Ok(BenchResult {
            test: format!("pp{n_prompt}"),
            n_tokens: n_prompt,
            samples_ms,
        })
    }

    /// `tg n_gen`: a one-token warm-up, then `reps` runs of `n_gen` single-token decodes from an
    /// empty state (as llama-bench: no prompt before a tg test).
    pub fn bench_tg(
        &mut self,
        n_gen: usize,
        reps: usize,
        seed: u64,
    ) -> Result<BenchResult, PeerError> {
        let mut rng = SplitMix64::new(seed);
        let mut samples_ms = Vec::with_capacity(reps);
        let warm = self.random_tokens(1, &mut rng);
        self.decode_timed(&[], &warm)?;
        for _ in 0..reps {
            let tokens = self.random_tokens(n_gen, &mut rng);
            let (ms, _) = self.decode_timed(&[], &tokens)?;
            samples_ms.push(ms);
        }
        Ok(BenchResult {
            test: format!("tg{n_gen}"),
            n_tokens: n_gen,
            samples_ms,
        })
    }

    /// Prefills `prompt` (untimed), then decodes `gen` one token at a time (timed).
    fn decode_timed(&mut self, prompt: &[u32], steps: &[u32]) -> Result<(f64, u64), PeerError> {
        let (n_batch, n_vocab) = (self.params().n_batch, self.config().n_vocab);
        let ctx = self.context_for(false, prompt.len() + steps.len())?;
        ctx.clear_memory();
        let chunk = n_batch.max(1) as usize;
        for (i, part) in prompt.chunks(chunk).enumerate() {
            ctx.decode(part, (i * chunk) as u32, false)?;
        }
        ctx.synchronize();
        let t0 = Instant::now();
        for (i, &t) in steps.iter().enumerate() {
            ctx.decode(&[t], (prompt.len() + i) as u32, true)?;
            ctx.synchronize();
        }
        let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
        let d = if steps.is_empty() {
            0
        } else {
            digest(&ctx.last_logits(n_vocab)?)
        };
        Ok((wall_ms, d))
    }

    /// [`tally_ledger::subject::Subject::decode`]: `n_gen` pseudo-random tokens after `prompt`.
    pub fn decode_steps(&mut self, prompt: &[u32], n_gen: usize) -> Result<RunOutcome, PeerError> {
        if n_gen == 0 {
            return Err(PeerError::Param("decode needs n_gen >= 1".into()));
        }
        let n_vocab = self.config().n_vocab;
        if let Some(&bad) = prompt.iter().find(|&&t| t >= n_vocab) {
            return Err(PeerError::Param(format!(
                "token id {bad} is outside the vocabulary of {n_vocab}"
            )));
        }
        let mut rng = SplitMix64::new(0x6465_636f_6465 ^ prompt.len() as u64);
        let steps = self.random_tokens(n_gen, &mut rng);
        let (wall_ms, output_digest) = self.decode_timed(prompt, &steps)?;
        Ok(RunOutcome {
            wall_ms,
            output_digest,
            dispatches: 0,
            in_node_ms: None,
        })
    }

    pub(crate) fn context_for(
        &mut self,
        probed: bool,
        n_tokens: usize,
    ) -> Result<&mut Context, PeerError> {
        self.context(probed, n_tokens)
    }
}

/// Other processes on the GPU, from `nvidia-smi` (None when it is missing or shows none).
pub(crate) fn gpu_busy_reason() -> Option<String> {
    tally_ledger::machine::gpu_busy()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_sees_every_bit() {
        let a = [1.0f32, -2.5, 3.25];
        let mut b = a;
        b[1] = f32::from_bits(b[1].to_bits() ^ 1);
        assert_ne!(digest(&a), digest(&b));
        assert_eq!(digest(&a), digest(&[1.0, -2.5, 3.25]));
    }
}
