//! Dispatch of the ops whose kernels are large: projections (GEMM, MoE), the delta rule, the
//! causal conv, attention and the embedding lookup.

use std::collections::HashMap;

use cudarc::driver::{result, sys};
use tally_gguf::GgmlType;
use tally_model::{Node, Op, OutLayout, Plan};

use super::CudaBackend;
use super::args::*;
use super::dispatch::Io;
use super::launch::{Kernel, blocks, launch};
use crate::EngineError;

/// At most this many tokens go token by token through `delta_step`; longer runs are chunked.
const DELTA_STEP_MAX_T: usize = 16;

/// The four kernels of one weight type: BM 128, 64, 32 tensor-core tiles and the GEMV.
fn gemm_kernels(ty: GgmlType) -> Option<[&'static str; 4]> {
    Some(match ty {
        GgmlType::Q4_K => ["gemm_q4_k", "gemm_q4_k_m64", "gemm_q4_k_m32", "gemv_q4_k"],
        GgmlType::Q5_K => ["gemm_q5_k", "gemm_q5_k_m64", "gemm_q5_k_m32", "gemv_q5_k"],
        GgmlType::Q6_K => ["gemm_q6_k", "gemm_q6_k_m64", "gemm_q6_k_m32", "gemv_q6_k"],
        GgmlType::Q8_0 => ["gemm_q8_0", "gemm_q8_0_m64", "gemm_q8_0_m32", "gemv_q8_0"],
        GgmlType::BF16 => ["gemm_bf16", "gemm_bf16_m64", "gemm_bf16_m32", "gemv_bf16"],
        GgmlType::F16 => ["gemm_f16", "gemm_f16_m64", "gemm_f16_m32", "gemv_f16"],
        GgmlType::F32 => ["gemm_f32", "gemm_f32_m64", "gemm_f32_m32", "gemv_f32"],
        _ => return None,
    })
}

/// The decode GEMV `mmv_<t>` of a type (gemm.cu): x held in registers across the block's rows.
fn mmv_kernel(ty: GgmlType) -> Option<&'static str> {
    Some(match ty {
        GgmlType::Q4_K => "mmv_q4_k",
        GgmlType::Q5_K => "mmv_q5_k",
        GgmlType::Q6_K => "mmv_q6_k",
        GgmlType::Q8_0 => "mmv_q8_0",
        GgmlType::BF16 => "mmv_bf16",
        GgmlType::F16 => "mmv_f16",
        GgmlType::F32 => "mmv_f32",
        _ => return None,
    })
}

/// Threads of `mmv_<t>` per block (MMV_THREADS in gemm.cu).
const MMV_THREADS: u32 = 256;

/// Rows one `mmv_<t>` block step covers (mmv_rows_per_step in gemm.cu): groups of the pieces
/// of a row (K/32, rounded up to a power of two) times the rows each thread unrolls.
fn mmv_rows_per_step(ty: GgmlType, k: usize) -> usize {
    let tpr = (k / 32).max(1).next_power_of_two().min(MMV_THREADS as usize);
    let unroll = match ty {
        GgmlType::Q6_K | GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 2,
        _ => 4,
    };
    (MMV_THREADS as usize / tpr) * unroll
}

/// Whether a one-row-at-a-time product goes to `mmv_<t>` instead of `gemv_<t>`. Measured on
/// the H200 (lab/gemm/bench.cu --decode, docs/results/2026-12-01-h200-decode/): mmv wins where
/// a block walks many row steps with its x in registers (the 248,320-row output head: -18%)
/// and on the MoE down projection (K = 512: gemv_<t> leaves half of each warp's lanes idle,
/// -44% at Q4_K); elsewhere the two are within a few percent and gemv_<t> stays.
fn use_mmv(ty: GgmlType, n: usize, k: usize) -> bool {
    mmv_kernel(ty).is_some() && k % 32 == 0 && k / 32 <= MMV_THREADS as usize && (k <= 1024 || n >= 65536)
}

/// The grid width of an `mmv_<t>` launch: every row step covered, at most `max_blocks` blocks
/// (each walks the steps blockIdx.x, + gridDim.x, ...).
fn mmv_grid_x(ty: GgmlType, n: usize, k: usize, max_blocks: u32) -> u32 {
    let steps = n.div_ceil(mmv_rows_per_step(ty, k)).max(1);
    (steps as u64).min(u64::from(max_blocks.max(1))) as u32
}

const GEMM_TYPES: [GgmlType; 7] = [
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_0,
    GgmlType::BF16,
    GgmlType::F16,
    GgmlType::F32,
];

/// ggml's numeric type id (what quant.cuh's QT_* constants are).
fn qt(ty: GgmlType) -> i32 {
    ty.id() as i32
}

pub fn kernel_names(source: &str) -> &'static [&'static str] {
    match source {
        "gemm" => &[
            "gemm_q4_k",
            "gemm_q4_k_m64",
            "gemm_q4_k_m32",
            "gemv_q4_k",
            "gemm_q5_k",
            "gemm_q5_k_m64",
            "gemm_q5_k_m32",
            "gemv_q5_k",
            "gemm_q6_k",
            "gemm_q6_k_m64",
            "gemm_q6_k_m32",
            "gemv_q6_k",
            "gemm_q8_0",
            "gemm_q8_0_m64",
            "gemm_q8_0_m32",
            "gemv_q8_0",
            "gemm_bf16",
            "gemm_bf16_m64",
            "gemm_bf16_m32",
            "gemv_bf16",
            "gemm_f16",
            "gemm_f16_m64",
            "gemm_f16_m32",
            "gemv_f16",
            "gemm_f32",
            "gemm_f32_m64",
            "gemm_f32_m32",
            "gemv_f32",
            "gemm_f32_simt",
            "gemm_f32_simt_m32",
            "mmv_q4_k",
            "mmv_q5_k",
            "mmv_q6_k",
            "mmv_q8_0",
            "mmv_bf16",
            "mmv_f16",
            "mmv_f32",
            "dequant_rows",
            "dequant_f16",
            "cast_f16_rows",
        ],
        "moe_route" => &["moe_route"],
        "delta" => &["delta_chunk_prep", "delta_chunk_scan", "delta_step"],
        "conv" => &["conv_silu", "conv_silu_l2norm", "delta_gates"],
        "attention" => &[
            "flash_attn_d32",
            "flash_attn_d64",
            "flash_attn_d128",
            "flash_attn_d256",
            "flash_decode_d32",
            "flash_decode_d64",
            "flash_decode_d128",
            "flash_decode_d256",
            "flash_attn_combine",
        ],
        _ => &[],
    }
}

fn max_dynamic_smem(k: Kernel, bytes: u32) -> Result<(), EngineError> {
    // SAFETY: `k.f` is a loaded function; the attribute takes a byte count.
    unsafe {
        result::function::set_function_attribute(
            k.f,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    }
    .map_err(|e| EngineError::Cuda(format!("raising shared memory of {}: {e}", k.name)))
}

pub fn configure_kernels(k: &HashMap<&'static str, Kernel>) -> Result<(), EngineError> {
    for ty in GEMM_TYPES {
        if let Some(names) = gemm_kernels(ty) {
            for (name, bm) in names.iter().zip([128, 64, 32]) {
                if let Some(&f) = k.get(name) {
                    max_dynamic_smem(f, gemm_smem_bytes(ty, bm))?;
                }
            }
        }
    }
    // dk = 128 covers every supported key dimension.
    if let Some(&f) = k.get("delta_chunk_prep") {
        max_dynamic_smem(f, delta_prep_smem_bytes(128))?;
    }
    if let Some(&f) = k.get("delta_chunk_scan") {
        max_dynamic_smem(f, delta_scan_smem_bytes(128))?;
    }
    for (name, d) in [
        ("flash_attn_d32", 32),
        ("flash_attn_d64", 64),
        ("flash_attn_d128", 128),
        ("flash_attn_d256", 256),
    ] {
        if let Some(&f) = k.get(name) {
            max_dynamic_smem(f, attn_smem_bytes(d, 8, false))?;
        }
    }
    Ok(())
}

pub fn dispatch(b: &mut CudaBackend, plan: &Plan, node: &Node, io: &Io) -> Result<(), EngineError> {
    let s = b.cu_stream();
    match &node.op {
        Op::ConvSilu => {
            let x = node.inputs[0];
            let w = b.weight(&node.weights[0])?;
            let a = ConvSiluArgs {
                x: io.ins[0].0,
                ldx: io.ins[0].1,
                state: io.outs[1].0,
                lds: io.outs[1].1,
                w: w.buf.ptr,
                y: io.outs[0].0,
                ldy: io.outs[0].1,
                t: x.rows as i32,
                c: x.cols as i32,
                k: w.dims[0] as i32,
            };
            let grid = (blocks(x.cols as i64, 512), blocks(x.rows as i64, 32), 1);
            launch(b.kernel("conv_silu")?, grid, (128, 1, 1), 0, s, &a)
        }
        Op::DeltaGates => {
            let bv = node.inputs[0];
            let a = DeltaGatesArgs {
                b: io.ins[0].0,
                ldbin: io.ins[0].1,
                a: io.ins[1].0,
                lda: io.ins[1].1,
                dt_bias: b.weight(&node.weights[0])?.buf.ptr,
                ssm_a: b.weight(&node.weights[1])?.buf.ptr,
                beta: io.outs[0].0,
                ldbeta: io.outs[0].1,
                g: io.outs[1].0,
                ldg: io.outs[1].1,
                t: bv.rows as i32,
                h: bv.cols as i32,
            };
            let n = (bv.rows * bv.cols) as i64;
            launch(
                b.kernel("delta_gates")?,
                (blocks(n, 256).min(4096), 1, 1),
                (256, 1, 1),
                0,
                s,
                &a,
            )
        }
        Op::DeltaRule {
            k_heads,
            v_heads,
            k_dim,
            v_dim,
        } => {
            let (t, r) = (node.inputs[1].rows, node.inputs[0].rows);
            if !matches!(k_dim, 64 | 128) || v_dim % 32 != 0 || *v_dim > 128 {
                return Err(EngineError::Unsupported(format!(
                    "the CUDA delta rule supports key dims 64 and 128 and value dims of 32..128 in steps of 32; got {k_dim} and {v_dim}"
                )));
            }
            let chunked = t > DELTA_STEP_MAX_T;
            let work = if chunked {
                let floats = delta_work_floats(
                    t as i64,
                    *k_heads as i64,
                    *v_heads as i64,
                    *k_dim as i64,
                    *v_dim as i64,
                );
                b.workspace(floats as usize * 4)?
            } else {
                0
            };
            let a = DeltaArgs {
                q: io.ins[0].0,
                ldq: io.ins[0].1,
                k: io.ins[1].0,
                ldk: io.ins[1].1,
                v: io.ins[2].0,
                ldv: io.ins[2].1,
                g: io.ins[3].0,
                ldg: io.ins[3].1,
                beta: io.ins[4].0,
                ldb: io.ins[4].1,
                state: io.outs[1].0,
                o: io.outs[0].0,
                ldo: io.outs[0].1,
                work,
                t: t as i32,
                r: r as i32,
                hk: *k_heads as i32,
                hv: *v_heads as i32,
                dk: *k_dim as i32,
                dv: *v_dim as i32,
            };
            let slices = (*v_dim as i64 / DELTA_NS) as u32;
            if chunked {
                let nc = (t as u64).div_ceil(DELTA_C as u64) as u32;
                let dk = *k_dim as i64;
                launch(
                    b.kernel("delta_chunk_prep")?,
                    (nc, *v_heads as u32, 1),
                    (256, 1, 1),
                    delta_prep_smem_bytes(dk),
                    s,
                    &a,
                )?;
                launch(
                    b.kernel("delta_chunk_scan")?,
                    (*v_heads as u32, slices, 1),
                    (256, 1, 1),
                    delta_scan_smem_bytes(dk),
                    s,
                    &a,
                )
            } else {
                launch(
                    b.kernel("delta_step")?,
                    (*v_heads as u32, slices, 1),
                    (128, 1, 1),
                    0,
                    s,
                    &a,
                )
            }
        }
        Op::Attention {
            n_head,
            n_head_kv,
            head_dim,
            scale,
            q_pos0,
        } => attention(
            b,
            node,
            io,
            (*n_head, *n_head_kv, *head_dim, *scale, *q_pos0),
        ),
        Op::MatMul { layout } => {
            let x = node.inputs[0];
            let (layout, head_dim, n_head) = layout_code(*layout);
            dense_gemm(
                b,
                &node.weights[0],
                x.rows,
                io.ins[0],
                io.outs[0],
                (layout, head_dim, n_head),
            )
        }
        Op::MoeMatMul { k, pair_input } => moe_gemm(b, plan, node, io, *k, *pair_input),
        Op::Embed => {
            let w = b.weight(&node.weights[0])?;
            let ids = node.inputs[0];
            let a = DequantRowsArgs {
                w: w.buf.ptr,
                row_bytes: w.row_bytes as i64,
                ty: qt(w.ty),
                k: w.dims[0] as i32,
                n_rows_w: w.dims[1] as i32,
                row_ids: io.ins[0].0,
                row0: 0,
                n_rows: ids.rows as i32,
                out: io.outs[0].0,
                ldo: io.outs[0].1,
                err: 0,
            };
            let grid = (blocks(w.dims[0] as i64, 2048), ids.rows as u32, 1);
            launch(b.kernel("dequant_rows")?, grid, (256, 1, 1), 0, s, &a)
        }
        _ => Err(EngineError::Unsupported(format!(
            "the CUDA backend has no kernel for `{}`",
            node.op.name()
        ))),
    }
}

fn attention(
    b: &mut CudaBackend,
    node: &Node,
    io: &Io,
    (h, hkv, d, scale, q_pos0): (usize, usize, usize, f32, usize),
) -> Result<(), EngineError> {
    let s = b.cu_stream();
    let (r, p) = (node.inputs[0].rows, node.inputs[1].rows);
    let suffix = match d {
        32 => "d32",
        64 => "d64",
        128 => "d128",
        256 => "d256",
        _ => {
            return Err(EngineError::Unsupported(format!(
                "the CUDA attention supports head dims 32, 64, 128, 256; got {d}"
            )));
        }
    };
    let g = (h / hkv.max(1)) as i64;
    let rows = r as i64 * g;
    let p_vis = (q_pos0 + r) as i64;
    let mut a = AttnArgs {
        q: io.ins[0].0,
        ldq: io.ins[0].1,
        k: io.ins[1].0,
        ldk: io.ins[1].1,
        v: io.ins[2].0,
        ldv: io.ins[2].1,
        o: io.outs[0].0,
        ldo: io.outs[0].1,
        r: r as i32,
        p: p as i32,
        h: h as i32,
        hkv: hkv as i32,
        d: d as i32,
        q_pos0: q_pos0 as i32,
        scale,
        n_split: 1,
        kv_chunk: p_vis as i32,
        pad0: 0,
        ws: 0,
        k16: 0,
        v16: 0,
        ld16: 0,
    };
    if rows <= ATTN_DEC_MAXQ {
        // Flash decoding: split the keys so every SM has a block, then combine.
        let sms = i64::from(b.props.sm_count.max(1));
        let target = (sms / hkv as i64).max(1);
        let chunk = ((p_vis + target - 1) / target + 63) / 64 * 64;
        let n_split = ((p_vis + chunk - 1) / chunk).max(1);
        a.kv_chunk = chunk as i32;
        a.n_split = n_split as i32;
        if n_split > 1 {
            let floats = n_split * r as i64 * h as i64 * (d as i64 + 2);
            a.ws = b.workspace(floats as usize * 4)?;
        }
        let name = match suffix {
            "d32" => "flash_decode_d32",
            "d64" => "flash_decode_d64",
            "d128" => "flash_decode_d128",
            _ => "flash_decode_d256",
        };
        launch(
            b.kernel(name)?,
            (n_split as u32, hkv as u32, 1),
            (256, 1, 1),
            0,
            s,
            &a,
        )?;
        if n_split > 1 {
            let n = r as i64 * h as i64 * d as i64 / 4;
            launch(
                b.kernel("flash_attn_combine")?,
                (blocks(n, 256), 1, 1),
                (256, 1, 1),
                0,
                s,
                &a,
            )?;
        }
        return Ok(());
    }
    let name = match suffix {
        "d32" => "flash_attn_d32",
        "d64" => "flash_attn_d64",
        "d128" => "flash_attn_d128",
        _ => "flash_attn_d256",
    };
    let bm = 128;
    launch(
        b.kernel(name)?,
        (blocks(rows, bm), hkv as u32, 1),
        (2 * bm, 1, 1),
        attn_smem_bytes(d as i64, 8, false),
        s,
        &a,
    )
}

/// (layout code, head_dim, n_head) of a projection's output layout, as gemm.cu takes them.
fn layout_code(l: OutLayout) -> (i32, i32, i32) {
    match l {
        OutLayout::Plain => (0, 0, 0),
        OutLayout::QGateSplit { n_head, head_dim } => (1, head_dim as i32, n_head as i32),
    }
}

/// Which kernel of a type runs a product: 0 = BM 128, 1 = BM 64, 2 = BM 32, 3 = GEMV.
/// `TALLY_GEMM_VARIANT=0..3` forces one (for experiments).
fn dense_variant(m: usize, n: usize, k: usize, sms: u32) -> usize {
    if let Some(v) = std::env::var("TALLY_GEMM_VARIANT")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|v| *v < 4)
    {
        return v;
    }
    if m <= 8 || k % 64 != 0 {
        return 3;
    }
    let n_blocks = (n as u64).div_ceil(GEMM_BN as u64);
    // The largest tile that still gives every SM a block.
    for (v, bm) in [(0usize, 128u64), (1, 64), (2, 32)] {
        if n_blocks * (m as u64).div_ceil(bm) >= u64::from(sms) {
            return v;
        }
    }
    2
}

/// The f32 SIMT GEMM of an F32-weight product (m > 8 rows) and its square block tile:
/// `gemm_f32_simt` (64 x 64) when that grid gives every SM a block, else `gemm_f32_simt_m32`
/// (32 x 32, each K step split over 4 thread groups: 4x the blocks for the same work per output).
fn simt_variant(m: usize, n: usize, sms: u32) -> (&'static str, i64) {
    let tiles = |t: i64| (n as u64).div_ceil(t as u64) * (m as u64).div_ceil(t as u64);
    if tiles(SIMT_TILE) >= u64::from(sms) {
        ("gemm_f32_simt", SIMT_TILE)
    } else {
        ("gemm_f32_simt_m32", SIMT_M32_TILE)
    }
}

/// Bytes of cuBLAS's own workspace on the cuBLAS path (set explicitly, so a captured graph
/// never has the library allocate).
const CUBLAS_WORKSPACE: usize = 32 << 20;

/// `TALLY_GEMM=cublas` turns the cuBLAS path on, for projections of at least
/// `TALLY_GEMM_CUBLAS_MIN_M` rows (default 128).
pub fn cublas_min_m_from_env() -> Option<usize> {
    if std::env::var("TALLY_GEMM").ok()?.as_str() != "cublas" {
        return None;
    }
    Some(
        std::env::var("TALLY_GEMM_CUBLAS_MIN_M")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(128),
    )
}

/// The f16 operand bytes (weight, activations) of a dense projection that takes the cuBLAS path,
/// or None when it runs on the engine's own kernels: F32 weights (the router stays exact) and
/// shapes the operand kernels do not take stay there.
fn cublas_operands(b: &CudaBackend, weight: &str, m: usize) -> Option<(usize, usize)> {
    let min_m = b.cublas_min_m?;
    let w = b.weight(weight).ok()?;
    let (k, n) = (*w.dims.first()? as usize, *w.dims.get(1)? as usize);
    let block = w.ty.block_elems();
    let supported = w.ty != GgmlType::F32 && gemm_kernels(w.ty).is_some();
    if m < min_m || !supported || k % 8 != 0 || block == 0 || k % block != 0 {
        return None;
    }
    let align = |bytes: usize| bytes.div_ceil(256) * 256;
    Some((align(n * k * 2), align(m * k * 2)))
}

/// Sizes and leading dimensions of the column-major `cublasGemmEx(OP_T, OP_N, ...)` call that
/// computes row-major `Y[m][ldy] = X[m][k] * W'[n][k]^T`: column-major, that is
/// `Y^T (n x m, ld ldy) = op(W') (n x k: W' is k x n column-major, transposed) * X^T (k x m, ld k)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GemmExDims {
    m: i32,
    n: i32,
    k: i32,
    lda: i32,
    ldb: i32,
    ldc: i32,
}

impl GemmExDims {
    fn row_major(m: usize, n: usize, k: usize, ldy: usize) -> GemmExDims {
        GemmExDims {
            m: n as i32,
            n: m as i32,
            k: k as i32,
            lda: k as i32,
            ldb: k as i32,
            ldc: ldy as i32,
        }
    }
}

/// A dense projection through cuBLAS: the weight dequantised once to f16 (rows already in
/// output order for layout 1), the activations rounded to f16, then `cublasGemmEx` with f32
/// accumulation and output: the precision of the engine's tensor-core kernels, each weight
/// element decoded once instead of once per M tile.
fn cublas_gemm(
    b: &mut CudaBackend,
    weight: &str,
    m: usize,
    x: (u64, i64),
    y: (u64, i64),
    (layout, head_dim, n_head): (i32, i32, i32),
    (w_bytes, x_bytes): (usize, usize),
) -> Result<(), EngineError> {
    use cudarc::cublas::{result as blas_result, sys as blas};
    let (w_ptr, ty, row_bytes, k, n) = {
        let w = b.weight(weight)?;
        (
            w.buf.ptr,
            w.ty,
            w.row_bytes,
            w.dims[0] as usize,
            w.dims[1] as usize,
        )
    };
    let handle = b.blas_handle()?;
    let ws = b.workspace(w_bytes + x_bytes + CUBLAS_WORKSPACE)?;
    let (wh, xh, lib_ws) = (ws, ws + w_bytes as u64, ws + (w_bytes + x_bytes) as u64);
    let s = b.cu_stream();
    let gx = blocks(k as i64, 2048);
    let dq = DequantF16Args {
        w: w_ptr,
        row_bytes: row_bytes as i64,
        ty: qt(ty),
        k: k as i32,
        n: n as i32,
        out: wh,
        layout,
        head_dim,
        n_head,
    };
    launch(
        b.kernel("dequant_f16")?,
        (gx, n as u32, 1),
        (256, 1, 1),
        0,
        s,
        &dq,
    )?;
    let cast = CastF16Args {
        x: x.0,
        ldx: x.1,
        m: m as i32,
        k: k as i32,
        out: xh,
    };
    launch(
        b.kernel("cast_f16_rows")?,
        (gx, m as u32, 1),
        (256, 1, 1),
        0,
        s,
        &cast,
    )?;
    let blas_err =
        |what: &str, e: blas_result::CublasError| EngineError::Cuda(format!("{what}: {e:?}"));
    // SAFETY: the workspace pointer addresses CUBLAS_WORKSPACE bytes of the backend's workspace,
    // which lives until the next workspace growth (prepare() sizes it for every node first).
    unsafe {
        blas::cublasSetWorkspace_v2(handle, lib_ws as *mut std::ffi::c_void, CUBLAS_WORKSPACE)
            .result()
            .map_err(|e| blas_err("cublasSetWorkspace", e))?;
    }
    let d = GemmExDims::row_major(m, n, k, y.1 as usize);
    let (alpha, beta) = (1.0f32, 0.0f32);
    // SAFETY: wh holds n*k and xh m*k f16 values written above on the same stream; y.0 holds m
    // rows of stride ldy >= n f32 values (the plan's output view); alpha and beta are host f32
    // scalars (the handle's default host pointer mode) alive for the call.
    unsafe {
        blas_result::gemm_ex(
            handle,
            blas::cublasOperation_t::CUBLAS_OP_T,
            blas::cublasOperation_t::CUBLAS_OP_N,
            d.m,
            d.n,
            d.k,
            (&alpha as *const f32).cast(),
            wh as *const std::ffi::c_void,
            blas::cudaDataType::CUDA_R_16F,
            d.lda,
            xh as *const std::ffi::c_void,
            blas::cudaDataType::CUDA_R_16F,
            d.ldb,
            (&beta as *const f32).cast(),
            y.0 as *mut std::ffi::c_void,
            blas::cudaDataType::CUDA_R_32F,
            d.ldc,
            blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| blas_err("cublasGemmEx", e))
}

/// A dense projection. F32 weights (the MoE router) with more than 8 rows run on the f32 SIMT
/// GEMM: exact to f32 like the CPU reference, so near-tied experts are picked the same way (the
/// tensor-core kernels round operands to f16); up to 8 rows, `gemv_f32` (also f32).
fn dense_gemm(
    b: &mut CudaBackend,
    weight: &str,
    m: usize,
    x: (u64, i64),
    y: (u64, i64),
    (layout, head_dim, n_head): (i32, i32, i32),
) -> Result<(), EngineError> {
    if let Some(operands) = cublas_operands(b, weight, m) {
        return cublas_gemm(b, weight, m, x, y, (layout, head_dim, n_head), operands);
    }
    let s = b.cu_stream();
    let w = b.weight(weight)?;
    let (k, n) = (w.dims[0] as usize, w.dims[1] as usize);
    let names = gemm_kernels(w.ty).ok_or_else(|| {
        EngineError::Unsupported(format!("no GEMM for {} weights ({weight})", w.ty.name()))
    })?;
    let a = GemmArgs {
        w: w.buf.ptr,
        w_row_bytes: w.row_bytes as i64,
        w_expert_bytes: 0,
        x: x.0,
        ldx: x.1,
        y: y.0,
        ldy: y.1,
        m: m as i32,
        n: n as i32,
        k: k as i32,
        sorted_rows: 0,
        x_div: 1,
        tile_expert: 0,
        tile_start: 0,
        tile_rows: 0,
        layout,
        head_dim,
        n_head,
    };
    let ty = w.ty;
    if ty == GgmlType::F32 && m > 8 {
        let (name, tile) = simt_variant(m, n, b.props.sm_count);
        let grid = (
            blocks(n as i64, tile as u32),
            blocks(m as i64, tile as u32),
            1,
        );
        return launch(b.kernel(name)?, grid, (SIMT_THREADS, 1, 1), 0, s, &a);
    }
    let v = dense_variant(m, n, k, b.props.sm_count);
    if v == 3 && use_mmv(ty, n, k) {
        if let Some(name) = mmv_kernel(ty) {
            let gx = mmv_grid_x(ty, n, k, 4 * b.props.sm_count);
            return launch(b.kernel(name)?, (gx, m as u32, 1), (MMV_THREADS, 1, 1), 0, s, &a);
        }
    }
    let kern = b.kernel(names[v])?;
    if v == 3 {
        let grid = (blocks(n as i64, GEMV_ROWS as u32), m as u32, 1);
        launch(kern, grid, (256, 1, 1), 0, s, &a)
    } else {
        let bm = [128i64, 64, 32][v];
        let grid = (
            blocks(n as i64, GEMM_BN as u32),
            blocks(m as i64, bm as u32),
            1,
        );
        launch(kern, grid, (256, 1, 1), gemm_smem_bytes(ty, bm), s, &a)
    }
}

/// Rows per MoE tile for `pairs` (token, expert) pairs over `experts`: 1 (GEMV) when experts
/// get about one row each (decode), else the tensor-core tile nearest the mean rows per expert.
fn moe_bm(pairs: usize, experts: usize) -> i64 {
    let mean = pairs as f64 / experts.max(1) as f64;
    if mean <= 2.0 {
        1
    } else if mean <= 40.0 {
        32
    } else if mean <= 100.0 {
        64
    } else {
        128
    }
}

/// Tiles the routing of `pairs` pairs over `experts` experts can make with tiles of `bm` rows:
/// each expert's rows in ceil(count / bm) tiles, so at most ceil(pairs / bm) + min(experts,
/// pairs), and exactly `pairs` for one-row tiles (decode). The MoE GEMM's grid.y: a loose bound
/// launches blocks that only exit (at decode, 256 + 8 tiles for 8 pairs).
fn moe_max_tiles(pairs: usize, experts: usize, bm: usize) -> usize {
    if bm <= 1 {
        pairs.max(1)
    } else {
        pairs.div_ceil(bm) + experts.min(pairs)
    }
}

/// Workspace bytes of the MoE routing tables for `pairs` pairs and `experts` experts.
/// Covers both tile heights a MoE GEMM may route with: `moe_bm`'s, and one-row tiles (taken
/// when K is not a multiple of the tensor-core K step).
pub fn moe_work_bytes(pairs: usize, experts: usize) -> usize {
    let bm = moe_bm(pairs, experts) as usize;
    moe_work_bytes_bm(pairs, experts, bm).max(moe_work_bytes_bm(pairs, experts, 1))
}

fn moe_work_bytes_bm(pairs: usize, experts: usize, bm: usize) -> usize {
    4 * (experts + pairs + 3 * moe_max_tiles(pairs, experts, bm) + 2)
}

fn moe_gemm(
    b: &mut CudaBackend,
    plan: &Plan,
    node: &Node,
    io: &Io,
    k: usize,
    pair_input: bool,
) -> Result<(), EngineError> {
    let _ = plan;
    let s = b.cu_stream();
    let w = b.weight(&node.weights[0])?;
    let (kk, n, e) = (w.dims[0] as usize, w.dims[1] as usize, w.dims[2] as usize);
    let ty = w.ty;
    let (wptr, row_bytes) = (w.buf.ptr, w.row_bytes as i64);
    let names = gemm_kernels(ty).ok_or_else(|| {
        EngineError::Unsupported(format!("no GEMM for {} expert weights", ty.name()))
    })?;
    if e > 256 {
        return Err(EngineError::Unsupported(format!(
            "MoE routing supports up to 256 experts; the model has {e}"
        )));
    }
    let tokens = node.inputs[1].rows;
    let pairs = tokens * k;
    let mut bm = moe_bm(pairs, e);
    if kk % 64 != 0 {
        bm = 1;
    }
    let max_tiles = moe_max_tiles(pairs, e, bm as usize);
    // Routing tables in the workspace: counts[E], sorted[P], tiles 3 x [max_tiles], err[2].
    let base = b.workspace(moe_work_bytes(pairs, e))?;
    let counts = base;
    let sorted = counts + 4 * e as u64;
    let t_exp = sorted + 4 * pairs as u64;
    let t_start = t_exp + 4 * max_tiles as u64;
    let t_rows = t_start + 4 * max_tiles as u64;
    let err = t_rows + 4 * max_tiles as u64;
    let ids = io.ins[1];
    if ids.1 != k as i64 {
        return Err(EngineError::Internal(
            "expert ids must be a contiguous [T, k] view".into(),
        ));
    }
    let r = MoeRouteArgs {
        ids: ids.0,
        n_tokens: tokens as i32,
        k: k as i32,
        n_expert: e as i32,
        bm: bm as i32,
        max_tiles: max_tiles as i32,
        counts,
        sorted_rows: sorted,
        tile_expert: t_exp,
        tile_start: t_start,
        tile_rows: t_rows,
        err,
    };
    launch(b.kernel("moe_route")?, (1, 1, 1), (1024, 1, 1), 0, s, &r)?;
    let a = GemmArgs {
        w: wptr,
        w_row_bytes: row_bytes,
        w_expert_bytes: row_bytes * n as i64,
        x: io.ins[0].0,
        ldx: io.ins[0].1,
        y: io.outs[0].0,
        ldy: io.outs[0].1,
        m: pairs as i32,
        n: n as i32,
        k: kk as i32,
        sorted_rows: sorted,
        x_div: if pair_input { 1 } else { k as i32 },
        tile_expert: t_exp,
        tile_start: t_start,
        tile_rows: t_rows,
        layout: 0,
        head_dim: 0,
        n_head: 0,
    };
    if bm == 1 {
        if use_mmv(ty, n, kk) {
            if let Some(name) = mmv_kernel(ty) {
                // About four waves of blocks over the used tiles (one per pair at decode).
                let per_tile = (4 * b.props.sm_count).div_ceil(pairs.max(1) as u32);
                let gx = mmv_grid_x(ty, n, kk, per_tile);
                let grid = (gx, max_tiles as u32, 1);
                return launch(b.kernel(name)?, grid, (MMV_THREADS, 1, 1), 0, s, &a);
            }
        }
        let grid = (blocks(n as i64, GEMV_ROWS as u32), max_tiles as u32, 1);
        launch(b.kernel(names[3])?, grid, (256, 1, 1), 0, s, &a)
    } else {
        let v = match bm {
            128 => 0,
            64 => 1,
            _ => 2,
        };
        let grid = (blocks(n as i64, GEMM_BN as u32), max_tiles as u32, 1);
        launch(
            b.kernel(names[v])?,
            grid,
            (256, 1, 1),
            gemm_smem_bytes(ty, bm),
            s,
            &a,
        )
    }
}

/// Workspace one node needs (bytes), so the backend can size it once per plan: a captured
/// graph must never see it move.
pub fn node_work_bytes(b: &CudaBackend, node: &Node) -> usize {
    let sms = b.props.sm_count;
    match &node.op {
        Op::DeltaRule {
            k_heads,
            v_heads,
            k_dim,
            v_dim,
        } => {
            let t = node.inputs[1].rows;
            if t > DELTA_STEP_MAX_T {
                4 * delta_work_floats(
                    t as i64,
                    *k_heads as i64,
                    *v_heads as i64,
                    *k_dim as i64,
                    *v_dim as i64,
                ) as usize
            } else {
                0
            }
        }
        Op::MatMul { .. } => node
            .weights
            .first()
            .and_then(|w| cublas_operands(b, w, node.inputs[0].rows))
            .map_or(0, |(w, x)| w + x + CUBLAS_WORKSPACE),
        Op::MoeMatMul { k, .. } => {
            let tokens = node.inputs[1].rows;
            let e = b
                .weight(&node.weights[0])
                .map(|w| w.dims.get(2).copied().unwrap_or(1) as usize)
                .unwrap_or(1);
            let pairs = tokens * k;
            let max_tiles = pairs + e; // bm >= 1 bound
            4 * (e + pairs + 3 * max_tiles + 2)
        }
        Op::Attention {
            n_head,
            n_head_kv,
            head_dim,
            q_pos0,
            ..
        } => {
            let r = node.inputs[0].rows;
            let p_vis = (q_pos0 + r) as i64;
            let target = (i64::from(sms) / *n_head_kv as i64).max(1);
            let chunk = ((p_vis + target - 1) / target + 63) / 64 * 64;
            let n_split = ((p_vis + chunk - 1) / chunk).max(1);
            4 * (n_split * r as i64 * *n_head as i64 * (*head_dim as i64 + 2)) as usize
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cuBLAS's definition of `C = op(A) op(B)` with op(A) = A^T and op(B) = B, column-major.
    fn gemm_ex_t_n(d: GemmExDims, a: &[f32], b: &[f32], c: &mut [f32]) {
        let (m, n, k) = (d.m as usize, d.n as usize, d.k as usize);
        let (lda, ldb, ldc) = (d.lda as usize, d.ldb as usize, d.ldc as usize);
        for j in 0..n {
            for i in 0..m {
                // op(A)(i, l) = A(l, i) = a[l + i * lda]; op(B)(l, j) = b[l + j * ldb].
                c[i + j * ldc] = (0..k).map(|l| a[l + i * lda] * b[l + j * ldb]).sum();
            }
        }
    }

    #[test]
    fn cublas_arguments_give_the_row_major_projection() {
        let (m, n, k, ldy) = (3usize, 5usize, 4usize, 7usize);
        let x: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let w: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.53).cos()).collect();
        let mut y = vec![f32::NAN; m * ldy];
        gemm_ex_t_n(GemmExDims::row_major(m, n, k, ldy), &w, &x, &mut y);
        for r in 0..m {
            for c in 0..ldy {
                let got = y[r * ldy + c];
                if c < n {
                    let want: f32 = (0..k).map(|l| x[r * k + l] * w[c * k + l]).sum();
                    assert!(
                        (got - want).abs() < 1e-6,
                        "y[{r}][{c}] = {got}, want {want}"
                    );
                } else {
                    assert!(got.is_nan(), "padding y[{r}][{c}] written");
                }
            }
        }
    }

    #[test]
    fn simt_constants_mirror_gemm_cu() {
        let src = include_str!("kernels/gemm.cu");
        for (mac, v) in [
            ("SIMT_THREADS", i64::from(SIMT_THREADS)),
            ("SIMT_BM", SIMT_TILE),
            ("SIMT_BN", SIMT_TILE),
            ("SIMT_M32_BM", SIMT_M32_TILE),
            ("SIMT_M32_BN", SIMT_M32_TILE),
        ] {
            assert!(
                src.contains(&format!("#define {mac} {v}\n")),
                "{mac} != {v}"
            );
        }
    }

    #[test]
    fn simt_variant_gives_every_sm_a_block() {
        // Router shapes (N = 256) on 132 SMs: 64 x 64 tiles from 4 x 33 blocks on.
        assert_eq!(simt_variant(8192, 256, 132), ("gemm_f32_simt", 64));
        assert_eq!(simt_variant(4096, 256, 132), ("gemm_f32_simt", 64));
        assert_eq!(simt_variant(2112, 256, 132), ("gemm_f32_simt", 64));
        assert_eq!(simt_variant(2048, 256, 132), ("gemm_f32_simt_m32", 32));
        assert_eq!(simt_variant(512, 256, 132), ("gemm_f32_simt_m32", 32));
        assert_eq!(simt_variant(100, 8, 132), ("gemm_f32_simt_m32", 32));
    }
}
