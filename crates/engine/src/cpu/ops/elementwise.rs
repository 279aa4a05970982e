//! Element-wise ops: binary maps, delta-net gates, the shared-expert gate.

use super::{Mat, Weight, dot, sigmoid};
use crate::EngineError;

pub fn binary(
    a: &Mat,
    b: &Mat,
    y: &mut Mat,
    f: impl Fn(f32, f32) -> f32,
) -> Result<(), EngineError> {
    if a.rows != b.rows || a.cols != b.cols || y.rows != a.rows || y.cols != a.cols {
        return Err(EngineError::Internal(format!(
            "element-wise: {}x{} with {}x{} into {}x{}",
            a.rows, a.cols, b.rows, b.cols, y.rows, y.cols
        )));
    }
    for ((o, &x), &z) in y.data.iter_mut().zip(&a.data).zip(&b.data) {
        *o = f(x, z);
    }
    Ok(())
}

fn softplus(x: f32) -> f32 {
    // Linear above 20, as the reference does (exp would overflow no sooner, but this keeps
    // the two implementations bit-close there).
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// `beta = sigmoid(b)`, `g = ssm_a * softplus(a + dt_bias)`.
pub fn delta_gates(
    b: &Mat,
    a: &Mat,
    dt_bias: &Weight<'_>,
    ssm_a: &Weight<'_>,
    beta: &mut Mat,
    g: &mut Mat,
) -> Result<(), EngineError> {
    let (bias, sa) = (dt_bias.to_f32()?, ssm_a.to_f32()?);
    let h = b.cols;
    if a.cols != h || bias.len() != h || sa.len() != h || a.rows != b.rows {
        return Err(EngineError::Internal("delta gates: shape mismatch".into()));
    }
    for t in 0..b.rows {
        for j in 0..h {
            beta.data[t * h + j] = sigmoid(b.data[t * h + j]);
            g.data[t * h + j] = sa[j] * softplus(a.data[t * h + j] + bias[j]);
        }
    }
    Ok(())
}

/// `y[t] = s[t] * sigmoid(x[t] . w)`.
pub fn shared_gate(x: &Mat, s: &Mat, w: &Weight<'_>, y: &mut Mat) -> Result<(), EngineError> {
    let wv = w.to_f32()?;
    if wv.len() != x.cols || x.rows != s.rows || y.rows != s.rows || y.cols != s.cols {
        return Err(EngineError::Internal("shared gate: shape mismatch".into()));
    }
    for t in 0..x.rows {
        let gate = sigmoid(dot(x.row(t), &wv));
        for (o, &v) in y.row_mut(t).iter_mut().zip(s.row(t)) {
            *o = v * gate;
        }
    }
    Ok(())
}
