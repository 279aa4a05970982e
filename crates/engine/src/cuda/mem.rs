//! Device memory: plain allocations (cuMemAlloc), freed on drop. Out-of-memory is reported with
//! what was being allocated and how much the device had free.

use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::{DriverError, result, sys};

use crate::EngineError;

/// Bytes of device memory tally's allocations hold now, and the most they have held, in this
/// process (a peer engine's memory and the CUDA context are not counted).
static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

/// `(live, peak)` bytes of tally's device allocations in this process.
pub fn allocated() -> (u64, u64) {
    (LIVE.load(Ordering::Relaxed), PEAK.load(Ordering::Relaxed))
}

/// One device allocation.
pub struct DevBuf {
    pub ptr: sys::CUdeviceptr,
    pub bytes: usize,
}

fn is_oom(e: &DriverError) -> bool {
    e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY
}

impl DevBuf {
    /// Allocates `bytes` (at least 1) of device memory for `what`, rounded up to whole 16-byte
    /// vectors: the GEMV front end (`Win16::issue` in quant_load.cuh) reads a weight block's
    /// last 16-byte vector whole, up to 15 bytes past the block.
    pub fn alloc(bytes: usize, what: &str) -> Result<DevBuf, EngineError> {
        let padded = bytes.max(1).next_multiple_of(16);
        // SAFETY: a plain allocation; the context is current on this thread (the backend binds it).
        match unsafe { result::malloc_sync(padded) } {
            Ok(ptr) => {
                let live = LIVE.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
                PEAK.fetch_max(live, Ordering::Relaxed);
                Ok(DevBuf { ptr, bytes })
            }
            Err(e) if is_oom(&e) => {
                let (free, total) = result::mem_get_info().unwrap_or((0, 0));
                Err(EngineError::OutOfMemory {
                    what: what.to_string(),
                    bytes,
                    free,
                    total,
                })
            }
            Err(e) => Err(EngineError::Cuda(format!(
                "allocating {bytes} bytes for {what}: {e}"
            ))),
        }
    }

    /// Address `offset` bytes into the allocation.
    pub fn at(&self, offset: usize) -> sys::CUdeviceptr {
        self.ptr + offset as u64
    }

    /// Copies host bytes into the start of the allocation (synchronous on `stream`).
    pub fn upload<T: Copy>(&self, src: &[T], stream: sys::CUstream) -> Result<(), EngineError> {
        self.upload_at(0, src, stream)
    }

    /// Copies host data to `offset` bytes into the allocation and waits for the copy.
    pub fn upload_at<T: Copy>(
        &self,
        offset: usize,
        src: &[T],
        stream: sys::CUstream,
    ) -> Result<(), EngineError> {
        self.upload_ordered(offset, src, stream)?;
        // SAFETY: the stream is live for the caller's backend.
        unsafe { result::stream::synchronize(stream) }.map_err(cuda_err)
    }

    /// Copies host data to `offset` bytes into the allocation in stream order, without
    /// waiting: the driver stages pageable host memory before the call returns (so `src` may
    /// change afterwards), and the copy lands after the work queued before it on `stream`.
    pub fn upload_ordered<T: Copy>(
        &self,
        offset: usize,
        src: &[T],
        stream: sys::CUstream,
    ) -> Result<(), EngineError> {
        let n = std::mem::size_of_val(src);
        if offset + n > self.bytes {
            return Err(EngineError::Internal(format!(
                "upload of {n} bytes at {offset} into {} bytes",
                self.bytes
            )));
        }
        // SAFETY: the destination range lies inside this allocation (checked above); the source
        // is pageable host memory, which cuMemcpyHtoDAsync copies to its staging buffer before
        // it returns.
        unsafe { result::memcpy_htod_async(self.at(offset), src, stream) }.map_err(cuda_err)
    }

    /// Copies `dst.len()` elements from `offset` bytes into the allocation to the host.
    pub fn download_at<T: Copy>(
        &self,
        offset: usize,
        dst: &mut [T],
        stream: sys::CUstream,
    ) -> Result<(), EngineError> {
        let n = std::mem::size_of_val(dst);
        if offset + n > self.bytes {
            return Err(EngineError::Internal(format!(
                "download of {n} bytes at {offset} from {} bytes",
                self.bytes
            )));
        }
        // SAFETY: the source range lies inside this allocation; `dst` is exclusively borrowed
        // until the stream is synchronised.
        unsafe {
            result::memcpy_dtoh_async(dst, self.at(offset), stream).map_err(cuda_err)?;
            result::stream::synchronize(stream).map_err(cuda_err)?;
        }
        Ok(())
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from cuMemAlloc and is freed exactly once.
        unsafe {
            let _ = result::free_sync(self.ptr);
        }
        LIVE.fetch_sub(self.bytes as u64, Ordering::Relaxed);
    }
}

pub fn cuda_err(e: DriverError) -> EngineError {
    EngineError::Cuda(format!("{e}"))
}
