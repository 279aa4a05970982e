//! Owned ggml objects (backend instance, buffer, context) and the one-node graph that replay
//! and standalone timing both dispatch.

use std::ptr::NonNull;

use llama_cpp_sys_2 as sys;

use crate::PeerError;
use crate::ffi;

/// An owned backend instance (its own stream on a GPU, its own thread pool on the CPU).
pub(crate) struct Backend {
    ptr: NonNull<sys::ggml_backend>,
    pub is_gpu: bool,
}

impl Backend {
    /// A new instance on `dev`; `threads` applies to the CPU backend.
    pub(crate) fn new(dev: sys::ggml_backend_dev_t, threads: i32) -> Result<Backend, PeerError> {
        ffi::init_once();
        let (name, _, is_gpu) = ffi::device_info(dev);
        // SAFETY: `dev` comes from ggml's registry; NULL params select the device defaults.
        let raw = unsafe { sys::ggml_backend_dev_init(dev, std::ptr::null()) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            PeerError::Engine(format!(
                "ggml could not start a backend on {name}: {}",
                ffi::log_tail()
            ))
        })?;
        if !is_gpu {
            // SAFETY: the backend is a CPU backend (device type CPU), as the call requires.
            unsafe { sys::ggml_backend_cpu_set_n_threads(ptr.as_ptr(), threads.max(1)) };
        }
        Ok(Backend { ptr, is_gpu })
    }

    pub(crate) fn as_ptr(&self) -> sys::ggml_backend_t {
        self.ptr.as_ptr()
    }

    /// Whether the backend can run `node` (as built, with its sources' buffers).
    pub(crate) fn supports(&self, node: *const sys::ggml_tensor) -> bool {
        // SAFETY: the backend is alive; `node` is a live tensor.
        unsafe { sys::ggml_backend_supports_op(self.as_ptr(), node) }
    }

    /// Computes a graph and waits for it.
    pub(crate) fn compute(&self, graph: *mut sys::ggml_cgraph) -> Result<(), PeerError> {
        // SAFETY: the backend is alive and every tensor of `graph` is allocated in a buffer the
        // backend can use (the callers check `supports`).
        let status = unsafe { sys::ggml_backend_graph_compute(self.as_ptr(), graph) };
        if status == sys::GGML_STATUS_SUCCESS {
            Ok(())
        } else {
            Err(PeerError::Engine(format!(
                "ggml graph compute failed with status {status}: {}",
                ffi::log_tail()
            )))
        }
    }

    /// Waits for queued work.
    pub(crate) fn synchronize(&self) {
        // SAFETY: the backend is alive.
        unsafe { sys::ggml_backend_synchronize(self.as_ptr()) }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // SAFETY: we own the backend; buffers allocated for it are separate objects.
        unsafe { sys::ggml_backend_free(self.as_ptr()) }
    }
}

/// An owned device buffer.
pub(crate) struct Buffer {
    ptr: NonNull<sys::ggml_backend_buffer>,
    pub size_bytes: usize,
}

impl Buffer {
    /// Allocates `size_bytes` in the backend's default buffer type.
    pub(crate) fn new(backend: &Backend, size_bytes: usize) -> Result<Buffer, PeerError> {
        // SAFETY: the backend is alive; its default buffer type is owned by ggml.
        let raw = unsafe {
            let buft = sys::ggml_backend_get_default_buffer_type(backend.as_ptr());
            sys::ggml_backend_buft_alloc_buffer(buft, size_bytes.max(1))
        };
        NonNull::new(raw)
            .map(|ptr| Buffer { ptr, size_bytes })
            .ok_or_else(|| {
                PeerError::Engine(format!("could not allocate a {size_bytes}-byte buffer"))
            })
    }

    /// Allocates every tensor of `ctx` (views included) in one buffer of the backend.
    pub(crate) fn for_ctx(ctx: &Ctx, backend: &Backend) -> Result<Buffer, PeerError> {
        // SAFETY: both are alive; ggml sizes the buffer to fit every tensor of the context.
        let raw = unsafe { sys::ggml_backend_alloc_ctx_tensors(ctx.as_ptr(), backend.as_ptr()) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            PeerError::Engine(format!(
                "could not allocate op tensors: {}",
                ffi::log_tail()
            ))
        })?;
        // SAFETY: the buffer was just created.
        let size_bytes = unsafe { sys::ggml_backend_buffer_get_size(ptr.as_ptr()) };
        Ok(Buffer { ptr, size_bytes })
    }

    pub(crate) fn as_ptr(&self) -> sys::ggml_backend_buffer_t {
        self.ptr.as_ptr()
    }

    /// Bytes the buffer needs to hold `t` (padding included).
    pub(crate) fn alloc_size(backend: &Backend, t: *const sys::ggml_tensor) -> usize {
        // SAFETY: backend alive, `t` a live tensor descriptor.
        unsafe {
            let buft = sys::ggml_backend_get_default_buffer_type(backend.as_ptr());
            sys::ggml_backend_buft_get_alloc_size(buft, t as *mut _)
        }
    }

    /// Places `t` at `offset` bytes into the buffer (offset must respect the buffer's alignment).
    pub(crate) fn place(&self, t: *mut sys::ggml_tensor, offset: usize) -> Result<(), PeerError> {
        // SAFETY: buffer alive; the caller sized the buffer so `offset + alloc_size(t)` fits.
        let status = unsafe {
            let base = sys::ggml_backend_buffer_get_base(self.as_ptr()).cast::<u8>();
            sys::ggml_backend_tensor_alloc(self.as_ptr(), t, base.add(offset).cast())
        };
        if status == sys::GGML_STATUS_SUCCESS {
            Ok(())
        } else {
            Err(PeerError::Engine(format!(
                "ggml_backend_tensor_alloc failed with status {status}"
            )))
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: we own the buffer; no graph using it outlives the owner (callers free the
        // context holding tensors placed in it first, or never compute again).
        unsafe { sys::ggml_backend_buffer_free(self.as_ptr()) }
    }
}

/// An owned ggml context holding tensor descriptors only (`no_alloc`).
pub(crate) struct Ctx {
    ptr: NonNull<sys::ggml_context>,
}

impl Ctx {
    /// Room for `n_tensors` descriptors and one graph of `graph_nodes` nodes.
    pub(crate) fn new(n_tensors: usize, graph_nodes: usize) -> Result<Ctx, PeerError> {
        // SAFETY: size queries have no preconditions.
        let mem_size = unsafe {
            n_tensors * sys::ggml_tensor_overhead()
                + sys::ggml_graph_overhead_custom(graph_nodes, false)
                + 1024
        };
        let params = sys::ggml_init_params {
            mem_size,
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        };
        // SAFETY: ggml allocates `mem_size` bytes for descriptors; no tensor data (no_alloc).
        let raw = unsafe { sys::ggml_init(params) };
        NonNull::new(raw)
            .map(|ptr| Ctx { ptr })
            .ok_or_else(|| PeerError::Engine("ggml_init failed".into()))
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::ggml_context {
        self.ptr.as_ptr()
    }

    /// A new contiguous tensor descriptor.
    pub(crate) fn tensor(&self, type_: sys::ggml_type, ne: [i64; 4]) -> *mut sys::ggml_tensor {
        // SAFETY: the context has room (sized by the caller); `ne` has 4 entries.
        unsafe { sys::ggml_new_tensor(self.as_ptr(), type_, 4, ne.as_ptr()) }
    }

    /// A graph holding exactly the given nodes, in order (sources are used as they are: they
    /// are not added, so nothing upstream is recomputed).
    pub(crate) fn graph_of(&self, nodes: &[*mut sys::ggml_tensor]) -> *mut sys::ggml_cgraph {
        // SAFETY: the context was sized for a graph of at least `nodes.len()` nodes.
        unsafe {
            let g = sys::ggml_new_graph_custom(self.as_ptr(), nodes.len().max(1), false);
            for &n in nodes {
                sys::ggml_graph_add_node(g, n);
            }
            g
        }
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: we own the context; tensor data lives in separate buffers.
        unsafe { sys::ggml_free(self.as_ptr()) }
    }
}

/// Turns `dst` into a copy of `node`'s operation: same op, op parameters and sources, flagged
/// for computation (backends skip nodes without `GGML_TENSOR_FLAG_COMPUTE`, which
/// `ggml_graph_add_node` does not set). A `CPY`'s second operand is its destination (ggml-cuda
/// writes into it, not into the node), so it is pointed at `dst` too: the real destination is
/// never written.
///
/// # Safety
/// `dst` and `node` must be live tensors; `node`'s sources must stay live while `dst` is used.
pub(crate) unsafe fn copy_op(dst: *mut sys::ggml_tensor, node: *const sys::ggml_tensor) {
    // SAFETY: guaranteed by the caller; plain field copies.
    unsafe {
        (*dst).op = (*node).op;
        (*dst).op_params = (*node).op_params;
        (*dst).src = (*node).src;
        if (*node).op == sys::GGML_OP_CPY {
            (*dst).src[1] = dst;
        }
        (*dst).flags = COMPUTE_FLAG;
    }
}

/// ggml's "must be computed" node flag.
pub(crate) const COMPUTE_FLAG: i32 = sys::GGML_TENSOR_FLAG_COMPUTE as i32;

/// Copies a tensor's bytes to the host.
pub(crate) fn read_bytes(t: *const sys::ggml_tensor) -> Vec<u8> {
    // SAFETY: `t` is a live, allocated tensor (callers pass tensors placed in a buffer); the
    // vector holds exactly its bytes.
    unsafe {
        let n = sys::ggml_nbytes(t);
        let mut v = vec![0u8; n];
        sys::ggml_backend_tensor_get(t, v.as_mut_ptr().cast(), 0, n);
        v
    }
}

/// Overwrites a tensor's bytes with `byte`.
pub(crate) fn poison(t: *mut sys::ggml_tensor, byte: u8) {
    // SAFETY: `t` is a live, allocated tensor; we write exactly its bytes.
    unsafe {
        let n = sys::ggml_nbytes(t);
        let v = vec![byte; n];
        sys::ggml_backend_tensor_set(t, v.as_ptr().cast(), 0, n);
    }
}
