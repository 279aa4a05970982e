//! The model's configuration as llama.cpp sees it, and the node counts it implies.
//!
//! Scalars come from llama.cpp's model API (`llama_model_meta_val_str`, `llama_model_n_layer`),
//! so they are exactly what the loader used; the per-layer recurrent flags (which may be an array)
//! and the presence of fused tensors come from the GGUF header through ggml's `gguf_*` reader.

use std::ffi::{CString, c_char};
use std::path::Path;

use llama_cpp_sys_2 as sys;
use tally_ledger::Category;
use tally_ledger::schema::ExpectedCount;

use crate::PeerError;
use crate::ffi::Model;

/// What the graph's shape depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// `general.architecture`.
    pub arch: String,
    /// Transformer blocks executed by a prefill (MTP blocks excluded).
    pub n_layer: u32,
    /// Vocabulary size.
    pub n_vocab: u32,
    /// Routed experts per layer.
    pub n_expert: u32,
    /// Experts per token.
    pub n_expert_used: u32,
    /// Per layer: true for a gated delta-net (linear attention) layer.
    pub recurrent: Vec<bool>,
    /// Routed experts store gate and up as one `ffn_gate_up_exps` tensor.
    pub fused_gate_up: bool,
    /// Full-attention layers use one fused `attn_qkv` weight instead of q, k, v.
    pub fused_qkv_full: bool,
    /// Layers have a shared expert.
    pub shared_expert: bool,
}

impl ModelConfig {
    /// Linear-attention layers.
    pub fn n_linear(&self) -> u64 {
        self.recurrent.iter().filter(|&&r| r).count() as u64
    }

    /// Full-attention layers.
    pub fn n_full(&self) -> u64 {
        self.recurrent.len() as u64 - self.n_linear()
    }

    /// Reads the configuration of a loaded model (and its file's header).
    pub(crate) fn read(model: &Model, path: &Path) -> Result<ModelConfig, PeerError> {
        let arch = model
            .meta("general.architecture")
            .ok_or_else(|| PeerError::Load("the model has no general.architecture".into()))?;
        let u32_key =
            |k: &str| -> Option<u32> { model.meta(&format!("{arch}.{k}"))?.trim().parse().ok() };
        let n_layer = model.n_layer();
        let header = GgufHeader::open(path)?;
        let recurrent: Vec<bool> =
            match header.u32_array(&format!("{arch}.attention.recurrent_layers")) {
                Some(flags) if flags.len() >= n_layer as usize => {
                    flags[..n_layer as usize].iter().map(|&f| f != 0).collect()
                }
                _ => {
                    let interval = u32_key("full_attention_interval").unwrap_or(4).max(1);
                    (0..n_layer).map(|i| (i + 1) % interval != 0).collect()
                }
            };
        let full_layer = recurrent.iter().position(|&r| !r);
        Ok(ModelConfig {
            n_layer,
            n_vocab: model.n_vocab(),
            n_expert: u32_key("expert_count").unwrap_or(0),
            n_expert_used: u32_key("expert_used_count").unwrap_or(0),
            fused_gate_up: header.has_tensor("blk.0.ffn_gate_up_exps.weight"),
            fused_qkv_full: full_layer
                .is_some_and(|il| header.has_tensor(&format!("blk.{il}.attn_qkv.weight"))),
            shared_expert: header.has_tensor("blk.0.ffn_up_shexp.weight"),
            recurrent,
            arch,
        })
    }

    /// Counts one graph execution (one ubatch) must have, times `n_graphs` executions of a
    /// prefill; `with_outputs` is how many of those executions produce logits (1 for a prefill).
    pub fn expected(
        &self,
        n_graphs: u64,
        with_outputs: u64,
        flash_attn: bool,
    ) -> Vec<ExpectedCount> {
        let l = u64::from(self.n_layer);
        let (lin, full) = (self.n_linear(), self.n_full());
        let g = n_graphs;
        let per =
            |what: &str, category: Option<Category>, op: Option<&str>, n: u64, how: String| {
                ExpectedCount {
                    what: what.to_string(),
                    category,
                    op: op.map(str::to_string),
                    expected: n * g,
                    derivation: if g == 1 {
                        how
                    } else {
                        format!("({how}) x {g} ubatch graphs")
                    },
                }
            };
        let gate_up = if self.fused_gate_up { 1 } else { 2 };
        let qkv_full = if self.fused_qkv_full { 2 } else { 4 };
        let mut v = vec![
            per(
                "routed-expert gate/up matmuls",
                Some(Category::MoeGateUp),
                Some("MUL_MAT_ID"),
                l * gate_up,
                format!(
                    "{l} layers x {gate_up} ({})",
                    if self.fused_gate_up {
                        "fused gate_up"
                    } else {
                        "gate, up"
                    }
                ),
            ),
            per(
                "routed-expert down matmuls",
                Some(Category::MoeDown),
                Some("MUL_MAT_ID"),
                l,
                format!("{l} layers x 1"),
            ),
            per(
                "router logits matmuls",
                Some(Category::Router),
                Some("MUL_MAT"),
                l,
                format!("{l} layers x 1 (ffn_gate_inp)"),
            ),
            per(
                "router top-k selections",
                Some(Category::Router),
                Some("ARGSORT"),
                l,
                format!("{l} layers x 1 (argsort, top-k is a view of it)"),
            ),
            per(
                "dense projection matmuls",
                Some(Category::DenseProj),
                Some("MUL_MAT"),
                5 * lin + qkv_full * full,
                format!(
                    "{lin} linear layers x 5 (qkv, z gate, beta, alpha, out) + {full} full layers x {qkv_full} ({})",
                    if self.fused_qkv_full {
                        "qkv, o"
                    } else {
                        "q, k, v, o"
                    }
                ),
            ),
            per(
                "delta-net recurrences",
                Some(Category::DeltaRule),
                Some("GATED_DELTA_NET"),
                lin,
                format!("{lin} linear layers x 1 (fused gated delta net)"),
            ),
            per(
                "causal convolutions",
                Some(Category::Conv),
                Some("SSM_CONV"),
                lin,
                format!("{lin} linear layers x 1"),
            ),
            per(
                "rotary embeddings",
                Some(Category::Rope),
                Some("ROPE"),
                2 * full,
                format!("{full} full layers x 2 (q, k)"),
            ),
            per(
                "RMS norms",
                Some(Category::Norm),
                Some("RMS_NORM"),
                2 * l + 3 * lin + 2 * full + 1,
                format!(
                    "{l} layers x 2 (input, post-attention) + {lin} linear x 3 (q and k L2 norms, which llama.cpp builds as rms_norm + scale, and the gated output norm) + {full} full x 2 (q, k) + 1 final"
                ),
            ),
            per(
                "embedding lookups",
                Some(Category::Embedding),
                Some("GET_ROWS"),
                1,
                "1 (token_embd)".into(),
            ),
        ];
        if flash_attn {
            v.push(per(
                "attention kernels",
                Some(Category::Attention),
                Some("FLASH_ATTN_EXT"),
                full,
                format!("{full} full layers x 1 (flash attention)"),
            ));
        }
        if self.shared_expert {
            v.push(per(
                "shared-expert matmuls",
                Some(Category::SharedExpert),
                Some("MUL_MAT"),
                4 * l,
                format!("{l} layers x 4 (gate, up, down, sigmoid gate)"),
            ));
        }
        v.push(ExpectedCount {
            what: "output head matmuls".into(),
            category: Some(Category::OutputHead),
            op: Some("MUL_MAT".into()),
            expected: with_outputs,
            derivation: format!(
                "1 per ubatch graph that has outputs ({with_outputs}); graphs without outputs run it on 0 rows, which the export marks as no-op"
            ),
        });
        v
    }
}

/// A GGUF header read by ggml (metadata and tensor infos only, no data).
struct GgufHeader {
    ctx: *mut sys::gguf_context,
}

impl GgufHeader {
    fn open(path: &Path) -> Result<GgufHeader, PeerError> {
        let c = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| PeerError::Load(format!("path {} contains a NUL byte", path.display())))?;
        let params = sys::gguf_init_params {
            no_alloc: true,
            ctx: std::ptr::null_mut(),
        };
        // SAFETY: the path is a valid C string; no tensor data is allocated (no_alloc, no ctx).
        let ctx = unsafe { sys::gguf_init_from_file(c.as_ptr(), params) };
        if ctx.is_null() {
            return Err(PeerError::Load(format!(
                "ggml could not read the GGUF header of {}",
                path.display()
            )));
        }
        Ok(GgufHeader { ctx })
    }

    fn key(&self, key: &str) -> Option<i64> {
        let c = CString::new(key).ok()?;
        // SAFETY: ctx is alive; key is a valid C string.
        let id = unsafe { sys::gguf_find_key(self.ctx, c.as_ptr()) };
        (id >= 0).then_some(id)
    }

    /// An integer or bool array as u32 values (None when absent or of another type).
    fn u32_array(&self, key: &str) -> Option<Vec<u32>> {
        let id = self.key(key)?;
        // SAFETY: ctx is alive and `id` is a valid key index; the data pointer covers
        // `n` elements of the array's element type, which we check before reading.
        unsafe {
            if sys::gguf_get_kv_type(self.ctx, id) != sys::GGUF_TYPE_ARRAY {
                return None;
            }
            let n = sys::gguf_get_arr_n(self.ctx, id);
            let data = sys::gguf_get_arr_data(self.ctx, id);
            match sys::gguf_get_arr_type(self.ctx, id) {
                sys::GGUF_TYPE_UINT32 | sys::GGUF_TYPE_INT32 => {
                    Some(std::slice::from_raw_parts(data.cast::<u32>(), n).to_vec())
                }
                sys::GGUF_TYPE_BOOL | sys::GGUF_TYPE_INT8 | sys::GGUF_TYPE_UINT8 => Some(
                    std::slice::from_raw_parts(data.cast::<u8>(), n)
                        .iter()
                        .map(|&b| u32::from(b))
                        .collect(),
                ),
                _ => None,
            }
        }
    }

    fn has_tensor(&self, name: &str) -> bool {
        let Ok(c) = CString::new(name) else {
            return false;
        };
        // SAFETY: ctx is alive; name is a valid C string.
        unsafe { sys::gguf_find_tensor(self.ctx, c.as_ptr() as *const c_char) >= 0 }
    }
}

impl Drop for GgufHeader {
    fn drop(&mut self) {
        // SAFETY: we own the context.
        unsafe { sys::gguf_free(self.ctx) }
    }
}
