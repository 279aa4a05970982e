//! Router: softmax over experts, top-k, renormalised weights.

use super::Mat;
use crate::EngineError;
use crate::cpu::IMat;

pub fn topk(logits: &Mat, k: usize, ids: &mut IMat, w: &mut Mat) -> Result<(), EngineError> {
    let e = logits.cols;
    if k == 0
        || k > e
        || ids.rows != logits.rows
        || ids.cols != k
        || w.rows != logits.rows
        || w.cols != k
    {
        return Err(EngineError::Internal(format!(
            "topk: {} of {e} experts for {} rows",
            k, logits.rows
        )));
    }
    let mut idx: Vec<usize> = Vec::with_capacity(e);
    for t in 0..logits.rows {
        let l = logits.row(t);
        let mx = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let p: Vec<f64> = l.iter().map(|&v| f64::from(v - mx).exp()).collect();
        let sum: f64 = p.iter().sum();
        idx.clear();
        idx.extend(0..e);
        // Highest probability first; ties go to the lower expert index.
        idx.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
        let chosen = &idx[..k];
        let norm: f64 = chosen.iter().map(|&j| p[j] / sum).sum();
        for (j, &ex) in chosen.iter().enumerate() {
            ids.data[t * k + j] = ex as i32;
            w.data[t * k + j] = (p[ex] / sum / norm) as f32;
        }
    }
    Ok(())
}
