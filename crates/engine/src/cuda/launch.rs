//! Kernel launches: one parameter struct passed by value, a grid, a block, dynamic shared memory.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::{result, sys};

use crate::EngineError;

/// A loaded kernel.
#[derive(Clone, Copy)]
pub struct Kernel {
    pub f: sys::CUfunction,
    pub name: &'static str,
    /// May be launched with programmatic stream serialization (Hopper's programmatic dependent
    /// launch; the device has it and `TALLY_PDL` is not `off`), which it is while the plan being
    /// dispatched asks for it ([`set_plan_pdl`]): the next kernel's blocks may start while this
    /// one drains. Safe because every kernel begins with `pdl_enter()` (common.cuh), which waits
    /// for the previous grid to complete and its writes to be visible before reading anything
    /// (test `every_kernel_enters_through_pdl_enter`).
    pub pdl: bool,
}

/// Kernel launches made by this process (empty grids, which launch nothing, are not counted):
/// a capture compares the launches its dispatches made with the kernel nodes of its graph.
static LAUNCHES: AtomicU64 = AtomicU64::new(0);
/// Library calls (cuBLAS) made by this process; each launches kernels of its own.
static LIBRARY_CALLS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether the plan this thread dispatches uses programmatic dependent launch (set per node
    /// by the backend from `CudaOptions::pdl_for`; a thread-local, so backends on other threads
    /// cannot change it). Only when kernels start depends on it, never what they compute.
    static PLAN_PDL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Sets whether this thread's next launches use programmatic dependent launch.
pub fn set_plan_pdl(on: bool) {
    PLAN_PDL.with(|c| c.set(on));
}

/// `(kernel launches, library calls)` so far in this process.
pub fn counts() -> (u64, u64) {
    (
        LAUNCHES.load(Ordering::Relaxed),
        LIBRARY_CALLS.load(Ordering::Relaxed),
    )
}

/// Counts one library call (a cuBLAS GEMM).
pub fn count_library_call() {
    LIBRARY_CALLS.fetch_add(1, Ordering::Relaxed);
}

/// Launches `k` with `args` as its single by-value parameter (empty grids launch nothing).
///
/// # Safety
/// `T` must be the `#[repr(C)]` mirror of `k`'s one parameter struct (same fields, order and
/// types), and every device pointer in `args` must be valid, on `stream`'s context, for every
/// access the kernel makes with this grid, block and `smem` (at most the kernel's configured
/// dynamic shared memory) until the launch completes. A kernel reading memory the stream has
/// not finished writing, or writing out of bounds, is undefined behaviour on the device.
pub unsafe fn launch<T: Copy>(
    k: Kernel,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    smem: u32,
    stream: sys::CUstream,
    args: &T,
) -> Result<(), EngineError> {
    if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
        return Ok(()); // nothing to do (an empty view)
    }
    let mut params = [args as *const T as *mut c_void];
    if k.pdl && PLAN_PDL.with(|c| c.get()) {
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value: sys::CUlaunchAttributeValue {
                programmaticStreamSerializationAllowed: 1,
            },
        };
        let config = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block.0,
            blockDimY: block.1,
            blockDimZ: block.2,
            sharedMemBytes: smem,
            hStream: stream,
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: `config` and `attr` live across the call; `params` holds one pointer to a live
        // `T` matching the kernel's single parameter (this function's contract); the driver
        // copies the argument and the configuration before returning. The kernel waits for the
        // previous grid in `pdl_enter()` before touching memory that grid wrote.
        unsafe { sys::cuLaunchKernelEx(&config, k.f, params.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .map_err(|e| EngineError::Cuda(format!("launch {}: {e}", k.name)))?;
    } else {
        // SAFETY: `params` holds one pointer to a live `T` matching the kernel's single
        // parameter (this function's contract); the driver copies the argument before returning.
        unsafe { result::launch_kernel(k.f, grid, block, smem, stream, &mut params) }
            .map_err(|e| EngineError::Cuda(format!("launch {}: {e}", k.name)))?;
    }
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Blocks of `threads` covering `n` items.
pub fn blocks(n: i64, threads: u32) -> u32 {
    (n.max(0) as u64)
        .div_ceil(u64::from(threads))
        .min(u64::from(u32::MAX)) as u32
}
