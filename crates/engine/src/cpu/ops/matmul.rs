//! Dense projection: `y[r, n] = sum_k x[r, k] * W[n, k]`, weights dequantised row by row.

use rayon::prelude::*;
use tally_model::OutLayout;

use super::{Mat, Weight, dot};
use crate::EngineError;
use crate::cpu::dequant_rows;

/// Output features per task: each task dequantises its weight rows once and reuses them for
/// every input row.
const CHUNK: usize = 16;

/// The output column that weight row `j` lands in.
pub fn out_col(layout: OutLayout, j: usize) -> usize {
    match layout {
        OutLayout::Plain => j,
        OutLayout::QGateSplit { n_head, head_dim } => {
            let (h, i) = (j / (2 * head_dim), j % (2 * head_dim));
            if i < head_dim {
                h * head_dim + i
            } else {
                n_head * head_dim + h * head_dim + (i - head_dim)
            }
        }
    }
}

pub fn matmul(x: &Mat, w: &Weight<'_>, layout: OutLayout, y: &mut Mat) -> Result<(), EngineError> {
    let (k, n) = (w.k(), w.n_rows());
    if x.cols != k || y.cols != n || y.rows != x.rows {
        return Err(EngineError::Internal(format!(
            "matmul {}: x {}x{}, W {n}x{k}, y {}x{}",
            w.name, x.rows, x.cols, y.rows, y.cols
        )));
    }
    let rows = x.rows;
    let chunks: Vec<Vec<f32>> = (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let n0 = c * CHUNK;
            let nn = CHUNK.min(n - n0);
            let mut wbuf = vec![0.0f32; nn * k];
            dequant_rows(w, n0, nn, &mut wbuf)?;
            let mut out = vec![0.0f32; nn * rows];
            for j in 0..nn {
                let wr = &wbuf[j * k..(j + 1) * k];
                for r in 0..rows {
                    out[j * rows + r] = dot(wr, x.row(r));
                }
            }
            Ok(out)
        })
        .collect::<Result<_, EngineError>>()?;
    for (c, out) in chunks.iter().enumerate() {
        let n0 = c * CHUNK;
        for (j, col) in out.chunks_exact(rows).enumerate() {
            let dst = out_col(layout, n0 + j);
            for (r, v) in col.iter().enumerate() {
                y.data[r * n + dst] = *v;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_gate_split_is_a_permutation() {
        let layout = OutLayout::QGateSplit {
            n_head: 3,
            head_dim: 4,
        };
        let mut seen: Vec<usize> = (0..24).map(|j| out_col(layout, j)).collect();
        // Head 1's gate element 2 is weight row 1*8 + 4 + 2 = 14 -> gates start at 12: 12 + 4 + 2.
        assert_eq!(out_col(layout, 14), 18);
        assert_eq!(out_col(layout, 9), 5);
        seen.sort_unstable();
        assert_eq!(seen, (0..24).collect::<Vec<_>>());
    }
}
