//! Quantisation mixes: which ggml type each tensor gets, following llama.cpp's recipe per file
//! type (`src/llama-quant.cpp`: `tensor_allows_quantization`, `tensor_get_category`,
//! `llama_tensor_get_type_impl`, `tensor_type_fallback`) for this architecture. Checked against
//! llama.cpp's own quantiser (`llama_model_quantize`) on converter-made and synth files, every
//! mix, every tensor: crates/peer-llama/tests/quantize.rs.
//!
//! What the recipe reads from the model ([`RecipeFacts`]): n_layer (llama.cpp counts MTP blocks
//! in it), n_gqa = n_head / n_head_kv (8 for the real model), and whether there are exactly 8
//! experts (256 for the real model; the tiny preset has 8). Not Falcon, not a 70B, an untied
//! output head: facts of this architecture.
//! Rules implemented, per category (layer i of n; `more_bits(i, n)` is llama.cpp's
//! `use_more_bits`: i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2):
//! - not quantised (F32): vectors, `ffn_gate_inp` (routers), `ssm_conv1d`; and the mix's
//!   float type for bf16.
//! - `output`: Q8_0 for q8_0 and mxfp4_moe, otherwise Q6_K.
//! - mxfp4_moe: every 3-D expert tensor MXFP4, every other matrix (token_embd included) Q8_0.
//! - `token_embd`: the mix's default type.
//! - attn_v-like (`attn_qkv` on linear layers, `attn_v` on full ones; llama.cpp counts both
//!   with one counter, which is the layer index here since every block has exactly one, the
//!   MTP blocks included): Q8_0 with 8 experts; else q2_k Q4_K (Q3_K below n_gqa 4); q3_k_m
//!   Q5_K for counter < 2, else Q4_K; iq4_nl/iq4_xs Q5_K (n_gqa >= 4); q4_k_m/q5_k_m Q6_K
//!   where more_bits.
//! - `attn_k`: Q8_0 with 8 experts.
//! - ffn_down (`ffn_down_exps`, `ffn_down_shexp`; layer from the name): q2_k Q3_K; q3_k_m Q5_K
//!   for i < n/16, else Q4_K; q4_k_m/q5_k_m Q6_K where more_bits; iq4_nl/iq4_xs Q5_K for i < n/8.
//! - `attn_output`: with 8 experts, Q5_K for q2_k, q3_k_m, iq4_nl, q4_k_m and iq4_xs; else
//!   q2_k Q3_K, q3_k_m Q4_K.
//! - everything else (attn_q, attn_gate, ssm_alpha/beta/out, ffn gate/up, shared expert
//!   gate/up, the MTP block's eh_proj): the default type.
//! - a row length that is not a whole number of blocks falls back as llama.cpp does
//!   (IQ4_XS -> IQ4_NL, Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), and to
//!   F16 if even that does not fit (llama.cpp's choice; F32 here for rows that are not even
//!   whole f16s is impossible, so F16 it is).
//!
//! Simplified: llama.cpp's imatrix-dependent rules are taken in their no-imatrix form (q4_0
//! keeps Q4_0 on the first ffn_down layers; iq4_* take the Q5_K ffn_down bump), and user
//! overrides (`--tensor-type`, `--output-tensor-type`, `--pure`) do not exist.

use tally_gguf::GgmlType;

/// Which tensor types the file uses: llama.cpp file types (`llama-quantize` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantMix {
    /// The stock Q4_K_M mix (MODEL.md).
    Q4KM,
    Q5KM,
    Q6K,
    /// Every matrix Q8_0.
    Q8_0,
    IQ4XS,
    IQ4NL,
    /// MXFP4 experts, Q8_0 elsewhere.
    Mxfp4Moe,
    Q4_0,
    Q3KM,
    Q2K,
    /// Every matrix BF16.
    Bf16,
}

/// (mix, name, llama.cpp ftype number, default type)
const MIXES: [(QuantMix, &str, u32, GgmlType); 11] = [
    (QuantMix::Q4KM, "q4_k_m", 15, GgmlType::Q4_K),
    (QuantMix::Q5KM, "q5_k_m", 17, GgmlType::Q5_K),
    (QuantMix::Q6K, "q6_k", 18, GgmlType::Q6_K),
    (QuantMix::Q8_0, "q8_0", 7, GgmlType::Q8_0),
    (QuantMix::IQ4XS, "iq4_xs", 30, GgmlType::IQ4_XS),
    (QuantMix::IQ4NL, "iq4_nl", 25, GgmlType::IQ4_NL),
    (QuantMix::Mxfp4Moe, "mxfp4_moe", 38, GgmlType::MXFP4),
    (QuantMix::Q4_0, "q4_0", 2, GgmlType::Q4_0),
    (QuantMix::Q3KM, "q3_k_m", 12, GgmlType::Q3_K),
    (QuantMix::Q2K, "q2_k", 10, GgmlType::Q2_K),
    (QuantMix::Bf16, "bf16", 32, GgmlType::BF16),
];

impl QuantMix {
    pub const NAMES: [&'static str; 11] = {
        let mut n = [""; 11];
        let mut i = 0;
        while i < MIXES.len() {
            n[i] = MIXES[i].1;
            i += 1;
        }
        n
    };

    pub fn parse(s: &str) -> Option<QuantMix> {
        MIXES.iter().find(|m| m.1 == s).map(|m| m.0)
    }

    fn row(self) -> &'static (QuantMix, &'static str, u32, GgmlType) {
        // MIXES is in declaration order.
        &MIXES[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.row().1
    }

    /// `general.file_type` (llama.cpp's ftype numbering).
    pub fn file_type(self) -> u32 {
        self.row().2
    }

    /// The type of every matrix no rule singles out.
    pub fn default_type(self) -> GgmlType {
        self.row().3
    }

    /// The type this mix gives tensor `name` of ggml shape `dims` in a model with `facts`: F32
    /// for what llama.cpp leaves unquantised (from an F32 source), otherwise the recipe's type
    /// after the block-size fallback. What `llama-quantize` writes without an importance matrix
    /// (checked against llama.cpp's own quantiser in crates/peer-llama/tests/quantize.rs), and
    /// what `tally synth` writes.
    pub fn tensor_type(self, name: &str, dims: &[u64], facts: RecipeFacts) -> GgmlType {
        if !is_quantised(name, dims) {
            return GgmlType::F32;
        }
        fit_type(wanted_type(self, name, dims, facts), dims[0])
    }
}

/// What llama.cpp's recipe reads from the model besides a tensor's name and shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecipeFacts {
    /// llama.cpp's `n_layer`: every block, MTP blocks included (its ffn_down rules divide by it,
    /// and its attn_v-like counter runs over one such tensor a block).
    pub n_layers: usize,
    /// `n_head / n_head_kv` (llama.cpp's `n_gqa()`; 0 without key/value heads).
    pub n_gqa: usize,
    /// Routed experts (`expert_count`): llama.cpp has rules for exactly 8.
    pub n_expert: usize,
}

impl RecipeFacts {
    /// The facts of a model configuration.
    pub fn of(cfg: &crate::Config) -> RecipeFacts {
        RecipeFacts {
            n_layers: cfg.block_count(),
            n_gqa: cfg.n_head.checked_div(cfg.n_head_kv).unwrap_or(0),
            n_expert: cfg.n_experts,
        }
    }
}

/// llama.cpp's `tensor_get_category`, for this architecture's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    Output,
    TokenEmbd,
    /// `attn_qkv` and `attn_v` (llama.cpp's `category_is_attn_v`).
    AttnV,
    /// `attn_k` (full-attention layers).
    AttnK,
    AttnOutput,
    FfnDown,
    Other,
}

fn category(name: &str) -> Category {
    if name == "output.weight" {
        Category::Output
    } else if name == "token_embd.weight" {
        Category::TokenEmbd
    } else if name.contains("attn_qkv.weight") || name.contains("attn_v.weight") {
        Category::AttnV
    } else if name.contains("attn_k.weight") {
        Category::AttnK
    } else if name.contains("attn_output.weight") {
        Category::AttnOutput
    } else if name.contains("ffn_up") || name.contains("ffn_gate") {
        // llama.cpp's FFN_UP / FFN_GATE: no rule for these mixes.
        Category::Other
    } else if name.contains("ffn_down") {
        Category::FfnDown
    } else {
        Category::Other
    }
}

/// llama.cpp's `use_more_bits`.
fn more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i as i64 - (n / 8) as i64).rem_euclid(3) == 2
}

/// Whether llama.cpp quantises a tensor at all (`tensor_allows_quantization`): matrices only,
/// never routers or the delta-net conv kernel.
pub(crate) fn is_quantised(name: &str, dims: &[u64]) -> bool {
    dims.iter().filter(|&&d| d > 1).count() >= 2
        && !name.contains("ffn_gate_inp.weight")
        && !name.contains("ssm_conv1d")
        && !name.contains("_norm.weight")
}

/// The type the mix wants for a quantised tensor, before the block-size fallback.
pub(crate) fn wanted_type(mix: QuantMix, name: &str, dims: &[u64], facts: RecipeFacts) -> GgmlType {
    use GgmlType as T;
    use QuantMix as M;
    let cat = category(name);
    let layer = name
        .strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|s| s.parse::<usize>().ok());
    let dflt = mix.default_type();
    match mix {
        M::Bf16 => return T::BF16,
        M::Q8_0 => return T::Q8_0,
        _ => {}
    }
    if cat == Category::Output {
        return if mix == M::Mxfp4Moe || dims[0] % dflt.block_elems() as u64 != 0 {
            T::Q8_0
        } else {
            T::Q6_K
        };
    }
    if mix == M::Mxfp4Moe {
        return if dims.get(2).is_some_and(|&e| e > 1) {
            T::MXFP4
        } else {
            T::Q8_0
        };
    }
    let (i, n) = (layer.unwrap_or(0), facts.n_layers);
    let (gqa4, moe8) = (facts.n_gqa >= 4, facts.n_expert == 8);
    match cat {
        Category::AttnV if moe8 => T::Q8_0,
        Category::AttnV => match mix {
            M::Q2K if gqa4 => T::Q4_K,
            M::Q2K => T::Q3_K,
            M::Q3KM if i < 2 => T::Q5_K,
            M::Q3KM => T::Q4_K,
            M::IQ4NL | M::IQ4XS if gqa4 => T::Q5_K,
            M::Q4KM | M::Q5KM if more_bits(i, n) => T::Q6_K,
            _ => dflt,
        },
        Category::AttnK if moe8 => T::Q8_0,
        Category::FfnDown => match mix {
            M::Q2K => T::Q3_K,
            M::Q3KM if i < n / 16 => T::Q5_K,
            M::Q3KM => T::Q4_K,
            M::Q4KM | M::Q5KM if more_bits(i, n) => T::Q6_K,
            M::IQ4NL | M::IQ4XS if i < n / 8 => T::Q5_K,
            _ => dflt,
        },
        Category::AttnOutput if moe8 => match mix {
            M::Q2K | M::Q3KM | M::IQ4NL | M::Q4KM | M::IQ4XS => T::Q5_K,
            _ => dflt,
        },
        Category::AttnOutput => match mix {
            M::Q2K => T::Q3_K,
            M::Q3KM => T::Q4_K,
            _ => dflt,
        },
        Category::AttnK | Category::TokenEmbd | Category::Other | Category::Output => dflt,
    }
}

/// llama.cpp's `tensor_type_fallback`: the type a tensor with rows of `row_len` is written
/// with when `want`'s blocks do not divide its rows.
pub(crate) fn fit_type(want: GgmlType, row_len: u64) -> GgmlType {
    use GgmlType as T;
    let fits = |t: GgmlType| row_len % t.block_elems() as u64 == 0;
    if fits(want) {
        return want;
    }
    let next = match want {
        T::IQ4_XS => T::IQ4_NL,
        T::Q2_K | T::Q3_K => T::Q4_0,
        T::Q4_K => T::Q5_0,
        T::Q5_K => T::Q5_1,
        T::Q6_K => T::Q8_0,
        _ => T::F16,
    };
    if fits(next) { next } else { T::F16 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{Preset, tensor_plans};

    /// The type of every tensor class on sample layers of the 35B preset (40 layers: n/16 = 2,
    /// n/8 = 5, 7n/8 = 35; more_bits holds for 0..5, 7, 10, .., 34 and 35..40), as
    /// llama-quantize picks it for each file type.
    #[test]
    fn mixes_for_the_35b_preset_follow_llama_quant() {
        use GgmlType as T;
        let cfg = Preset::Full35bA3b.config();
        // (tensor, [q4_k_m, q5_k_m, q6_k, q8_0, iq4_xs, iq4_nl, mxfp4_moe, q4_0, q3_k_m, q2_k, bf16])
        let q4k = T::Q4_K;
        let table: &[(&str, [T; 11])] = &[
            (
                "output.weight",
                [
                    T::Q6_K,
                    T::Q6_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::Q6_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::Q6_K,
                    T::Q6_K,
                    T::Q6_K,
                    T::BF16,
                ],
            ),
            (
                "token_embd.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::Q8_0,
                    T::Q4_0,
                    T::Q3_K,
                    T::Q2_K,
                    T::BF16,
                ],
            ),
            // attn_v-like: counter 0, 1 (q3_k_m's "< 2"), more_bits yes (7) / no (6, 23).
            (
                "blk.0.attn_qkv.weight",
                [
                    T::Q6_K,
                    T::Q6_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::Q5_K,
                    T::Q5_K,
                    T::Q8_0,
                    T::Q4_0,
                    T::Q5_K,
                    q4k,
                    T::BF16,
                ],
            ),
            (
                "blk.1.attn_qkv.weight",
                [
                    T::Q6_K,
                    T::Q6_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::Q5_K,
                    T::Q5_K,
                    T::Q8_0,
                    T::Q4_0,
                    T::Q5_K,
                    q4k,
                    T::BF16,
                ],
            ),
            (
                "blk.6.attn_qkv.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::Q5_K,
                    T::Q5_K,
                    T::Q8_0,
                    T::Q4_0,
                    q4k,
                    q4k,
                    T::BF16,
                ],
            ),
            (
                "blk.7.attn_v.weight",
                [
                    T::Q6_K,
                    T::Q6_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::Q5_K,
                    T::Q5_K,
                    T::Q8_0,
                    T::Q4_0,
                    q4k,
                    q4k,
                    T::BF16,
                ],
            ),
            (
                "blk.23.attn_v.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::Q5_K,
                    T::Q5_K,
                    T::Q8_0,
                    T::Q4_0,
                    q4k,
                    q4k,
                    T::BF16,
                ],
            ),
            // ffn_down: layer 1 (< n/16), 4 (< n/8), 20 (no more_bits), 22 (more_bits), 39 (>= 7n/8).
            (
                "blk.1.ffn_down_exps.weight",
                [
                    T::Q6_K,
                    T::Q6_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::Q5_K,
                    T::Q5_K,
                    T::MXFP4,
                    T::Q4_0,
                    T::Q5_K,
                    T::Q3_K,
                    T::BF16,
                ],
            ),
            (
                "blk.4.ffn_down_shexp.weight",
                [
                    T::Q6_K,
                    T::Q6_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::Q5_K,
                    T::Q5_K,
                    T::Q8_0,
                    T::Q4_0,
                    q4k,
                    T::Q3_K,
                    T::BF16,
                ],
            ),
            (
                "blk.20.ffn_down_exps.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::MXFP4,
                    T::Q4_0,
                    q4k,
                    T::Q3_K,
                    T::BF16,
                ],
            ),
            (
                "blk.22.ffn_down_exps.weight",
                [
                    T::Q6_K,
                    T::Q6_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::MXFP4,
                    T::Q4_0,
                    q4k,
                    T::Q3_K,
                    T::BF16,
                ],
            ),
            (
                "blk.39.ffn_down_shexp.weight",
                [
                    T::Q6_K,
                    T::Q6_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::Q8_0,
                    T::Q4_0,
                    q4k,
                    T::Q3_K,
                    T::BF16,
                ],
            ),
            (
                "blk.3.attn_output.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::Q8_0,
                    T::Q4_0,
                    q4k,
                    T::Q3_K,
                    T::BF16,
                ],
            ),
            (
                "blk.3.attn_q.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::Q8_0,
                    T::Q4_0,
                    T::Q3_K,
                    T::Q2_K,
                    T::BF16,
                ],
            ),
            (
                "blk.3.attn_k.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::Q8_0,
                    T::Q4_0,
                    T::Q3_K,
                    T::Q2_K,
                    T::BF16,
                ],
            ),
            (
                "blk.0.attn_gate.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::Q8_0,
                    T::Q4_0,
                    T::Q3_K,
                    T::Q2_K,
                    T::BF16,
                ],
            ),
            (
                "blk.0.ssm_alpha.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::Q8_0,
                    T::Q4_0,
                    T::Q3_K,
                    T::Q2_K,
                    T::BF16,
                ],
            ),
            (
                "blk.0.ssm_out.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::Q8_0,
                    T::Q4_0,
                    T::Q3_K,
                    T::Q2_K,
                    T::BF16,
                ],
            ),
            (
                "blk.5.ffn_gate_exps.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::MXFP4,
                    T::Q4_0,
                    T::Q3_K,
                    T::Q2_K,
                    T::BF16,
                ],
            ),
            (
                "blk.5.ffn_up_exps.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::MXFP4,
                    T::Q4_0,
                    T::Q3_K,
                    T::Q2_K,
                    T::BF16,
                ],
            ),
            (
                "blk.5.ffn_up_shexp.weight",
                [
                    q4k,
                    T::Q5_K,
                    T::Q6_K,
                    T::Q8_0,
                    T::IQ4_XS,
                    T::IQ4_NL,
                    T::Q8_0,
                    T::Q4_0,
                    T::Q3_K,
                    T::Q2_K,
                    T::BF16,
                ],
            ),
            ("blk.5.ffn_gate_inp.weight", [T::F32; 11]),
            ("blk.5.ffn_gate_inp_shexp.weight", [T::F32; 11]),
            ("blk.0.ssm_conv1d.weight", [T::F32; 11]),
            ("blk.0.ssm_a", [T::F32; 11]),
            ("blk.3.attn_q_norm.weight", [T::F32; 11]),
            ("output_norm.weight", [T::F32; 11]),
        ];
        let mixes = QuantMix::NAMES.map(|n| QuantMix::parse(n).unwrap());
        let mut wrong = Vec::new();
        for (m, mix) in mixes.iter().enumerate() {
            let (plans, fallbacks) = tensor_plans(&cfg, *mix);
            assert!(fallbacks.is_empty(), "{}: {fallbacks:?}", mix.name());
            for (name, want) in table {
                let got = plans
                    .iter()
                    .find(|p| p.spec.name == *name)
                    .unwrap_or_else(|| panic!("no tensor {name}"))
                    .spec
                    .ty;
                if got != want[m] {
                    wrong.push(format!(
                        "{} {name}: {got}, expected {}",
                        mix.name(),
                        want[m]
                    ));
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn fallbacks_follow_llama_quant() {
        use GgmlType as T;
        assert_eq!(fit_type(T::IQ4_XS, 96), T::IQ4_NL);
        assert_eq!(fit_type(T::Q2_K, 96), T::Q4_0);
        assert_eq!(fit_type(T::Q3_K, 96), T::Q4_0);
        assert_eq!(fit_type(T::Q4_K, 96), T::Q5_0);
        assert_eq!(fit_type(T::Q5_K, 96), T::Q5_1);
        assert_eq!(fit_type(T::Q6_K, 96), T::Q8_0);
        assert_eq!(fit_type(T::Q6_K, 100), T::F16);
        assert_eq!(fit_type(T::MXFP4, 100), T::F16);
        assert_eq!(fit_type(T::Q4_K, 512), T::Q4_K);
    }

    #[test]
    fn names_parse_back() {
        for n in QuantMix::NAMES {
            assert_eq!(QuantMix::parse(n).unwrap().name(), n);
        }
        assert_eq!(QuantMix::parse("q4_k_s"), None);
    }
}
