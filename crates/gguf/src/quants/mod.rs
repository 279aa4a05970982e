//! Row conversions between f32 and the supported ggml block formats.
//!
//! Dequantisation reproduces ggml's reference `dequantize_row_*` (and the gguf Python
//! package's `dequantize`) bit for bit for every supported type. Quantisation reproduces the
//! bytes of ggml's non-imatrix reference quantisers (`quantize_row_*_ref`) for F16, BF16, Q8_0,
//! Q4_0, Q4_1, Q5_0, Q5_1, MXFP4 and the Q4_K/Q5_K/Q6_K K-quants; for IQ4_NL, IQ4_XS, Q2_K and
//! Q3_K it is tally's own least-squares search (valid blocks, not ggml's bytes), meant for
//! synthetic files. Both are checked against vectors generated from ggml and gguf-py
//! (`tools/quant-vectors`).

mod codebook;
mod fit;
pub mod float;
mod k;
mod k_low;
mod legacy;
mod q8_0;

pub use codebook::e8m0_to_f32_half;

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
        GgmlType::Q4_0 => legacy::dequantize_q4_0,
        GgmlType::Q4_1 => legacy::dequantize_q4_1,
        GgmlType::Q5_0 => legacy::dequantize_q5_0,
        GgmlType::Q5_1 => legacy::dequantize_q5_1,
        GgmlType::IQ4_NL => codebook::dequantize_iq4_nl,
        GgmlType::IQ4_XS => codebook::dequantize_iq4_xs,
        GgmlType::MXFP4 => codebook::dequantize_mxfp4,
        GgmlType::Q2_K => k_low::dequantize_q2_k,
        GgmlType::Q3_K => k_low::dequantize_q3_k,
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
/// `ty.row_bytes(src.len())` bytes; the bytes equal those of ggml's reference quantiser except
/// for IQ4_NL, IQ4_XS, Q2_K and Q3_K (see the module doc).
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
        GgmlType::Q4_0 => legacy::quantize_q4_0,
        GgmlType::Q4_1 => legacy::quantize_q4_1,
        GgmlType::Q5_0 => legacy::quantize_q5_0,
        GgmlType::Q5_1 => legacy::quantize_q5_1,
        GgmlType::IQ4_NL => codebook::quantize_iq4_nl,
        GgmlType::IQ4_XS => codebook::quantize_iq4_xs,
        GgmlType::MXFP4 => codebook::quantize_mxfp4,
        GgmlType::Q2_K => k_low::quantize_q2_k,
        GgmlType::Q3_K => k_low::quantize_q3_k,
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
