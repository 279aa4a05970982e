//! Plain float formats: F32, F16, BF16. Conversions to the narrow formats round to nearest
//! even exactly as ggml's `ggml_compute_fp32_to_fp16` / `ggml_compute_fp32_to_bf16` do,
//! including how NaNs are made quiet.

use std::sync::OnceLock;

/// f16 bits → f32, exact, through a 65,536-entry table (256 KiB, built once).
#[inline]
pub fn f16_to_f32(bits: u16) -> f32 {
    static TABLE: OnceLock<Box<[f32]>> = OnceLock::new();
    let t = TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|b| half::f16::from_bits(b).to_f32())
            .collect()
    });
    t[bits as usize]
}

/// f32 → f16 bits, round to nearest even; overflow gives infinity; every NaN becomes the quiet
/// NaN 0x7E00 with the input's sign (what ggml's software conversion produces).
#[inline]
pub fn f32_to_f16(x: f32) -> u16 {
    if x.is_nan() {
        ((x.to_bits() >> 16) as u16 & 0x8000) | 0x7e00
    } else {
        half::f16::from_f32(x).to_bits()
    }
}

/// bf16 bits → f32, exact.
#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// f32 → bf16 bits, round to nearest even (overflow gives infinity); a NaN keeps its top bits
/// and gets the quiet bit set.
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    // Adding 0x7fff plus the lowest kept bit rounds ties to even; cannot overflow for non-NaN.
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

pub(crate) fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    }
}

pub(crate) fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(4).zip(src) {
        d.copy_from_slice(&s.to_le_bytes());
    }
}

pub(crate) fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = f16_to_f32(u16::from_le_bytes([s[0], s[1]]));
    }
}

pub(crate) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(2).zip(src) {
        d.copy_from_slice(&f32_to_f16(*s).to_le_bytes());
    }
}

pub(crate) fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = bf16_to_f32(u16::from_le_bytes([s[0], s[1]]));
    }
}

pub(crate) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (d, s) in dst.chunks_exact_mut(2).zip(src) {
        d.copy_from_slice(&f32_to_bf16(*s).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_table_matches_half_and_round_trips() {
        for b in 0..=u16::MAX {
            let x = f16_to_f32(b);
            if x.is_nan() {
                assert!(half::f16::from_bits(b).is_nan());
            } else {
                assert_eq!(f32_to_f16(x), b, "bits {b:#06x}");
            }
        }
        assert_eq!(f32_to_f16(f32::NAN), 0x7e00);
        assert_eq!(f32_to_f16(-f32::NAN), 0xfe00);
        assert_eq!(f32_to_f16(65520.0), 0x7c00); // rounds up to infinity
        assert_eq!(f32_to_f16(65519.0), 0x7bff);
    }

    #[test]
    fn bf16_rounding() {
        for b in 0..=u16::MAX {
            let x = bf16_to_f32(b);
            if !x.is_nan() {
                assert_eq!(f32_to_bf16(x), b);
            }
        }
        // Ties go to even: 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125.
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80);
    }
}
