//! Causal depthwise convolution with carried state, then SiLU.

use super::{Mat, Weight, silu};
use crate::EngineError;

/// `y[t,c] = silu(sum_j w[c,j] * xe[t+j,c])` with `xe = [state; x]`; the new state is the last
/// K-1 rows of `xe`.
pub fn conv_silu(
    x: &Mat,
    state: &Mat,
    w: &Weight<'_>,
    y: &mut Mat,
    new_state: &mut Mat,
) -> Result<(), EngineError> {
    let kern = w.k();
    let ch = w.n_rows();
    if x.cols != ch
        || state.cols != ch
        || state.rows + 1 != kern
        || y.rows != x.rows
        || y.cols != ch
    {
        return Err(EngineError::Internal(format!(
            "conv {}: x {}x{}, state {}x{}, kernel {kern} x {ch}",
            w.name, x.rows, x.cols, state.rows, state.cols
        )));
    }
    let wf = w.to_f32()?; // [ch][kern]
    let s = state.rows;
    let xe = |r: usize| -> &[f32] { if r < s { state.row(r) } else { x.row(r - s) } };
    for t in 0..x.rows {
        let out = y.row_mut(t);
        for (c, o) in out.iter_mut().enumerate() {
            let mut acc = 0.0f32;
            for j in 0..kern {
                acc += wf[c * kern + j] * xe(t + j)[c];
            }
            *o = silu(acc);
        }
    }
    let total = s + x.rows;
    for i in 0..s {
        new_state.row_mut(i).copy_from_slice(xe(total - s + i));
    }
    Ok(())
}
