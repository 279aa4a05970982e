//! Rotary position embedding, NeoX pairing (i with i + dims/2), on the leading `dims` columns of
//! each head.

use super::Mat;
use crate::EngineError;

pub fn rope(
    x: &Mat,
    head_dim: usize,
    dims: usize,
    theta: f32,
    offset: usize,
    y: &mut Mat,
) -> Result<(), EngineError> {
    if head_dim == 0
        || x.cols % head_dim != 0
        || dims > head_dim
        || dims % 2 != 0
        || y.cols != x.cols
        || y.rows != x.rows
    {
        return Err(EngineError::Internal(format!(
            "rope: {}x{} with heads of {head_dim}, {dims} rotary dims",
            x.rows, x.cols
        )));
    }
    let half = dims / 2;
    // Frequencies in f32 as the reference implementation computes them.
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| 1.0 / theta.powf((2 * i) as f32 / dims as f32))
        .collect();
    for r in 0..x.rows {
        let pos = (offset + r) as f32;
        let (xr, yr) = (x.row(r), &mut y.data[r * x.cols..(r + 1) * x.cols]);
        yr.copy_from_slice(xr);
        for h in 0..x.cols / head_dim {
            let base = h * head_dim;
            for (i, f) in inv_freq.iter().enumerate() {
                let (sin, cos) = (pos * f).sin_cos();
                let (a, b) = (xr[base + i], xr[base + i + half]);
                yr[base + i] = a * cos - b * sin;
                yr[base + i + half] = b * cos + a * sin;
            }
        }
    }
    Ok(())
}
