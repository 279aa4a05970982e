//! `#[repr(C)]` mirrors of the kernels' parameter structs (field order and types must match the
//! C structs in `kernels/*.cu` exactly; pointers are device addresses).

pub type DPtr = u64;

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
    pub pos0: i32,
    pub theta: f32,
    /// The batch position (`[1, 1]` i32), added to `pos0` on the device.
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

pub const BIN_ADD: i32 = 0;
pub const BIN_MUL_SILU: i32 = 1;
pub const BIN_MUL_SIGMOID: i32 = 2;
pub const BIN_SWIGLU: i32 = 3;

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
}

/// Tokens per chunk of the chunked delta rule (`DELTA_C`).
pub const DELTA_C: i64 = 64;
/// S columns per scan / step block (`DELTA_NS`).
pub const DELTA_NS: i64 = 32;

/// Mirror of `delta_work_floats` in delta.cu.
pub fn delta_work_floats(t: i64, hk: i64, hv: i64, dk: i64, dv: i64) -> i64 {
    let nc = (t + DELTA_C - 1) / DELTA_C;
    nc * (hv * (32 * dk + 4096 + 64 * dv + 64) + hk * 64 * dk)
}

/// Mirror of `delta_prep_smem_bytes` in delta.cu.
pub fn delta_prep_smem_bytes(dk: i64) -> u32 {
    let ldk = dk + 8;
    let ldv = 128 + 8;
    let tile = 64 * ldk * 2;
    let mut o = 0;
    o += 64 * ldv * 2; // vh
    o += 64 * ldv * 2; // vl
    o += tile; // bk
    o += 64 * 72 * 2; // tm
    o += 3 * 256 * 4; // z
    o = o.max(4 * tile);
    o += 64 * 72 * 4; // am
    o += 64 * 72 * 4; // tf
    o += 64 * 4 + 64 * 4 + 32 * 4; // gs, bs, red
    o as u32
}

/// Mirror of `delta_scan_smem_bytes` in delta.cu.
pub fn delta_scan_smem_bytes(dk: i64) -> u32 {
    let ldk = dk + 8;
    let o = 3 * 64 * ldk * 2 // wb, qb, kb
        + 2 * 64 * 72 * 2 // pb, pl
        + 2 * 64 * 40 * 4 // ub, ob
        + 64 * 4 // gb
        + 2 * dk * 40 * 2 // sh, sl
        + 4 * 64 * 40 * 2 // vh, vl, xh, xl
        + 16 * 4; // red
    o as u32
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_layouts_match_the_kernel_comments() {
        // delta.cu documents 107,136 B and 132,416 B at dk = 128.
        assert_eq!(delta_prep_smem_bytes(128), 107_136);
        assert_eq!(delta_scan_smem_bytes(128), 132_416);
        // 21 MB of workspace at T = 512 with the real heads (16 key, 32 value, 128 dims).
        let mb = delta_work_floats(512, 16, 32, 128, 128) * 4 / 1_000_000;
        assert_eq!(mb, 21);
    }
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
    pub q_pos0: i32,
    pub scale: f32,
    pub n_split: i32,
    pub kv_chunk: i32,
    pub pad0: i32,
    pub ws: DPtr,
    pub k16: DPtr,
    pub v16: DPtr,
    pub ld16: i64,
    /// The batch position (`[1, 1]` i32), added to `q_pos0` on the device.
    pub pos: DPtr,
}

/// Mirror of `ATTN_SMEM_BYTES(D, NW, KV16)` in attention.cu (dynamic shared memory of the
/// prefill kernels): `(16*NW + 2*BN) * (D + 8) * 2` bytes, BN = min(1024*NW/D, 64) (64 for f16 K/V).
pub fn attn_smem_bytes(d: i64, nw: i64, kv16: bool) -> u32 {
    let bn = if kv16 { 64 } else { (1024 * nw / d).min(64) };
    ((16 * nw + 2 * bn) * (d + 8) * 2) as u32
}

/// Query rows per decode kernel (`ATTN_DEC_MAXQ`): R * (H / Hkv) at most this goes to
/// `flash_decode_*`.
pub const ATTN_DEC_MAXQ: i64 = 8;

#[cfg(test)]
mod attn_tests {
    use super::*;

    #[test]
    fn attention_smem_matches_the_kernel_table() {
        // attention.cu: flash_attn_d* 20480 36864 69632 101376; flash_attn_w4_d* ... 50688.
        let d = [32, 64, 128, 256];
        let want8 = [20480, 36864, 69632, 101376];
        let want4 = [15360, 27648, 34816, 50688];
        for i in 0..4 {
            assert_eq!(attn_smem_bytes(d[i], 8, false), want8[i]);
            assert_eq!(attn_smem_bytes(d[i], 4, false), want4[i]);
        }
        assert_eq!(attn_smem_bytes(256, 8, true), 135168);
    }
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

/// Output columns per tensor-core GEMM block (`GEMM_BN`).
pub const GEMM_BN: i64 = 128;
/// Output columns per GEMV block (`GEMV_ROWS`).
pub const GEMV_ROWS: i64 = 16;
/// Threads per block of the f32 SIMT GEMMs (`SIMT_THREADS`).
pub const SIMT_THREADS: u32 = 256;
/// Square block tile of `gemm_f32_simt` (`SIMT_BM` = `SIMT_BN`).
pub const SIMT_TILE: i64 = 64;
/// Square block tile of `gemm_f32_simt_m32` (`SIMT_M32_BM` = `SIMT_M32_BN`).
pub const SIMT_M32_TILE: i64 = 32;

/// Mirror of `GEMM_SMEM_BYTES(t, bm)` in gemm.cu: two f16 stages of A and B tiles, two row
/// tables, three stages of raw weight bytes per thread.
pub fn gemm_smem_bytes(ty: tally_gguf::GgmlType, bm: i64) -> u32 {
    use tally_gguf::GgmlType as T;
    let slot = match ty {
        T::Q4_K => 32,
        T::Q5_K | T::Q8_0 => 48,
        T::Q6_K => 80,
        T::F32 => 128,
        _ => 64,
    };
    (2 * (bm + GEMM_BN) * 72 * 2 + 8 * bm + 3 * 256 * slot) as u32
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
    pub counts: DPtr,
    pub sorted_rows: DPtr,
    pub tile_expert: DPtr,
    pub tile_start: DPtr,
    pub tile_rows: DPtr,
    pub err: DPtr,
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

#[cfg(test)]
mod gemm_tests {
    use super::*;
    use tally_gguf::GgmlType as T;

    #[test]
    fn gemm_smem_matches_the_kernel_table() {
        // gemm.cu: BM=128: q4_k 99328, q5_k 111616, q6_k 136192, q8_0 111616, f16 123904, f32 173056;
        // BM=32: q4_k 70912.
        assert_eq!(gemm_smem_bytes(T::Q4_K, 128), 99_328);
        assert_eq!(gemm_smem_bytes(T::Q5_K, 128), 111_616);
        assert_eq!(gemm_smem_bytes(T::Q6_K, 128), 136_192);
        assert_eq!(gemm_smem_bytes(T::Q8_0, 128), 111_616);
        assert_eq!(gemm_smem_bytes(T::F16, 128), 123_904);
        assert_eq!(gemm_smem_bytes(T::F32, 128), 173_056);
        assert_eq!(gemm_smem_bytes(T::Q4_K, 32), 70_912);
        assert_eq!(gemm_smem_bytes(T::BF16, 64), 104_960);
    }
}
