//! Causal softmax attention (`Op::Attention`, reference `cpu/ops/attention.rs`): flash attention
//! for prefill, flash decoding with a key split for up to 8 query rows (`kernels/attention.cu`).

use tally_model::Node;

use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::*;
use crate::cuda::dispatch::Io;
use crate::cuda::launch::{blocks, launch};

pub(crate) fn attention(
    b: &mut CudaBackend,
    node: &Node,
    io: &Io,
    (h, hkv, d, scale, q_offset): (usize, usize, usize, f32, usize),
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
        q_pos0: q_offset as i32,
        scale,
        n_split: 1,
        kv_chunk: 0,
        pad0: 0,
        ws: 0,
        k16: 0,
        v16: 0,
        ld16: 0,
        pos: io.ins[3].0,
    };
    if rows <= ATTN_DEC_MAXQ {
        // Flash decoding: split the keys so every SM has a block, then combine. The grid is
        // fixed by the cache's capacity (the position is device data); the kernels split the
        // keys the cache holds evenly (kv_chunk 0), splits past them exit at once.
        let n_split = decode_splits(b.props.sm_count, hkv, p);
        a.n_split = n_split as i32;
        if n_split > 1 {
            let floats = n_split * r * h * (d + 2);
            a.ws = b.workspace(floats * 4)?;
        }
        let name = match suffix {
            "d32" => "flash_decode_d32",
            "d64" => "flash_decode_d64",
            "d128" => "flash_decode_d128",
            _ => "flash_decode_d256",
        };
        // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
        // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
        // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
        unsafe {
            launch(
                b.kernel(name)?,
                (n_split as u32, hkv as u32, 1),
                (256, 1, 1),
                0,
                s,
                &a,
            )
        }?;
        if n_split > 1 {
            let n = r as i64 * h as i64 * d as i64 / 4;
            // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
            // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
            // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
            unsafe {
                launch(
                    b.kernel("flash_attn_combine")?,
                    (blocks(n, 256), 1, 1),
                    (256, 1, 1),
                    0,
                    s,
                    &a,
                )
            }?;
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
    // SAFETY: `a` is the #[repr(C)] mirror of the kernel's parameter struct (args.rs); its
    // pointers are the node's views in buffers `prepare` sized for this plan, weights on the
    // device, or the workspace sized by `node_work_bytes`, and the grid stays in its shapes.
    unsafe {
        launch(
            b.kernel(name)?,
            (blocks(rows, bm), hkv as u32, 1),
            (2 * bm, 1, 1),
            attn_smem_bytes(d as i64, 8, false),
            s,
            &a,
        )
    }
}

/// Key splits of flash decoding over a cache of `cap` positions: one block per SM over the KV
/// heads, at most one split per 64 keys of the cache.
pub(crate) fn decode_splits(sms: u32, hkv: usize, cap: usize) -> usize {
    let target = (sms.max(1) as usize / hkv.max(1)).max(1);
    target.min(cap.div_ceil(64)).max(1)
}
