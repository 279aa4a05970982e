//! Dispatch of the ops whose kernels are large: projections (GEMM, MoE), the delta rule, the
//! causal conv, attention and the embedding lookup.

use std::collections::HashMap;

use cudarc::driver::{result, sys};
use tally_model::{Node, Op};

use super::CudaBackend;
use super::args::*;
use super::dispatch::Io;
use super::launch::{Kernel, blocks, launch};
use super::ops::attention::{attention, decode_splits};
use super::ops::matmul::{
    CUBLAS_WORKSPACE, GEMM_TYPES, cublas_operands, dense_gemm, gemm_kernels, layout_code, qt,
};
use super::ops::moe::{MoeTables, moe_gemm};
use crate::EngineError;

/// At most this many tokens go token by token through `delta_step`; longer runs are chunked.
const DELTA_STEP_MAX_T: usize = 16;

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
        "conv" => &["conv_silu", "delta_gates"],
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

pub fn dispatch(b: &mut CudaBackend, node: &Node, io: &Io) -> Result<(), EngineError> {
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
            // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
            // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
            // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
            unsafe { launch(b.kernel("conv_silu")?, grid, (128, 1, 1), 0, s, &a) }
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
            // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
            // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
            // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
            unsafe {
                launch(
                    b.kernel("delta_gates")?,
                    (blocks(n, 256).min(4096), 1, 1),
                    (256, 1, 1),
                    0,
                    s,
                    &a,
                )
            }
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
                // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
                // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
                // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
                unsafe {
                    launch(
                        b.kernel("delta_chunk_prep")?,
                        (nc, *v_heads as u32, 1),
                        (256, 1, 1),
                        delta_prep_smem_bytes(dk),
                        s,
                        &a,
                    )
                }?;
                // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
                // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
                // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
                unsafe {
                    launch(
                        b.kernel("delta_chunk_scan")?,
                        (*v_heads as u32, slices, 1),
                        (256, 1, 1),
                        delta_scan_smem_bytes(dk),
                        s,
                        &a,
                    )
                }
            } else {
                // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
                // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
                // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
                unsafe {
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
        }
        Op::Attention {
            n_head,
            n_head_kv,
            head_dim,
            scale,
            q_offset,
        } => attention(
            b,
            node,
            io,
            (*n_head, *n_head_kv, *head_dim, *scale, *q_offset),
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
        Op::MoeMatMul { k, pair_input } => moe_gemm(b, node, io, *k, *pair_input),
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
            // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
            // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
            // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
            unsafe { launch(b.kernel("dequant_rows")?, grid, (256, 1, 1), 0, s, &a) }
        }
        // No wildcard: a new op does not compile until it is handled here or in dispatch.rs.
        Op::RmsNorm { .. }
        | Op::L2Norm { .. }
        | Op::Rope { .. }
        | Op::KvStore
        | Op::Add
        | Op::MulSilu
        | Op::MulSigmoid
        | Op::SwiGlu
        | Op::TopK { .. }
        | Op::MoeCombine { .. }
        | Op::SharedGate => Err(EngineError::Internal(format!(
            "`{}` is launched by dispatch.rs",
            node.op.name()
        ))),
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
            let (e, kk) = b
                .weight(&node.weights[0])
                .map(|w| {
                    (
                        w.dims.get(2).copied().unwrap_or(1) as usize,
                        w.dims[0] as usize,
                    )
                })
                .unwrap_or((1, 1));
            MoeTables::new(node.inputs[1].rows * k, e, kk).bytes()
        }
        Op::Attention {
            n_head,
            n_head_kv,
            head_dim,
            ..
        } => {
            let (r, p) = (node.inputs[0].rows, node.inputs[1].rows);
            // Only flash decoding splits the keys (and needs the partials' workspace).
            if (r * (*n_head / (*n_head_kv).max(1))) as i64 > ATTN_DEC_MAXQ {
                return 0;
            }
            let n_split = decode_splits(sms, *n_head_kv, p) as i64;
            4 * (n_split * r as i64 * *n_head as i64 * (*head_dim as i64 + 2)) as usize
        }
        _ => 0,
    }
}
