//! `#[repr(C)]` mirrors of the kernels' parameter structs (pointers are device addresses), and
//! the check that they match: [`layout_asserts`] writes, from `offset_of!` and `size_of`, one
//! `static_assert` per field of every struct a kernel source defines (NVRTC has no `offsetof`:
//! `TALLY_OFFSETOF` is its front end's builtin, `__INTADDR__`), which `compile` appends to
//! that source, so a kernel build with a struct out of step with its mirror fails (tested in
//! `tests/cuda_kernels_compile.rs`, also with a deliberately wrong offset).

pub type DPtr = u64;

use super::consts::GEMV_MULTI_SEGS;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NormArgs {
    pub x: DPtr,
    pub ldx: i64,
    pub w: DPtr,
    pub y: DPtr,
    pub ldy: i64,
    pub rows: i32,
    pub cols: i32,
    pub group: i32,
    pub eps: f32,
    pub scale: f32,
    pub l2: i32,
    /// Fused MulSilu after the norm (null: none): y = norm * silu(gate).
    pub gate: DPtr,
    pub ldgate: i64,
    /// A second norm in the same launch (null: none), in the blocks from `blocks1` on.
    pub x2: DPtr,
    pub ldx2: i64,
    pub y2: DPtr,
    pub ldy2: i64,
    pub rows2: i32,
    pub cols2: i32,
    pub scale2: f32,
    pub blocks1: i32,
    /// 1: `norm_rows_w`'s loop form where its register form would run (`TALLY_NORM=warp-loop`).
    pub no_regs: i32,
    /// The first norm's outputs also as f16 (null: not), row stride `ldyh` halves: the cast
    /// of the cuBLAS projections that read them next (`TALLY_NORM_CAST=on`).
    pub yh: DPtr,
    pub ldyh: i64,
}

impl NormArgs {
    /// One norm (the fused forms off) of the `rows x cols` view `x` into `y` over groups of
    /// `group`: RMS with weight `w`, or (`w` null, `l2` 1) L2 with `scale`.
    pub fn plain(
        x: (DPtr, i64),
        y: (DPtr, i64),
        (rows, cols, group): (usize, usize, usize),
        (w, l2, scale): (DPtr, i32, f32),
        eps: f32,
    ) -> NormArgs {
        NormArgs {
            x: x.0,
            ldx: x.1,
            w,
            y: y.0,
            ldy: y.1,
            rows: rows as i32,
            cols: cols as i32,
            group: group as i32,
            eps,
            scale,
            l2,
            gate: 0,
            ldgate: 0,
            x2: 0,
            ldx2: 0,
            y2: 0,
            ldy2: 0,
            rows2: 0,
            cols2: 0,
            scale2: 0.0,
            blocks1: 0,
            no_regs: 0,
            yh: 0,
            ldyh: 0,
        }
    }
}

/// `AddNormArgs` of norm.cu (`add_rms_norm`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AddNormArgs {
    pub a: DPtr,
    pub lda: i64,
    pub b: DPtr,
    pub ldb: i64,
    pub c: DPtr,
    pub ldc: i64,
    pub mid: DPtr,
    pub ldm: i64,
    pub sum: DPtr,
    pub lds: i64,
    pub w: DPtr,
    pub y: DPtr,
    pub ldy: i64,
    pub rows: i32,
    pub cols: i32,
    pub eps: f32,
    /// 1: the combine's output `a` is not stored (no later node reads it; the register form
    /// only, the loop form reads it back).
    pub skip_a: i32,
    /// The shared-expert gate before the adds (null: none): gb = b * sigmoid(gx . gw) (gb null:
    /// not stored). `mid` null: not stored either.
    pub gx: DPtr,
    pub ldgx: i64,
    pub gw: DPtr,
    pub gb: DPtr,
    pub ldgb: i64,
    /// The routed experts' combine before the adds (null: none): `a` = sum over `ek` of
    /// `ew[j] * ey[row * ek + j]`, written to `a`.
    pub ey: DPtr,
    pub ldey: i64,
    pub ew: DPtr,
    pub ldew: i64,
    pub ek: i32,
    pub no_regs: i32,
    /// y also as f16 (null: not), row stride `ldyh` halves (as [`NormArgs::yh`]).
    pub yh: DPtr,
    pub ldyh: i64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RopeArgs {
    pub x: DPtr,
    pub ldx: i64,
    pub y: DPtr,
    pub ldy: i64,
    pub rows: i32,
    pub n_heads: i32,
    pub head_dim: i32,
    pub dims: i32,
    pub offset: i32,
    pub theta: f32,
    /// The batch position (`[1, 1]` i32), added to `offset` on the device.
    pub pos: DPtr,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct KvStoreArgs {
    pub k: DPtr,
    pub ldk: i64,
    pub v: DPtr,
    pub ldv: i64,
    pub kc: DPtr,
    pub ldkc: i64,
    pub vc: DPtr,
    pub ldvc: i64,
    pub pos: DPtr,
    pub rows: i32,
    pub cols: i32,
    pub cap: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BinaryArgs {
    pub a: DPtr,
    pub lda: i64,
    pub b: DPtr,
    pub ldb: i64,
    pub y: DPtr,
    pub ldy: i64,
    pub rows: i32,
    pub cols: i32,
    pub op: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TopkArgs {
    pub logits: DPtr,
    pub ld: i64,
    pub ids: DPtr,
    pub ld_ids: i64,
    pub w: DPtr,
    pub ld_w: i64,
    pub rows: i32,
    pub experts: i32,
    pub k: i32,
}

/// `RouterArgs` of router.cu (`router_fused`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RouterArgs {
    pub x: DPtr,
    pub w: DPtr,
    pub ldw: i64,
    pub logits: DPtr,
    pub ids: DPtr,
    pub wts: DPtr,
    pub counter: DPtr,
    pub experts: i32,
    pub k_dim: i32,
    pub k: i32,
    /// Row strides of the ids and weights, the x rows and the logits (grid.y = rows).
    pub ldt: i32,
    pub ldx: i64,
    pub ldl: i64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CombineArgs {
    pub y: DPtr,
    pub ldy: i64,
    pub w: DPtr,
    pub ldw: i64,
    pub out: DPtr,
    pub ldo: i64,
    pub rows: i32,
    pub cols: i32,
    pub k: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SharedGateArgs {
    pub x: DPtr,
    pub ldx: i64,
    pub s: DPtr,
    pub lds: i64,
    pub w: DPtr,
    pub y: DPtr,
    pub ldy: i64,
    pub rows: i32,
    pub cols: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeltaArgs {
    pub q: DPtr,
    pub ldq: i64,
    pub k: DPtr,
    pub ldk: i64,
    pub v: DPtr,
    pub ldv: i64,
    pub g: DPtr,
    pub ldg: i64,
    pub beta: DPtr,
    pub ldb: i64,
    pub state: DPtr,
    pub o: DPtr,
    pub ldo: i64,
    pub work: DPtr,
    pub t: i32,
    pub r: i32,
    pub hk: i32,
    pub hv: i32,
    pub dk: i32,
    pub dv: i32,
    /// The fused decode prologue (delta.cu's DeltaArgs; `kx == 0`: off).
    pub kx: DPtr,
    pub ldkx: i64,
    pub qx: DPtr,
    pub ldqx: i64,
    pub keps: f32,
    pub kscale: f32,
    pub qeps: f32,
    pub qscale: f32,
    pub gb: DPtr,
    pub ldgb: i64,
    pub ga: DPtr,
    pub ldga: i64,
    pub dt_bias: DPtr,
    pub ssm_a: DPtr,
    pub beta_out: DPtr,
    pub g_out: DPtr,
    pub snap: DPtr,
    pub snap_ld: i64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ConvSiluArgs {
    pub x: DPtr,
    pub ldx: i64,
    pub state: DPtr,
    pub lds: i64,
    pub w: DPtr,
    pub y: DPtr,
    pub ldy: i64,
    pub t: i32,
    pub c: i32,
    pub k: i32,
    pub pad0: i32,
    pub snap: DPtr,
    pub snap_ld: i64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeltaGatesArgs {
    pub b: DPtr,
    pub ldbin: i64,
    pub a: DPtr,
    pub lda: i64,
    pub dt_bias: DPtr,
    pub ssm_a: DPtr,
    pub beta: DPtr,
    pub ldbeta: i64,
    pub g: DPtr,
    pub ldg: i64,
    pub t: i32,
    pub h: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AttnArgs {
    pub q: DPtr,
    pub ldq: i64,
    pub k: DPtr,
    pub ldk: i64,
    pub v: DPtr,
    pub ldv: i64,
    pub o: DPtr,
    pub ldo: i64,
    pub r: i32,
    pub p: i32,
    pub h: i32,
    pub hkv: i32,
    pub d: i32,
    pub q_offset: i32,
    pub scale: f32,
    pub n_split: i32,
    pub kv_chunk: i32,
    /// Halves a row of the transposed V copy (`flash_attn_wg_d*`; `attn_kv_to_f16` writes V
    /// transposed into `v16` when it is positive); 0 otherwise.
    pub ldvt: i32,
    pub ws: DPtr,
    /// The batch position (`[1, 1]` i32), added to `q_offset` on the device.
    pub pos: DPtr,
    /// f16 copies of the caches (`attn_kv_to_f16` writes them, `flash_attn_h_w4_d*` reads
    /// them; 0 for the f32 kernels), `ld16` halves a row.
    pub k16: DPtr,
    pub v16: DPtr,
    pub ld16: i64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GemmArgs {
    pub w: DPtr,
    pub w_row_bytes: i64,
    pub w_expert_bytes: i64,
    pub x: DPtr,
    pub ldx: i64,
    pub y: DPtr,
    pub ldy: i64,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub sorted_rows: DPtr,
    pub x_div: i32,
    pub tile_expert: DPtr,
    pub tile_start: DPtr,
    pub tile_rows: DPtr,
    pub layout: i32,
    pub head_dim: i32,
    pub n_head: i32,
    /// MoE: experts in `w` (a tile of an expert outside `0..n_expert` writes nothing).
    pub n_expert: i32,
    /// Paired gate/up (`gemv_<t>` only; 0 otherwise): the up weight, and the up and SwiGlu
    /// outputs with their leading dimensions (gemm.cu).
    pub w2: DPtr,
    pub y2: DPtr,
    pub ldy2: i64,
    pub y3: DPtr,
    pub ldy3: i64,
    /// The wgmma tiles only (`gemm_<t>_w<BT>`; 0 otherwise): x as f16 in their K order
    /// (`x_f16_perm`), `ldxh` halves a row.
    pub xh: DPtr,
    pub ldxh: i64,
}

/// `MultiGemvArgs` of gemm.cu (`gemv_multi_<t>`): segment `s` is a `gemv_<t>` argument set
/// whose blocks are `block_end[s - 1]..block_end[s]` of the launch.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MultiGemvArgs {
    pub seg: [GemmArgs; GEMV_MULTI_SEGS],
    pub block_end: [i32; GEMV_MULTI_SEGS],
    /// Rows per warp of each segment: 2 (`gemv_<t>`'s body) or 4 (`gemv4_<t>`'s).
    pub rw: [i32; GEMV_MULTI_SEGS],
    pub n_seg: i32,
    /// `gemv_multi_<t>`: 0 (a block per x row, grid.y = M), or 2 to `GEMVR_MAX_M`: every x row
    /// in each block (grid.y 1, 2 rows per warp, integer formats, K <= `GEMV_QK_MAX /
    /// GEMVR_MAX_M`; gemm.cu's gemv_int_mr_body). `mmv_multi_<t>`: 0.
    pub mr: i32,
}

impl GemmArgs {
    /// A dense product y = x W^T of `m` rows (no MoE tables, not paired): weight `w` with rows of
    /// `w_row_bytes`, input and output views `(address, leading dimension)`, the output layout
    /// `(layout, head_dim, n_head)` (matmul.rs's `layout_code`).
    pub fn dense(
        (w, w_row_bytes): (DPtr, i64),
        x: (DPtr, i64),
        y: (DPtr, i64),
        (m, n, k): (usize, usize, usize),
        (layout, head_dim, n_head): (i32, i32, i32),
    ) -> GemmArgs {
        GemmArgs {
            w,
            w_row_bytes,
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
            n_expert: 0,
            w2: 0,
            y2: 0,
            ldy2: 0,
            y3: 0,
            ldy3: 0,
            xh: 0,
            ldxh: 0,
        }
    }
}

/// `DequantF16Args` of gemm.cu (`dequant_f16`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DequantF16Args {
    pub w: DPtr,
    pub row_bytes: i64,
    pub ty: i32,
    pub k: i32,
    pub n: i32,
    pub out: DPtr,
    pub layout: i32,
    pub head_dim: i32,
    pub n_head: i32,
}

/// `CastF16Args` of gemm.cu (`cast_f16_rows`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CastF16Args {
    pub x: DPtr,
    pub ldx: i64,
    pub m: i32,
    pub k: i32,
    pub out: DPtr,
}

/// `XPermArgs` of gemm_wg.cuh (`x_f16_perm`: x as f16 in the wgmma tiles' K order).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct XPermArgs {
    pub x: DPtr,
    pub ldx: i64,
    pub out: DPtr,
    pub ldo: i64,
    pub m: i32,
    pub k: i32,
    /// 1 for the K-quants (Q4_K, Q5_K, Q6_K: their pieces' element order), else 0.
    pub kquant: i32,
    pub pad0: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MoeRouteArgs {
    pub ids: DPtr,
    pub n_tokens: i32,
    pub k: i32,
    pub n_expert: i32,
    pub bm: i32,
    pub max_tiles: i32,
    pub chunk: i32,
    pub counts: DPtr,
    pub sorted_rows: DPtr,
    pub tile_expert: DPtr,
    pub tile_start: DPtr,
    pub tile_rows: DPtr,
    pub err: DPtr,
    pub bcount: DPtr,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DequantRowsArgs {
    pub w: DPtr,
    pub row_bytes: i64,
    pub ty: i32,
    pub k: i32,
    pub n_rows_w: i32,
    pub row_ids: DPtr,
    pub row0: i32,
    pub n_rows: i32,
    pub out: DPtr,
    pub ldo: i64,
    pub err: DPtr,
}

/// `SampleArgs` of sample.cu (`sample_token`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SampleArgs {
    pub logits: DPtr,
    pub work: DPtr,
    pub window: DPtr,
    pub out: DPtr,
    pub vocab: i32,
    pub n_window: i32,
    pub top_k: i32,
    pub greedy: i32,
    pub temperature: f32,
    pub top_p: f32,
    pub rep: f32,
    pub freq: f32,
    pub presence: f32,
    pub min_weight: u64,
    pub random: u64,
}

/// `ArgmaxArgs` of sample.cu (`argmax_token`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ArgmaxArgs {
    pub logits: DPtr,
    pub best: DPtr,
    pub vocab: i32,
    pub pad0: i32,
}

/// `static_assert`s of a struct's size and of each field's offset; a field whose C name differs
/// from the Rust one is written `rust as C`.
macro_rules! layout {
    ($ty:ident { $($f:ident $(as $c:ident)?),* $(,)? }) => {{
        let mut s = format!(
            "static_assert(sizeof({0}) == {1}, \"{0}: size differs from args.rs\");\n",
            stringify!($ty),
            std::mem::size_of::<$ty>()
        );
        $(
            let c = layout!(@name $f $($c)?);
            s.push_str(&format!(
                "static_assert(TALLY_OFFSETOF({0}, {1}) == {2}, \"{0}.{1}: offset differs from args.rs\");\n",
                stringify!($ty),
                c,
                std::mem::offset_of!($ty, $f)
            ));
        )*
        s
    }};
    (@name $f:ident) => { stringify!($f) };
    (@name $f:ident $c:ident) => { stringify!($c) };
}

/// The layout checks of the structs kernel source `source` (a [`super::compile::Source`] name)
/// defines: every field's offset and every struct's size as Rust lays out its mirror.
pub fn layout_asserts(source: &str) -> String {
    match source {
        "norm" => [
            layout!(NormArgs {
                x, ldx, w, y, ldy, rows, cols, group, eps, scale, l2, gate, ldgate, x2, ldx2, y2, ldy2,
                rows2, cols2, scale2, blocks1, no_regs, yh, ldyh
            }),
            layout!(AddNormArgs {
                a, lda, b, ldb, c, ldc, mid, ldm, sum, lds, w, y, ldy, rows, cols, eps, skip_a, gx,
                ldgx, gw, gb, ldgb, ey, ldey, ew, ldew, ek, no_regs, yh, ldyh
            }),
        ]
        .concat(),
        "rope" => layout!(RopeArgs { x, ldx, y, ldy, rows, n_heads, head_dim, dims, offset, theta, pos }),
        "kv_store" => layout!(KvStoreArgs { k, ldk, v, ldv, kc, ldkc, vc, ldvc, pos, rows, cols, cap }),
        "elementwise" => [
            layout!(BinaryArgs { a, lda, b, ldb, y, ldy, rows, cols, op }),
            layout!(SharedGateArgs { x, ldx, s, lds, w, y, ldy, rows, cols }),
            layout!(DeltaGatesArgs {
                b, ldbin, a, lda, dt_bias, ssm_a, beta, ldbeta, g, ldg, t as T, h as H
            }),
        ]
        .concat(),
        "router" => [
            layout!(TopkArgs { logits, ld, ids, ld_ids, w, ld_w, rows, experts, k }),
            layout!(RouterArgs { x, w, ldw, logits, ids, wts, counter, experts, k_dim as K, k, ldt, ldx, ldl }),
        ]
        .concat(),
        "moe" => [
            layout!(MoeRouteArgs {
                ids, n_tokens, k, n_expert, bm, max_tiles, chunk, counts, sorted_rows, tile_expert,
                tile_start, tile_rows, err, bcount
            }),
            layout!(CombineArgs { y, ldy, w, ldw, out, ldo, rows, cols, k }),
        ]
        .concat(),
        "conv" => layout!(ConvSiluArgs { x, ldx, state, lds, w, y, ldy, t as T, c as C, k as K, pad0, snap, snap_ld }),
        "delta" => layout!(DeltaArgs {
            q, ldq, k, ldk, v, ldv, g, ldg, beta, ldb, state, o, ldo, work, t as T, r as R,
            hk as Hk, hv as Hv, dk, dv, kx, ldkx, qx, ldqx, keps, kscale, qeps, qscale, gb, ldgb,
            ga, ldga, dt_bias, ssm_a, beta_out, g_out, snap, snap_ld
        }),
        "attention" => layout!(AttnArgs {
            q, ldq, k, ldk, v, ldv, o, ldo, r as R, p as P, h as H, hkv as Hkv, d, q_offset, scale,
            n_split, kv_chunk, ldvt, ws, pos, k16, v16, ld16
        }),
        "gemm" => [
            layout!(GemmArgs {
                w, w_row_bytes, w_expert_bytes, x, ldx, y, ldy, m as M, n as N, k as K,
                sorted_rows, x_div, tile_expert, tile_start, tile_rows, layout, head_dim, n_head,
                n_expert, w2, y2, ldy2, y3, ldy3, xh, ldxh
            }),
            layout!(MultiGemvArgs { seg, block_end, rw, n_seg, mr }),
            layout!(DequantF16Args { w, row_bytes, ty as type, k as K, n as N, out, layout, head_dim, n_head }),
            layout!(CastF16Args { x, ldx, m as M, k as K, out }),
            layout!(XPermArgs { x, ldx, out, ldo, m as M, k as K, kquant, pad0 }),
            layout!(DequantRowsArgs {
                w, row_bytes, ty as type, k as K, n_rows_w, row_ids, row0, n_rows, out, ldo, err
            }),
        ]
        .concat(),
        "sample" => [
            layout!(SampleArgs {
                logits, work, window, out, vocab, n_window, top_k, greedy, temperature, top_p,
                rep, freq, presence, min_weight, random
            }),
            layout!(ArgmaxArgs {
                logits, best, vocab, pad0
            }),
        ]
        .concat(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_checks_its_structs() {
        for src in super::super::compile::SOURCES {
            let asserts = layout_asserts(src.name);
            assert!(!asserts.is_empty(), "{}: no layout checks", src.name);
            for line in asserts.lines() {
                let ty = line
                    .trim_start_matches("static_assert(sizeof(")
                    .trim_start_matches("static_assert(TALLY_OFFSETOF(")
                    .split([')', ','])
                    .next()
                    .unwrap_or("");
                let text = super::super::compile::expand_includes(src.text).expect("includes");
                assert!(
                    text.contains(&format!("struct {ty} {{")),
                    "{}.cu does not define {ty}",
                    src.name
                );
            }
        }
        assert!(layout_asserts("norm").contains("TALLY_OFFSETOF(NormArgs, l2) == 60"));
    }
}
