//! Q8_0: blocks of 32 elements, an f16 scale `d` then 32 signed bytes; x = d * q.

use super::float::{f16_to_f32, f32_to_f16};

pub(crate) const QK: usize = 32;
pub(crate) const BLOCK_BYTES: usize = 2 + QK;

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BLOCK_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
        for (y, &q) in y.iter_mut().zip(&b[2..]) {
            *y = f32::from(q as i8) * d;
        }
    }
}

/// Matches ggml's `quantize_row_q8_0_ref`: the scale is amax/127 computed in f32; the quants use
/// the reciprocal of that f32 scale (not of its f16 rounding) and round half away from zero.
pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(BLOCK_BYTES)) {
        // `max` here must treat NaN like C's `MAX(a, b)` = `a > b ? a : b`, which keeps `a`
        // when the comparison is false.
        let amax = x
            .iter()
            .fold(0.0f32, |m, v| if m > v.abs() { m } else { v.abs() });
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        for (q, &v) in b[2..].iter_mut().zip(x) {
            *q = to_i8_like_x86((v * id).round()) as u8;
        }
    }
}

/// ggml stores the rounded float straight into an `int8_t`. In range (|r| <= 127, all that a
/// finite scale can produce) that is exact. Out of range, which happens only when the scale is
/// so small (amax < ~1.5e-38) that `1/d` overflows to infinity, C leaves the result undefined;
/// gcc on x86-64 converts through a 32-bit `cvttss2si`, whose out-of-range/NaN answer
/// 0x80000000 keeps 0 in its low byte. We return that 0 (the stored f16 scale is 0 anyway, so
/// every choice decodes to 0; this one keeps the bytes equal to ggml's).
#[inline]
pub(crate) fn to_i8_like_x86(r: f32) -> i8 {
    if r.abs() < 2_147_483_648.0 {
        r as i32 as i8
    } else {
        0
    }
}
