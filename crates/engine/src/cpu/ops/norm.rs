//! RMS norm (model, per-head and delta-net output norms) and L2 norm (delta-net q and k).

use super::{Mat, Weight};
use crate::EngineError;

fn check(x: &Mat, group: usize, y: &Mat) -> Result<(), EngineError> {
    if group == 0 || x.cols % group != 0 || x.rows != y.rows || x.cols != y.cols {
        return Err(EngineError::Internal(format!(
            "norm: x {}x{} in groups of {group}, y {}x{}",
            x.rows, x.cols, y.rows, y.cols
        )));
    }
    Ok(())
}

/// `y = x * rsqrt(mean(x^2) + eps) * w` over each group of `group` columns.
pub fn rms_norm(
    x: &Mat,
    w: &Weight<'_>,
    eps: f32,
    group: usize,
    y: &mut Mat,
) -> Result<(), EngineError> {
    check(x, group, y)?;
    let w = w.to_f32()?;
    if w.len() != group {
        return Err(EngineError::Internal(format!(
            "norm weight has {} values for groups of {group}",
            w.len()
        )));
    }
    for (xs, ys) in x
        .data
        .chunks_exact(group)
        .zip(y.data.chunks_exact_mut(group))
    {
        let ms = xs.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / group as f64;
        let s = (1.0 / (ms + f64::from(eps)).sqrt()) as f32;
        for ((o, &v), &g) in ys.iter_mut().zip(xs).zip(&w) {
            *o = v * s * g;
        }
    }
    Ok(())
}

/// `y = x / sqrt(sum(x^2) + eps) * scale` over each group of `group` columns.
pub fn l2_norm(
    x: &Mat,
    eps: f32,
    group: usize,
    scale: f32,
    y: &mut Mat,
) -> Result<(), EngineError> {
    check(x, group, y)?;
    for (xs, ys) in x
        .data
        .chunks_exact(group)
        .zip(y.data.chunks_exact_mut(group))
    {
        let ss = xs.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>();
        let s = (1.0 / (ss + f64::from(eps)).sqrt()) as f32 * scale;
        for (o, &v) in ys.iter_mut().zip(xs) {
            *o = v * s;
        }
    }
    Ok(())
}
