//! The CUDA backend: the same plan and executor loop as the CPU reference, on one GPU.
//!
//! Host code over cudarc with dynamic loading (the binary runs its CPU parts where CUDA is
//! absent); kernels are CUDA C++ sources compiled with NVRTC at first use (see [`compile`]).
//! Weights are uploaded as stored in the GGUF file; activations are f32. One stream; a barrier is
//! a stream synchronisation; a plain prefill is captured once as a CUDA graph and replayed.

mod args;
pub mod compile;
mod dispatch;
mod launch;
mod mem;
mod ops;
mod ops_big;
pub mod options;
#[path = "ops/sample.rs"]
mod sample;
#[path = "ops/snapshot.rs"]
mod snapshot;

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaGraph, CudaModule, CudaStream, result, sys};
use tally_gguf::GgmlType;
use tally_model::{BufKind, DType, Model, Plan, View};

use crate::EngineError;
use crate::backend::{Backend, GraphCount, Target};
use launch::Kernel;
use mem::{DevBuf, cuda_err};
pub use options::CudaOptions;

/// Why CUDA cannot be used here, if it cannot (no driver library, no device).
pub fn unavailable_reason() -> Option<String> {
    // SAFETY: probing for the driver library has no preconditions.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Some("the CUDA driver library (libcuda.so) was not found".into());
    }
    // SAFETY: as above, for NVRTC.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Some(
            "NVRTC (libnvrtc.so) was not found: add the CUDA toolkit's lib directory to LD_LIBRARY_PATH"
                .into(),
        );
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => None,
        Ok(_) => Some("no CUDA device is visible".into()),
        Err(e) => Some(format!("CUDA initialisation failed: {e}")),
    }
}

/// Facts read from the device.
#[derive(Debug, Clone)]
pub struct DeviceProps {
    pub name: String,
    pub sm_count: u32,
    pub l2_bytes: u64,
    pub memory_bytes: u64,
    pub cc: (i32, i32),
}

/// A weight tensor on the device, bytes as in the file.
pub struct DevWeight {
    pub buf: DevBuf,
    pub ty: GgmlType,
    pub dims: Vec<u64>,
    pub row_bytes: usize,
}

enum Slot {
    Own(DevBuf),
    State(String),
}

pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    _modules: Vec<Arc<CudaModule>>,
    kernels: HashMap<&'static str, Kernel>,
    model: Arc<Model>,
    weights: HashMap<String, DevWeight>,
    bufs: Vec<Slot>,
    shapes: Vec<(usize, usize, DType, String)>,
    /// What each buffer of the prepared plan holds.
    kinds: Vec<BufKind>,
    state: HashMap<String, DevBuf>,
    scratch: Vec<DevBuf>,
    /// Workspace for kernels that need one (delta rule, MoE routing), grown on demand.
    work: Option<DevBuf>,
    /// Captured plans by batch length, valid while the buffers they point at stay where they
    /// are (cleared whenever `prepare` or the workspace moves one). Plans hold no position, so
    /// the one-token plan's graph serves every decode step.
    graphs: HashMap<usize, (CudaGraph, GraphCount)>,
    /// The counts of the capture in progress.
    capturing: Option<GraphCount>,
    /// The switches, read once when the backend opened.
    pub options: CudaOptions,
    /// Its handle, bound to `stream`; made by `prepare`, before any capture.
    blas: Option<cudarc::cublas::CudaBlas>,
    pub props: DeviceProps,
    /// Seconds spent uploading weights.
    pub load_seconds: f64,
    /// Bytes of weights on the device.
    pub weight_bytes: u64,
    /// Device buffers of on-device sampling.
    sample_bufs: sample::SampleBufs,
    /// Saved sequence states by slot (see `Backend::save_state`).
    snapshots: snapshot::Snapshots,
}

fn attr(ctx: &CudaContext, a: sys::CUdevice_attribute) -> i64 {
    ctx.attribute(a).map(i64::from).unwrap_or(0)
}

impl CudaBackend {
    /// Opens device 0, compiles (or loads cached) kernels, and uploads the model's weights.
    pub fn new(model: Arc<Model>) -> Result<CudaBackend, EngineError> {
        let options = CudaOptions::from_env()?;
        if let Some(why) = unavailable_reason() {
            return Err(EngineError::Unsupported(format!(
                "CUDA backend unavailable: {why}"
            )));
        }
        let ctx = CudaContext::new(0).map_err(cuda_err)?;
        let stream = ctx.new_stream().map_err(cuda_err)?;
        let cc = ctx.compute_capability().map_err(cuda_err)?;
        let props = DeviceProps {
            name: ctx.name().map_err(cuda_err)?,
            sm_count: attr(
                &ctx,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            ) as u32,
            l2_bytes: attr(
                &ctx,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
            ) as u64,
            memory_bytes: ctx.total_mem().map_err(cuda_err)? as u64,
            cc,
        };
        let arch = if cc == (9, 0) {
            "sm_90a".to_string()
        } else {
            format!("sm_{}{}", cc.0, cc.1)
        };
        let mut modules = Vec::new();
        let mut kernels = HashMap::new();
        for src in compile::SOURCES {
            let cubin = compile::compile(src, &arch)?;
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
                .map_err(|e| EngineError::Cuda(format!("loading module {}: {e}", src.name)))?;
            for name in dispatch::kernel_names(src.name) {
                let f = module.load_function(name).map_err(|e| {
                    EngineError::Cuda(format!("kernel {name} in {}: {e}", src.name))
                })?;
                kernels.insert(
                    *name,
                    Kernel {
                        f: f.cu_function(),
                        name,
                    },
                );
            }
            modules.push(module);
        }
        let mut b = CudaBackend {
            ctx,
            stream,
            _modules: modules,
            kernels,
            model,
            weights: HashMap::new(),
            bufs: Vec::new(),
            shapes: Vec::new(),
            kinds: Vec::new(),
            state: HashMap::new(),
            scratch: Vec::new(),
            work: None,
            graphs: HashMap::new(),
            capturing: None,
            options,
            blas: None,
            props,
            load_seconds: 0.0,
            weight_bytes: 0,
            sample_bufs: Default::default(),
            snapshots: Default::default(),
        };
        dispatch::configure_kernels(&b.kernels)?;
        b.upload_weights()?;
        Ok(b)
    }

    fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    fn upload_weights(&mut self) -> Result<(), EngineError> {
        let t0 = std::time::Instant::now();
        let names: Vec<String> = self
            .model
            .config
            .tensor_shapes()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        let stream = self.cu_stream();
        for name in names {
            let (info, bytes) = self.model.weight(&name)?;
            let buf = DevBuf::alloc(bytes.len(), &name)?;
            // Chunks keep the driver's staging of pageable memory bounded.
            for (i, chunk) in bytes.chunks(64 << 20).enumerate() {
                buf.upload_at(i * (64 << 20), chunk, stream)?;
            }
            self.weight_bytes += bytes.len() as u64;
            let row_bytes = info.ty.row_bytes(info.dims[0])? as usize;
            self.weights.insert(
                name,
                DevWeight {
                    buf,
                    ty: info.ty,
                    dims: info.dims.clone(),
                    row_bytes,
                },
            );
        }
        self.load_seconds = t0.elapsed().as_secs_f64();
        Ok(())
    }

    fn kernel(&self, name: &'static str) -> Result<Kernel, EngineError> {
        self.kernels
            .get(name)
            .copied()
            .ok_or_else(|| EngineError::Cuda(format!("kernel {name} not loaded")))
    }

    fn weight(&self, name: &str) -> Result<&DevWeight, EngineError> {
        self.weights
            .get(name)
            .ok_or_else(|| EngineError::Internal(format!("weight {name} not on the device")))
    }

    fn slot_buf(&self, plan: &Plan, id: tally_model::BufId) -> Result<&DevBuf, EngineError> {
        match self.bufs.get(id.0 as usize) {
            Some(Slot::Own(b)) => Ok(b),
            Some(Slot::State(n)) => self
                .state
                .get(n)
                .ok_or_else(|| EngineError::Internal(format!("state {n} missing"))),
            None => Err(EngineError::Internal(format!(
                "buffer {} not prepared",
                plan.buf(id).name
            ))),
        }
    }

    /// Device address and leading dimension (elements) of a view.
    fn view(&self, plan: &Plan, v: &View) -> Result<(u64, i64), EngineError> {
        let b = plan.buf(v.buf);
        let base = self.slot_buf(plan, v.buf)?;
        let off = (v.row0 * b.cols + v.col0) * b.dtype.size_bytes();
        Ok((base.at(off), b.cols as i64))
    }

    /// Scratch slot `slot` holding at least `bytes`; its leading dimension is the view's width.
    fn scratch(&mut self, slot: usize, bytes: usize) -> Result<u64, EngineError> {
        while self.scratch.len() <= slot {
            self.scratch.push(DevBuf::alloc(1, "replay scratch")?);
        }
        if self.scratch[slot].bytes < bytes {
            self.scratch[slot] = DevBuf::alloc(bytes, "replay scratch")?;
        }
        Ok(self.scratch[slot].ptr)
    }

    /// The cuBLAS handle, made on first use (prepare() makes it before any graph capture:
    /// creating one allocates, which a capturing stream does not allow).
    fn blas_handle(&mut self) -> Result<cudarc::cublas::sys::cublasHandle_t, EngineError> {
        if self.blas.is_none() {
            let h = cudarc::cublas::CudaBlas::new(self.stream.clone())
                .map_err(|e| EngineError::Cuda(format!("cuBLAS: {e:?}")))?;
            self.blas = Some(h);
        }
        Ok(self
            .blas
            .as_ref()
            .map(|h| *h.handle())
            .unwrap_or(std::ptr::null_mut()))
    }

    /// A workspace of at least `bytes`.
    fn workspace(&mut self, bytes: usize) -> Result<u64, EngineError> {
        if self.work.as_ref().is_none_or(|w| w.bytes < bytes) {
            // prepare() sizes the workspace for the whole plan; growing it here (standalone
            // timing of another shape) moves it, so a captured graph pointing at it must go.
            self.graphs.clear();
            self.work = Some(DevBuf::alloc(bytes, "kernel workspace")?);
        }
        Ok(self.work.as_ref().map(|w| w.ptr).unwrap_or(0))
    }

    fn sync(&self) -> Result<(), EngineError> {
        // SAFETY: the stream is live for the backend's lifetime.
        unsafe { result::stream::synchronize(self.cu_stream()) }.map_err(cuda_err)
    }

    /// Device memory in use and total, in bytes.
    pub fn memory_use(&self) -> (u64, u64) {
        let _ = self.ctx.bind_to_thread();
        let (free, total) = result::mem_get_info().unwrap_or((0, 0));
        ((total - free) as u64, total as u64)
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device(&self) -> String {
        format!(
            "{} ({} SMs, sm_{}{})",
            self.props.name, self.props.sm_count, self.props.cc.0, self.props.cc.1
        )
    }

    fn prepare(&mut self, plan: &Plan) -> Result<(), EngineError> {
        self.ctx.bind_to_thread().map_err(cuda_err)?;
        if self.options.cublas_min_m.is_some() {
            self.blas_handle()?;
        }
        // Compared in place: decode calls this once per token.
        let same =
            self.bufs.len() == plan.buffers.len()
                && self.shapes.len() == plan.buffers.len()
                && self.shapes.iter().zip(&plan.buffers).all(|(s, b)| {
                    s.0 == b.rows && s.1 == b.cols && s.2 == b.dtype && s.3 == b.name
                });
        if same {
            return Ok(());
        }
        let shapes: Vec<(usize, usize, DType, String)> = plan
            .buffers
            .iter()
            .map(|b| (b.rows, b.cols, b.dtype, b.name.clone()))
            .collect();
        // New buffers: any captured graph points at the old ones.
        self.graphs.clear();
        let mut bufs = Vec::with_capacity(plan.buffers.len());
        for b in &plan.buffers {
            let bytes = b.elems() * b.dtype.size_bytes();
            if b.kind == BufKind::State {
                let fresh = self.state.get(&b.name).is_none_or(|s| s.bytes != bytes);
                if fresh {
                    let buf = DevBuf::alloc(bytes, &b.name)?;
                    dispatch::zero(self, buf.ptr, bytes)?;
                    self.state.insert(b.name.clone(), buf);
                }
                bufs.push(Slot::State(b.name.clone()));
            } else {
                bufs.push(Slot::Own(DevBuf::alloc(bytes, &b.name)?));
            }
        }
        self.bufs = bufs;
        self.shapes = shapes;
        self.kinds = plan.buffers.iter().map(|b| b.kind).collect();
        let work = plan
            .nodes
            .iter()
            .map(|n| ops_big::node_work_bytes(self, n))
            .max()
            .unwrap_or(0);
        self.workspace(work.max(256))?;
        self.sync()
    }

    fn reset_state(&mut self) -> Result<(), EngineError> {
        let list: Vec<(u64, usize)> = self.state.values().map(|b| (b.ptr, b.bytes)).collect();
        for (p, n) in list {
            dispatch::zero(self, p, n)?;
        }
        Ok(())
    }

    fn dispatch(&mut self, plan: &Plan, index: usize, target: Target) -> Result<(), EngineError> {
        let before = launch::counts();
        dispatch::dispatch(self, plan, index, target)
            .map_err(|e| e.in_node(&plan.nodes[index].name))?;
        if let Some(c) = self.capturing.as_mut() {
            let after = launch::counts();
            let (k, l) = (after.0 - before.0, after.1 - before.1);
            c.dispatches += 1;
            c.launches += k;
            c.library_calls += l;
            c.silent += u64::from(k + l == 0);
        }
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), EngineError> {
        self.sync()
    }

    fn read(&mut self, plan: &Plan, view: View) -> Result<Vec<f32>, EngineError> {
        if plan.buf(view.buf).dtype == DType::I32 {
            // Ids read as values, as the CPU backend does (not their bits as floats).
            return Ok(self
                .read_i32(plan, view)?
                .into_iter()
                .map(|x| x as f32)
                .collect());
        }
        self.read_rows(plan, view)
    }

    fn read_i32(&mut self, plan: &Plan, view: View) -> Result<Vec<i32>, EngineError> {
        self.read_rows(plan, view)
    }

    fn write_i32(&mut self, plan: &Plan, view: View, data: &[i32]) -> Result<(), EngineError> {
        self.write_rows(plan, view, data)
    }

    fn write(&mut self, plan: &Plan, view: View, data: &[f32]) -> Result<(), EngineError> {
        self.write_rows(plan, view, data)
    }

    fn memory_in_use(&self) -> Option<u64> {
        Some(self.memory_use().0)
    }

    fn options(&self) -> Vec<String> {
        self.options.describe()
    }

    fn memory_peak(&self) -> Option<u64> {
        Some(mem::allocated().1)
    }

    fn graph_count(&self, plan: &Plan) -> Option<GraphCount> {
        self.graphs.get(&plan.n_tokens).map(|(_, c)| *c)
    }

    fn poison(&mut self) -> Result<(), EngineError> {
        self.poison_all()
    }

    fn graph_launch(&mut self, plan: &Plan) -> Result<bool, EngineError> {
        match self.graphs.get(&plan.n_tokens).map(|(g, _)| g) {
            Some(g) => {
                g.launch().map_err(cuda_err)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn capture_begin(&mut self, plan: &Plan) -> Result<bool, EngineError> {
        if !self.options.graph_for(plan.n_tokens) {
            return Ok(false);
        }
        self.graphs.remove(&plan.n_tokens);
        self.capturing = Some(GraphCount::default());
        self.begin_capture()
    }

    fn capture_end(&mut self, plan: &Plan, keep: bool) -> Result<(), EngineError> {
        let count = self.capturing.take().unwrap_or_default();
        // A failed dispatch leaves a partial capture: end it without running it.
        let g = self.end_capture(keep)?;
        if keep {
            let kernel_nodes = kernel_nodes(&g)?;
            self.graphs.insert(
                plan.n_tokens,
                (
                    g,
                    GraphCount {
                        kernel_nodes,
                        ..count
                    },
                ),
            );
        }
        Ok(())
    }

    fn sample(
        &mut self,
        plan: &Plan,
        step: &crate::sample::SampleStep<'_>,
    ) -> Result<u32, EngineError> {
        self.sample_on_device(plan, step)
    }

    fn save_state(
        &mut self,
        slot: u64,
        extents: &[crate::backend::StateExtent],
    ) -> Result<usize, EngineError> {
        self.snapshot_save(slot, extents)
    }

    fn restore_state(&mut self, slot: u64) -> Result<(), EngineError> {
        self.snapshot_restore(slot)
    }

    fn drop_state(&mut self, slot: u64) {
        self.snapshots.remove(slot);
    }
}

/// Kernel nodes of a captured graph.
fn kernel_nodes(g: &CudaGraph) -> Result<u64, EngineError> {
    let graph = g.cu_graph();
    let mut n = 0usize;
    // SAFETY: `graph` is the live graph `g` owns; a null node array asks for the count only.
    unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n) }
        .result()
        .map_err(cuda_err)?;
    let mut nodes: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); n];
    // SAFETY: `nodes` has room for the `n` nodes the first call reported.
    unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut n) }
        .result()
        .map_err(cuda_err)?;
    let mut kernels = 0u64;
    for &node in nodes.iter().take(n) {
        let mut ty = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: `node` belongs to the live graph; the type is written through a valid pointer.
        unsafe { sys::cuGraphNodeGetType(node, &mut ty) }
            .result()
            .map_err(cuda_err)?;
        kernels += u64::from(ty == sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL);
    }
    Ok(kernels)
}

impl CudaBackend {
    /// Fills the activation buffers (not state, token ids or the position), the workspace and
    /// the replay scratch with NaN, and waits.
    fn poison_all(&mut self) -> Result<(), EngineError> {
        const NAN_BITS: u32 = 0x7fc0_0000;
        let mut spans: Vec<(u64, usize)> = Vec::new();
        for (slot, shape) in self.bufs.iter().zip(&self.kinds) {
            if let (Slot::Own(b), BufKind::Activation | BufKind::Logits) = (slot, shape) {
                spans.push((b.ptr, b.bytes));
            }
        }
        spans.extend(self.work.iter().map(|w| (w.ptr, w.bytes)));
        spans.extend(self.scratch.iter().map(|w| (w.ptr, w.bytes)));
        for (ptr, bytes) in spans {
            // SAFETY: each span is a live allocation of the backend, `bytes / 4` words long.
            unsafe { sys::cuMemsetD32Async(ptr, NAN_BITS, bytes / 4, self.cu_stream()) }
                .result()
                .map_err(cuda_err)?;
        }
        self.sync()
    }

    /// Starts capturing this thread's launches on the stream into a graph.
    fn begin_capture(&mut self) -> Result<bool, EngineError> {
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cuda_err)?;
        Ok(true)
    }

    /// Ends the capture; with `launch`, runs the graph once (the captured work has not run yet).
    fn end_capture(&mut self, launch: bool) -> Result<CudaGraph, EngineError> {
        let g = self
            .stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(cuda_err)?
            .ok_or_else(|| EngineError::Cuda("graph capture produced no graph".into()))?;
        if launch {
            g.launch().map_err(cuda_err)?;
        }
        Ok(g)
    }

    /// Copies the rows a view spans to the host and keeps its columns.
    fn read_rows<T: Copy + Default>(
        &mut self,
        plan: &Plan,
        view: View,
    ) -> Result<Vec<T>, EngineError> {
        self.sync()?;
        let b = plan.buf(view.buf);
        let mut rows = vec![T::default(); view.rows * b.cols];
        let base = self.slot_buf(plan, view.buf)?;
        base.download_at(view.row0 * b.cols * 4, &mut rows, self.cu_stream())?;
        Ok(rows
            .chunks_exact(b.cols)
            .flat_map(|r| r[view.col0..view.col0 + view.cols].iter().copied())
            .collect())
    }

    fn write_rows<T: Copy + Default>(
        &mut self,
        plan: &Plan,
        view: View,
        data: &[T],
    ) -> Result<(), EngineError> {
        if data.len() != view.elems() {
            return Err(EngineError::Internal(format!(
                "{} values for a view of {} elements",
                data.len(),
                view.elems()
            )));
        }
        self.sync()?;
        let b = plan.buf(view.buf);
        let base = self.slot_buf(plan, view.buf)?;
        let stream = self.cu_stream();
        if view.col0 == 0 && view.cols == b.cols {
            return base.upload_at(view.row0 * b.cols * 4, data, stream);
        }
        for (i, row) in data.chunks_exact(view.cols).enumerate() {
            base.upload_at(((view.row0 + i) * b.cols + view.col0) * 4, row, stream)?;
        }
        Ok(())
    }
}

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
