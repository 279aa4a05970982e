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

/// CPU: a parallel copy of 128 MiB (read + write counted) and a blocked f32 GEMM on every
/// thread at once (the matrix ceiling the reference kernels can approach).
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
    let (gflops, size) = cpu_gemm_gflops(threads);
    Peaks {
        gbps: Some(gbps),
        tflops: Some(gflops / 1e3),
        method: format!(
            "cpu: parallel copy of 128 MiB (read+write), median of 7; f32 GEMM {size}x{size}x{size} \
             (matrixmultiply's blocked AVX2/FMA kernel) on each of {threads} threads at once, \
             best of 5"
        ),
        gpu: None,
    }
}

/// GFLOP/s of `threads` independent f32 GEMMs run at once, one per thread (each thread its own
/// matrices, so the figure is the whole machine's rate without a shared-matrix split). Best of
/// five: a ceiling is the fastest the machine did, not a typical run. Returns (GFLOP/s, size).
fn cpu_gemm_gflops(threads: usize) -> (f64, usize) {
    use rayon::prelude::*;
    // 512^3: 268 MFLOP per GEMM, three 1 MiB matrices per thread (in L2/L3 with blocking).
    let n = 512usize;
    let mats: Vec<(Vec<f32>, Vec<f32>)> = (0..threads)
        .map(|t| {
            let a = (0..n * n).map(|i| ((i + t) % 97) as f32 * 0.01).collect();
            let b = (0..n * n)
                .map(|i| ((i * 7 + t) % 89) as f32 * 0.01)
                .collect();
            (a, b)
        })
        .collect();
    let mut outs: Vec<Vec<f32>> = vec![vec![0.0; n * n]; threads];
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        outs.par_iter_mut().zip(&mats).for_each(|(c, (a, b))| {
            // SAFETY: a, b and c are n x n row-major matrices (n * n elements each, strides
            // n and 1), c is not aliased by a or b: exactly what sgemm reads and writes.
            unsafe {
                matrixmultiply::sgemm(
                    n,
                    n,
                    n,
                    1.0,
                    a.as_ptr(),
                    n as isize,
                    1,
                    b.as_ptr(),
                    n as isize,
                    1,
                    0.0,
                    c.as_mut_ptr(),
                    n as isize,
                    1,
                );
            }
        });
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&outs);
    let flops = 2.0 * (n * n * n) as f64 * threads as f64;
    (flops / best / 1e9, n)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cpu_gemm_computes_a_product() {
        // 2x3 times 3x2 through the same call the peak uses.
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0];
        let mut c = [0.0f32; 4];
        // SAFETY: 2x3, 3x2 and 2x2 row-major arrays with matching strides.
        unsafe {
            matrixmultiply::sgemm(
                2,
                3,
                2,
                1.0,
                a.as_ptr(),
                3,
                1,
                b.as_ptr(),
                2,
                1,
                0.0,
                c.as_mut_ptr(),
                2,
                1,
            );
        }
        assert_eq!(c, [58.0, 64.0, 139.0, 154.0]);
    }
}
