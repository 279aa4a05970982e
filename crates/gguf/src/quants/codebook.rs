//! 4-bit codebook formats: each nibble indexes a fixed table of 16 signed values.
//!
//! - IQ4_NL (18 bytes per 32): f16 `d`, 16 bytes of nibbles (byte j: element j low, j + 16
//!   high); x = d * IQ4_VALUES[q].
//! - IQ4_XS (136 bytes per 256): f16 `d`, u16 `scales_h`, 4 bytes `scales_l`, 128 bytes of
//!   nibbles in eight 32-element sub-blocks laid out as IQ4_NL's; sub-block `ib` has the 6-bit
//!   scale `ls = (scales_l[ib/2] >> 4*(ib%2)) & 15 | ((scales_h >> 2*ib) & 3) << 4` and
//!   x = (d * (ls - 32)) * IQ4_VALUES[q].
//! - MXFP4 (17 bytes per 32): an E8M0 exponent byte `e`, 16 bytes of nibbles; the table is
//!   twice the E2M1 values and the scale is half of 2^(e - 127), so x = MXFP4_VALUES[q] *
//!   2^(e - 128) exactly (ggml's `GGML_E8M0_TO_FP32_HALF`).
//!
//! Dequantisation matches ggml and the gguf Python package bit for bit. The MXFP4 quantiser is
//! ggml's reference (`quantize_row_mxfp4_ref`, which the Python package mirrors). The IQ4
//! quantisers are tally's own (see [`super::fit`]): valid blocks with a least-squares scale,
//! not ggml's bytes (ggml's search uses an importance weighting tally does not reproduce).

use super::fit::{assign, fit_codebook};
use super::float::{f16_to_f32, f32_to_f16};

pub(crate) const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];
pub(crate) const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
const QK: usize = 32;
const QK_K: usize = 256;
const IQ4XS_BYTES: usize = 136;

#[inline]
fn half(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// Decodes 16 nibble bytes (32 elements) as `f(table value)`.
#[inline]
fn nibbles(qs: &[u8], y: &mut [f32], table: &[i8; 16], f: impl Fn(f32) -> f32) {
    for j in 0..QK / 2 {
        y[j] = f(f32::from(table[(qs[j] & 0x0f) as usize]));
        y[j + 16] = f(f32::from(table[(qs[j] >> 4) as usize]));
    }
}

fn pack_nibbles(l: &[u8], qs: &mut [u8]) {
    for j in 0..QK / 2 {
        qs[j] = l[j] | (l[j + 16] << 4);
    }
}

/// ggml's `GGML_E8M0_TO_FP32_HALF`: 2^(e - 128) as an f32 (subnormal for e < 2).
#[inline]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    if e < 2 {
        f32::from_bits(0x0020_0000u32 << e)
    } else {
        f32::from_bits(u32::from(e - 1) << 23)
    }
}

pub(crate) fn dequantize_iq4_nl(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(18).zip(dst.chunks_exact_mut(QK)) {
        let d = half(b, 0);
        nibbles(&b[2..], y, &IQ4_VALUES, |v| d * v);
    }
}

/// The 6-bit scale of IQ4_XS sub-block `ib` (0..8), before the -32 offset.
#[inline]
fn iq4xs_scale(b: &[u8], ib: usize) -> i32 {
    let h = u16::from_le_bytes([b[2], b[3]]);
    let lo = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0f;
    let hi = ((h >> (2 * ib)) & 3) as u8;
    i32::from(lo | (hi << 4))
}

pub(crate) fn dequantize_iq4_xs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ4XS_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = half(b, 0);
        for (ib, y) in y.chunks_exact_mut(QK).enumerate() {
            let dl = d * (iq4xs_scale(b, ib) - 32) as f32;
            nibbles(&b[8 + 16 * ib..], y, &IQ4_VALUES, |v| dl * v);
        }
    }
}

pub(crate) fn dequantize_mxfp4(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(17).zip(dst.chunks_exact_mut(QK)) {
        let d = e8m0_to_f32_half(b[0]);
        nibbles(&b[1..], y, &MXFP4_VALUES, |v| v * d);
    }
}

/// Search width of tally's IQ4 quantisers (tries per codebook end, each side).
const NTRY: i32 = 7;

pub(crate) fn quantize_iq4_nl(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK];
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(18)) {
        let d = fit_codebook(x, &IQ4_VALUES, NTRY, &mut l);
        let dh = f32_to_f16(d);
        b[..2].copy_from_slice(&dh.to_le_bytes());
        // Re-assign against the scale as stored (f16), which is what decodes.
        assign(x, &IQ4_VALUES, f16_to_f32(dh), &mut l);
        pack_nibbles(&l, &mut b[2..]);
    }
}

pub(crate) fn quantize_iq4_xs(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK];
    for (x, b) in src
        .chunks_exact(QK_K)
        .zip(dst.chunks_exact_mut(IQ4XS_BYTES))
    {
        let mut scales = [0.0f32; 8];
        for (s, xs) in scales.iter_mut().zip(x.chunks_exact(QK)) {
            *s = fit_codebook(xs, &IQ4_VALUES, NTRY, &mut l);
        }
        // The super-block scale maps the largest sub-block scale onto -32 (keeping signs), so
        // every sub-block's (ls - 32) lands in -32..=31.
        let max = scales
            .iter()
            .copied()
            .fold(0.0f32, |m, s| if s.abs() > m.abs() { s } else { m });
        let dh = f32_to_f16(-max / 32.0);
        let d = f16_to_f32(dh);
        let id = if d != 0.0 && d.is_finite() {
            1.0 / d
        } else {
            0.0
        };
        b.fill(0);
        b[..2].copy_from_slice(&dh.to_le_bytes());
        let mut h = 0u16;
        for (ib, xs) in x.chunks_exact(QK).enumerate() {
            let ls = ((id * scales[ib]).round() as i32).clamp(-32, 31) + 32;
            b[4 + ib / 2] |= ((ls & 15) as u8) << (4 * (ib % 2));
            h |= ((ls >> 4) as u16) << (2 * ib);
            assign(xs, &IQ4_VALUES, d * (ls - 32) as f32, &mut l);
            pack_nibbles(&l, &mut b[8 + 16 * ib..8 + 16 * ib + 16]);
        }
        b[2..4].copy_from_slice(&h.to_le_bytes());
    }
}

/// ggml's `best_index_mxfp4`: the first table entry of least `|value * d - x|`.
#[inline]
fn best_index_mxfp4(x: f32, d: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (f32::from(MXFP4_VALUES[0]) * d - x).abs();
    for (i, &v) in MXFP4_VALUES.iter().enumerate().skip(1) {
        let err = (f32::from(v) * d - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

/// ggml's `quantize_row_mxfp4_ref`: `e = floor(log2(amax)) - 2 + 127` (so the largest element
/// lands at most at table value 12 = 6 * 2^(e-127)), each element to its nearest table entry.
pub(crate) fn quantize_mxfp4(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(17)) {
        let amax = x
            .iter()
            .fold(0.0f32, |m, v| if m < v.abs() { v.abs() } else { m });
        // C converts the float to uint8_t; gcc on x86-64 goes through a 32-bit integer.
        let e = if amax > 0.0 {
            let v = amax.log2().floor() - 2.0 + 127.0;
            if v.abs() < 2_147_483_648.0 {
                v as i32 as u8
            } else {
                0
            }
        } else {
            0
        };
        let d = e8m0_to_f32_half(e);
        b[0] = e;
        for j in 0..QK / 2 {
            b[1 + j] = best_index_mxfp4(x[j], d) | (best_index_mxfp4(x[j + 16], d) << 4);
        }
    }
}
