//! The GPU's ceilings, measured: a device copy and a cuBLAS f16 GEMM.

use cudarc::driver::{CudaContext, result, sys};

use super::mem::{DevBuf, cuda_err};
use super::{attr, unavailable_reason};
use crate::EngineError;

/// GPU ceilings: a 2 GiB device-to-device copy (read + write counted) and an 8192^3 f16 GEMM
/// through cuBLAS (f32 accumulation, the precision of the tensor-core kernels), random data,
/// medians of repeated runs timed with CUDA events.
pub fn peaks() -> Result<crate::peaks::Peaks, EngineError> {
    use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys as blas};
    if let Some(why) = unavailable_reason() {
        return Err(EngineError::Unsupported(why));
    }
    let ctx = CudaContext::new(0).map_err(cuda_err)?;
    let stream = ctx.new_stream().map_err(cuda_err)?;
    let time = |f: &mut dyn FnMut() -> Result<(), EngineError>| -> Result<f64, EngineError> {
        let start = ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(cuda_err)?;
        let end = ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(cuda_err)?;
        start.record(&stream).map_err(cuda_err)?;
        f()?;
        end.record(&stream).map_err(cuda_err)?;
        end.synchronize().map_err(cuda_err)?;
        Ok(f64::from(start.elapsed_ms(&end).map_err(cuda_err)?))
    };
    let bytes = 2usize << 30;
    let src = DevBuf::alloc(bytes, "peak copy source")?;
    let dst = DevBuf::alloc(bytes, "peak copy destination")?;
    // Random bytes (never zeros): one 64 MiB random block uploaded over the whole buffer.
    let block: Vec<u32> = (0..(16u32 << 20))
        .map(|i| i.wrapping_mul(2_654_435_761).rotate_left(13) ^ 0x9E37_79B9)
        .collect();
    for off in (0..bytes).step_by(64 << 20) {
        src.upload_at(off, &block, stream.cu_stream())?;
    }
    let mut copy = Vec::new();
    for _ in 0..10 {
        copy.push(time(&mut || {
            // SAFETY: both allocations hold `bytes`.
            unsafe { result::memcpy_dtod_async(dst.ptr, src.ptr, bytes, stream.cu_stream()) }
                .map_err(cuda_err)
        })?);
    }
    copy.sort_by(f64::total_cmp);
    let gbps = 2.0 * bytes as f64 / (copy[copy.len() / 2] / 1e3) / 1e9;
    drop((src, dst));
    let n = 8192usize;
    let host: Vec<half::f16> = (0..n * n)
        .map(|i| half::f16::from_f32(((i * 2_654_435_761usize) % 2001) as f32 / 1000.0 - 1.0))
        .collect();
    let a = stream.clone_htod(&host).map_err(cuda_err)?;
    let b = stream.clone_htod(&host).map_err(cuda_err)?;
    let mut c = stream.alloc_zeros::<half::f16>(n * n).map_err(cuda_err)?;
    let blas_h =
        CudaBlas::new(stream.clone()).map_err(|e| EngineError::Cuda(format!("cuBLAS: {e:?}")))?;
    let cfg = GemmConfig {
        transa: blas::cublasOperation_t::CUBLAS_OP_N,
        transb: blas::cublasOperation_t::CUBLAS_OP_N,
        m: n as i32,
        n: n as i32,
        k: n as i32,
        alpha: half::f16::ONE,
        lda: n as i32,
        ldb: n as i32,
        beta: half::f16::ZERO,
        ldc: n as i32,
    };
    let mut gemm = Vec::new();
    for i in 0..8 {
        let ms = time(&mut || {
            // SAFETY: a, b, c hold n*n elements, matching the configuration.
            unsafe { blas_h.gemm(cfg, &a, &b, &mut c) }
                .map_err(|e| EngineError::Cuda(format!("cuBLAS gemm: {e:?}")))
        })?;
        if i >= 2 {
            gemm.push(ms);
        }
    }
    gemm.sort_by(f64::total_cmp);
    let tflops = 2.0 * (n as f64).powi(3) / (gemm[gemm.len() / 2] / 1e3) / 1e12;
    let name = ctx.name().map_err(cuda_err)?;
    let cc = ctx.compute_capability().map_err(cuda_err)?;
    Ok(crate::peaks::Peaks {
        gbps: Some(gbps),
        tflops: Some(tflops),
        method: "cuda: device copy of 2 GiB (read+write), median of 10; cuBLAS f16 GEMM 8192^3 (f32 accumulate), median of 6 after 2 warm-ups; CUDA events".into(),
        gpu: Some(tally_ledger::schema::GpuInfo {
            name,
            sm_count: attr(&ctx, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) as u32,
            l2_bytes: attr(&ctx, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE) as u64,
            memory_bytes: ctx.total_mem().map_err(cuda_err)? as u64,
            compute_capability: format!("{}.{}", cc.0, cc.1),
            driver: driver_version(),
        }),
    })
}

fn driver_version() -> String {
    let mut v = 0i32;
    // SAFETY: cuDriverGetVersion writes one int through a valid pointer.
    let r = unsafe { sys::cuDriverGetVersion(&mut v) };
    if r == sys::cudaError_enum::CUDA_SUCCESS {
        format!("{}.{}", v / 1000, (v % 1000) / 10)
    } else {
        String::new()
    }
}
