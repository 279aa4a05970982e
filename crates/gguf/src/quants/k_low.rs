//! The low-bit K-quants: super-blocks of 256 elements in sixteen 16-element groups.
//!
//! - Q2_K (84 bytes): `scales[16]` (low nibble: scale, high nibble: min of group g), `qs[64]`
//!   of 2-bit quants, f16 `d`, f16 `dmin`. Element 128n + 32j + l (n in 0..2, j in 0..4,
//!   l in 0..32) is `(qs[32n + l] >> 2j) & 3` in group 8n + 2j + l/16;
//!   x = (d * sc) * q - (dmin * m).
//! - Q3_K (110 bytes): `hmask[32]`, `qs[64]`, 12 bytes of packed 6-bit scales, f16 `d`. The same
//!   element order as Q2_K for the low two bits; the third bit of element 128n + 32j + l is bit
//!   4n + j of `hmask[l]`, and a clear bit subtracts 4: q = low2 - (bit ? 0 : 4) in -4..=3.
//!   Group g's scale has its low 4 bits in `scales[g]` (g < 8) or the high nibble of
//!   `scales[g - 8]`, and its top 2 bits at bit 2*(g/4) of `scales[8 + g%4]`;
//!   x = (d * (sc - 32)) * q.
//!
//! Dequantisation matches ggml and the gguf Python package bit for bit. The quantisers are
//! tally's own, not ggml's (`quantize_row_q{2,3}_K_ref` search differently): per-group least
//! squares fits (see [`super::fit`]), then the group scales quantised against the super-block
//! scale and the quants re-assigned against the scales as stored.

use super::fit::{assign, fit_codebook, fit_scale_min};
use super::float::{f16_to_f32, f32_to_f16};

const QK_K: usize = 256;
const Q2K_BYTES: usize = 84;
const Q3K_BYTES: usize = 110;
const Q3_VALUES: [i8; 8] = [-4, -3, -2, -1, 0, 1, 2, 3];

#[inline]
fn half(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// (n, j, l) of element `e` of a super-block in the 2-bit plane order; group is 8n + 2j + l/16.
#[inline]
fn plane_pos(e: usize) -> (usize, usize, usize) {
    (e / 128, (e / 32) % 4, e % 32)
}

pub(crate) fn dequantize_q2_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q2K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (half(b, 80), half(b, 82));
        let (scales, qs) = (&b[..16], &b[16..80]);
        for (g, y) in y.chunks_exact_mut(16).enumerate() {
            let sc = scales[g];
            let dl = d * f32::from(sc & 0x0f);
            let ml = dmin * f32::from(sc >> 4);
            let (n, j, l0) = plane_pos(16 * g);
            for (l, y) in y.iter_mut().enumerate() {
                let q = (qs[32 * n + l0 + l] >> (2 * j)) & 3;
                *y = dl * f32::from(q) - ml;
            }
        }
    }
}

/// The 6-bit scale of Q3_K group `g` (0..16), before the -32 offset.
#[inline]
fn q3k_scale(s: &[u8], g: usize) -> i32 {
    let lo = if g < 8 { s[g] & 0x0f } else { s[g - 8] >> 4 };
    let hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    i32::from(lo | (hi << 4))
}

pub(crate) fn dequantize_q3_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q3K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = half(b, 108);
        let (hmask, qs, scales) = (&b[..32], &b[32..96], &b[96..108]);
        for (g, y) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * (q3k_scale(scales, g) - 32) as f32;
            let (n, j, l0) = plane_pos(16 * g);
            for (l, y) in y.iter_mut().enumerate() {
                let low = ((qs[32 * n + l0 + l] >> (2 * j)) & 3) as i8;
                let high = if hmask[l0 + l] & (1 << (4 * n + j)) != 0 {
                    0
                } else {
                    4
                };
                *y = dl * f32::from(low - high);
            }
        }
    }
}

/// Nearest integer in `0..=max` to `v` (NaN and negative values give 0).
#[inline]
fn level(v: f32, max: u8) -> u8 {
    let r = v.round();
    if r >= f32::from(max) {
        max
    } else if r > 0.0 {
        r as u8
    } else {
        0
    }
}

pub(crate) fn quantize_q2_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q2K_BYTES)) {
        let mut fits = [(0.0f32, 0.0f32); 16];
        for (f, xg) in fits.iter_mut().zip(x.chunks_exact(16)) {
            *f = fit_scale_min(xg, 3);
        }
        let smax = fits.iter().fold(0.0f32, |m, f| m.max(f.0));
        let mmax = fits.iter().fold(0.0f32, |m, f| m.max(f.1));
        let (dh, mh) = (f32_to_f16(smax / 15.0), f32_to_f16(mmax / 15.0));
        let (d, dmin) = (f16_to_f32(dh), f16_to_f32(mh));
        b.fill(0);
        for (g, xg) in x.chunks_exact(16).enumerate() {
            let sc = if d > 0.0 { level(fits[g].0 / d, 15) } else { 0 };
            let mc = if dmin > 0.0 {
                level(fits[g].1 / dmin, 15)
            } else {
                0
            };
            b[g] = sc | (mc << 4);
            let dl = d * f32::from(sc);
            let ml = dmin * f32::from(mc);
            let (n, j, l0) = plane_pos(16 * g);
            for (l, &v) in xg.iter().enumerate() {
                let q = if dl > 0.0 { level((v + ml) / dl, 3) } else { 0 };
                b[16 + 32 * n + l0 + l] |= q << (2 * j);
            }
        }
        b[80..82].copy_from_slice(&dh.to_le_bytes());
        b[82..84].copy_from_slice(&mh.to_le_bytes());
    }
}

pub(crate) fn quantize_q3_k(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; 16];
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q3K_BYTES)) {
        let mut scales = [0.0f32; 16];
        for (s, xg) in scales.iter_mut().zip(x.chunks_exact(16)) {
            *s = fit_codebook(xg, &Q3_VALUES, 4, &mut l);
        }
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
        for (g, xg) in x.chunks_exact(16).enumerate() {
            let ls = ((id * scales[g]).round() as i32).clamp(-32, 31) + 32;
            let (lo, hi) = ((ls & 15) as u8, (ls >> 4) as u8);
            if g < 8 {
                b[96 + g] |= lo;
            } else {
                b[96 + g - 8] |= lo << 4;
            }
            b[96 + 8 + g % 4] |= hi << (2 * (g / 4));
            assign(xg, &Q3_VALUES, d * (ls - 32) as f32, &mut l);
            let (n, j, l0) = plane_pos(16 * g);
            for (i, &k) in l.iter().enumerate() {
                // Index k holds q = k - 4: low two bits (q + 4) & 3, high bit set when q >= 0.
                let q = k as i32 - 4;
                let low = ((q + 4) & 3) as u8;
                b[32 + 32 * n + l0 + i] |= low << (2 * j);
                if q >= 0 {
                    b[l0 + i] |= 1 << (4 * n + j);
                }
            }
        }
        b[108..110].copy_from_slice(&dh.to_le_bytes());
    }
}
