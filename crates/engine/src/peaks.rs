//! The two ceilings every ledger row is judged against, measured on this machine (never taken
//! from a datasheet): memory bandwidth and the matrix rate of the precision the big kernels use.

use tally_ledger::schema::GpuInfo;

/// Measured ceilings.
#[derive(Debug, Clone, Default)]
pub struct Peaks {
    /// Bytes read plus written per second / 1e9.
    pub gbps: Option<f64>,
    /// Multiply-adds x 2 per second / 1e12.
    pub tflops: Option<f64>,
    /// How they were measured.
    pub method: String,
    pub gpu: Option<GpuInfo>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Measures the ceilings of `backend` (`cpu` or `cuda`); a failure leaves the figure empty and
/// says why in `method`.
pub fn measure(backend: &str) -> Peaks {
    match backend {
        "cuda" => match crate::cuda::peaks() {
            Ok(p) => p,
            Err(e) => Peaks {
                method: format!("GPU peaks not measured: {e}"),
                ..Peaks::default()
            },
        },
        _ => cpu(),
    }
}

/// CPU: a parallel copy of 128 MiB (read + write counted) and an f32 multiply-add loop on every
/// thread (8 independent accumulators, as the reference kernels use).
pub fn cpu() -> Peaks {
    use rayon::prelude::*;
    let n = 32 << 20; // f32 elements: 128 MiB
    let src: Vec<f32> = (0..n).map(|i| (i % 1021) as f32 * 0.5 + 1.0).collect();
    let mut dst = vec![0.0f32; n];
    let chunk = 1 << 20;
    let mut copy_ms = Vec::new();
    for _ in 0..7 {
        let t = std::time::Instant::now();
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s));
        copy_ms.push(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    let gbps = 2.0 * (n * 4) as f64 / median(copy_ms) / 1e9;
    let threads = rayon::current_num_threads();
    let iters = 20_000_000u64;
    let mut fma_s = Vec::new();
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let s: f32 = (0..threads)
            .into_par_iter()
            .map(|i| {
                let mut acc = [1.0f32 + i as f32; 8];
                let (a, b) = (
                    std::hint::black_box(0.999_999f32),
                    std::hint::black_box(1e-7f32),
                );
                for _ in 0..iters {
                    for x in acc.iter_mut() {
                        *x = *x * a + b;
                    }
                }
                acc.iter().sum::<f32>()
            })
            .sum();
        std::hint::black_box(s);
        fma_s.push(t.elapsed().as_secs_f64());
    }
    let flops = 2.0 * 8.0 * iters as f64 * threads as f64;
    Peaks {
        gbps: Some(gbps),
        tflops: Some(flops / median(fma_s) / 1e12),
        method: format!(
            "cpu: parallel copy of 128 MiB (read+write), median of 7; f32 multiply-add loop on {threads} threads, median of 3"
        ),
        gpu: None,
    }
}
