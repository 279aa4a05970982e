//! The legacy 32-element block formats, each with an f16 scale `d`; nibbles of byte j hold
//! elements j (low) and j + 16 (high):
//!
//! - Q4_0 (18 bytes): `d`, 16 bytes of nibbles; x = d * (q - 8).
//! - Q4_1 (20 bytes): `d`, f16 `m`, nibbles; x = d * q + m.
//! - Q5_0 (22 bytes): `d`, a little-endian u32 `qh` whose bit j is the fifth bit of element j,
//!   nibbles; x = d * (q - 16).
//! - Q5_1 (24 bytes): `d`, `m`, `qh`, nibbles; x = d * q + m.
//!
//! Quantisation reproduces ggml's `quantize_row_q{4,5}_{0,1}_ref` (and the gguf Python
//! package's quantisers, which agree with them): the scale comes from the block's extreme value
//! in f32, quants are `(int8_t)(x * id + offset)` truncations.

use super::float::{f16_to_f32, f32_to_f16};
use super::q8_0::to_i8_like_x86;

pub(crate) const QK: usize = 32;

#[inline]
fn half(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// The 32 quants of a block: 4-bit nibbles plus (for the Q5 types) the fifth bit from `qh`.
#[inline]
fn quants(qs: &[u8], qh: u32) -> [u8; QK] {
    let mut q = [0u8; QK];
    for j in 0..QK / 2 {
        q[j] = (qs[j] & 0x0f) | ((((qh >> j) & 1) as u8) << 4);
        q[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
    }
    q
}

/// Symmetric formats (`_0`): `d` at 0, optional `qh` at 2, nibbles after; x = d * (q - bias).
fn dequantize_sym(src: &[u8], dst: &mut [f32], block_bytes: usize, five: bool) {
    let bias = if five { 16 } else { 8 };
    for (b, y) in src.chunks_exact(block_bytes).zip(dst.chunks_exact_mut(QK)) {
        let d = half(b, 0);
        let (qh, qs) = if five {
            (u32::from_le_bytes([b[2], b[3], b[4], b[5]]), &b[6..])
        } else {
            (0, &b[2..])
        };
        for (y, q) in y.iter_mut().zip(quants(qs, qh)) {
            *y = (i32::from(q) - bias) as f32 * d;
        }
    }
}

/// Offset formats (`_1`): `d` at 0, `m` at 2, optional `qh` at 4, nibbles after; x = d*q + m.
fn dequantize_min(src: &[u8], dst: &mut [f32], block_bytes: usize, five: bool) {
    for (b, y) in src.chunks_exact(block_bytes).zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (half(b, 0), half(b, 2));
        let (qh, qs) = if five {
            (u32::from_le_bytes([b[4], b[5], b[6], b[7]]), &b[8..])
        } else {
            (0, &b[4..])
        };
        for (y, q) in y.iter_mut().zip(quants(qs, qh)) {
            *y = f32::from(q) * d + m;
        }
    }
}

pub(crate) fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    dequantize_sym(src, dst, 18, false);
}
pub(crate) fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    dequantize_sym(src, dst, 22, true);
}
pub(crate) fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    dequantize_min(src, dst, 20, false);
}
pub(crate) fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    dequantize_min(src, dst, 24, true);
}

/// Packs quants (values < 32) into nibbles and, for the Q5 types, the fifth-bit word.
fn pack(q: &[u8; QK], qs: &mut [u8]) -> u32 {
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        qs[j] = (q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4);
        qh |= u32::from((q[j] & 0x10) >> 4) << j;
        qh |= u32::from((q[j + 16] & 0x10) >> 4) << (j + 16);
    }
    qh
}

/// ggml's `MIN(qmax, (int8_t)v)` stored into a `uint8_t`.
#[inline]
fn clamp_c(v: f32, qmax: i8) -> u8 {
    to_i8_like_x86(v).min(qmax) as u8
}

/// `_0` formats: `d = max / -(2^(bits-1))` where `max` is the first element of largest
/// magnitude, keeping its sign, so that it maps to quant 0.
fn quantize_sym(src: &[f32], dst: &mut [u8], block_bytes: usize, five: bool) {
    let (half_range, qmax) = if five { (16.0f32, 31) } else { (8.0f32, 15) };
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(block_bytes)) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -half_range;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = clamp_c(v * id + (half_range + 0.5), qmax);
        }
        if five {
            let (qh, qs) = b[2..].split_at_mut(4);
            let h = pack(&q, qs);
            qh.copy_from_slice(&h.to_le_bytes());
        } else {
            pack(&q, &mut b[2..]);
        }
    }
}

/// `_1` formats: `d = (max - min) / (2^bits - 1)`, `m = min`.
fn quantize_min(src: &[f32], dst: &mut [u8], block_bytes: usize, five: bool) {
    let (levels, qmax) = if five { (31.0f32, 31) } else { (15.0f32, 15) };
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(block_bytes)) {
        // C's `if (v < min) min = v; if (v > max) max = v;` starting from +-FLT_MAX.
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in x {
            if v < min {
                min = v;
            }
            if v > max {
                max = v;
            }
        }
        let d = (max - min) / levels;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        b[2..4].copy_from_slice(&f32_to_f16(min).to_le_bytes());
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = clamp_c((v - min) * id + 0.5, qmax);
        }
        if five {
            let (qh, qs) = b[4..].split_at_mut(4);
            let h = pack(&q, qs);
            qh.copy_from_slice(&h.to_le_bytes());
        } else {
            pack(&q, &mut b[4..]);
        }
    }
}

pub(crate) fn quantize_q4_0(src: &[f32], dst: &mut [u8]) {
    quantize_sym(src, dst, 18, false);
}
pub(crate) fn quantize_q5_0(src: &[f32], dst: &mut [u8]) {
    quantize_sym(src, dst, 22, true);
}
pub(crate) fn quantize_q4_1(src: &[f32], dst: &mut [u8]) {
    quantize_min(src, dst, 20, false);
}
pub(crate) fn quantize_q5_1(src: &[f32], dst: &mut [u8]) {
    quantize_min(src, dst, 24, true);
}
