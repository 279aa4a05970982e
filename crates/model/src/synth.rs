//! Synthetic `qwen35moe` models: the real tensor layout with random weights, deterministic by seed.
//!
//! Weights are scaled so activations stay finite and non-degenerate through every layer (inputs
//! to each projection have unit RMS after the norms; projections into the residual stream are
//! damped by 1/sqrt(2 * layers)), and the router is built so tokens spread over all experts with a
//! mild popularity skew, as a trained model's do. The file is streamed: tensor data is generated
//! in fixed chunks (in parallel, a bounded window at a time) and written in order, so memory stays
//! flat whatever the file size, and the bytes do not depend on the thread count.

use std::collections::BTreeMap;
use std::io::Write;

use rayon::prelude::*;
use tally_gguf::{GgmlType, GgufWriter, MetaValue, TensorSpec, quantize_row};

use crate::ModelError;
use crate::config::{ARCH, Config, LayerKind};
use crate::rng::Rng;

mod mix;
mod tokenizer;

pub use mix::{QuantMix, RecipeFacts};

/// Named model shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Qwen3.6-35B-A3B as released (MODEL.md).
    Full35bA3b,
    /// A mid-size model with the real head counts, for GPU correctness checks.
    Mid,
    /// Same structure, small; the real head-count ratios (8:1 attention, 1:2 linear).
    Tiny,
    /// Small with other ratios (2:1 attention, 1:4 linear), odd vocab, last layer linear.
    TinyOdd,
}

impl Preset {
    pub const NAMES: [&'static str; 4] = ["35b-a3b", "mid", "tiny", "tiny-odd"];

    pub fn parse(s: &str) -> Option<Preset> {
        match s {
            "35b-a3b" => Some(Preset::Full35bA3b),
            "mid" => Some(Preset::Mid),
            "tiny" => Some(Preset::Tiny),
            "tiny-odd" => Some(Preset::TinyOdd),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Preset::Full35bA3b => "35b-a3b",
            Preset::Mid => "mid",
            Preset::Tiny => "tiny",
            Preset::TinyOdd => "tiny-odd",
        }
    }

    pub fn config(self) -> Config {
        #[allow(clippy::too_many_arguments)]
        fn mk(
            n_layers: usize,
            interval: usize,
            hidden: usize,
            vocab: usize,
            (n_head, n_head_kv, head_dim, rope_dims): (usize, usize, usize, usize),
            (k_heads, v_heads, k_dim, v_dim): (usize, usize, usize, usize),
            (n_experts, used, ffn, shared): (usize, usize, usize, usize),
        ) -> Config {
            Config {
                n_layers,
                n_mtp_layers: 0,
                hidden,
                vocab,
                context_length: 262_144,
                n_head,
                n_head_kv,
                head_dim,
                rope_dims,
                rope_theta: 10_000_000.0,
                rms_eps: 1e-6,
                n_experts,
                n_experts_used: used,
                expert_ffn: ffn,
                shared_ffn: shared,
                conv_kernel: 4,
                ssm_k_heads: k_heads,
                ssm_v_heads: v_heads,
                ssm_k_dim: k_dim,
                ssm_v_dim: v_dim,
                layers: Config::layers_from_interval(n_layers, interval),
                gate_up_fused: false,
            }
        }
        match self {
            Preset::Full35bA3b => mk(
                40,
                4,
                2048,
                248_320,
                (16, 2, 256, 64),
                (16, 32, 128, 128),
                (256, 8, 512, 512),
            ),
            Preset::Mid => mk(
                8,
                4,
                1024,
                32_768,
                (16, 2, 256, 64),
                (16, 32, 128, 128),
                (64, 8, 512, 512),
            ),
            Preset::Tiny => mk(
                4,
                4,
                256,
                512,
                (8, 1, 32, 8),
                (2, 4, 64, 64),
                (8, 2, 256, 256),
            ),
            Preset::TinyOdd => mk(
                5,
                2,
                512,
                1000,
                (4, 2, 64, 16),
                (2, 8, 64, 64),
                (16, 3, 256, 512),
            ),
        }
    }
}

/// Applies `key=value` overrides to a config (keys are `Config` field names; `interval` sets the
/// full-attention interval).
pub fn apply_overrides(cfg: &mut Config, overrides: &[String]) -> Result<(), ModelError> {
    let mut interval = None;
    for o in overrides {
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| ModelError::Synth(format!("override `{o}` is not key=value")))?;
        let num = || -> Result<usize, ModelError> {
            v.trim()
                .parse::<usize>()
                .map_err(|_| ModelError::Synth(format!("override `{o}`: `{v}` is not a count")))
        };
        match k.trim() {
            "n_layers" => cfg.n_layers = num()?,
            "hidden" => cfg.hidden = num()?,
            "vocab" => cfg.vocab = num()?,
            "context_length" => cfg.context_length = num()?,
            "n_head" => cfg.n_head = num()?,
            "n_head_kv" => cfg.n_head_kv = num()?,
            "head_dim" => cfg.head_dim = num()?,
            "rope_dims" => cfg.rope_dims = num()?,
            "n_experts" => cfg.n_experts = num()?,
            "n_experts_used" => cfg.n_experts_used = num()?,
            "expert_ffn" => cfg.expert_ffn = num()?,
            "shared_ffn" => cfg.shared_ffn = num()?,
            "conv_kernel" => cfg.conv_kernel = num()?,
            "ssm_k_heads" => cfg.ssm_k_heads = num()?,
            "ssm_v_heads" => cfg.ssm_v_heads = num()?,
            "ssm_k_dim" => cfg.ssm_k_dim = num()?,
            "ssm_v_dim" => cfg.ssm_v_dim = num()?,
            "interval" => interval = Some(num()?),
            "rope_theta" => {
                cfg.rope_theta = v.trim().parse().map_err(|_| {
                    ModelError::Synth(format!("override `{o}`: `{v}` is not a number"))
                })?
            }
            other => {
                return Err(ModelError::Synth(format!(
                    "unknown override key `{other}` (keys: n_layers hidden vocab context_length n_head n_head_kv head_dim rope_dims n_experts n_experts_used expert_ffn shared_ffn conv_kernel ssm_k_heads ssm_v_heads ssm_k_dim ssm_v_dim interval rope_theta)"
                )));
            }
        }
    }
    let interval = interval.unwrap_or_else(|| infer_interval(&cfg.layers));
    cfg.layers = Config::layers_from_interval(cfg.n_layers, interval);
    Ok(())
}

fn infer_interval(layers: &[LayerKind]) -> usize {
    layers
        .iter()
        .position(|k| *k == LayerKind::Full)
        .map(|i| i + 1)
        .unwrap_or(4)
}

/// What to write.
#[derive(Debug, Clone)]
pub struct SynthSpec {
    pub preset: Preset,
    pub config: Config,
    pub quant: QuantMix,
    pub seed: u64,
    /// How the large quantised tensors are filled.
    pub fill: Fill,
}

/// How tensor data is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fill {
    /// Every value drawn and quantised (the default; what the checks and tests use).
    #[default]
    Exact,
    /// Large quantised tensors (of at least [`POOL_MIN_BYTES`]) are filled with blocks drawn at
    /// random from a pool of [`POOL_BLOCKS`] blocks quantised from the same distribution, per
    /// type and scale: the bytes of real quantised blocks, not i.i.d. across blocks. For timing
    /// runs of the 35B shape (no kernel's speed depends on the values; the router and every f32
    /// tensor are still drawn exactly): quantising 35B values is the cost of `Exact`, and this
    /// skips it. A pooled file records `tally.synth.fill = "pool"` (an exact one has no such key).
    Pool,
}

impl Fill {
    pub fn name(self) -> &'static str {
        match self {
            Fill::Exact => "exact",
            Fill::Pool => "pool",
        }
    }
}

/// Blocks in each pool of [`Fill::Pool`].
pub const POOL_BLOCKS: usize = 4096;
/// Tensors smaller than this are drawn exactly under [`Fill::Pool`] too.
pub const POOL_MIN_BYTES: u64 = 1 << 20;

/// One tensor's row in the summary.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TypeCount {
    pub tensors: usize,
    pub bytes: u64,
    pub params: u64,
}

/// Router spread of one layer for a 512-token prompt.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LayerRouting {
    pub layer: usize,
    pub experts_touched: usize,
    pub max_tokens_per_expert: usize,
    pub mean_tokens_per_expert: f64,
}

/// What was written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SynthReport {
    pub preset: String,
    pub quant: String,
    pub seed: u64,
    pub file_bytes: u64,
    pub params: u64,
    pub by_type: BTreeMap<String, TypeCount>,
    /// Tensors whose rows did not fit the mix's block size and fell back to another type.
    pub fallbacks: Vec<String>,
    /// Estimated routing: each layer's router applied to 512 random unit-RMS inputs (the
    /// post-attention norm's output has unit RMS times the norm weight).
    pub routing: Vec<LayerRouting>,
}

/// How a tensor's values are drawn.
#[derive(Debug, Clone, Copy)]
enum Init {
    /// N(0, std^2).
    Normal(f32),
    /// 1 + N(0, std^2): norm weights.
    AroundOne(f32),
    /// The delta-net decay parameter `ssm_a = -exp(u)`, u uniform in [-2, 1].
    SsmA,
    /// Router rows with a per-expert popularity scale: N(0, (std * p_e)^2).
    Router(f32),
}

struct TensorPlan {
    spec: TensorSpec,
    init: Init,
}

fn tensor_plans(cfg: &Config, mix: QuantMix) -> (Vec<TensorPlan>, Vec<String>) {
    let mut out = Vec::new();
    let mut fallbacks = Vec::new();
    let d = cfg.hidden as f32;
    let resid = 1.0 / (2.0 * cfg.n_layers as f32).sqrt();
    let facts = mix::RecipeFacts::of(cfg);
    for (name, dims) in synth_shapes(cfg) {
        let short = name
            .rsplit_once(".weight")
            .map_or(name.as_str(), |(a, _)| a);
        let short = short.rsplit('.').next().unwrap_or(short);
        let fan_in = dims[0] as f32;
        let init = match short {
            "token_embd" => Init::Normal(1.0),
            "attn_norm"
            | "post_attention_norm"
            | "output_norm"
            | "attn_q_norm"
            | "attn_k_norm"
            | "ssm_norm"
            | "enorm"
            | "hnorm"
            | "shared_head_norm" => Init::AroundOne(0.05),
            "ssm_a" => Init::SsmA,
            "bias" => Init::Normal(0.5), // ssm_dt.bias
            "ffn_gate_inp" => Init::Router(2.0 / d.sqrt()),
            "ssm_out" | "attn_output" | "ffn_down_exps" | "ffn_down_shexp" => {
                Init::Normal(resid / fan_in.sqrt())
            }
            "ssm_conv1d" => Init::Normal(0.5),
            _ => Init::Normal(1.0 / fan_in.sqrt()),
        };
        let ty = if !mix::is_quantised(&name, &dims) {
            GgmlType::F32
        } else {
            let want = mix::wanted_type(mix, &name, &dims, facts);
            let got = mix::fit_type(want, dims[0]);
            if got != want {
                fallbacks.push(format!(
                    "{name}: rows of {} do not fit {} blocks; wrote {}",
                    dims[0],
                    want.name(),
                    got.name()
                ));
            }
            got
        };
        out.push(TensorPlan {
            spec: TensorSpec { name, dims, ty },
            init,
        });
    }
    (out, fallbacks)
}

/// The tensors a synthetic file holds: the trunk, then (with MTP blocks) each block's required
/// tensors and `nextn.shared_head_norm`, as the converter writes them from a Qwen3.5/3.6
/// checkpoint (`mtp.norm` becomes `shared_head_norm`; the checkpoints have no separate MTP
/// embedding or head). A file with MTP blocks also spells the shared-expert gate vectors as the
/// converter does, `[d, 1]`.
fn synth_shapes(cfg: &Config) -> Vec<(String, Vec<u64>)> {
    let mut out = cfg.tensor_shapes();
    for il in cfg.n_layers..cfg.block_count() {
        out.extend(
            crate::mtp::block_shapes(cfg, il)
                .into_iter()
                .filter(|(n, _, required)| {
                    *required || n.ends_with("nextn.shared_head_norm.weight")
                })
                .map(|(n, d, _)| (n, d)),
        );
    }
    if cfg.n_mtp_layers > 0 {
        for (name, dims) in &mut out {
            if name.ends_with("ffn_gate_inp_shexp.weight") {
                dims.push(1);
            }
        }
    }
    out
}

fn metadata(spec: &SynthSpec) -> Vec<(String, MetaValue)> {
    let c = &spec.config;
    let k = |s: &str| format!("{ARCH}.{s}");
    let u = |v: usize| MetaValue::U32(v as u32);
    let interval = infer_interval(&c.layers);
    let mut m = vec![
        (
            "general.architecture".to_string(),
            MetaValue::String(ARCH.into()),
        ),
        (
            "general.name".to_string(),
            MetaValue::String(format!(
                "tally synth {} {}",
                spec.preset.name(),
                spec.quant.name()
            )),
        ),
        (
            "general.file_type".to_string(),
            MetaValue::U32(spec.quant.file_type()),
        ),
        (
            "general.quantization_version".to_string(),
            MetaValue::U32(2),
        ),
        ("general.alignment".to_string(), MetaValue::U32(32)),
        ("tally.synth.seed".to_string(), MetaValue::U64(spec.seed)),
        (
            "tally.synth.preset".to_string(),
            MetaValue::String(spec.preset.name().into()),
        ),
        (k("block_count"), u(c.block_count())),
        (k("context_length"), u(c.context_length)),
        (k("embedding_length"), u(c.hidden)),
        (k("feed_forward_length"), u(c.expert_ffn)),
        (k("attention.head_count"), u(c.n_head)),
        (k("attention.head_count_kv"), u(c.n_head_kv)),
        (k("attention.key_length"), u(c.head_dim)),
        (k("attention.value_length"), u(c.head_dim)),
        (
            k("attention.layer_norm_rms_epsilon"),
            MetaValue::F32(c.rms_eps),
        ),
        (k("rope.freq_base"), MetaValue::F32(c.rope_theta)),
        (k("rope.dimension_count"), u(c.rope_dims)),
        (k("expert_count"), u(c.n_experts)),
        (k("expert_used_count"), u(c.n_experts_used)),
        (k("expert_feed_forward_length"), u(c.expert_ffn)),
        (k("expert_shared_feed_forward_length"), u(c.shared_ffn)),
        (k("ssm.conv_kernel"), u(c.conv_kernel)),
        (k("ssm.inner_size"), u(c.ssm_value_dim())),
        (k("ssm.state_size"), u(c.ssm_k_dim)),
        (k("ssm.time_step_rank"), u(c.ssm_v_heads)),
        (k("ssm.group_count"), u(c.ssm_k_heads)),
        (k("full_attention_interval"), u(interval)),
    ];
    if spec.fill != Fill::Exact {
        // Only a pooled file says so: an exact file's bytes are as they always were (the
        // goldens hash them).
        m.push((
            "tally.synth.fill".to_string(),
            MetaValue::String(spec.fill.name().into()),
        ));
    }
    m.push((
        k("rope.dimension_sections"),
        MetaValue::Array(tally_gguf::MetaArray::I32(rope_sections(c.rope_dims))),
    ));
    if c.n_mtp_layers > 0 {
        // As the converter writes them: the MTP count, and the mixer of every block with the
        // MTP blocks marked non-recurrent.
        m.push((k("nextn_predict_layers"), u(c.n_mtp_layers)));
        let mut recurrent: Vec<bool> = c.layers.iter().map(|l| *l == LayerKind::Linear).collect();
        recurrent.resize(c.block_count(), false);
        m.push((
            k("attention.recurrent_layers"),
            MetaValue::Array(tally_gguf::MetaArray::Bool(recurrent)),
        ));
    }
    m.extend(tokenizer::metadata(c.vocab));
    m
}

/// Text-only mRoPE sections in the model's proportions (11:11:10 of 32 pairs), scaled to the
/// rotary pairs of this config; for text all sections see the same position, so this only has to
/// be well-formed.
fn rope_sections(rope_dims: usize) -> Vec<i32> {
    let pairs = (rope_dims / 2) as i32;
    let a = pairs * 11 / 32;
    let b = pairs * 11 / 32;
    vec![a, b, pairs - a - b, 0]
}

/// Rows per generation chunk: a fixed function of the row length (never of the thread count),
/// about 4 MiB of f32 per chunk.
fn chunk_rows(row_len: usize) -> usize {
    ((4 << 20) / (row_len * 4)).max(1)
}

fn gen_chunk(
    seed: u64,
    plan: &TensorPlan,
    popularity: &[f32],
    chunk: usize,
    rows: std::ops::Range<usize>,
) -> Vec<f32> {
    let row_len = plan.spec.dims[0] as usize;
    let mut rng = Rng::stream(seed, &plan.spec.name, chunk as u64);
    let mut v = vec![0.0f32; rows.len() * row_len];
    match plan.init {
        Init::Normal(std) => rng.fill_normal(&mut v, std),
        Init::AroundOne(std) => {
            rng.fill_normal(&mut v, std);
            v.iter_mut().for_each(|x| *x += 1.0);
        }
        Init::SsmA => v
            .iter_mut()
            .for_each(|x| *x = -(rng.uniform() * 3.0 - 2.0).exp()),
        Init::Router(std) => {
            for (r, row) in rows.clone().zip(v.chunks_exact_mut(row_len)) {
                let p = popularity.get(r).copied().unwrap_or(1.0);
                rng.fill_normal(row, std * p);
            }
        }
    }
    v
}

fn encode_rows(ty: GgmlType, values: &[f32], row_len: usize) -> Result<Vec<u8>, ModelError> {
    let row_bytes = ty.row_bytes(row_len as u64)? as usize;
    let n_rows = values.len() / row_len;
    let mut out = vec![0u8; row_bytes * n_rows];
    for (src, dst) in values
        .chunks_exact(row_len)
        .zip(out.chunks_exact_mut(row_bytes))
    {
        quantize_row(ty, src, dst)?;
    }
    Ok(out)
}

/// Per-expert popularity for a router: `exp(0.3 z_e)`, normalised to mean 1.
fn popularity(seed: u64, name: &str, n: usize) -> Vec<f32> {
    let mut rng = Rng::stream(seed, name, u64::MAX);
    let mut p: Vec<f32> = (0..n).map(|_| (0.3 * rng.normal()).exp()).collect();
    let mean = p.iter().sum::<f32>() / n.max(1) as f32;
    p.iter_mut().for_each(|x| *x /= mean);
    p
}

fn estimate_routing(layer: usize, router: &[f32], cfg: &Config, seed: u64) -> LayerRouting {
    let d = cfg.hidden;
    let e = cfg.n_experts;
    let k = cfg.n_experts_used;
    let tokens = 512;
    let mut rng = Rng::stream(seed, "routing-estimate", layer as u64);
    let mut counts = vec![0usize; e];
    let mut x = vec![0.0f32; d];
    let mut logits = vec![0.0f32; e];
    for _ in 0..tokens {
        rng.fill_normal(&mut x, 1.0);
        for (j, l) in logits.iter_mut().enumerate() {
            *l = router[j * d..(j + 1) * d]
                .iter()
                .zip(&x)
                .map(|(a, b)| a * b)
                .sum();
        }
        let mut idx: Vec<usize> = (0..e).collect();
        idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        for &j in idx.iter().take(k) {
            counts[j] += 1;
        }
    }
    let touched = counts.iter().filter(|&&c| c > 0).count();
    LayerRouting {
        layer,
        experts_touched: touched,
        max_tokens_per_expert: counts.iter().copied().max().unwrap_or(0),
        mean_tokens_per_expert: (tokens * k) as f64 / touched.max(1) as f64,
    }
}

/// The pool of [`POOL_BLOCKS`] quantised blocks of `ty` from N(0, std^2): deterministic by seed,
/// type and scale, shared by every tensor of that type and scale.
fn make_pool(seed: u64, ty: GgmlType, std: f32) -> Result<Vec<u8>, ModelError> {
    let elems = ty.block_elems();
    let mut rng = Rng::stream(
        seed,
        &format!("pool {} {:08x}", ty.name(), std.to_bits()),
        0,
    );
    let mut v = vec![0.0f32; POOL_BLOCKS * elems];
    rng.fill_normal(&mut v, std);
    encode_rows(ty, &v, elems)
}

/// Whether a tensor is filled from a pool under `fill`.
fn pooled(fill: Fill, plan: &TensorPlan) -> Option<f32> {
    let ty = plan.spec.ty;
    let bytes = ty
        .row_bytes(plan.spec.dims[0])
        .ok()?
        .saturating_mul(plan.spec.dims.iter().skip(1).product::<u64>());
    match (fill, plan.init) {
        (Fill::Pool, Init::Normal(std)) if ty.block_elems() >= 32 && bytes >= POOL_MIN_BYTES => {
            Some(std)
        }
        _ => None,
    }
}

/// Rows `rows` of a pooled tensor: block b of the tensor is pool block `mix(key ^ b)`.
fn pool_chunk(
    pool: &[u8],
    block_bytes: usize,
    key: u64,
    row_bytes: usize,
    rows: std::ops::Range<usize>,
) -> Vec<u8> {
    let per_row = row_bytes / block_bytes;
    let mut out = vec![0u8; rows.len() * row_bytes];
    let first = (rows.start * per_row) as u64;
    for (i, dst) in out.chunks_exact_mut(block_bytes).enumerate() {
        let h = crate::rng::mix64(key ^ (first + i as u64));
        let j = (h % POOL_BLOCKS as u64) as usize * block_bytes;
        dst.copy_from_slice(&pool[j..j + block_bytes]);
    }
    out
}

/// A chunk's encoded bytes and (for routers) its f32 values.
type ChunkResult = Result<(Vec<u8>, Vec<f32>), ModelError>;

/// What every chunk of one tensor needs.
struct TensorJob<'a> {
    plan: &'a TensorPlan,
    /// The pool its blocks are drawn from, and its row bytes, under [`Fill::Pool`].
    pool: Option<(&'a [u8], usize)>,
    key: u64,
    row_len: usize,
    n_rows: usize,
    chunk_rows: usize,
    n_chunks: usize,
    popularity: Vec<f32>,
}

impl TensorJob<'_> {
    fn is_router(&self) -> bool {
        matches!(self.plan.init, Init::Router(_))
    }

    fn chunk(&self, seed: u64, c: usize) -> ChunkResult {
        let rows = c * self.chunk_rows..((c + 1) * self.chunk_rows).min(self.n_rows);
        let ty = self.plan.spec.ty;
        if let Some((pool, row_bytes)) = self.pool {
            let bytes = pool_chunk(pool, ty.block_bytes(), self.key, row_bytes, rows);
            return Ok((bytes, Vec::new()));
        }
        let values = gen_chunk(seed, self.plan, &self.popularity, c, rows);
        let bytes = encode_rows(ty, &values, self.row_len)?;
        Ok((bytes, if self.is_router() { values } else { Vec::new() }))
    }
}

/// Writes the model to `out`, calling `progress(bytes_written, bytes_total)` as data streams.
///
/// The data is made in windows of chunks (two per thread, in file order, in parallel), and a
/// window is written while the next one is made: writing is one thread's work (the page cache's
/// copy), making is every thread's, so a large file takes about the longer of the two instead of
/// their sum. The bytes do not depend on the thread count.
pub fn write_model<W: Write + Send>(
    spec: &SynthSpec,
    out: W,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SynthReport, ModelError> {
    spec.config.validate()?;
    let (plans, fallbacks) = tensor_plans(&spec.config, spec.quant);
    let mut report = summary(spec, &plans, fallbacks)?;
    let total = report.file_bytes;
    let specs: Vec<TensorSpec> = plans.iter().map(|p| p.spec.clone()).collect();
    let mut writer = GgufWriter::new(out, &metadata(spec), &specs)?;
    // Every pool first: one per (type, scale) that a pooled tensor draws from.
    let pool_key = |plan: &TensorPlan, std: f32| (plan.spec.ty.id(), std.to_bits());
    let mut pools: BTreeMap<(u32, u32), Vec<u8>> = BTreeMap::new();
    for plan in &plans {
        if let Some(std) = pooled(spec.fill, plan)
            && !pools.contains_key(&pool_key(plan, std))
        {
            pools.insert(
                pool_key(plan, std),
                make_pool(spec.seed, plan.spec.ty, std)?,
            );
        }
    }
    let mut tensors = Vec::with_capacity(plans.len());
    for plan in &plans {
        let row_len = plan.spec.dims[0] as usize;
        let n_rows = (plan.spec.dims.iter().product::<u64>() / plan.spec.dims[0]) as usize;
        let pool = match pooled(spec.fill, plan).and_then(|std| pools.get(&pool_key(plan, std))) {
            Some(pool) => Some((
                pool.as_slice(),
                plan.spec.ty.row_bytes(plan.spec.dims[0])? as usize,
            )),
            None => None,
        };
        let cr = chunk_rows(row_len);
        tensors.push(TensorJob {
            plan,
            pool,
            key: crate::rng::hash_str(&plan.spec.name) ^ spec.seed.rotate_left(17),
            row_len,
            n_rows,
            chunk_rows: cr,
            n_chunks: n_rows.div_ceil(cr),
            popularity: match plan.init {
                Init::Router(_) => popularity(spec.seed, &plan.spec.name, n_rows),
                _ => Vec::new(),
            },
        });
    }
    // Every chunk of the file, in file order: (tensor, chunk).
    let chunks: Vec<(usize, usize)> = tensors
        .iter()
        .enumerate()
        .flat_map(|(t, job)| (0..job.n_chunks).map(move |c| (t, c)))
        .collect();
    let make = |range: std::ops::Range<usize>| -> Vec<ChunkResult> {
        chunks[range]
            .par_iter()
            .map(|&(t, c)| tensors[t].chunk(spec.seed, c))
            .collect()
    };
    let window = rayon::current_num_threads().max(1) * 2;
    let mut range = 0..window.min(chunks.len());
    let mut made = make(range.clone());
    let mut done = 0u64;
    let mut router_values = Vec::new();
    while !range.is_empty() {
        let mut bytes = Vec::with_capacity(made.len());
        for (r, &(t, c)) in made.into_iter().zip(&chunks[range.clone()]) {
            let (b, values) = r?;
            bytes.push(b);
            let job = &tensors[t];
            if job.is_router() {
                router_values.extend(values);
                if c + 1 == job.n_chunks {
                    let layer = job
                        .plan
                        .spec
                        .name
                        .split('.')
                        .nth(1)
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    report.routing.push(estimate_routing(
                        layer,
                        &router_values,
                        &spec.config,
                        spec.seed,
                    ));
                    router_values.clear();
                }
            }
        }
        let next = range.end..(range.end + window).min(chunks.len());
        let (written, next_made) = rayon::join(
            || -> Result<u64, ModelError> {
                let mut n = 0;
                for b in &bytes {
                    writer.write_data(b)?;
                    n += b.len() as u64;
                }
                Ok(n)
            },
            || make(next.clone()),
        );
        done += written?;
        progress(done, total);
        made = next_made;
        range = next;
    }
    writer.finish()?;
    report.file_bytes = done;
    Ok(report)
}

/// Bytes of tensor data a spec will produce (header excluded), for progress and disk checks.
pub fn data_bytes(spec: &SynthSpec) -> Result<u64, ModelError> {
    Ok(plan_summary(spec)?.file_bytes)
}

/// The tensor types, counts and sizes a spec would write, without generating anything.
pub fn plan_summary(spec: &SynthSpec) -> Result<SynthReport, ModelError> {
    spec.config.validate()?;
    let (plans, fallbacks) = tensor_plans(&spec.config, spec.quant);
    summary(spec, &plans, fallbacks)
}

/// Types, counts, parameters and data bytes of `plans` (routing estimates are left empty: they
/// come from the generated routers).
fn summary(
    spec: &SynthSpec,
    plans: &[TensorPlan],
    fallbacks: Vec<String>,
) -> Result<SynthReport, ModelError> {
    let mut r = SynthReport {
        preset: spec.preset.name().into(),
        quant: spec.quant.name().into(),
        seed: spec.seed,
        file_bytes: 0,
        params: 0,
        by_type: BTreeMap::new(),
        fallbacks,
        routing: Vec::new(),
    };
    for p in plans {
        let n: u64 = p.spec.dims.iter().product();
        let bytes = p.spec.ty.row_bytes(p.spec.dims[0])? * (n / p.spec.dims[0]);
        let e = r.by_type.entry(p.spec.ty.name().to_string()).or_default();
        e.tensors += 1;
        e.bytes += bytes;
        e.params += n;
        r.params += n;
        r.file_bytes += bytes;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Tiny, with expert tensors over [`POOL_MIN_BYTES`] (8 x 1024 x 256 at Q4_K: 1.18 MB).
    fn spec(fill: Fill, seed: u64) -> SynthSpec {
        let mut config = Preset::Tiny.config();
        config.expert_ffn = 1024;
        SynthSpec {
            preset: Preset::Tiny,
            config,
            quant: QuantMix::Q4KM,
            seed,
            fill,
        }
    }

    fn file(s: &SynthSpec) -> tally_gguf::GgufFile {
        let mut out = Vec::new();
        write_model(s, &mut out, &mut |_, _| {}).expect("synth");
        tally_gguf::GgufFile::from_bytes(out, "mem").expect("parse")
    }

    #[test]
    fn pool_fill_draws_real_blocks_and_keeps_the_rest_exact() {
        let (exact, pool) = (file(&spec(Fill::Exact, 3)), file(&spec(Fill::Pool, 3)));
        assert_eq!(
            pool.get("tally.synth.fill"),
            Some(&MetaValue::String("pool".into()))
        );
        assert_eq!(exact.get("tally.synth.fill"), None);
        let (plans, _) = tensor_plans(&spec(Fill::Pool, 3).config, QuantMix::Q4KM);
        let mut n_pooled = 0;
        for plan in &plans {
            let name = &plan.spec.name;
            let (te, tp) = (
                exact.tensor(name).expect("exact"),
                pool.tensor(name).expect("pool"),
            );
            assert_eq!((te.dims.clone(), te.ty), (tp.dims.clone(), tp.ty), "{name}");
            let (be, bp) = (exact.tensor_data(te), pool.tensor_data(tp));
            let Some(std) = pooled(Fill::Pool, plan) else {
                assert_eq!(be, bp, "{name}: not pooled, so drawn exactly");
                continue;
            };
            n_pooled += 1;
            assert_ne!(be, bp, "{name}");
            // Every block is a block of the pool (made as the writer makes it), and the draw
            // spreads over the pool.
            let ty = plan.spec.ty;
            let bb = ty.block_bytes();
            let pool_bytes = make_pool(3, ty, std).expect("pool");
            let blocks: HashSet<&[u8]> = pool_bytes.chunks_exact(bb).collect();
            let mut used = HashSet::new();
            for b in bp.chunks_exact(bb) {
                assert!(
                    blocks.contains(b),
                    "{name}: a block that is not in the pool"
                );
                used.insert(b);
            }
            assert!(
                used.len() > POOL_BLOCKS / 2,
                "{name}: {} blocks used",
                used.len()
            );
            // The values keep the tensor's scale.
            let mut v = vec![0.0f32; ty.block_elems() * bp.len() / bb];
            tally_gguf::dequantize_row(ty, bp, &mut v).expect("dequant");
            let rms =
                (v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
            assert!(
                (rms / f64::from(std) - 1.0).abs() < 0.1,
                "{name}: rms {rms} for std {std}"
            );
        }
        // The three routed-expert projections of each of the 4 layers (a count from the shapes,
        // not from the fill).
        assert_eq!(n_pooled, 3 * 4);
        assert_eq!(
            file(&spec(Fill::Pool, 3)).tensors().len(),
            pool.tensors().len()
        );
    }

    #[test]
    fn pool_fill_is_deterministic_by_seed() {
        let bytes = |seed| {
            let mut out = Vec::new();
            write_model(&spec(Fill::Pool, seed), &mut out, &mut |_, _| {}).expect("synth");
            out
        };
        let a = bytes(5);
        assert_eq!(a, bytes(5));
        assert_ne!(a, bytes(6));
    }

    /// The windows of chunks (two per thread) and the writing of one window beside the making
    /// of the next must not change a byte: the same file and routing report from 1, 2 and 5
    /// threads, pooled and exact (windows of 2, 4 and 10 chunks, cut across tensors).
    #[test]
    fn bytes_and_report_do_not_depend_on_the_thread_count() {
        let run = |fill, threads| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");
            let mut out = Vec::new();
            let report = pool
                .install(|| write_model(&spec(fill, 7), &mut out, &mut |_, _| {}))
                .expect("synth");
            (out, format!("{:?}", report.routing), report.file_bytes)
        };
        for fill in [Fill::Pool, Fill::Exact] {
            let one = run(fill, 1);
            assert!(!one.1.is_empty() && one.2 > 0);
            for threads in [2, 5] {
                assert!(
                    run(fill, threads) == one,
                    "{} with {threads} threads",
                    fill.name()
                );
            }
        }
    }
}
