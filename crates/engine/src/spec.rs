//! Speculative decoding, greedy: a draft proposes up to k tokens, the model scores the last
//! accepted token and all k drafts in one batch ([`Session::verify`], logits for every row), the
//! longest prefix of drafts that greedy decoding would have produced is kept, plus the model's
//! own next token after it. The output is plain greedy decoding's, token for token; what changes
//! is how many model steps it takes.
//!
//! A rejected draft leaves its tokens in the state: the conv and recurrent states are saved
//! before each verification ([`Session::save_recurrent`]) and, when not every draft was kept,
//! restored and the kept tokens run again ("restore and recompute"; the KV caches need no
//! restore, a later batch overwrites their rows). Keeping per-token states inside the verify
//! batch instead (no recompute) needs the recurrent kernels to write them: not done.
//!
//! Drafts come from a [`Draft`]. [`ReplayDraft`] replays a recorded greedy continuation,
//! corrupted at a chosen rate, so the pipeline can be measured at a known acceptance on
//! models whose own draft head is random (synthetic files).

use std::time::Instant;

use tally_model::rng::Rng;

use crate::EngineError;
use crate::backend::Backend;
use crate::sample::argmax;
use crate::session::Session;

/// Where drafts come from.
pub trait Draft {
    /// Up to `k` tokens to follow `sequence` (the prompt and every token generated so far; the
    /// last one has not run through the model yet).
    fn propose(&mut self, sequence: &[u32], k: usize) -> Vec<u32>;
}

/// Drafts from a recorded greedy continuation of the prompt, each drafted token replaced by a
/// different random one with probability `1 - acceptance`: a draft whose tokens are right with
/// a chosen probability, independently of the model.
pub struct ReplayDraft {
    prompt_len: usize,
    reference: Vec<u32>,
    acceptance: f64,
    vocab: u32,
    rng: Rng,
}

impl ReplayDraft {
    /// `reference`: greedy decoding's tokens after a prompt of `prompt_len` tokens.
    pub fn new(
        prompt_len: usize,
        reference: Vec<u32>,
        acceptance: f64,
        vocab: usize,
        seed: u64,
    ) -> ReplayDraft {
        ReplayDraft {
            prompt_len,
            reference,
            acceptance: acceptance.clamp(0.0, 1.0),
            vocab: vocab.max(2) as u32,
            rng: Rng::new(seed),
        }
    }
}

impl Draft for ReplayDraft {
    fn propose(&mut self, sequence: &[u32], k: usize) -> Vec<u32> {
        // `sequence` ends with generated token number `g` (1-based): drafts follow it.
        let g = sequence.len().saturating_sub(self.prompt_len);
        (g..g + k)
            .map_while(|i| self.reference.get(i).copied())
            .map(|t| {
                if f64::from(self.rng.uniform()) < self.acceptance {
                    t
                } else {
                    (t + 1 + self.rng.below(u64::from(self.vocab - 1)) as u32) % self.vocab
                }
            })
            .collect()
    }
}

/// What a speculative generation did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SpecStats {
    /// Tokens generated (the first comes from the prompt's logits).
    pub tokens: usize,
    /// Verification batches run.
    pub steps: usize,
    /// Drafts proposed and kept.
    pub drafted: usize,
    pub accepted: usize,
    /// Steps that had to restore the state and run the kept tokens again.
    pub recomputes: usize,
    /// Seconds in drafting, verifying, saving, and restoring + recomputing.
    pub draft_s: f64,
    pub verify_s: f64,
    pub save_s: f64,
    pub recompute_s: f64,
    /// Seconds from the first token to the last (the prompt not included).
    pub decode_s: f64,
}

impl SpecStats {
    /// Drafts kept over drafts proposed.
    pub fn acceptance(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }

    /// The probability that a draft is kept given that the one before it was: kept drafts
    /// over kept drafts plus rejections (a step stops at its first rejection). A
    /// [`ReplayDraft`] of acceptance `a` measures close to `a`.
    pub fn conditional_acceptance(&self) -> f64 {
        let n = self.accepted + self.recomputes;
        if n == 0 {
            0.0
        } else {
            self.accepted as f64 / n as f64
        }
    }

    /// Generated tokens after the first, per second of decoding.
    pub fn decode_tok_s(&self) -> f64 {
        if self.decode_s > 0.0 {
            self.tokens.saturating_sub(1) as f64 / self.decode_s
        } else {
            0.0
        }
    }
}

/// The backend slot the state is saved into before each verification.
const SPEC_SLOT: u64 = u64::MAX - 1;

/// Greedy decoding of `n_gen` tokens after `prompt` (a fresh sequence), verifying up to `k`
/// drafts per step. The tokens are plain greedy decoding's: with `k = 0` or a draft that
/// proposes nothing, this is plain greedy decoding.
pub fn greedy<B: Backend>(
    session: &mut Session<B>,
    prompt: &[u32],
    n_gen: usize,
    k: usize,
    draft: &mut dyn Draft,
) -> Result<(Vec<u32>, SpecStats), EngineError> {
    let vocab = session.model.config.vocab;
    let mut stats = SpecStats::default();
    let mut out = Vec::with_capacity(n_gen);
    if n_gen == 0 {
        return Ok((out, stats));
    }
    let logits = session.prefill(prompt)?;
    out.push(argmax(&logits));
    let t0 = Instant::now();
    let mut seq: Vec<u32> = prompt.to_vec();
    seq.push(out[0]);
    while out.len() < n_gen {
        let last = *out.last().unwrap_or(&0);
        // Never draft past what is wanted, nor past the context (the batch is 1 + drafts).
        let room = session.max_ctx().saturating_sub(session.n_past() + 1);
        let want = k.min(n_gen - out.len() - 1).min(room);
        let td = Instant::now();
        let mut drafts = if want > 0 {
            draft.propose(&seq, want)
        } else {
            Vec::new()
        };
        drafts.truncate(want);
        stats.draft_s += td.elapsed().as_secs_f64();
        if drafts.is_empty() {
            let tv = Instant::now();
            let next = argmax(&session.decode(last)?);
            stats.verify_s += tv.elapsed().as_secs_f64();
            stats.steps += 1;
            out.push(next);
            seq.push(next);
            continue;
        }
        let n0 = session.n_past();
        let ts = Instant::now();
        session.save_recurrent(SPEC_SLOT)?;
        stats.save_s += ts.elapsed().as_secs_f64();
        let mut batch = Vec::with_capacity(drafts.len() + 1);
        batch.push(last);
        batch.extend_from_slice(&drafts);
        let tv = Instant::now();
        let rows = session.verify(&batch)?;
        stats.verify_s += tv.elapsed().as_secs_f64();
        stats.steps += 1;
        stats.drafted += drafts.len();
        // Row i scores the token after batch[i]: draft i is kept while it is that argmax.
        let best: Vec<u32> = rows.chunks(vocab).map(argmax).collect();
        let kept = drafts.iter().zip(&best).take_while(|(d, b)| d == b).count();
        stats.accepted += kept;
        if kept < drafts.len() {
            // The state holds rejected drafts: back to n0, then the kept tokens again.
            let tr = Instant::now();
            session.restore_recurrent(SPEC_SLOT, n0)?;
            session.append(&batch[..kept + 1])?;
            stats.recompute_s += tr.elapsed().as_secs_f64();
            stats.recomputes += 1;
        }
        let new = drafts[..kept].iter().copied().chain([best[kept]]);
        for t in new {
            if out.len() < n_gen {
                out.push(t);
                seq.push(t);
            }
        }
    }
    session.backend.drop_state(SPEC_SLOT);
    stats.decode_s = t0.elapsed().as_secs_f64();
    stats.tokens = out.len();
    Ok((out, stats))
}

/// Plain greedy decoding of `n_gen` tokens after `prompt` (the reference speculative decoding
/// must reproduce).
pub fn greedy_plain<B: Backend>(
    session: &mut Session<B>,
    prompt: &[u32],
    n_gen: usize,
) -> Result<Vec<u32>, EngineError> {
    let mut out = Vec::with_capacity(n_gen);
    if n_gen == 0 {
        return Ok(out);
    }
    let mut logits = session.prefill(prompt)?;
    loop {
        let t = argmax(&logits);
        out.push(t);
        if out.len() == n_gen {
            return Ok(out);
        }
        logits = session.decode(t)?;
    }
}
