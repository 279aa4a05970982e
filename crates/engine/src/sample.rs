//! Choosing the next token from a row of logits: the specification every backend follows.
//!
//! One step, in this order (the CPU reference [`sample_logits`] is the definition; the CUDA kernel
//! `sample_token` in `cuda/kernels/sample.cu` does the same with a radix select instead of a sort):
//!
//! 1. **Logits.** `w_i = logits[i]`; a NaN counts as `-inf`.
//! 2. **Penalties**, once per distinct token `t` of the history window (the last
//!    `penalty_last_n` tokens of prompt and output), `c` = its count in the window, in f32:
//!    repetition `w_t = w_t > 0 ? w_t / r : w_t * r`, then frequency `w_t -= c * f`, then presence
//!    `w_t -= p`.
//! 3. **Greedy** (`temperature <= 0`): the largest `w_i`, ties broken by the lowest id. Stop here.
//! 4. **Order.** Tokens ranked by `w` descending (the f32 total order of [`key`]), ties by id
//!    ascending.
//! 5. **Top-k** (`top_k > 0`): the first `top_k` ranks survive.
//! 6. **Mass.** With `M` the largest `w` and `T` the temperature, each token's weight is the
//!    integer `m_i = floor(exp((w_i - M) / T) * 2^32)` computed in f64 (the top token weighs
//!    exactly 2^32). Integers make every later sum exact and the same on every backend in any
//!    summation order; a token 2^-32 less likely than the top one gets weight 0 and is never drawn.
//! 7. **Top-p** (`top_p < 1`): among the top-k survivors, walk the ranks summing `m`; the token at
//!    which the sum first reaches `ceil(top_p * Z_k)` (`Z_k` = the survivors' total) sets the cut:
//!    survivors whose `w` is at least its `w` stay (ties at the cut are kept).
//! 8. **Min-p** (`min_p > 0`): survivors need `m_i >= ceil(min_p * 2^32)`, i.e. a probability at
//!    least `min_p` times the top token's.
//! 9. **Draw.** `Z` = the final survivors' total weight; `r = floor(u * Z / 2^64)` for the step's
//!    random `u64` `u`; the winner is the first survivor **in id order** whose running weight sum
//!    exceeds `r`. Walking in id order (not rank order) lets a device find the winner with one
//!    prefix sum instead of a sort.
//!
//! The random `u64` of each step comes from a [`Rng`](tally_model::rng::Rng) seeded with
//! `seed`, one draw per sampled token, on the host, so CPU and CUDA consume the same stream.
//! Temperature applies before top-p and min-p (as in Hugging Face's warpers), so those cut on the
//! distribution that is actually sampled.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// How tokens are chosen and when generation stops. Defaults: greedy, no penalties, 256 tokens,
/// stop on EOS/EOT.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// `<= 0`: greedy. Otherwise logits are divided by it before top-p, min-p and the draw.
    pub temperature: f32,
    /// Keep the `top_k` best tokens; 0 = no limit.
    pub top_k: usize,
    /// Nucleus: keep the smallest head of the ranking holding this probability; `>= 1` = off.
    pub top_p: f32,
    /// Keep tokens at least this fraction as likely as the best one; `<= 0` = off.
    pub min_p: f32,
    /// Multiplicative penalty on tokens of the window (`1` = off); > 1 discourages repeats.
    pub repetition_penalty: f32,
    /// Subtracted once from the logit of each token present in the window (`0` = off).
    pub presence_penalty: f32,
    /// Subtracted `count` times from the logit of each token of the window (`0` = off).
    pub frequency_penalty: f32,
    /// How many of the most recent tokens (prompt and output) the penalties look at.
    pub penalty_last_n: usize,
    /// Seed of the draw's random stream.
    pub seed: u64,
    /// At most this many generated tokens.
    pub max_tokens: usize,
    /// Generation stops when the text contains one of these; the stop string is not output.
    pub stop: Vec<String>,
    /// Stop at the vocabulary's end-of-generation tokens (EOS, EOT).
    pub stop_at_eos: bool,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
            max_tokens: 256,
            stop: Vec::new(),
            stop_at_eos: true,
        }
    }
}

impl SamplingParams {
    pub fn is_greedy(&self) -> bool {
        self.temperature.is_nan() || self.temperature <= 0.0
    }

    /// Whether any penalty changes the logits.
    pub fn has_penalties(&self) -> bool {
        self.penalty_last_n > 0
            && (self.repetition_penalty != 1.0
                || self.presence_penalty != 0.0
                || self.frequency_penalty != 0.0)
    }

    /// The tokens of `history` (oldest first) the penalties look at.
    pub fn window<'a>(&self, history: &'a [u32]) -> &'a [u32] {
        if !self.has_penalties() {
            return &[];
        }
        &history[history.len().saturating_sub(self.penalty_last_n)..]
    }

    /// Checks the ranges; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        let finite = |v: f32, name: &str| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(format!("{name} must be a finite number"))
            }
        };
        finite(self.temperature, "temperature")?;
        finite(self.top_p, "top_p")?;
        finite(self.min_p, "min_p")?;
        finite(self.repetition_penalty, "repetition_penalty")?;
        finite(self.presence_penalty, "presence_penalty")?;
        finite(self.frequency_penalty, "frequency_penalty")?;
        if self.temperature < 0.0 {
            return Err("temperature must be >= 0".into());
        }
        if !(0.0..=1.0).contains(&self.top_p) || self.top_p == 0.0 {
            return Err("top_p must be in (0, 1]".into());
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err("min_p must be in [0, 1]".into());
        }
        if self.repetition_penalty <= 0.0 {
            return Err("repetition_penalty must be > 0".into());
        }
        Ok(())
    }
}

/// One step's inputs, in the form a backend kernel takes them.
#[derive(Debug, Clone, Copy)]
pub struct SampleStep<'a> {
    pub params: &'a SamplingParams,
    /// The penalty window (see [`SamplingParams::window`]), oldest first.
    pub window: &'a [u32],
    /// The step's random draw.
    pub random: u64,
}

/// An order-preserving u32 of an f32: `a < b` (total order, `-0 < +0`) iff `key(a) < key(b)`.
/// NaN maps to the key of `-inf`.
pub fn key(x: f32) -> u32 {
    let x = if x.is_nan() { f32::NEG_INFINITY } else { x };
    let b = x.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// The weight of a token of logit `w` under the top logit `m` at temperature `t` (step 6).
pub fn mass(w: f32, m: f32, t: f32) -> u64 {
    let e = ((f64::from(w) - f64::from(m)) / f64::from(t)).exp();
    // exp of a non-positive number is <= 1, so this is <= 2^32; -inf gives 0.
    (e * 4_294_967_296.0).floor() as u64
}

/// `ceil(min_p * 2^32)`: the least weight min-p keeps (0 = off).
pub fn min_p_weight(min_p: f32) -> u64 {
    if min_p <= 0.0 {
        0
    } else {
        (f64::from(min_p.min(1.0)) * 4_294_967_296.0).ceil() as u64
    }
}

/// `ceil(top_p * z)`, at least 1 and at most `z`: the mass top-p must reach.
pub fn top_p_target(top_p: f32, z: u64) -> u64 {
    ((f64::from(top_p) * z as f64).ceil() as u64).clamp(1, z.max(1))
}

/// `floor(u * z / 2^64)`: the draw's position in `[0, z)`.
pub fn draw_point(u: u64, z: u64) -> u64 {
    ((u128::from(u) * u128::from(z)) >> 64) as u64
}

/// Steps 1-2: the penalised logits (a copy only where a penalty applies).
pub fn penalise(logits: &mut [f32], params: &SamplingParams, window: &[u32]) {
    for x in logits.iter_mut() {
        if x.is_nan() {
            *x = f32::NEG_INFINITY;
        }
    }
    let mut counts: HashMap<u32, u32> = HashMap::new();
    for &t in window {
        *counts.entry(t).or_default() += 1;
    }
    for (&t, &c) in &counts {
        let Some(w) = logits.get_mut(t as usize) else {
            continue;
        };
        let r = params.repetition_penalty;
        *w = if *w > 0.0 { *w / r } else { *w * r };
        *w -= c as f32 * params.frequency_penalty;
        *w -= params.presence_penalty;
    }
}

/// Greedy choice: the largest value, ties broken by the lowest index.
pub fn argmax(w: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &x) in w.iter().enumerate() {
        if key(x) > key(w[best]) {
            best = i;
        }
    }
    best as u32
}

/// The CPU reference of one sampling step (the module docs are its specification).
pub fn sample_logits(logits: &[f32], step: &SampleStep<'_>) -> u32 {
    let mut w = logits.to_vec();
    penalise(&mut w, step.params, step.window);
    let p = step.params;
    if p.is_greedy() || w.len() <= 1 {
        return argmax(&w);
    }
    let survivors = survivors(&w, p);
    let z: u64 = survivors.iter().map(|&(_, m)| m).sum();
    if z == 0 {
        return argmax(&w);
    }
    let r = draw_point(step.random, z);
    let mut acc = 0u64;
    for &(id, m) in &survivors {
        acc += m;
        if acc > r {
            return id;
        }
    }
    argmax(&w)
}

/// Steps 4-8: the surviving tokens and their weights, in id order.
pub fn survivors(w: &[f32], p: &SamplingParams) -> Vec<(u32, u64)> {
    let top = w[argmax(w) as usize];
    let mut order: Vec<u32> = (0..w.len() as u32).collect();
    order.sort_by(|&a, &b| key(w[b as usize]).cmp(&key(w[a as usize])).then(a.cmp(&b)));
    if p.top_k > 0 {
        order.truncate(p.top_k);
    }
    let weights: Vec<u64> = order
        .iter()
        .map(|&i| mass(w[i as usize], top, p.temperature))
        .collect();
    let mut keep = order.len();
    if p.top_p < 1.0 {
        let target = top_p_target(p.top_p, weights.iter().sum());
        let mut acc = 0u64;
        for (rank, &m) in weights.iter().enumerate() {
            acc += m;
            if acc >= target {
                let cut = key(w[order[rank] as usize]);
                keep = order
                    .iter()
                    .take_while(|&&i| key(w[i as usize]) >= cut)
                    .count();
                break;
            }
        }
    }
    let floor = min_p_weight(p.min_p);
    let mut out: Vec<(u32, u64)> = order[..keep]
        .iter()
        .zip(&weights)
        .filter(|&(_, &m)| m >= floor)
        .map(|(&i, &m)| (i, m))
        .collect();
    out.sort_unstable_by_key(|&(i, _)| i);
    out
}

#[cfg(test)]
#[path = "sample_tests.rs"]
mod tests;
