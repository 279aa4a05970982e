//! The one validated configuration of a `qwen35moe` model, read from GGUF metadata and checked
//! against every tensor's shape and type. After `Config::from_gguf` succeeds, the plan builder
//! and the backends can index tensors without further checks.

use tally_gguf::{GgmlType, GgufFile, MetaArray, MetaValue};

use crate::ModelError;

/// GGUF `general.architecture` of the one model tally runs.
pub const ARCH: &str = "qwen35moe";

/// The mixer of one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerKind {
    /// Gated DeltaNet (linear attention with a recurrent state).
    Linear,
    /// Full softmax attention with a KV cache.
    Full,
}

/// Shape of the model. Every field is a count of elements (not bytes).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Config {
    /// Trunk layers: the decoder blocks prefill and decode run (`block_count` minus
    /// `nextn_predict_layers`).
    pub n_layers: usize,
    /// Multi-token-prediction blocks stored after the trunk (`nextn_predict_layers`; 0 or 1 in
    /// the files people download). Parsed and validated ([`crate::mtp`]), never run by plain
    /// decoding. The file's `block_count` is `n_layers + n_mtp_layers`.
    #[serde(default)]
    pub n_mtp_layers: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    pub vocab: usize,
    /// Longest context the model was trained for (`context_length`).
    pub context_length: usize,
    /// Full attention: query heads.
    pub n_head: usize,
    /// Full attention: key/value heads.
    pub n_head_kv: usize,
    /// Full attention: dimension of one head (query, key and value alike).
    pub head_dim: usize,
    /// Leading dimensions of each head that RoPE rotates (NeoX pairing).
    pub rope_dims: usize,
    pub rope_theta: f32,
    pub rms_eps: f32,
    pub n_experts: usize,
    pub n_experts_used: usize,
    /// Width of one routed expert's hidden layer.
    pub expert_ffn: usize,
    /// Width of the shared expert's hidden layer.
    pub shared_ffn: usize,
    /// Linear attention: causal conv kernel length.
    pub conv_kernel: usize,
    /// Linear attention: key heads (`ssm.group_count`).
    pub ssm_k_heads: usize,
    /// Linear attention: value heads (`ssm.time_step_rank`).
    pub ssm_v_heads: usize,
    /// Linear attention: dimension of one key head (`ssm.state_size`).
    pub ssm_k_dim: usize,
    /// Linear attention: dimension of one value head (`ssm.inner_size / ssm.time_step_rank`).
    pub ssm_v_dim: usize,
    /// Mixer kind per layer.
    pub layers: Vec<LayerKind>,
    /// The file stores routed gate and up projections fused (`ffn_gate_up_exps`).
    pub gate_up_fused: bool,
}

impl Config {
    /// Linear attention: q and k channel count (each).
    pub fn ssm_key_dim(&self) -> usize {
        self.ssm_k_heads * self.ssm_k_dim
    }
    /// Linear attention: v channel count (`ssm.inner_size`).
    pub fn ssm_value_dim(&self) -> usize {
        self.ssm_v_heads * self.ssm_v_dim
    }
    /// Channels of the causal conv (q, k and v together).
    pub fn conv_channels(&self) -> usize {
        2 * self.ssm_key_dim() + self.ssm_value_dim()
    }
    /// Full attention: query projection width (query and gate interleaved per head).
    pub fn q_proj_dim(&self) -> usize {
        2 * self.n_head * self.head_dim
    }
    /// Full attention: width of K (and of V).
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
    /// Full attention: attention output width (heads times head_dim).
    pub fn attn_dim(&self) -> usize {
        self.n_head * self.head_dim
    }
    pub fn n_full_layers(&self) -> usize {
        self.layers
            .iter()
            .filter(|k| **k == LayerKind::Full)
            .count()
    }
    pub fn n_linear_layers(&self) -> usize {
        self.layers
            .iter()
            .filter(|k| **k == LayerKind::Linear)
            .count()
    }
    /// `block_count` as the file writes it: the trunk plus the MTP blocks.
    pub fn block_count(&self) -> usize {
        self.n_layers + self.n_mtp_layers
    }
    /// Layer kinds from the `full_attention_interval` rule: layer i is full iff (i+1) % n == 0.
    pub fn layers_from_interval(n_layers: usize, interval: usize) -> Vec<LayerKind> {
        (0..n_layers)
            .map(|i| {
                if interval > 0 && (i + 1) % interval == 0 {
                    LayerKind::Full
                } else {
                    LayerKind::Linear
                }
            })
            .collect()
    }

    /// Checks the invariants the plan and the kernels rely on (independent of any file).
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |what: String| Err(ModelError::Config(what));
        let positive = [
            ("block_count", self.n_layers),
            ("embedding_length", self.hidden),
            ("vocab", self.vocab),
            ("attention.head_count", self.n_head),
            ("attention.head_count_kv", self.n_head_kv),
            ("attention.key_length", self.head_dim),
            ("expert_count", self.n_experts),
            ("expert_used_count", self.n_experts_used),
            ("expert_feed_forward_length", self.expert_ffn),
            ("expert_shared_feed_forward_length", self.shared_ffn),
            ("ssm.conv_kernel", self.conv_kernel),
            ("ssm.group_count", self.ssm_k_heads),
            ("ssm.time_step_rank", self.ssm_v_heads),
            ("ssm.state_size", self.ssm_k_dim),
            ("ssm.inner_size / ssm.time_step_rank", self.ssm_v_dim),
        ];
        for (name, v) in positive {
            if v == 0 {
                return bad(format!("{ARCH}.{name} must be positive, got 0"));
            }
        }
        crate::limits::check(self)?;
        if self.layers.len() != self.n_layers {
            return bad(format!(
                "{} layer kinds for {} layers",
                self.layers.len(),
                self.n_layers
            ));
        }
        if self.n_head % self.n_head_kv != 0 {
            return bad(format!(
                "attention.head_count {} is not a multiple of head_count_kv {}",
                self.n_head, self.n_head_kv
            ));
        }
        if self.ssm_v_heads % self.ssm_k_heads != 0 {
            return bad(format!(
                "ssm.time_step_rank (value heads) {} is not a multiple of ssm.group_count (key heads) {}",
                self.ssm_v_heads, self.ssm_k_heads
            ));
        }
        if self.n_experts_used > self.n_experts {
            return bad(format!(
                "expert_used_count {} exceeds expert_count {}",
                self.n_experts_used, self.n_experts
            ));
        }
        if self.rope_dims > self.head_dim || self.rope_dims % 2 != 0 {
            return bad(format!(
                "rope.dimension_count {} must be even and at most the head dimension {}",
                self.rope_dims, self.head_dim
            ));
        }
        if self.conv_kernel < 2 {
            return bad(format!(
                "ssm.conv_kernel {} must be at least 2",
                self.conv_kernel
            ));
        }
        if self.rms_eps.is_nan() || self.rms_eps <= 0.0 || self.rms_eps >= 1.0 {
            return bad(format!(
                "attention.layer_norm_rms_epsilon {} is out of range",
                self.rms_eps
            ));
        }
        if !self.rope_theta.is_finite() || self.rope_theta <= 1.0 {
            return bad(format!(
                "rope.freq_base {} is out of range",
                self.rope_theta
            ));
        }
        Ok(())
    }

    /// Reads and validates the configuration of a `qwen35moe` GGUF file, then checks every tensor
    /// the model needs: present, the expected shape, a supported type.
    pub fn from_gguf(file: &GgufFile) -> Result<Config, ModelError> {
        let arch = match file.get("general.architecture") {
            Some(v) => v.as_str().unwrap_or("").to_string(),
            None => return Err(ModelError::MissingKey("general.architecture".into())),
        };
        if arch != ARCH {
            return Err(ModelError::UnsupportedArch(arch));
        }
        let meta = Meta { file };
        let block_count = meta.usize("block_count")?;
        // Before anything per-layer is sized from it.
        crate::limits::check_layers(block_count)?;
        let n_mtp_layers = meta.usize_or("nextn_predict_layers", 0)?;
        if n_mtp_layers >= block_count.max(1) {
            return Err(ModelError::Config(format!(
                "{ARCH}.nextn_predict_layers {n_mtp_layers} leaves no trunk layers of block_count {block_count}"
            )));
        }
        // MTP blocks come after the trunk (llama.cpp's `n_layer()` is the same difference).
        let n_layers = block_count - n_mtp_layers;
        let interval = meta.usize_or("full_attention_interval", 4)?;
        let n_v_heads = meta.usize("ssm.time_step_rank")?;
        let inner = meta.usize("ssm.inner_size")?;
        let embd = file
            .tensor("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        let vocab = embd.dims.get(1).copied().unwrap_or(0) as usize;
        let head_dim = meta.usize("attention.key_length")?;
        if let Some(v) = meta.opt_usize("attention.value_length")?
            && v != head_dim
        {
            return Err(ModelError::Config(format!(
                "attention.value_length {v} differs from key_length {head_dim}; tally requires them equal"
            )));
        }
        let layers = match file.get(&format!("{ARCH}.attention.recurrent_layers")) {
            Some(MetaValue::Array(MetaArray::Bool(flags))) => {
                // The converter marks MTP blocks non-recurrent: they are full attention.
                if let Some(il) = (n_layers..block_count).find(|&il| flags.get(il) == Some(&true)) {
                    return Err(ModelError::Config(format!(
                        "{ARCH}.attention.recurrent_layers marks MTP block {il} recurrent; an MTP block is full attention"
                    )));
                }
                flags
                    .iter()
                    .take(n_layers)
                    .map(|r| {
                        if *r {
                            LayerKind::Linear
                        } else {
                            LayerKind::Full
                        }
                    })
                    .collect()
            }
            Some(_) => {
                return Err(ModelError::KeyType {
                    key: format!("{ARCH}.attention.recurrent_layers"),
                    expected: "an array of bools",
                });
            }
            None => Config::layers_from_interval(n_layers, interval),
        };
        let cfg = Config {
            n_layers,
            n_mtp_layers,
            hidden: meta.usize("embedding_length")?,
            vocab,
            context_length: meta.usize_or("context_length", 262_144)?,
            n_head: meta.usize("attention.head_count")?,
            n_head_kv: meta.usize("attention.head_count_kv")?,
            head_dim,
            rope_dims: meta.usize("rope.dimension_count")?,
            rope_theta: meta.f32("rope.freq_base")?,
            rms_eps: meta.f32("attention.layer_norm_rms_epsilon")?,
            n_experts: meta.usize("expert_count")?,
            n_experts_used: meta.usize("expert_used_count")?,
            expert_ffn: meta.usize("expert_feed_forward_length")?,
            shared_ffn: meta.usize("expert_shared_feed_forward_length")?,
            conv_kernel: meta.usize("ssm.conv_kernel")?,
            ssm_k_heads: meta.usize("ssm.group_count")?,
            ssm_v_heads: n_v_heads,
            ssm_k_dim: meta.usize("ssm.state_size")?,
            ssm_v_dim: inner.checked_div(n_v_heads).unwrap_or(0),
            layers,
            gate_up_fused: file.tensor("blk.0.ffn_gate_up_exps.weight").is_some(),
        };
        cfg.validate()?;
        if inner != cfg.ssm_value_dim() {
            return Err(ModelError::Config(format!(
                "ssm.inner_size {inner} is not a multiple of ssm.time_step_rank {n_v_heads}"
            )));
        }
        if cfg.layers.len() != cfg.n_layers {
            return Err(ModelError::Config(format!(
                "{ARCH}.attention.recurrent_layers has {} entries for {} layers",
                cfg.layers.len(),
                cfg.n_layers
            )));
        }
        cfg.check_tensors(file)?;
        Ok(cfg)
    }

    /// Every tensor the forward pass reads (the trunk; MTP blocks in [`crate::mtp`]), with its
    /// ggml dims (row length first).
    pub fn tensor_shapes(&self) -> Vec<(String, Vec<u64>)> {
        let d = self.hidden as u64;
        let mut out = vec![
            ("token_embd.weight".to_string(), vec![d, self.vocab as u64]),
            ("output_norm.weight".to_string(), vec![d]),
            ("output.weight".to_string(), vec![d, self.vocab as u64]),
        ];
        for (il, kind) in self.layers.iter().enumerate() {
            out.extend(self.block_shapes(il, *kind));
        }
        out
    }

    /// The tensors of decoder block `il` of mixer `kind` (the norms, the mixer, the MoE), with
    /// their ggml dims. An MTP block is a full-attention block plus its `nextn.*` tensors.
    pub fn block_shapes(&self, il: usize, kind: LayerKind) -> Vec<(String, Vec<u64>)> {
        let d = self.hidden as u64;
        let e = self.n_experts as u64;
        let f = self.expert_ffn as u64;
        let fs = self.shared_ffn as u64;
        let p = |s: &str| format!("blk.{il}.{s}");
        let mut out = vec![
            (p("attn_norm.weight"), vec![d]),
            (p("post_attention_norm.weight"), vec![d]),
        ];
        match kind {
            LayerKind::Linear => {
                let conv = self.conv_channels() as u64;
                let vd = self.ssm_value_dim() as u64;
                let hv = self.ssm_v_heads as u64;
                out.push((p("attn_qkv.weight"), vec![d, conv]));
                out.push((p("attn_gate.weight"), vec![d, vd]));
                out.push((p("ssm_beta.weight"), vec![d, hv]));
                out.push((p("ssm_alpha.weight"), vec![d, hv]));
                out.push((p("ssm_conv1d.weight"), vec![self.conv_kernel as u64, conv]));
                out.push((p("ssm_dt.bias"), vec![hv]));
                out.push((p("ssm_a"), vec![hv]));
                out.push((p("ssm_norm.weight"), vec![self.ssm_v_dim as u64]));
                out.push((p("ssm_out.weight"), vec![vd, d]));
            }
            LayerKind::Full => {
                out.push((p("attn_q.weight"), vec![d, self.q_proj_dim() as u64]));
                out.push((p("attn_k.weight"), vec![d, self.kv_dim() as u64]));
                out.push((p("attn_v.weight"), vec![d, self.kv_dim() as u64]));
                out.push((p("attn_output.weight"), vec![self.attn_dim() as u64, d]));
                out.push((p("attn_q_norm.weight"), vec![self.head_dim as u64]));
                out.push((p("attn_k_norm.weight"), vec![self.head_dim as u64]));
            }
        }
        out.push((p("ffn_gate_inp.weight"), vec![d, e]));
        if self.gate_up_fused {
            out.push((p("ffn_gate_up_exps.weight"), vec![d, 2 * f, e]));
        } else {
            out.push((p("ffn_gate_exps.weight"), vec![d, f, e]));
            out.push((p("ffn_up_exps.weight"), vec![d, f, e]));
        }
        out.push((p("ffn_down_exps.weight"), vec![f, d, e]));
        out.push((p("ffn_gate_inp_shexp.weight"), vec![d]));
        out.push((p("ffn_gate_shexp.weight"), vec![d, fs]));
        out.push((p("ffn_up_shexp.weight"), vec![d, fs]));
        out.push((p("ffn_down_shexp.weight"), vec![fs, d]));
        out
    }

    /// Every tensor a file of this config must or may hold: the trunk's, then each MTP block's,
    /// as `(name, ggml dims, required)`.
    pub fn file_tensor_shapes(&self) -> Vec<(String, Vec<u64>, bool)> {
        let mut out: Vec<_> = self
            .tensor_shapes()
            .into_iter()
            .map(|(n, d)| (n, d, true))
            .collect();
        for il in self.n_layers..self.block_count() {
            out.extend(crate::mtp::block_shapes(self, il));
        }
        out
    }

    fn check_tensors(&self, file: &GgufFile) -> Result<(), ModelError> {
        for (name, dims, required) in self.file_tensor_shapes() {
            let Some(t) = file.tensor(&name) else {
                if required {
                    return Err(ModelError::MissingTensor(name));
                }
                continue;
            };
            // ggml's comparison: the converter writes `[d, 1]` where the loader expects `[d]`.
            if !tally_gguf::same_ggml_shape(&t.dims, &dims) {
                return Err(ModelError::TensorShape {
                    name,
                    expected: dims,
                    found: t.dims.clone(),
                });
            }
            t.require_supported()?;
            // Vectors are read element-wise by the kernels: keep them in plain floats.
            if dims.len() == 1 && t.ty != GgmlType::F32 {
                return Err(ModelError::Config(format!(
                    "tensor {name} has type {}, expected F32 for a vector",
                    t.ty.name()
                )));
            }
        }
        Ok(())
    }
}

/// Typed access to `qwen35moe.*` keys with errors that name the key.
struct Meta<'a> {
    file: &'a GgufFile,
}

impl Meta<'_> {
    fn key(name: &str) -> String {
        format!("{ARCH}.{name}")
    }
    fn opt_usize(&self, name: &str) -> Result<Option<usize>, ModelError> {
        let key = Self::key(name);
        match self.file.get(&key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .map(Some)
                .ok_or(ModelError::KeyType {
                    key,
                    expected: "an unsigned integer",
                }),
        }
    }
    fn usize(&self, name: &str) -> Result<usize, ModelError> {
        self.opt_usize(name)?
            .ok_or_else(|| ModelError::MissingKey(Self::key(name)))
    }
    fn usize_or(&self, name: &str, default: usize) -> Result<usize, ModelError> {
        Ok(self.opt_usize(name)?.unwrap_or(default))
    }
    fn f32(&self, name: &str) -> Result<f32, ModelError> {
        let key = Self::key(name);
        let v = self
            .file
            .get(&key)
            .ok_or_else(|| ModelError::MissingKey(key.clone()))?;
        v.as_f32().ok_or(ModelError::KeyType {
            key,
            expected: "a float",
        })
    }
}
