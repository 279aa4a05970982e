//! Routed experts: projections over only the routed (token, expert) pairs, and the weighted
//! combine.

use rayon::prelude::*;

use super::{Mat, Weight, dot};
use crate::EngineError;
use crate::cpu::{IMat, dequant_rows};

/// `y[t*k+j] = W[ids[t,j]] * x[row]`, row = t, or t*k+j when `pair_input`.
pub fn moe_matmul(
    x: &Mat,
    ids: &IMat,
    w: &Weight<'_>,
    k: usize,
    pair_input: bool,
    y: &mut Mat,
) -> Result<(), EngineError> {
    if w.dims.len() != 3 {
        return Err(EngineError::Internal(format!(
            "{} is not a 3-D expert tensor",
            w.name
        )));
    }
    let (kk, n, e) = (w.dims[0] as usize, w.dims[1] as usize, w.dims[2] as usize);
    let t = ids.rows;
    let pairs = t * k;
    let x_rows = if pair_input { pairs } else { t };
    if ids.cols != k || x.cols != kk || x.rows != x_rows || y.rows != pairs || y.cols != n {
        return Err(EngineError::Internal(format!(
            "moe {}: x {}x{}, ids {}x{}, W [{kk},{n},{e}], y {}x{}",
            w.name, x.rows, x.cols, ids.rows, ids.cols, y.rows, y.cols
        )));
    }
    let mut by_expert: Vec<Vec<usize>> = vec![Vec::new(); e];
    for (p, &id) in ids.data.iter().enumerate() {
        let ex = usize::try_from(id)
            .ok()
            .filter(|&v| v < e)
            .ok_or(EngineError::ExpertId { id, experts: e })?;
        by_expert[ex].push(p);
    }
    let results: Vec<(usize, Vec<f32>)> = by_expert
        .par_iter()
        .enumerate()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(ex, ps)| {
            let mut wbuf = vec![0.0f32; n * kk];
            dequant_rows(w, ex * n, n, &mut wbuf)?;
            let mut out = Vec::with_capacity(ps.len() * n);
            for &p in ps {
                let xr = x.row(if pair_input { p } else { p / k });
                out.extend(wbuf.chunks_exact(kk).map(|wr| dot(wr, xr)));
            }
            Ok((ex, out))
        })
        .collect::<Result<_, EngineError>>()?;
    for (ex, out) in results {
        for (&p, row) in by_expert[ex].iter().zip(out.chunks_exact(n)) {
            y.row_mut(p).copy_from_slice(row);
        }
    }
    Ok(())
}

/// `out[t] = sum_j wts[t,j] * y[t*k+j]`.
pub fn combine(y: &Mat, wts: &Mat, k: usize, out: &mut Mat) -> Result<(), EngineError> {
    if y.rows != out.rows * k || wts.rows != out.rows || wts.cols != k || y.cols != out.cols {
        return Err(EngineError::Internal("moe combine: shape mismatch".into()));
    }
    for t in 0..out.rows {
        let o = out.row_mut(t);
        o.fill(0.0);
        for j in 0..k {
            let wj = wts.data[t * k + j];
            for (a, b) in o.iter_mut().zip(y.row(t * k + j)) {
                *a += wj * b;
            }
        }
    }
    Ok(())
}
