//! The host side of every op, one file per op family beside its CPU twin (`cpu/ops/<op>.rs`) and
//! its kernels (`kernels/<op>.cu`; the projections of `matmul`, `moe` and `embed` share
//! `kernels/gemm.cu` and `quant.cuh`), with one flat dispatch on the op kind. The matches below
//! have no wildcard arm: a new `Op` does not compile until it is handled here.

mod attention;
mod conv;
mod delta;
mod elementwise;
mod embed;
pub mod fused;
mod kv_store;
mod matmul;
mod moe;
mod norm;
mod rope;
pub(crate) mod router;
pub mod sample;
pub mod snapshot;

use cudarc::driver::result;
use tally_model::{Node, Op, Plan};

pub(crate) use matmul::{CastState, cast_bytes, keep_f16};

use super::CudaBackend;
use super::mem::cuda_err;
use crate::EngineError;
use crate::backend::Target;

/// Device address and leading dimension (elements) of each input and output of a node; outputs
/// go to scratch (leading dimension = the view's width) for a replay.
pub struct Io {
    pub ins: Vec<(u64, i64)>,
    pub outs: Vec<(u64, i64)>,
}

fn io(b: &mut CudaBackend, plan: &Plan, node: &Node, target: Target) -> Result<Io, EngineError> {
    let ins = node
        .inputs
        .iter()
        .map(|v| b.view(plan, v))
        .collect::<Result<Vec<_>, _>>()?;
    let mut outs = Vec::with_capacity(node.outputs.len());
    for (slot, v) in node.outputs.iter().enumerate() {
        outs.push(match target {
            Target::Real => b.view(plan, v)?,
            Target::Scratch => {
                let bytes = v.elems() * plan.buf(v.buf).dtype.size_bytes();
                (b.arena.scratch(slot, bytes)?, v.cols as i64)
            }
        });
    }
    Ok(Io { ins, outs })
}

/// For replay of an op that updates state in place: copy the real state into the scratch slot
/// first, so the kernel reads the same state and writes only scratch.
fn stage_state(
    b: &mut CudaBackend,
    plan: &Plan,
    node: &Node,
    io: &Io,
    slot: usize,
    target: Target,
) -> Result<(), EngineError> {
    if target == Target::Scratch {
        let v = node.outputs[slot];
        let (real, _) = b.view(plan, &v)?;
        let bytes = v.elems() * 4;
        // SAFETY: `real` is the state view in its buffer (`prepare` sized it for this plan) and
        // io.outs[slot] the scratch slot `io` sized for this view: both hold at least `bytes`.
        unsafe {
            result::memcpy_dtod_async(io.outs[slot].0, real, bytes, b.cu_stream())
                .map_err(cuda_err)?;
        }
    }
    Ok(())
}

/// Launches node `index` of `plan`: one or a few kernels (or a library call).
pub fn dispatch(
    b: &mut CudaBackend,
    plan: &Plan,
    index: usize,
    target: Target,
) -> Result<(), EngineError> {
    let node = &plan.nodes[index];
    let io = io(b, plan, node, target)?;
    match &node.op {
        Op::Embed => embed::embed(b, plan, index, &io),
        Op::RmsNorm { eps, group } => norm::rms_norm(b, plan, index, &io, *eps, *group),
        Op::L2Norm { eps, group, scale } => norm::l2_norm(b, node, &io, *eps, *group, *scale),
        Op::MatMul { layout } => matmul::matmul(b, plan, index, &io, *layout),
        Op::Add => elementwise::binary(b, node, &io, elementwise::Binary::Add),
        Op::MulSilu => elementwise::binary(b, node, &io, elementwise::Binary::MulSilu),
        Op::MulSigmoid => elementwise::binary(b, node, &io, elementwise::Binary::MulSigmoid),
        Op::SwiGlu => elementwise::binary(b, node, &io, elementwise::Binary::SwiGlu),
        Op::ConvSilu => {
            stage_state(b, plan, node, &io, 1, target)?;
            conv::conv_silu(b, plan, index, &io)
        }
        Op::DeltaGates => elementwise::delta_gates(b, plan, index, &io),
        Op::DeltaRule {
            k_heads,
            v_heads,
            k_dim,
            v_dim,
        } => {
            stage_state(b, plan, node, &io, 1, target)?;
            let heads = delta::Heads {
                k_heads: *k_heads,
                v_heads: *v_heads,
                k_dim: *k_dim,
                v_dim: *v_dim,
            };
            delta::delta_rule(b, node, &io, heads)
        }
        Op::Rope {
            head_dim,
            dims,
            theta,
            offset,
        } => rope::rope(b, node, &io, (*head_dim, *dims, *theta, *offset)),
        Op::KvStore => kv_store::kv_store(b, node, &io),
        Op::Attention {
            n_head,
            n_head_kv,
            head_dim,
            scale,
            q_offset,
        } => {
            let shape = attention::Shape {
                n_head: *n_head,
                n_head_kv: *n_head_kv,
                head_dim: *head_dim,
                scale: *scale,
                q_offset: *q_offset,
            };
            attention::attention(b, node, &io, shape)
        }
        Op::TopK { k } => router::topk(b, node, &io, *k),
        Op::MoeMatMul { k, pair_input } => moe::moe_matmul(b, plan, index, &io, *k, *pair_input),
        Op::MoeCombine { k } => moe::combine(b, node, &io, *k),
        Op::SharedGate => elementwise::shared_gate(b, plan, index, &io),
    }
}

/// Workspace bytes node `index` of `plan` needs, so that `prepare` sizes the workspace once per
/// plan (a captured graph must never see it move). The one place each family's size is
/// computed; the launches take their part of the workspace from the same functions.
pub fn work_bytes(b: &CudaBackend, plan: &Plan, index: usize) -> Result<usize, EngineError> {
    let node = &plan.nodes[index];
    Ok(match &node.op {
        Op::DeltaRule {
            k_heads,
            v_heads,
            k_dim,
            v_dim,
        } => delta::work_bytes(
            node.inputs[1].rows,
            &delta::Heads {
                k_heads: *k_heads,
                v_heads: *v_heads,
                k_dim: *k_dim,
                v_dim: *v_dim,
            },
        ),
        Op::MatMul { .. } => matmul::work_bytes(b, plan, index)?,
        Op::MoeMatMul { k, pair_input } => moe::work_bytes(b, plan, index, *k, *pair_input)?,
        Op::Attention {
            n_head,
            n_head_kv,
            head_dim,
            ..
        } => attention::work_bytes(
            attention::Choice::of(b),
            node.inputs[0].rows,
            node.inputs[1].rows,
            (*n_head, *n_head_kv, *head_dim),
        ),
        Op::Embed
        | Op::RmsNorm { .. }
        | Op::L2Norm { .. }
        | Op::Add
        | Op::MulSilu
        | Op::MulSigmoid
        | Op::SwiGlu
        | Op::ConvSilu
        | Op::DeltaGates
        | Op::Rope { .. }
        | Op::KvStore
        | Op::TopK { .. }
        | Op::MoeCombine { .. }
        | Op::SharedGate => 0,
    })
}

/// The checks of launch geometry that kernel source `source` gets appended at build time
/// (beside [`super::args::layout_asserts`]): the host's shared-memory sizes and tile steps,
/// asserted equal to the kernel's own formulas.
pub fn geometry_asserts(source: &str) -> String {
    match source {
        "gemm" => matmul::geometry_asserts(),
        "delta" => delta::geometry_asserts(),
        "attention" => attention::geometry_asserts(),
        _ => String::new(),
    }
}

/// Raises the dynamic shared memory limit of the kernels that need more than the default 48 KB,
/// once after loading, to the most their launches ask for (each launch's size comes from the same
/// functions).
pub fn configure(k: &super::kernels::Kernels) -> Result<(), EngineError> {
    use super::kernels::{ATTN_HEAD_DIMS, GEMM_TYPES};
    for (ty, set) in GEMM_TYPES.iter().zip(&k.gemm) {
        for (&f, bm) in set.tiles.iter().zip(matmul::TILE_BM) {
            max_dynamic_smem(f, matmul::gemm_smem_bytes(*ty, bm))?;
        }
        max_dynamic_smem(set.swap, matmul::swap_smem_bytes(*ty, matmul::SWAP_BT))?;
        // The wgmma tiles where they fit (x128 of the 112- and 128-byte slots does not;
        // wg_tile never picks a tile that does not).
        for (&f, t) in set.wg.iter().zip(matmul::WgTile::ALL) {
            if let Some(bytes) = matmul::wg_tile_smem_if_fits(*ty, t) {
                max_dynamic_smem(f, bytes)?;
            }
        }
        if let Some(bytes) = matmul::ws_smem_if_fits(*ty) {
            max_dynamic_smem(set.gs128, bytes)?;
        }
        if let Some(bytes) = matmul::wg_tile_smem_if_fits(*ty, matmul::WgTile::W256) {
            max_dynamic_smem(set.gs256, bytes)?;
        }
        if let Some(bytes) = matmul::ws256a_smem_if_fits(*ty) {
            max_dynamic_smem(set.gs256a, bytes)?;
        }
        if let Some(bytes) = matmul::wg_tile_smem_if_fits(*ty, matmul::WgTile::XS128) {
            max_dynamic_smem(set.xs128, bytes)?;
        }
        // The bulk-fed GEMV's size depends on the row; its launches stay within the opt-in most.
        for &f in &set.gemvt {
            max_dynamic_smem(f, matmul::SMEM_OPT_IN_MAX)?;
        }
        // The gated tiles take their unfused tile's shared memory.
        for (&f, t) in set
            .wg_gated
            .iter()
            .zip([matmul::WgTile::W32, matmul::WgTile::W128])
        {
            if let Some(bytes) = matmul::wg_tile_smem_if_fits(*ty, t) {
                max_dynamic_smem(f, bytes)?;
            }
        }
    }
    // dk = 128 covers every supported key dimension.
    max_dynamic_smem(k.delta_rule_chunk_prep, delta::prep_smem_bytes(128))?;
    max_dynamic_smem(k.delta_rule_chunk_prep_pro, delta::prep_smem_bytes(128))?;
    max_dynamic_smem(k.delta_rule_chunk_scan, delta::scan_smem_bytes(128, 1))?;
    max_dynamic_smem(k.delta_rule_chunk_scan2, delta::scan_smem_bytes(128, 2))?;
    for (&f, d) in k.flash_attn.iter().zip(ATTN_HEAD_DIMS) {
        max_dynamic_smem(
            f,
            attention::smem_bytes(d as i64, super::consts::ATTN_NW, false),
        )?;
    }
    for (&f, d) in k.flash_attn_h.iter().zip(ATTN_HEAD_DIMS) {
        max_dynamic_smem(f, attention::smem_bytes(d as i64, attention::F16_NW, true))?;
    }
    max_dynamic_smem(
        k.flash_attn_wg,
        attention::wg_smem_bytes(attention::WG_HEAD_DIM as i64),
    )?;
    Ok(())
}

fn max_dynamic_smem(k: super::launch::Kernel, bytes: u32) -> Result<(), EngineError> {
    // SAFETY: `k.f` is a function of a module the backend keeps loaded; the attribute takes a
    // byte count.
    unsafe {
        result::function::set_function_attribute(
            k.f,
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    }
    .map_err(|e| EngineError::Cuda(format!("raising shared memory of {}: {e}", k.name)))
}
