//! Upper bounds on header values and on every product of them, checked before anything is sized
//! from the header.
//!
//! A GGUF header is untrusted input: `block_count = 2^40` would otherwise size per-layer vectors
//! of a terabyte, and `head_count = 2^59 + 8` would wrap `2 * head_count * key_length` to a
//! plausible width. Each bound is far above Qwen3.6-35B-A3B's value (in brackets) and above any
//! model of this family, and small enough that every product below fits a `u64` with room left.

use crate::ModelError;
use crate::config::{ARCH, Config};

/// Most layers a file may declare [40].
pub const MAX_LAYERS: usize = 1024;
/// Most elements of one weight tensor (2^40, about 1.1 T: 4 TB at F32) [2^28].
pub const MAX_TENSOR_ELEMS: u64 = 1 << 40;
/// Most elements of one derived width (a projection's output) [8192].
pub const MAX_WIDTH: u64 = 1 << 24;

/// Each header value's bound: (key as in the file, value, most allowed).
fn bounds(c: &Config) -> [(&'static str, usize, usize); 16] {
    [
        ("block_count", c.n_layers, MAX_LAYERS),
        ("embedding_length", c.hidden, 1 << 16), // [2048]
        ("vocab (token_embd rows)", c.vocab, 1 << 22), // [248320]
        ("context_length", c.context_length, 1 << 24), // [262144]
        ("attention.head_count", c.n_head, 1024), // [16]
        ("attention.head_count_kv", c.n_head_kv, 1024), // [2]
        ("attention.key_length", c.head_dim, 4096), // [256]
        ("rope.dimension_count", c.rope_dims, 4096), // [64]
        ("expert_count", c.n_experts, 4096),     // [256]
        ("expert_used_count", c.n_experts_used, 4096), // [8]
        ("expert_feed_forward_length", c.expert_ffn, 1 << 18), // [512]
        ("expert_shared_feed_forward_length", c.shared_ffn, 1 << 18), // [512]
        ("ssm.conv_kernel", c.conv_kernel, 64),  // [4]
        ("ssm.group_count", c.ssm_k_heads, 1024), // [16]
        ("ssm.time_step_rank", c.ssm_v_heads, 1024), // [32]
        ("ssm.state_size", c.ssm_k_dim, 4096),   // [128]
    ]
}

/// `block_count` alone, checked before per-layer vectors are built from it.
pub fn check_layers(n_layers: usize) -> Result<(), ModelError> {
    if n_layers > MAX_LAYERS {
        return Err(ModelError::Config(format!(
            "{ARCH}.block_count {n_layers} exceeds the limit of {MAX_LAYERS}"
        )));
    }
    Ok(())
}

/// Multiplies header values, failing with a message that names the product.
fn product(what: &str, factors: &[usize], limit: u64) -> Result<u64, ModelError> {
    let mut p: u64 = 1;
    for &f in factors {
        p = p.checked_mul(f as u64).ok_or_else(|| {
            ModelError::Config(format!("{what} overflows ({factors:?} multiplied)"))
        })?;
    }
    if p > limit {
        return Err(ModelError::Config(format!(
            "{what} = {p} exceeds the limit of {limit} ({factors:?} multiplied)"
        )));
    }
    Ok(p)
}

/// Every bound and every product the plan, the exports and the kernels compute from the
/// config. After this succeeds the `Config` width helpers cannot overflow.
pub fn check(c: &Config) -> Result<(), ModelError> {
    for (key, v, max) in bounds(c) {
        if v > max {
            return Err(ModelError::Config(format!(
                "{ARCH}.{key} {v} exceeds the limit of {max}"
            )));
        }
    }
    if c.ssm_v_dim > 4096 {
        return Err(ModelError::Config(format!(
            "{ARCH}.ssm.inner_size / ssm.time_step_rank {} exceeds the limit of 4096",
            c.ssm_v_dim
        )));
    }
    let w = MAX_WIDTH;
    product(
        "2 x attention.head_count x key_length",
        &[2, c.n_head, c.head_dim],
        w,
    )?;
    product(
        "attention.head_count_kv x key_length",
        &[c.n_head_kv, c.head_dim],
        w,
    )?;
    let kd = product(
        "ssm.group_count x state_size",
        &[c.ssm_k_heads, c.ssm_k_dim],
        w,
    )?;
    let vd = product("ssm.inner_size", &[c.ssm_v_heads, c.ssm_v_dim], w)?;
    if 2 * kd + vd > w {
        return Err(ModelError::Config(format!(
            "conv channels 2 x {kd} + {vd} exceed the limit of {w}"
        )));
    }
    let t = MAX_TENSOR_ELEMS;
    product("token_embd elements", &[c.hidden, c.vocab], t)?;
    let f = c.expert_ffn.max(c.shared_ffn);
    product("expert tensor elements", &[c.hidden, 2 * f, c.n_experts], t)?;
    product("attn_qkv elements", &[c.hidden, (2 * kd + vd) as usize], t)?;
    product("attn_q elements", &[c.hidden, 2 * c.n_head, c.head_dim], t)?;
    product(
        "conv state elements",
        &[c.conv_kernel, (2 * kd + vd) as usize],
        t,
    )?;
    product(
        "KV cache elements per layer",
        &[c.context_length, c.n_head_kv, c.head_dim],
        t,
    )?;
    product(
        "recurrent state elements",
        &[c.ssm_v_heads, c.ssm_k_dim, c.ssm_v_dim],
        t,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::Preset;

    fn err(c: &Config) -> String {
        c.validate().unwrap_err().to_string()
    }

    #[test]
    fn every_preset_is_within_the_limits() {
        for name in Preset::NAMES {
            let c = Preset::parse(name).unwrap().config();
            check(&c).unwrap();
        }
    }

    #[test]
    fn wrapping_products_are_rejected() {
        // 2 * (2^59 + 8) * 32 wraps to 512 in u64: the value itself must be refused.
        let mut c = Preset::Tiny.config();
        c.n_head = (1 << 59) + 8;
        c.n_head_kv = 1;
        assert!(err(&c).contains("attention.head_count"), "{}", err(&c));
        let mut c = Preset::Tiny.config();
        c.ssm_k_dim = (1 << 62) + 64;
        assert!(err(&c).contains("ssm.state_size"), "{}", err(&c));
        // Each value in bounds, the product not.
        let mut c = Preset::Tiny.config();
        c.n_head = 1024;
        c.n_head_kv = 1024;
        c.head_dim = 4096;
        c.rope_dims = 8;
        c.context_length = 1 << 24;
        assert!(
            err(&c).contains("KV cache elements per layer"),
            "{}",
            err(&c)
        );
        let mut c = Preset::Tiny.config();
        c.hidden = 1 << 16;
        c.n_experts = 4096;
        c.n_experts_used = 1;
        c.expert_ffn = 1 << 18;
        assert!(err(&c).contains("expert tensor elements"), "{}", err(&c));
    }

    #[test]
    fn layer_count_is_bounded_before_use() {
        assert!(check_layers(40).is_ok());
        assert!(check_layers(MAX_LAYERS).is_ok());
        let e = check_layers(1 << 40).unwrap_err().to_string();
        assert!(e.contains("block_count 1099511627776 exceeds"), "{e}");
        let e = check_layers(usize::MAX).unwrap_err().to_string();
        assert!(e.contains("exceeds the limit of 1024"), "{e}");
    }
}
