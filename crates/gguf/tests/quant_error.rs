//! tally's quantisers for the types a synthetic file may use: random data quantised and
//! dequantised again must come back within a per-type relative RMS error bound, and every
//! dequantised value must be finite.
//!
//! The bounds come from the bits per index. For a uniform grid of 2^b levels spanning a
//! block's range, the rounding error is uniform over one step, RMS = step / sqrt(12). With the
//! block's extreme at about 3.5 sigma for Gaussian data (blocks of 16..256), the span is about
//! 7 sigma and the relative RMS error at most about 7 / ((2^b - 1) sqrt 12) = 2.02 / (2^b - 1):
//! b = 2: 0.67, b = 3: 0.29, b = 4: 0.135, b = 5: 0.065, b = 8: 0.0079. The codebook formats
//! (IQ4_NL, IQ4_XS) place their 16 levels closer where Gaussian data is dense, so the 4-bit
//! bound holds for them too; MXFP4's power-of-two scale and E2M1 grid (steps of 0.5 up to 4
//! units, then 1 and 2, relative to 2^e) lose up to about one bit against a free scale, so it
//! gets the 3-bit bound. Measured values are printed (`--nocapture`) and sit well inside.

use tally_gguf::{GgmlType, dequantize_row, quantize_row};

/// splitmix64: fresh deterministic inputs without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Relative RMS bound for a uniform grid with `bits` bits per index (see the module doc).
fn grid_bound(bits: u32) -> f64 {
    2.02 / (f64::from(1u32 << bits) - 1.0)
}

fn bound(ty: GgmlType) -> f64 {
    match ty {
        GgmlType::Q2_K => grid_bound(2),
        GgmlType::Q3_K | GgmlType::MXFP4 => grid_bound(3),
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => grid_bound(4),
        GgmlType::Q5_0 | GgmlType::Q5_1 => grid_bound(5),
        other => panic!("no bound for {other}"),
    }
}

/// Quantises `x` and returns the relative RMS error of its dequantisation (f64 norms).
fn rel_rms(ty: GgmlType, x: &[f32]) -> f64 {
    let mut q = vec![0u8; ty.row_bytes(x.len() as u64).unwrap() as usize];
    quantize_row(ty, x, &mut q).unwrap();
    let mut y = vec![f32::NAN; x.len()];
    dequantize_row(ty, &q, &mut y).unwrap();
    assert!(y.iter().all(|v| v.is_finite()), "{ty}: non-finite output");
    let (mut e, mut n) = (0.0f64, 0.0f64);
    for (a, b) in x.iter().zip(&y) {
        e += (f64::from(*a) - f64::from(*b)).powi(2);
        n += f64::from(*a).powi(2);
    }
    (e / n).sqrt()
}

const TYPES: [GgmlType; 9] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
];

#[test]
fn quantisers_stay_within_their_error_bound() {
    let mut rng = Rng(0x7a11_9a75);
    let mut failures = Vec::new();
    for ty in TYPES {
        // 64 rows of 256, each with its own scale over five decades and a random offset of up
        // to half a sigma (weights are not always centred). Below ~1e-3, IQ4_XS's super-block
        // scale (about sigma / 1000) falls among the f16 subnormals and loses precision, in
        // ggml's format as in ours; the synth weights have sigma >= 2e-3.
        let mut worst = 0.0f64;
        for row in 0..64 {
            let scale = 10f64.powf(rng.uniform() * 5.0 - 3.0);
            let offset = (rng.uniform() - 0.5) * scale;
            let x: Vec<f32> = (0..256)
                .map(|_| (rng.normal() * scale + offset) as f32)
                .collect();
            let r = rel_rms(ty, &x);
            worst = worst.max(r);
            if r > bound(ty) {
                failures.push(format!(
                    "{ty} row {row} (scale {scale:.1e}): {r:.4} > {:.4}",
                    bound(ty)
                ));
            }
        }
        println!(
            "{ty}: worst relative RMS {worst:.4} (bound {:.4})",
            bound(ty)
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn quantisers_handle_zeros_and_constant_blocks() {
    for ty in TYPES {
        for v in [0.0f32, 0.25, -3.0] {
            let x = vec![v; 256];
            let mut q = vec![0u8; ty.row_bytes(256).unwrap() as usize];
            quantize_row(ty, &x, &mut q).unwrap();
            let mut y = vec![f32::NAN; 256];
            dequantize_row(ty, &q, &mut y).unwrap();
            for y in &y {
                assert!(
                    (f64::from(*y) - f64::from(v)).abs() <= 0.2 * f64::from(v.abs()) + 1e-6,
                    "{ty}: constant {v} came back as {y}"
                );
            }
        }
    }
}
