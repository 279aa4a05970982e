//! Causal softmax attention with grouped KV heads.

use rayon::prelude::*;

use super::{Mat, dot};
use crate::EngineError;

#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub q_offset: usize,
}

pub fn attention(q: &Mat, k: &Mat, v: &Mat, s: Shape, o: &mut Mat) -> Result<(), EngineError> {
    let d = s.head_dim;
    let ok = q.cols == s.n_head * d
        && k.cols == s.n_head_kv * d
        && v.cols == k.cols
        && k.rows == v.rows
        && k.rows >= s.q_offset + q.rows
        && o.rows == q.rows
        && o.cols == q.cols
        && s.n_head % s.n_head_kv == 0;
    if !ok {
        return Err(EngineError::Internal(format!(
            "attention: q {}x{}, k {}x{}, v {}x{}, q_offset {}",
            q.rows, q.cols, k.rows, k.cols, v.rows, v.cols, s.q_offset
        )));
    }
    let group = s.n_head / s.n_head_kv;
    let rows: Vec<Vec<f32>> = (0..q.rows)
        .into_par_iter()
        .map(|r| {
            let pos = s.q_offset + r;
            let mut out = vec![0.0f32; q.cols];
            let mut p = vec![0.0f64; pos + 1];
            for h in 0..s.n_head {
                let kvh = h / group;
                let qh = &q.row(r)[h * d..(h + 1) * d];
                let mut mx = f64::NEG_INFINITY;
                for (j, pj) in p.iter_mut().enumerate() {
                    *pj = f64::from(dot(qh, &k.row(j)[kvh * d..(kvh + 1) * d]) * s.scale);
                    mx = mx.max(*pj);
                }
                let mut sum = 0.0;
                for pj in p.iter_mut() {
                    *pj = (*pj - mx).exp();
                    sum += *pj;
                }
                let oh = &mut out[h * d..(h + 1) * d];
                for (j, pj) in p.iter().enumerate() {
                    let w = (*pj / sum) as f32;
                    for (a, b) in oh.iter_mut().zip(&v.row(j)[kvh * d..(kvh + 1) * d]) {
                        *a += w * b;
                    }
                }
            }
            out
        })
        .collect();
    for (r, row) in rows.into_iter().enumerate() {
        o.row_mut(r).copy_from_slice(&row);
    }
    Ok(())
}
