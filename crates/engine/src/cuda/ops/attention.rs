//! Causal softmax attention (`Op::Attention`, reference `cpu/ops/attention.rs`): flash attention
//! for prefill (f16 copies of K/V for prompts of at least [`F16_MIN_ROWS`] tokens, head dim 256
//! on wgmma where the prompt fills the device: `TALLY_ATTN=wg`, the default; `=f16` keeps the
//! mma.sync kernel for every head dim, `=f32` reads the f32 cache), flash decoding with a key
//! split for up to ATTN_DEC_MAXQ query rows (`kernels/attention.cu`, `attention_wg.cuh`).

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
use crate::cuda::options::AttnPath;

/// The heads of one attention node.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub q_offset: usize,
}

/// Warps of the f16 prefill kernel (`flash_attn_h_w4_d*`): 64-row tiles, two blocks an SM.
pub const F16_NW: i64 = 4;

/// Query rows (tokens) from which `TALLY_ATTN=f16` takes the f16 path (prompts only): its conversion reads the
/// whole visible cache once per node, which a long prompt's attention amortises (the lab
/// measured it faster from 512 rows up, docs/results/2026-12-04-h200-decode-attn/) and a
/// verification batch of a few tokens at depth would not.
pub const F16_MIN_ROWS: usize = 64;

/// Dynamic shared memory of a prefill kernel of `nw` warps (`ATTN_SMEM_BYTES(D, NW, KV16)` in
/// attention.cu): `(16*NW + 2*BN) * (D + 8) * 2` bytes with BN = 64 for f16 K/V, else
/// min(1024*NW/D, 64).
pub fn smem_bytes(d: i64, nw: i64, kv16: bool) -> u32 {
    let bn = if kv16 { 64 } else { (1024 * nw / d).min(64) };
    ((16 * nw + 2 * bn) * (d + 8) * 2) as u32
}

/// Packed rows of a `flash_attn_wg_d*` block (`ATTN_WG_BM`: two warpgroups of 64) and the head
/// dim it serves.
pub const WG_ROWS: i64 = 128;
pub const WG_HEAD_DIM: usize = 256;

/// Dynamic shared memory of `flash_attn_wg_d*` (`ATTN_WG_SMEM_BYTES(D)`): 1024 bytes of
/// alignment slack, the 128-row Q tile, two slots of a 64-key K tile and three of a transposed
/// V tile, all f16 (230,400 bytes at d = 256).
pub fn wg_smem_bytes(d: i64) -> u32 {
    (1024 + WG_ROWS * d * 2 + 5 * 64 * d * 2) as u32
}

/// The host's sizes asserted equal to attention.cu's own (appended to it at build time).
pub fn geometry_asserts() -> String {
    let mut s = String::new();
    s += &format!(
        "static_assert(ATTN_WG_SMEM_BYTES({WG_HEAD_DIM}) == {} && ATTN_WG_BM == {WG_ROWS}, \"wgmma attention geometry differs from attention.rs\");\n",
        wg_smem_bytes(WG_HEAD_DIM as i64)
    );
    for &d in &ATTN_HEAD_DIMS {
        for (nw, kv16, nw_src) in [(ATTN_NW, false, "ATTN_NW"), (F16_NW, true, "4")] {
            s += &format!(
                "static_assert(ATTN_SMEM_BYTES({d}, {nw_src}, {}) == {}, \"attention smem of d {d}{} differs from attention.rs\");\n",
                kv16 as i32,
                smem_bytes(d as i64, nw, kv16),
                if kv16 { " (f16 K/V)" } else { "" },
            );
        }
    }
    s
}

/// Bytes of one f16 copy of a `cap`-row cache of `hkv` heads of `d`, rounded up to 256 (what
/// follows it starts aligned).
fn f16_copy_bytes(cap: usize, hkv: usize, d: usize) -> usize {
    (cap * hkv * d * 2).div_ceil(256) * 256
}

/// Keys a row of the transposed V copy holds (`ldvt`): the capacity rounded up to the 64-key
/// tiles `flash_attn_wg_d*` reads whole (`attn_kv_to_f16` zeroes them past the visible keys).
fn vt_keys(cap: usize) -> usize {
    cap.div_ceil(64) * 64
}

/// Key splits over a cache of `cap` positions for a grid of `blocks` blocks a split (flash
/// decoding: one per KV head): about `sms` blocks in all (for decoding the SM count times
/// `TALLY_DEC_SPLIT`), at most one split per ATTN_DEC_STEP keys of the cache.
pub fn key_splits(sms: u32, blocks: usize, cap: usize) -> usize {
    let target = (sms.max(1) as usize / blocks.max(1)).max(1);
    target.min(cap.div_ceil(ATTN_DEC_STEP as usize)).max(1)
}

/// Whether `r` query rows of `h` heads over `hkv` KV heads go to flash decoding.
fn decodes(r: usize, h: usize, hkv: usize) -> bool {
    (r * (h / hkv.max(1))) as i64 <= ATTN_DEC_MAXQ
}

/// Floats of the split partials: n_split * R * H * (d + 2).
fn partial_floats(n_split: usize, r: usize, h: usize, d: usize) -> usize {
    n_split * r * h * (d + 2)
}

/// The switches and the device's size that choose an attention node's kernels.
#[derive(Debug, Clone, Copy)]
pub struct Choice {
    /// Multiprocessors.
    pub sms: u32,
    /// Flash decoding's splits per multiprocessor (`TALLY_DEC_SPLIT`).
    pub dec_per_sm: u32,
    /// `TALLY_ATTN`.
    pub path: AttnPath,
    /// `TALLY_ATTN_SPLIT=on`: key splits for prompts too short to fill the device.
    pub split: bool,
}

impl Choice {
    pub fn of(b: &CudaBackend) -> Choice {
        Choice {
            sms: b.props.sm_count,
            dec_per_sm: b.options.decode_splits_per_sm,
            path: b.options.attn,
            split: b.options.attn_split,
        }
    }
}

/// How an attention node of `r` query rows over a `cap`-row cache runs: which kernel, its key
/// splits (each split's partials go to the workspace and `flash_attn_combine` merges them), and
/// its workspace (the f16 copies first, then the partials).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub kind: Kind,
    pub n_split: usize,
    /// Bytes of each f16 copy of the cache (0: none).
    pub copy_bytes: usize,
    /// Bytes of the split partials (0: one split).
    pub partial_bytes: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `flash_decode_d*`: at most ATTN_DEC_MAXQ packed rows.
    Decode,
    /// `flash_attn_d*`: f32 K/V, ATTN_NW warps.
    F32,
    /// `attn_kv_to_f16` then `flash_attn_h_w4_d*`.
    F16,
    /// `attn_kv_to_f16` (V transposed) then `flash_attn_wg_d256`.
    Wg,
}

impl Route {
    pub fn work_bytes(&self) -> usize {
        2 * self.copy_bytes + self.partial_bytes
    }
}

/// Key splits of a prompt's attention whose `qblocks * hkv` blocks would leave most of the `sms`
/// multiprocessors idle (fewer than four blocks each: a verification batch, a short turn at
/// depth): [`key_splits`], as for decoding. The grid is fixed by the capacity; the kernels
/// divide the keys the position makes visible (kv_chunk 0).
fn prefill_splits(sms: u32, qblocks: usize, hkv: usize, cap: usize) -> usize {
    let blocks = qblocks * hkv.max(1);
    if blocks * 4 >= sms as usize {
        return 1;
    }
    key_splits(sms, blocks, cap)
}

/// The route of a node of `r` query rows over a `cap`-row cache: the one place it is decided
/// (the workspace sizes of `work_bytes` and the launches both come from it).
pub fn route(c: Choice, r: usize, cap: usize, (h, hkv, d): (usize, usize, usize)) -> Route {
    let part = |n_split: usize| {
        if n_split > 1 {
            4 * partial_floats(n_split, r, h, d)
        } else {
            0
        }
    };
    if decodes(r, h, hkv) {
        let n_split = key_splits(c.sms * c.dec_per_sm, hkv, cap);
        return Route {
            kind: Kind::Decode,
            n_split,
            copy_bytes: 0,
            partial_bytes: part(n_split),
        };
    }
    let f16 = c.path != AttnPath::F32 && r >= F16_MIN_ROWS;
    let rows = r * (h / hkv.max(1));
    // The wgmma kernel walks every key of its rows (no key split): it takes a prompt whose
    // 128-row tiles fill the device, the split f16 kernel any other.
    if f16 && c.path.wgmma() && d == WG_HEAD_DIM {
        let tiles = rows.div_ceil(WG_ROWS as usize);
        if !c.split || prefill_splits(c.sms, tiles, hkv, cap) == 1 {
            return Route {
                kind: Kind::Wg,
                n_split: 1,
                copy_bytes: f16_copy_bytes(vt_keys(cap), hkv, d),
                partial_bytes: 0,
            };
        }
    }
    let nw = if f16 { F16_NW } else { ATTN_NW };
    let n_split = if c.split {
        prefill_splits(c.sms, rows.div_ceil(16 * nw as usize), hkv, cap)
    } else {
        1
    };
    Route {
        kind: if f16 { Kind::F16 } else { Kind::F32 },
        n_split,
        copy_bytes: if f16 { f16_copy_bytes(cap, hkv, d) } else { 0 },
        partial_bytes: part(n_split),
    }
}

/// Workspace bytes of an attention node of `r` query rows over a cache of `cap` rows.
pub fn work_bytes(c: Choice, r: usize, cap: usize, heads: (usize, usize, usize)) -> usize {
    route(c, r, cap, heads).work_bytes()
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
    let rt = route(Choice::of(b), r, p, (h, hkv, d));
    let by_dim =
        |ks: &[crate::cuda::launch::Kernel; 4]| Kernels::by_head_dim(ks, d).ok_or_else(unsupported);
    let (kernel, threads, smem) = match rt.kind {
        Kind::Decode => (by_dim(&b.kernels.flash_decode)?, 256, 0),
        Kind::F32 => (
            by_dim(&b.kernels.flash_attn)?,
            32 * ATTN_NW as u32,
            smem_bytes(d as i64, ATTN_NW, false),
        ),
        Kind::F16 => (
            by_dim(&b.kernels.flash_attn_h)?,
            32 * F16_NW as u32,
            smem_bytes(d as i64, F16_NW, true),
        ),
        // route() picks it for WG_HEAD_DIM only.
        Kind::Wg => (b.kernels.flash_attn_wg, 256, wg_smem_bytes(d as i64)),
    };
    let n_split = rt.n_split;
    if n_split > 1
        && (n_split as i64 > ATTN_COMBINE_MAX_SPLITS || d / 4 > ATTN_COMBINE_THREADS as usize)
    {
        return Err(EngineError::Internal(format!(
            "{n_split} key splits of head dim {d} exceed the combine's limits"
        )));
    }
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
        n_split: n_split as i32,
        // 0: the kernels split the keys the position makes visible evenly (the grid is fixed
        // by the capacity; splits past them find no key and weigh nothing in the combine).
        kv_chunk: 0,
        ldvt: 0,
        ws: 0,
        pos: io.ins[3].0,
        k16: 0,
        v16: 0,
        ld16: 0,
    };
    if rt.work_bytes() > 0 {
        let ws = b.workspace(rt.work_bytes())?;
        if rt.copy_bytes > 0 {
            (a.k16, a.v16, a.ld16) = (ws, ws + rt.copy_bytes as u64, (hkv * d) as i64);
        }
        if rt.kind == Kind::Wg {
            a.ldvt = vt_keys(p) as i32;
        }
        if rt.partial_bytes > 0 {
            a.ws = ws + 2 * rt.copy_bytes as u64;
        }
    }
    let s = b.cu_stream();
    if matches!(rt.kind, Kind::F16 | Kind::Wg) {
        // The conversion's blocks stride over the visible rows (the position is device data),
        // so a grid for the cache's capacity, capped at 8 blocks an SM, covers any position.
        let chunks = (p * hkv * d / 8) as i64;
        let grid_x = blocks(chunks, 256).min(8 * b.props.sm_count).max(1);
        // SAFETY: AttnArgs mirrors attention.cu's struct (layout asserted at kernel build);
        // k16 and v16 are two disjoint 256-byte-aligned parts of the workspace (grown above to
        // two copies of p rows of ld16 = hkv * d halves, the most rows the position can make
        // visible; for Wg each holds hkv * d rows of ldvt >= p keys rounded up to 64, V's
        // transposed copy), k and v the node's p-row caches. Grid (any x, 2): y picks K or V.
        unsafe {
            launch(
                b.kernels.attn_kv_to_f16,
                (grid_x, 2, 1),
                (256, 1, 1),
                0,
                s,
                &a,
            )
        }?;
    }
    let grid = match rt.kind {
        Kind::Decode => (n_split as u32, hkv as u32, 1),
        Kind::Wg => {
            let rows = r as i64 * (h / hkv.max(1)) as i64;
            (blocks(rows, WG_ROWS as u32), hkv as u32, 1)
        }
        _ => {
            let rows = r as i64 * (h / hkv.max(1)) as i64;
            (blocks(rows, threads / 2), hkv as u32, n_split as u32)
        }
    };
    // SAFETY: AttnArgs mirrors attention.cu's struct (layout asserted at kernel build). q and o
    // are the node's R x H*d views, k and v the whole P-row caches, pos the plan's `[1, 1]`
    // position (the kernels see cache rows up to it, at most P). Flash decoding: grid
    // (n_split, Hkv), 256 threads; prefill: grid (query tiles of threads / 2 packed rows, Hkv,
    // n_split) and the kernel's own warps and shared memory for d (asserted at kernel build;
    // `configure` raised the limit to it); n_split is exactly the splits the combine reads.
    // The f16 copies were written just before on this stream; ws holds the partials of
    // n_split > 1 (the workspace grown above from the same route; prepare() sized it for the
    // plan).
    unsafe { launch(kernel, grid, (threads, 1, 1), smem, s, &a) }?;
    if n_split > 1 {
        // SAFETY: as above: it reads the n_split partials written to ws just before on this
        // stream and writes o; one block of ATTN_COMBINE_THREADS (the count the kernel was
        // built with) per (query row, head), n_split and d within its limits (checked above).
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_matches_the_kernel_table() {
        // attention.cu's launch rules list these sizes (d = 32, 64, 128, 256).
        let f32_w8 = ATTN_HEAD_DIMS.map(|d| smem_bytes(d as i64, ATTN_NW, false));
        let f16_w4 = ATTN_HEAD_DIMS.map(|d| smem_bytes(d as i64, F16_NW, true));
        assert_eq!(f32_w8, [20480, 36864, 69632, 101376]);
        assert_eq!(f16_w4, [15360, 27648, 52224, 101376]);
    }

    fn choice(path: AttnPath, split: bool) -> Choice {
        Choice {
            sms: 132,
            dec_per_sm: 1,
            path,
            split,
        }
    }

    #[test]
    fn the_f16_path_takes_long_prompts_only_and_sizes_two_copies() {
        let model = (16, 2, 256);
        // Off by default: a prompt needs no workspace, decoding its split partials.
        assert_eq!(
            work_bytes(choice(AttnPath::F32, false), 512, 4096, model),
            0
        );
        let dec = route(choice(AttnPath::F32, false), 1, 4096, model);
        assert_eq!((dec.kind, dec.n_split), (Kind::Decode, 64));
        assert_eq!(dec.work_bytes(), 4 * 64 * 16 * 258);
        // On: prompts of F16_MIN_ROWS tokens and more get two aligned f16 copies of the cache;
        // shorter batches (a verification) and decode keep the f32 kernels.
        let copy = 4097 * 2 * 256 * 2;
        let f16 = route(choice(AttnPath::F16, false), F16_MIN_ROWS, 4097, model);
        assert_eq!(
            (f16.kind, f16.n_split, f16.copy_bytes),
            (Kind::F16, 1, copy)
        );
        assert_eq!(f16.work_bytes(), 2 * copy);
        let short = route(choice(AttnPath::F16, false), F16_MIN_ROWS - 1, 4096, model);
        assert_eq!((short.kind, short.work_bytes()), (Kind::F32, 0));
        assert_eq!(route(choice(AttnPath::F16, false), 1, 4096, model), dec);
        // A copy of 5 rows of 32 halves starts the second copy at 256 bytes, not 320 / 2.
        assert_eq!(
            work_bytes(choice(AttnPath::F16, false), 64, 5, (4, 1, 32)),
            2 * 512
        );
    }

    #[test]
    fn short_prompts_split_their_keys_when_asked() {
        let model = (16, 2, 256);
        // A verification of 4 tokens: 32 packed rows, one query tile per KV head (2 blocks on
        // 132 SMs): 66 splits a head, at most one per 64 keys of the cache.
        let v = route(choice(AttnPath::F32, true), 4, 8192, model);
        assert_eq!((v.kind, v.n_split), (Kind::F32, 66));
        assert_eq!(v.partial_bytes, 4 * 66 * 4 * 16 * 258);
        assert_eq!(route(choice(AttnPath::F32, true), 4, 200, model).n_split, 4);
        assert_eq!(
            route(choice(AttnPath::F32, false), 4, 8192, model).n_split,
            1
        );
        // 256 tokens: 16 tiles of 128 packed rows x 2 heads = 32 blocks, under 4 an SM: 4 splits.
        assert_eq!(
            route(choice(AttnPath::F32, true), 256, 8192, model).n_split,
            4
        );
        // 512 tokens fill the device: no split.
        assert_eq!(
            route(choice(AttnPath::F32, true), 512, 8192, model).n_split,
            1
        );
        // With f16 copies the tiles are 64 rows: 64 tokens = 8 tiles x 2 = 16 blocks: 8 splits,
        // the partials after the two copies.
        let h = route(choice(AttnPath::F16, true), 64, 8192, model);
        assert_eq!((h.kind, h.n_split), (Kind::F16, 8));
        assert_eq!(h.work_bytes(), 2 * h.copy_bytes + 4 * 8 * 64 * 16 * 258);
        // Decoding keeps its own splits.
        assert_eq!(
            route(choice(AttnPath::F32, true), 1, 8192, model).kind,
            Kind::Decode
        );
    }

    #[test]
    fn the_wgmma_path_takes_head_dim_256_prompts_that_fill_the_device() {
        let model = (16, 2, 256);
        let wg = |r, cap, split| route(choice(AttnPath::Wg, split), r, cap, model);
        // 512 tokens: 4,096 packed rows = 32 tiles of 128 x 2 heads = 64 blocks: no split. Both
        // copies sized for V transposed: 512 channels x the capacity rounded up to 64 keys.
        let r = wg(512, 4097, true);
        assert_eq!((r.kind, r.n_split, r.partial_bytes), (Kind::Wg, 1, 0));
        assert_eq!(r.copy_bytes, 4160 * 2 * 256 * 2);
        assert_eq!(r.work_bytes(), 2 * r.copy_bytes);
        // 64 tokens: 4 tiles x 2 = 8 blocks, under 4 an SM: the split f16 kernel takes it,
        // unless splits are off.
        assert_eq!(wg(64, 8192, true).kind, Kind::F16);
        assert_eq!(wg(64, 8192, false).kind, Kind::Wg);
        // Short batches and decoding as before; other head dims on the f16 kernel.
        assert_eq!(wg(F16_MIN_ROWS - 1, 4096, false).kind, Kind::F32);
        assert_eq!(wg(1, 4096, true).kind, Kind::Decode);
        let d128 = route(choice(AttnPath::Wg, true), 512, 4096, (16, 2, 128));
        assert_eq!(d128.kind, Kind::F16);
    }
}
