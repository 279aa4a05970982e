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
//! With sampling ([`generate`] with a temperature), a draft token `d` is kept with the
//! target's probability `p(d)` (after every filter and penalty of [`crate::sample`]), and on a
//! rejection the step's token is drawn from `p` without `d`, renormalised: the standard
//! speculative-sampling rule for a draft that proposes one token (its `q` is one-hot), which
//! leaves each token's distribution exactly the target's ([`accept_or_resample`]).
//!
//! Drafts come from a [`Draft`]. [`ReplayDraft`] replays a recorded greedy continuation,
//! corrupted at a chosen rate, so the pipeline can be measured at a known acceptance on
//! models whose own draft head is random (synthetic files). [`MtpDraft`] is the model's own
//! MTP block.

use std::time::Instant;

use tally_model::rng::Rng;

use crate::EngineError;
use crate::backend::Backend;
use crate::sample::{
    SampleStep, SamplingParams, argmax, draw_point, penalise, sample_logits, survivors,
};
use crate::session::Session;

mod mtp;
pub use mtp::MtpDraft;

/// Where drafts come from.
pub trait Draft<B: Backend> {
    /// Whether the draft reads the trunk's final hidden states (the session records them:
    /// [`Session::set_hidden`]).
    fn needs_hidden(&self) -> bool {
        false
    }

    /// A new sequence starts (before its prompt runs).
    fn begin(&mut self) {}

    /// Up to `k` tokens to follow `sequence` (the prompt and every token generated so far; the
    /// last one has not run through the model yet, so `sequence.len() == session.n_past() + 1`).
    fn propose(
        &mut self,
        session: &mut Session<B>,
        sequence: &[u32],
        k: usize,
    ) -> Result<Vec<u32>, EngineError>;
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

impl<B: Backend> Draft<B> for ReplayDraft {
    fn propose(
        &mut self,
        _session: &mut Session<B>,
        sequence: &[u32],
        k: usize,
    ) -> Result<Vec<u32>, EngineError> {
        // `sequence` ends with generated token number `g` (1-based): drafts follow it.
        let g = sequence.len().saturating_sub(self.prompt_len);
        Ok((g..g + k)
            .map_while(|i| self.reference.get(i).copied())
            .map(|t| {
                if f64::from(self.rng.uniform()) < self.acceptance {
                    t
                } else {
                    (t + 1 + self.rng.below(u64::from(self.vocab - 1)) as u32) % self.vocab
                }
            })
            .collect())
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
    /// Steps that went back to the state after their last kept token from the states the
    /// backend kept during the verification (instead of a recompute).
    pub rollbacks: usize,
    /// Seconds in drafting, verifying, saving, and restoring + recomputing (or rolling back).
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
        let n = self.accepted + self.recomputes + self.rollbacks;
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

/// The speculative acceptance rule for one drafted token `draft` against the target row
/// `logits` (penalised with `window`, then filtered as [`crate::sample`] specifies): keep it
/// with probability `p(draft)` (`u_keep` decides), else draw from `p` without `draft`,
/// renormalised (`u_draw`). Returns whether the draft was kept, and the token. Over the random
/// draws the token is distributed as `p` exactly. Greedy parameters keep the draft iff it is
/// the argmax.
pub fn accept_or_resample(
    logits: &[f32],
    params: &SamplingParams,
    window: &[u32],
    draft: u32,
    u_keep: u64,
    u_draw: u64,
) -> (bool, u32) {
    let mut w = logits.to_vec();
    penalise(&mut w, params, window);
    let best = argmax(&w);
    if params.is_greedy() || w.len() <= 1 {
        return (draft == best, best);
    }
    let surv = survivors(&w, params);
    let z: u64 = surv.iter().map(|&(_, m)| m).sum();
    if z == 0 {
        return (draft == best, best);
    }
    let pd = surv
        .iter()
        .find(|&&(id, _)| id == draft)
        .map_or(0, |&(_, m)| m);
    if draw_point(u_keep, z) < pd {
        return (true, draft);
    }
    // Rejected: p without the draft. Its mass is z - pd > 0 (pd == z is always kept).
    let r = draw_point(u_draw, z - pd);
    let mut acc = 0u64;
    for &(id, m) in surv.iter().filter(|&&(id, _)| id != draft) {
        acc += m;
        if acc > r {
            return (false, id);
        }
    }
    (false, best)
}

/// Greedy decoding of `n_gen` tokens after `prompt` (a fresh sequence), verifying up to `k`
/// drafts per step. The tokens are plain greedy decoding's: with `k = 0` or a draft that
/// proposes nothing, this is plain greedy decoding.
pub fn greedy<B: Backend>(
    session: &mut Session<B>,
    prompt: &[u32],
    n_gen: usize,
    k: usize,
    draft: &mut dyn Draft<B>,
) -> Result<(Vec<u32>, SpecStats), EngineError> {
    generate(session, prompt, n_gen, k, draft, &SamplingParams::default())
}

/// Decoding of `n_gen` tokens after `prompt` (a fresh sequence) with `params`' sampling (its
/// `max_tokens`, stop strings and EOS are the caller's business), verifying up to `k` drafts
/// per step. Greedy parameters give plain greedy decoding's tokens; otherwise each token is
/// distributed as plain sampling's, drawn from the random stream of `params.seed`.
pub fn generate<B: Backend>(
    session: &mut Session<B>,
    prompt: &[u32],
    n_gen: usize,
    k: usize,
    draft: &mut dyn Draft<B>,
    params: &SamplingParams,
) -> Result<(Vec<u32>, SpecStats), EngineError> {
    let mut rng = Rng::new(params.seed);
    let mut stats = SpecStats::default();
    let mut out = Vec::with_capacity(n_gen);
    if n_gen == 0 {
        return Ok((out, stats));
    }
    let hidden_was = session.opts.hidden;
    session.set_hidden(draft.needs_hidden());
    draft.begin();
    let result = run(
        session, prompt, n_gen, k, draft, params, &mut rng, &mut stats, &mut out,
    );
    session.set_hidden(hidden_was);
    result?;
    Ok((out, stats))
}

/// [`generate`]'s loop, into `out` and `stats`.
#[allow(clippy::too_many_arguments)]
fn run<B: Backend>(
    session: &mut Session<B>,
    prompt: &[u32],
    n_gen: usize,
    k: usize,
    draft: &mut dyn Draft<B>,
    params: &SamplingParams,
    rng: &mut Rng,
    stats: &mut SpecStats,
    out: &mut Vec<u32>,
) -> Result<(), EngineError> {
    let vocab = session.model.config.vocab;
    let mut seq: Vec<u32> = prompt.to_vec();
    let pick = |logits: &[f32], history: &[u32], rng: &mut Rng| {
        sample_logits(
            logits,
            &SampleStep {
                params,
                window: params.window(history),
                random: rng.next_u64(),
            },
        )
    };
    // Greedy without penalties needs only each row's argmax: the backend takes it (on a GPU the
    // ids travel instead of k + 1 rows of the vocabulary), the same tokens as `pick` and
    // `accept_or_resample` give (keep a draft iff it is the argmax; the random draws are still
    // taken, though greedy decoding uses none).
    let argmax_only = params.is_greedy() && !params.has_penalties();
    let logits = session.prefill(prompt)?;
    // Where the backend keeps the states after each verified token (the GPU), a rejection goes
    // back to the last kept one with a copy; otherwise the state is saved before each
    // verification and a rejection restores it and runs the kept tokens again.
    let token_states = k > 0 && session.enable_token_states(k + 1)?;
    let first = pick(&logits, &seq, rng);
    out.push(first);
    seq.push(first);
    let t0 = Instant::now();
    while out.len() < n_gen {
        let last = *out.last().unwrap_or(&0);
        // Never draft past what is wanted, nor past the context (the batch is 1 + drafts).
        let room = session.max_ctx().saturating_sub(session.n_past() + 1);
        let want = k.min(n_gen - out.len() - 1).min(room);
        let td = Instant::now();
        let mut drafts = if want > 0 {
            draft.propose(session, &seq, want)?
        } else {
            Vec::new()
        };
        drafts.truncate(want);
        stats.draft_s += td.elapsed().as_secs_f64();
        if drafts.is_empty() {
            let tv = Instant::now();
            let next = if argmax_only {
                rng.next_u64();
                session.decode_greedy(last)?
            } else {
                let logits = session.decode(last)?;
                pick(&logits, &seq, rng)
            };
            stats.verify_s += tv.elapsed().as_secs_f64();
            stats.steps += 1;
            out.push(next);
            seq.push(next);
            continue;
        }
        let n0 = session.n_past();
        if !token_states {
            let ts = Instant::now();
            session.save_recurrent(SPEC_SLOT)?;
            stats.save_s += ts.elapsed().as_secs_f64();
        }
        let mut batch = Vec::with_capacity(drafts.len() + 1);
        batch.push(last);
        batch.extend_from_slice(&drafts);
        let tv = Instant::now();
        let (kept, next) = if argmax_only {
            let best = session.verify_greedy(&batch)?;
            stats.verify_s += tv.elapsed().as_secs_f64();
            greedy_kept(&drafts, &best, rng)?
        } else {
            let rows = session.verify(&batch)?;
            stats.verify_s += tv.elapsed().as_secs_f64();
            // Row i scores the token after batch[i] (the history then holds drafts[..i]).
            let mut kept = 0;
            let mut next = None;
            let mut history = seq.clone();
            for (i, &d) in drafts.iter().enumerate() {
                let row = &rows[i * vocab..(i + 1) * vocab];
                let (keep, token) =
                    accept_or_resample(row, params, &history, d, rng.next_u64(), rng.next_u64());
                if !keep {
                    next = Some(token);
                    break;
                }
                kept += 1;
                history.push(d);
            }
            let next = match next {
                Some(t) => t,
                None => pick(&rows[drafts.len() * vocab..], &history, rng),
            };
            (kept, next)
        };
        stats.steps += 1;
        stats.drafted += drafts.len();
        stats.accepted += kept;
        if kept < drafts.len() && token_states {
            // The state holds rejected drafts: back to the state after the last kept one.
            let tr = Instant::now();
            if !session.rollback_to_token(n0, kept, batch.len())? {
                return Err(EngineError::Internal(
                    "the backend kept no per-token states for a verified batch".into(),
                ));
            }
            stats.recompute_s += tr.elapsed().as_secs_f64();
            stats.rollbacks += 1;
        } else if kept < drafts.len() {
            // The state holds rejected drafts: back to n0, then the kept tokens again.
            let tr = Instant::now();
            session.restore_recurrent(SPEC_SLOT, n0)?;
            // No logits wanted: the next step's batch starts from the verified token.
            session.extend_run(&batch[..kept + 1])?;
            stats.recompute_s += tr.elapsed().as_secs_f64();
            stats.recomputes += 1;
        }
        for t in drafts[..kept].iter().copied().chain([next]) {
            if out.len() < n_gen {
                out.push(t);
                seq.push(t);
            }
        }
    }
    session.backend.drop_state(SPEC_SLOT);
    stats.decode_s = t0.elapsed().as_secs_f64();
    stats.tokens = out.len();
    Ok(())
}

/// The greedy acceptance of `drafts` against `best`, the argmax after each token of the
/// verified batch (`best[i]` follows drafts[..i]): the drafts kept (each equal to the argmax
/// before it) and the token after them, with the random draws [`run`]'s general path takes
/// (two per draft examined, one for the final pick), so the stream stays where it would be.
fn greedy_kept(drafts: &[u32], best: &[u32], rng: &mut Rng) -> Result<(usize, u32), EngineError> {
    if best.len() != drafts.len() + 1 {
        return Err(EngineError::Internal(format!(
            "{} greedy tokens for a batch of {}",
            best.len(),
            drafts.len() + 1
        )));
    }
    for (i, &d) in drafts.iter().enumerate() {
        rng.next_u64();
        rng.next_u64();
        if d != best[i] {
            return Ok((i, best[i]));
        }
    }
    rng.next_u64();
    Ok((drafts.len(), best[drafts.len()]))
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
    let mut t = argmax(&session.prefill(prompt)?);
    loop {
        out.push(t);
        if out.len() == n_gen {
            return Ok(out);
        }
        t = session.decode_greedy(t)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over many draws, the rule's token is distributed as the target: for every draft token
    /// (likely, unlikely, filtered out), each token's frequency is within 4.5 sigma of p.
    #[test]
    fn acceptance_rule_keeps_the_target_distribution() {
        let logits = [1.3f32, -0.4, 2.1, 0.2, -2.5, 1.9];
        let params = SamplingParams {
            temperature: 0.9,
            top_k: 4,
            ..SamplingParams::default()
        };
        let surv = survivors(&logits, &params);
        let z: u64 = surv.iter().map(|&(_, m)| m).sum();
        let p = |t: u32| {
            surv.iter()
                .find(|&&(id, _)| id == t)
                .map_or(0.0, |&(_, m)| m as f64 / z as f64)
        };
        assert_eq!(surv.len(), 4, "top-k 4 leaves two tokens out");
        let n = 60_000;
        let mut rng = Rng::new(5);
        for draft in 0..logits.len() as u32 {
            let mut counts = [0usize; 6];
            let mut kept = 0;
            for _ in 0..n {
                let (keep, t) = accept_or_resample(
                    &logits,
                    &params,
                    &[],
                    draft,
                    rng.next_u64(),
                    rng.next_u64(),
                );
                counts[t as usize] += 1;
                if keep {
                    assert_eq!(t, draft);
                    kept += 1;
                }
            }
            let pd = p(draft);
            let sd = (pd * (1.0 - pd) / n as f64).sqrt();
            let f = kept as f64 / n as f64;
            assert!(
                (f - pd).abs() <= 4.5 * sd + 1e-12,
                "draft {draft}: kept {f} vs p {pd}"
            );
            for (t, &c) in counts.iter().enumerate() {
                let pt = p(t as u32);
                let sd = (pt * (1.0 - pt) / n as f64).sqrt();
                let f = c as f64 / n as f64;
                assert!(
                    (f - pt).abs() <= 4.5 * sd + 1e-12,
                    "draft {draft}: token {t} at {f}, target {pt}"
                );
            }
        }
    }

    #[test]
    fn greedy_rule_keeps_only_the_argmax() {
        let logits = [0.1f32, 3.0, -1.0];
        let g = SamplingParams::default();
        assert_eq!(accept_or_resample(&logits, &g, &[], 1, 0, 0), (true, 1));
        assert_eq!(
            accept_or_resample(&logits, &g, &[], 2, u64::MAX, 0),
            (false, 1)
        );
    }
}
