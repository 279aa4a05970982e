//! Robust statistics of timing samples and the least-squares line (pure functions).
//!
//! Quantiles use linear interpolation between order statistics (Hyndman-Fan type 7, numpy's
//! default): `q(p) = x[h] + (h - floor h) (x[floor h + 1] - x[floor h])`, `h = (n - 1) p`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Scale from the median absolute deviation to a normal distribution's standard deviation.
pub const MAD_TO_SIGMA: f64 = 1.4826;

fn sorted(xs: &[f64]) -> Option<Vec<f64>> {
    if xs.is_empty() || xs.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    Some(v)
}

fn quantile_sorted(v: &[f64], p: f64) -> f64 {
    let h = (v.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(v.len() - 1);
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

/// The `p`-quantile (`0 <= p <= 1`) of finite samples; None when empty, non-finite or `p` is
/// outside `[0, 1]`.
pub fn quantile(xs: &[f64], p: f64) -> Option<f64> {
    if !(0.0..=1.0).contains(&p) {
        return None;
    }
    sorted(xs).map(|v| quantile_sorted(&v, p))
}

/// The median (mean of the two middle values for an even count).
pub fn median(xs: &[f64]) -> Option<f64> {
    quantile(xs, 0.5)
}

/// Median absolute deviation from the median (unscaled; multiply by [`MAD_TO_SIGMA`] for sigma).
pub fn mad(xs: &[f64]) -> Option<f64> {
    let m = median(xs)?;
    let dev: Vec<f64> = xs.iter().map(|x| (x - m).abs()).collect();
    median(&dev)
}

/// Summary of timing samples in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Stats {
    /// Number of samples summarised.
    pub n: usize,
    /// Median.
    pub median_ms: f64,
    /// Arithmetic mean (reported, never used for verdicts).
    pub mean_ms: f64,
    /// Smallest sample.
    pub min_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
    /// First quartile (type-7 interpolation).
    pub q1_ms: f64,
    /// Third quartile.
    pub q3_ms: f64,
    /// Interquartile range `q3 - q1`: the spread the noise gate compares effects against.
    pub iqr_ms: f64,
    /// Median absolute deviation (unscaled).
    pub mad_ms: f64,
}

impl Stats {
    /// The summary of no samples: `n = 0`, every figure 0.
    pub fn zero() -> Stats {
        Stats {
            n: 0,
            median_ms: 0.0,
            mean_ms: 0.0,
            min_ms: 0.0,
            max_ms: 0.0,
            q1_ms: 0.0,
            q3_ms: 0.0,
            iqr_ms: 0.0,
            mad_ms: 0.0,
        }
    }

    /// Summarises samples; None when there are none or one is not finite.
    pub fn of(samples_ms: &[f64]) -> Option<Stats> {
        let v = sorted(samples_ms)?;
        let n = v.len();
        let q1_ms = quantile_sorted(&v, 0.25);
        let q3_ms = quantile_sorted(&v, 0.75);
        Some(Stats {
            n,
            median_ms: quantile_sorted(&v, 0.5),
            mean_ms: v.iter().sum::<f64>() / n as f64,
            min_ms: v[0],
            max_ms: v[n - 1],
            q1_ms,
            q3_ms,
            iqr_ms: q3_ms - q1_ms,
            mad_ms: mad(&v)?,
        })
    }

    /// Interquartile range relative to the median (0 when the median is 0).
    pub fn spread_ratio(&self) -> f64 {
        if self.median_ms == 0.0 {
            0.0
        } else {
            self.iqr_ms / self.median_ms.abs()
        }
    }
}

/// Outlier rule: `|x - median| > max(mads * 1.4826 * MAD, floor_ratio * |median|)`.
///
/// The floor keeps perfectly repeatable series (MAD = 0) from calling every tiny wobble an
/// outlier. Returns the indices of the outliers and the threshold used.
pub fn outliers(xs: &[f64], mads: f64, floor_ratio: f64) -> Option<(Vec<usize>, f64)> {
    let m = median(xs)?;
    let threshold = (mads * MAD_TO_SIGMA * mad(xs)?).max(floor_ratio * m.abs());
    let idx = xs
        .iter()
        .enumerate()
        .filter(|(_, x)| (**x - m).abs() > threshold)
        .map(|(i, _)| i)
        .collect();
    Some((idx, threshold))
}

/// A least-squares line `y = slope * x + intercept` with its coefficient of determination.
///
/// Used on replay increments (ms) against the number of replays, so `slope_ms` is the cost of
/// one replay and `intercept_ms` the overhead that does not scale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LinearFit {
    /// Increase of y per unit of x.
    pub slope_ms: f64,
    /// y at x = 0.
    pub intercept_ms: f64,
    /// `1 - SS_res / SS_tot`; 1 when every y is equal and the line passes through all of them.
    pub r2: f64,
}

/// Fits a line through `(x, y)` points; None with fewer than two distinct x, mismatched
/// lengths, or non-finite values.
pub fn linear_fit(xs: &[f64], ys: &[f64]) -> Option<LinearFit> {
    if xs.len() != ys.len() || xs.len() < 2 || xs.iter().chain(ys).any(|v| !v.is_finite()) {
        return None;
    }
    let n = xs.len() as f64;
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let ss_res: f64 = xs
        .iter()
        .zip(ys)
        .map(|(x, y)| {
            let r = y - (slope * x + intercept);
            r * r
        })
        .sum();
    let ss_tot: f64 = ys.iter().map(|y| (y - my) * (y - my)).sum();
    let r2 = if ss_tot == 0.0 {
        if ss_res == 0.0 { 1.0 } else { 0.0 }
    } else {
        1.0 - ss_res / ss_tot
    };
    Some(LinearFit {
        slope_ms: slope,
        intercept_ms: intercept,
        r2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * (1.0 + b.abs())
    }

    #[test]
    fn median_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn quartiles_type7_by_hand() {
        // sorted 1 2 3 4 5 6 7 8: h(0.25) = 1.75 -> 2 + 0.75 = 2.75; h(0.75) = 5.25 -> 6.25.
        let xs = [8.0, 1.0, 7.0, 2.0, 6.0, 3.0, 5.0, 4.0];
        assert!(close(quantile(&xs, 0.25).unwrap(), 2.75));
        assert!(close(quantile(&xs, 0.75).unwrap(), 6.25));
        assert_eq!(quantile(&xs, 1.5), None);
        let s = Stats::of(&xs).unwrap();
        assert!(close(s.iqr_ms, 3.5));
        assert!(close(s.median_ms, 4.5));
        assert!(close(s.mean_ms, 4.5));
        assert_eq!((s.min_ms, s.max_ms, s.n), (1.0, 8.0, 8));
    }

    #[test]
    fn mad_by_hand() {
        // median 3; |dev| = 2 1 0 1 97 -> sorted 0 1 1 2 97 -> MAD 1.
        let xs = [1.0, 2.0, 3.0, 4.0, 100.0];
        assert_eq!(mad(&xs), Some(1.0));
        let s = Stats::of(&xs).unwrap();
        assert_eq!(s.mad_ms, 1.0);
        assert_eq!(s.median_ms, 3.0);
        // q1 = 2, q3 = 4 -> iqr 2, spread ratio 2/3.
        assert!(close(s.spread_ratio(), 2.0 / 3.0));
    }

    #[test]
    fn outlier_rule_by_hand() {
        // median 3, MAD 1: threshold max(5 * 1.4826, 0.02 * 3) = 7.413; only 100 is beyond.
        let (idx, thr) = outliers(&[1.0, 2.0, 3.0, 4.0, 100.0], 5.0, 0.02).unwrap();
        assert_eq!(idx, vec![4]);
        assert!(close(thr, 7.413));
        // Identical samples: MAD 0, the 2% floor of 10 = 0.2 decides; 10.1 stays, 10.5 goes.
        let (idx, thr) = outliers(&[10.0, 10.0, 10.0, 10.1, 10.5], 5.0, 0.02).unwrap();
        assert_eq!(idx, vec![4]);
        assert!(close(thr, 0.2));
    }

    #[test]
    fn exact_line_fits_perfectly() {
        let f = linear_fit(&[1.0, 2.0, 4.0], &[3.0, 5.0, 9.0]).unwrap();
        assert!(close(f.slope_ms, 2.0));
        assert!(close(f.intercept_ms, 1.0));
        assert!(close(f.r2, 1.0));
    }

    #[test]
    fn noisy_line_by_hand() {
        // x 1 2 4 (mean 7/3), y 2.1 3.9 8.2 (mean 4.7333..).
        // sxx = 14/3, sxy = sum(dx * y) = (-4*2.1 - 3.9 + 5*8.2)/3 = 28.7/3 -> slope = 28.7/14 = 2.05,
        // intercept = 14.2/3 - 2.05 * 7/3 = -0.05.
        let f = linear_fit(&[1.0, 2.0, 4.0], &[2.1, 3.9, 8.2]).unwrap();
        let slope = 2.05;
        let intercept = 14.2 / 3.0 - slope * 7.0 / 3.0;
        assert!(close(f.slope_ms, slope));
        assert!(close(f.intercept_ms, intercept));
        // residuals: 2.1-(s+i), 3.9-(2s+i), 8.2-(4s+i); r2 = 1 - ss_res/ss_tot.
        let res: f64 = [(1.0, 2.1), (2.0, 3.9), (4.0, 8.2)]
            .iter()
            .map(|(x, y)| (y - (slope * x + intercept)).powi(2))
            .sum();
        let ss_tot: f64 = [2.1f64, 3.9, 8.2]
            .iter()
            .map(|y| (y - 14.2 / 3.0).powi(2))
            .sum();
        assert!(close(f.r2, 1.0 - res / ss_tot));
        assert!(f.r2 > 0.99 && f.r2 < 1.0);
    }

    #[test]
    fn quadratic_is_not_linear_enough() {
        // y = x^2 at 1, 2, 4: 1 4 16. sxx = 14/3, sxy = 24 -> slope 36/7, intercept 7 - 12 = -5;
        // ss_res = 18/7, ss_tot = 126 -> r2 = 1 - 1/49 = 0.9796 < 0.98.
        let f = linear_fit(&[1.0, 2.0, 4.0], &[1.0, 4.0, 16.0]).unwrap();
        assert!(close(f.slope_ms, 36.0 / 7.0));
        assert!(close(f.intercept_ms, -5.0));
        assert!(close(f.r2, 48.0 / 49.0), "{}", f.r2);
        assert!(f.r2 < 0.98);
    }

    #[test]
    fn degenerate_fits() {
        assert_eq!(linear_fit(&[1.0], &[1.0]), None);
        assert_eq!(linear_fit(&[2.0, 2.0], &[1.0, 3.0]), None);
        assert_eq!(linear_fit(&[1.0, 2.0], &[1.0]), None);
        let flat = linear_fit(&[1.0, 2.0, 4.0], &[5.0, 5.0, 5.0]).unwrap();
        assert_eq!((flat.slope_ms, flat.intercept_ms, flat.r2), (0.0, 5.0, 1.0));
    }
}
