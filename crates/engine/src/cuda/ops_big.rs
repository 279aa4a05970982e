//! Dispatch of the ops whose kernels are large: projections (GEMM, MoE), the delta rule, the
//! causal conv, attention and the embedding lookup.

use std::collections::HashMap;

use cudarc::driver::{result, sys};
use tally_model::{Node, Op, Plan};

use super::CudaBackend;
use super::args::*;
use super::dispatch::Io;
use super::launch::{Kernel, blocks, launch};
use crate::EngineError;

/// At most this many tokens go token by token through `delta_step`; longer runs are chunked.
const DELTA_STEP_MAX_T: usize = 16;

pub fn kernel_names(source: &str) -> &'static [&'static str] {
    match source {
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
        _ => {
            let _ = plan;
            Err(EngineError::Unsupported(format!(
                "the CUDA backend has no kernel for `{}` yet",
                node.op.name()
            )))
        }
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
