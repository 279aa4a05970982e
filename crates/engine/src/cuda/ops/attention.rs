//! Causal softmax attention (`Op::Attention`, reference `cpu/ops/attention.rs`): flash attention
//! for prefill, flash decoding with a key split for up to ATTN_DEC_MAXQ query rows
//! (`kernels/attention.cu`).

use tally_model::Node;

use super::Io;
use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::AttnArgs;
use crate::cuda::consts::{
    ATTN_COMBINE_MAX_SPLITS, ATTN_COMBINE_THREADS, ATTN_DEC_MAXQ, ATTN_DEC_STEP, ATTN_NW,
};
use crate::cuda::kernels::{ATTN_HEAD_DIMS, Kernels};
use crate::cuda::launch::{blocks, launch};

/// The heads of one attention node.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub q_offset: usize,
}

/// Dynamic shared memory of the prefill kernels (`ATTN_SMEM_BYTES(D, NW, 0)` in attention.cu):
/// `(16*NW + 2*BN) * (D + 8) * 2` bytes with BN = min(1024*NW/D, 64).
pub fn smem_bytes(d: i64) -> u32 {
    let bn = (1024 * ATTN_NW / d).min(64);
    ((16 * ATTN_NW + 2 * bn) * (d + 8) * 2) as u32
}

/// The host's sizes asserted equal to attention.cu's own (appended to it at build time).
pub fn geometry_asserts() -> String {
    ATTN_HEAD_DIMS
        .iter()
        .map(|&d| {
            format!(
                "static_assert(ATTN_SMEM_BYTES({d}, ATTN_NW, 0) == {}, \"attention smem of d {d} differs from attention.rs\");\n",
                smem_bytes(d as i64)
            )
        })
        .collect()
}

/// Key splits of flash decoding over a cache of `cap` positions: `sms` blocks (the SM count
/// times `TALLY_DEC_SPLIT`) over the KV heads, at most one split per ATTN_DEC_STEP keys of the
/// cache.
pub fn decode_splits(sms: u32, hkv: usize, cap: usize) -> usize {
    let target = (sms.max(1) as usize / hkv.max(1)).max(1);
    target.min(cap.div_ceil(ATTN_DEC_STEP as usize)).max(1)
}

/// Whether `r` query rows of `h` heads over `hkv` KV heads go to flash decoding.
fn decodes(r: usize, h: usize, hkv: usize) -> bool {
    (r * (h / hkv.max(1))) as i64 <= ATTN_DEC_MAXQ
}

/// Floats of flash decoding's split partials: n_split * R * H * (d + 2).
fn partial_floats(n_split: usize, r: usize, h: usize, d: usize) -> usize {
    n_split * r * h * (d + 2)
}

/// Workspace bytes of an attention node of `r` query rows over a cache of `cap` rows: only flash
/// decoding with more than one split needs one (its partials).
pub fn work_bytes(sms: u32, r: usize, cap: usize, (h, hkv, d): (usize, usize, usize)) -> usize {
    if !decodes(r, h, hkv) {
        return 0;
    }
    let n_split = decode_splits(sms, hkv, cap);
    if n_split > 1 {
        4 * partial_floats(n_split, r, h, d)
    } else {
        0
    }
}

pub fn attention(b: &mut CudaBackend, node: &Node, io: &Io, sh: Shape) -> Result<(), EngineError> {
    let Shape {
        n_head: h,
        n_head_kv: hkv,
        head_dim: d,
        scale,
        q_offset,
    } = sh;
    let (r, p) = (node.inputs[0].rows, node.inputs[1].rows);
    let unsupported = || {
        EngineError::Unsupported(format!(
            "the CUDA attention supports head dims 32, 64, 128, 256; got {d}"
        ))
    };
    let (prefill, decode) = (
        Kernels::by_head_dim(&b.kernels.flash_attn, d).ok_or_else(unsupported)?,
        Kernels::by_head_dim(&b.kernels.flash_decode, d).ok_or_else(unsupported)?,
    );
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
        q_offset: q_offset as i32,
        scale,
        n_split: 1,
        kv_chunk: 0,
        pad0: 0,
        ws: 0,
        pos: io.ins[3].0,
    };
    let s = b.cu_stream();
    if decodes(r, h, hkv) {
        // Flash decoding: split the keys so every SM has a block, then combine. The grid is
        // fixed by the cache's capacity (the position is device data); the kernels split the
        // keys the cache holds evenly (kv_chunk 0), splits past them exit at once.
        let n_split = decode_splits(b.props.sm_count * b.options.decode_splits_per_sm, hkv, p);
        a.n_split = n_split as i32;
        if n_split > 1 {
            a.ws = b.workspace(4 * partial_floats(n_split, r, h, d))?;
        }
        // SAFETY: AttnArgs mirrors attention.cu's struct (layout asserted at kernel build).
        // Grid (n_split, Hkv) with n_split exactly the splits the combine reads; q and o are the
        // node's R x H*d views, k and v the whole P-row caches, pos the plan's `[1, 1]` position
        // (the kernel sees cache rows up to it, at most P); ws holds the partials of n_split > 1
        // (workspace grown above, prepare() sized it for the plan).
        unsafe {
            launch(
                decode,
                (n_split as u32, hkv as u32, 1),
                (256, 1, 1),
                0,
                s,
                &a,
            )
        }?;
        if n_split > 1 {
            if n_split as i64 > ATTN_COMBINE_MAX_SPLITS || d / 4 > ATTN_COMBINE_THREADS as usize {
                return Err(EngineError::Internal(format!(
                    "{n_split} key splits of head dim {d} exceed the combine's limits"
                )));
            }
            // SAFETY: as for flash decoding: it reads the n_split partials it wrote to ws earlier
            // on this stream and writes o; one block of ATTN_COMBINE_THREADS (the count the
            // kernel was built with) per (query row, head), n_split and d within its limits
            // (checked above).
            unsafe {
                launch(
                    b.kernels.flash_attn_combine,
                    ((r * h) as u32, 1, 1),
                    (ATTN_COMBINE_THREADS, 1, 1),
                    0,
                    s,
                    &a,
                )
            }?;
        }
        return Ok(());
    }
    let bm = 16 * ATTN_NW as u32;
    // SAFETY: as for flash decoding, with n_split = 1 (o written directly, no workspace), grid
    // (query tiles of 16 * ATTN_NW packed rows, Hkv) and 32 * ATTN_NW threads, the warps the
    // kernel was built with; the dynamic shared memory is attention.cu's own size for d
    // (asserted at kernel build), which `configure` raised the kernel's limit to.
    unsafe {
        launch(
            prefill,
            (blocks(rows, bm), hkv as u32, 1),
            (2 * bm, 1, 1),
            smem_bytes(d as i64),
            s,
            &a,
        )
    }
}
