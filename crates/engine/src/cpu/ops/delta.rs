//! The gated delta rule, token by token (the reference; the chunked form computes the same).

use rayon::prelude::*;

use super::Mat;
use crate::EngineError;

/// Head layout of the linear-attention layers.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub k_heads: usize,
    pub v_heads: usize,
    pub k_dim: usize,
    pub v_dim: usize,
}

/// Inputs `[q (R rows), k, v, g, beta, state]`; outputs `o (R rows)` and the new state.
pub fn delta_rule(
    h: &Heads,
    ins: [&Mat; 6],
    o: &mut Mat,
    new_state: &mut Mat,
) -> Result<(), EngineError> {
    let [q, k, v, g, beta, state] = ins;
    let (dk, dv) = (h.k_dim, h.v_dim);
    let t = k.rows;
    let r = q.rows;
    let ok = q.cols == h.k_heads * dk
        && k.cols == h.k_heads * dk
        && v.cols == h.v_heads * dv
        && v.rows == t
        && g.rows == t
        && beta.rows == t
        && g.cols == h.v_heads
        && beta.cols == h.v_heads
        && r <= t
        && state.rows == h.v_heads
        && state.cols == dk * dv
        && o.rows == r
        && o.cols == h.v_heads * dv
        && h.v_heads % h.k_heads == 0;
    if !ok {
        return Err(EngineError::Internal(format!(
            "delta rule: q {}x{}, k {}x{}, v {}x{}, state {}x{}, o {}x{}",
            q.rows, q.cols, k.rows, k.cols, v.rows, v.cols, state.rows, state.cols, o.rows, o.cols
        )));
    }
    let first_out = t - r;
    // One task per value head: its own state and its own output columns.
    let per_head: Vec<(Vec<f32>, Vec<f32>)> = (0..h.v_heads)
        .into_par_iter()
        .map(|hv| {
            let kh = hv % h.k_heads;
            let mut s = state.row(hv).to_vec(); // [dk][dv]
            let mut out = vec![0.0f32; r * dv];
            let mut mem = vec![0.0f32; dv];
            for tt in 0..t {
                let decay = g.data[tt * h.v_heads + hv].exp();
                let b = beta.data[tt * h.v_heads + hv];
                let kt = &k.row(tt)[kh * dk..(kh + 1) * dk];
                let vt = &v.row(tt)[hv * dv..(hv + 1) * dv];
                s.iter_mut().for_each(|x| *x *= decay);
                mem.fill(0.0);
                for (i, &ki) in kt.iter().enumerate() {
                    for (m, &sij) in mem.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
                        *m += sij * ki;
                    }
                }
                for (m, &vj) in mem.iter_mut().zip(vt) {
                    *m = (vj - *m) * b; // now the delta
                }
                for (i, &ki) in kt.iter().enumerate() {
                    for (sij, &dj) in s[i * dv..(i + 1) * dv].iter_mut().zip(&mem) {
                        *sij += ki * dj;
                    }
                }
                if tt >= first_out {
                    let qt = &q.row(tt - first_out)[kh * dk..(kh + 1) * dk];
                    let ot = &mut out[(tt - first_out) * dv..(tt - first_out + 1) * dv];
                    for (i, &qi) in qt.iter().enumerate() {
                        for (oj, &sij) in ot.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
                            *oj += sij * qi;
                        }
                    }
                }
            }
            (s, out)
        })
        .collect();
    for (hv, (s, out)) in per_head.into_iter().enumerate() {
        new_state.row_mut(hv).copy_from_slice(&s);
        for rr in 0..r {
            o.row_mut(rr)[hv * dv..(hv + 1) * dv].copy_from_slice(&out[rr * dv..(rr + 1) * dv]);
        }
    }
    Ok(())
}
