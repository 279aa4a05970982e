//! Row conversions between f32 and the supported ggml block formats.
//!
//! Dequantisation reproduces ggml's reference `dequantize_row_*` bit for bit; quantisation
//! reproduces the bytes of ggml's non-imatrix reference quantisers (`quantize_row_*_ref`),
//! checked against vectors generated from ggml itself (`tools/quant-vectors`).

pub mod float;
mod k;
mod q8_0;

use crate::{GgmlType, GgufError};

fn sizes(op: &'static str, ty: GgmlType, n_elems: usize, n_bytes: usize) -> Result<(), GgufError> {
    let want = ty.row_bytes(n_elems as u64)?;
    if want != n_bytes as u64 {
        return Err(GgufError::BufferSize {
            op,
            ty: ty.name(),
            what: format!(
                "{n_elems} elements take {want} bytes, but the byte buffer has {n_bytes}"
            ),
        });
    }
    Ok(())
}

/// Decodes `dst.len()` elements of type `ty` from `src`, which must be exactly
/// `ty.row_bytes(dst.len())` bytes. `dst.len()` must be a whole number of blocks.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), GgufError> {
    const OP: &str = "dequantize";
    let f: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::F32 => float::dequantize_f32,
        GgmlType::F16 => float::dequantize_f16,
        GgmlType::BF16 => float::dequantize_bf16,
        GgmlType::Q8_0 => q8_0::dequantize,
        GgmlType::Q4_K => k::dequantize_q4_k,
        GgmlType::Q5_K => k::dequantize_q5_k,
        GgmlType::Q6_K => k::dequantize_q6_k,
        _ => {
            return Err(GgufError::UnsupportedType {
                ty: ty.name(),
                op: OP,
            });
        }
    };
    sizes(OP, ty, dst.len(), src.len())?;
    f(src, dst);
    Ok(())
}

/// Encodes `src.len()` f32 elements as type `ty` into `dst`, which must be exactly
/// `ty.row_bytes(src.len())` bytes; the bytes equal those of ggml's reference quantiser.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), GgufError> {
    const OP: &str = "quantize";
    let f: fn(&[f32], &mut [u8]) = match ty {
        GgmlType::F32 => float::quantize_f32,
        GgmlType::F16 => float::quantize_f16,
        GgmlType::BF16 => float::quantize_bf16,
        GgmlType::Q8_0 => q8_0::quantize,
        GgmlType::Q4_K => k::quantize_q4_k,
        GgmlType::Q5_K => k::quantize_q5_k,
        GgmlType::Q6_K => k::quantize_q6_k,
        _ => {
            return Err(GgufError::UnsupportedType {
                ty: ty.name(),
                op: OP,
            });
        }
    };
    sizes(OP, ty, src.len(), dst.len())?;
    f(src, dst);
    Ok(())
}
