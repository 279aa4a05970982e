//! Scale searches shared by tally's own quantisers for the codebook formats (IQ4_NL, IQ4_XS,
//! Q3_K, Q2_K). These are not ggml's quantisers and need not give ggml's bytes: they give valid
//! blocks with a least-squares scale, which is all a synthetic file needs. Every choice is
//! deterministic (no randomness, no dependence on thread count).

/// Index of the codebook entry nearest to `x` in an ascending codebook (ties go to the upper
/// entry unless the lower one is strictly nearer).
#[inline]
pub(crate) fn nearest_index(values: &[i8], x: f32) -> usize {
    let n = values.len();
    if x <= f32::from(values[0]) {
        return 0;
    }
    if x >= f32::from(values[n - 1]) {
        return n - 1;
    }
    let (mut lo, mut hi) = (0, n - 1);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < f32::from(values[mid]) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - f32::from(values[lo]) < f32::from(values[hi]) - x {
        lo
    } else {
        hi
    }
}

/// Fits `x ~ d * values[L]` over one group: starting from the scale that maps the element of
/// largest magnitude onto either end of the codebook, tries `2 * ntry + 1` nearby inverse
/// scales around each (steps of 1/16) and keeps the least-squares `d` of the
/// assignment with the smallest squared error. Writes `L` and returns `d` (0 for an all-zero
/// group, whose `L` is then the index nearest to 0).
pub(crate) fn fit_codebook(x: &[f32], values: &[i8], ntry: i32, l_out: &mut [u8]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < 1e-30 || !amax.is_finite() {
        let zero = nearest_index(values, 0.0) as u8;
        l_out[..x.len()].fill(zero);
        return 0.0;
    }
    let lo = f32::from(values[0]);
    let hi = f32::from(values[values.len() - 1]);
    let mut best_err = f32::INFINITY;
    let mut best_d = 0.0f32;
    let mut l = vec![0u8; x.len()];
    // The extreme element goes to either end of the codebook (d of either sign), then nearby.
    let tries = [lo, hi]
        .into_iter()
        .filter(|t| *t != 0.0)
        .flat_map(|t| (-ntry..=ntry).map(move |i| t * (1.0 + i as f32 / 16.0) / max));
    for id in tries {
        let (mut sxq, mut sqq) = (0.0f32, 0.0f32);
        for (li, &v) in l.iter_mut().zip(x) {
            let k = nearest_index(values, id * v);
            *li = k as u8;
            let q = f32::from(values[k]);
            sxq += v * q;
            sqq += q * q;
        }
        if sqq <= 0.0 {
            continue;
        }
        let d = sxq / sqq;
        let err: f32 = l
            .iter()
            .zip(x)
            .map(|(&k, &v)| {
                let e = v - d * f32::from(values[k as usize]);
                e * e
            })
            .sum();
        if err < best_err {
            best_err = err;
            best_d = d;
            l_out[..x.len()].copy_from_slice(&l);
        }
    }
    best_d
}

/// Re-assigns `L` for a fixed (already rounded) scale `d`.
pub(crate) fn assign(x: &[f32], values: &[i8], d: f32, l_out: &mut [u8]) {
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (l, &v) in l_out.iter_mut().zip(x) {
        *l = nearest_index(values, id * v) as u8;
    }
}

/// Fits `x ~ s * L - m` with `L` in `0..=nmax`, `s >= 0`, `m >= 0` (the min is folded in as in
/// the K-quants: the group's minimum, clamped to at most 0, maps to L = 0). A few rounds of
/// alternating least squares from the min/max start. Returns `(s, m)`.
pub(crate) fn fit_scale_min(x: &[f32], nmax: u8) -> (f32, f32) {
    let mut mn = x.iter().copied().fold(f32::INFINITY, f32::min).min(0.0);
    let mx = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !mn.is_finite() || !mx.is_finite() || mx <= mn {
        let m = -mn;
        return (
            0.0,
            if m.is_nan() {
                0.0
            } else {
                m.clamp(0.0, f32::MAX)
            },
        );
    }
    let nf = f32::from(nmax);
    let mut s = (mx - mn) / nf;
    let mut best = (s, -mn);
    let mut best_err = f32::INFINITY;
    for _ in 0..4 {
        let (m, is) = (-mn, 1.0 / s);
        let (mut n, mut sl, mut sl2, mut sx, mut sxl, mut err) = (0.0f32, 0.0, 0.0, 0.0, 0.0, 0.0);
        for &v in x {
            let l = ((v + m) * is).round().clamp(0.0, nf);
            let e = s * l - m - v;
            err += e * e;
            n += 1.0;
            sl += l;
            sl2 += l * l;
            sx += v;
            sxl += v * l;
        }
        if err < best_err {
            best_err = err;
            best = (s, m);
        }
        // Least squares for x = s*l + b (b = -m), keeping b <= 0.
        let det = n * sl2 - sl * sl;
        if det <= 0.0 {
            break;
        }
        let ns = (n * sxl - sl * sx) / det;
        let nb = (sx * sl2 - sl * sxl) / det;
        if !ns.is_finite() || ns <= 0.0 {
            break;
        }
        if nb > 0.0 {
            s = sxl / sl2;
            mn = 0.0;
        } else {
            s = ns;
            mn = nb;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_index_picks_the_nearest_entry() {
        let v: [i8; 4] = [-10, -1, 2, 20];
        assert_eq!(nearest_index(&v, -100.0), 0);
        assert_eq!(nearest_index(&v, -5.0), 1);
        assert_eq!(nearest_index(&v, -6.0), 0);
        assert_eq!(nearest_index(&v, 0.4), 1);
        assert_eq!(nearest_index(&v, 0.6), 2);
        assert_eq!(nearest_index(&v, 30.0), 3);
    }
}
