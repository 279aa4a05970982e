//! The CUDA backend: the same plan and executor loop as the CPU reference, on one GPU.
//!
//! Host code over cudarc with dynamic loading (the binary runs its CPU parts where CUDA is
//! absent); kernels are CUDA C++ sources compiled with NVRTC at first use (see [`compile`]).
//! Weights are uploaded as stored in the GGUF file; activations are f32. One stream; a barrier is
//! a stream synchronisation; a plain prefill is captured once as a CUDA graph and replayed.
//!
//! The backend in parts: the device ([`Gpu`]), the kernels as typed handles
//! ([`kernels::Kernels`]), the weights ([`weights::Weights`]), the prepared plan's buffers
//! ([`arena::Arena`]), the captured graphs ([`Graphs`]), the sampler's buffers and the saved
//! sequence states. `ops/` holds the host side of every op.

mod arena;
mod args;
pub mod compile;
pub mod consts;
pub mod kernels;
mod launch;
mod mem;
mod ops;
pub mod options;
mod peaks;
mod trace;
mod weights;

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaGraph, CudaStream, result, sys};
use tally_model::{BufKind, DType, Model, Plan, View};

use crate::EngineError;
use crate::backend::{Backend, GraphCount, Target};
use arena::{Arena, Slot};
use kernels::Kernels;
use mem::{DevBuf, cuda_err};
use ops::{sample, snapshot};
pub use options::{CudaOptions, PdlMode};
pub use peaks::peaks;
pub use weights::DevWeight;
use weights::Weights;

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

/// The device: its context, the one stream, and the cuBLAS handle.
struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Bound to `stream`; made by `prepare`, before any capture.
    blas: Option<cudarc::cublas::CudaBlas>,
}

/// Captured plans by batch length, valid while the buffers they point at stay where they are
/// (cleared whenever `prepare` or the workspace moves one). Plans hold no position, so the
/// one-token plan's graph serves every decode step.
#[derive(Default)]
struct Graphs {
    /// By the id of the arena's buffer set of the plan captured (one per plan shape).
    by_set: HashMap<u64, (CudaGraph, GraphCount)>,
    /// The counts of the capture in progress.
    capturing: Option<GraphCount>,
}

pub struct CudaBackend {
    gpu: Gpu,
    pub props: DeviceProps,
    /// The switches, read once when the backend opened.
    pub options: CudaOptions,
    kernels: Kernels,
    /// The model (its MTP block's tensors are uploaded when a plan first reads them).
    model: Arc<Model>,
    weights: Weights,
    arena: Arena,
    graphs: Graphs,
    /// Device buffers of on-device sampling.
    sampling: sample::SampleBufs,
    /// Saved sequence states by slot (see `Backend::save_state`).
    snapshots: snapshot::Snapshots,
    /// `TALLY_STEP_TRACE`: the decode steps' wall and device times.
    trace: Option<trace::StepTrace>,
    /// The cuBLAS path's f16 copies of dense weights, decoded once (`ops::matmul::keep_f16`),
    /// by (weight buffer, output layout).
    f16_weights: HashMap<(u64, (i32, i32, i32)), DevBuf>,
    /// `TALLY_EXPERT_F16`: f16 copies of routed-expert weights (`[E * N, K]`), decoded once
    /// (`ops::matmul::keep_f16`), by the GGUF weight's device buffer.
    f16_experts: HashMap<u64, DevBuf>,
    /// The cuBLAS path's f16 activations (`ops::matmul::cublas_gemm`), outside the shared
    /// workspace so that the projections reading one input (qkv, z, beta, alpha; the shared
    /// expert's gate and up) cast it once: sized by `prepare` for every such projection of the
    /// plans it prepared.
    cast_buf: Option<DevBuf>,
    /// `router_fused`'s block counters (router.cu; one per token row, `ROUTER_MAX_M`): 0 between
    /// launches (each row's last block sets its own back); allocated and zeroed by the first
    /// `prepare`, before any graph capture.
    router_counter: Option<DevBuf>,
    /// What `cast_buf` holds (the input view it was cast from and the node that cast it) and
    /// where the run is (`ops::CastState`).
    cast: ops::CastState,
}

/// The NVRTC architecture the backend compiles for on a device of compute capability `cc`
/// (sm_90a on Hopper: wgmma and setmaxnreg need the `a` target).
fn arch_of(cc: (i32, i32)) -> String {
    if cc == (9, 0) {
        "sm_90a".to_string()
    } else {
        format!("sm_{}{}", cc.0, cc.1)
    }
}

/// The architecture the backend would compile for on device 0.
pub fn device_arch() -> Result<String, EngineError> {
    if let Some(why) = unavailable_reason() {
        return Err(EngineError::Unsupported(format!(
            "CUDA backend unavailable: {why} (name the architecture, e.g. --arch sm_90a)"
        )));
    }
    let ctx = CudaContext::new(0).map_err(cuda_err)?;
    Ok(arch_of(ctx.compute_capability().map_err(cuda_err)?))
}

/// Whether opening the CUDA backend now will compile kernels first (a cache miss: a new machine,
/// NVRTC release or tally build): the device's architecture, the sources to compile and the
/// cache folder; `None` when every kernel is cached or there is no usable device.
pub fn pending_compile() -> Option<(String, Vec<&'static str>, std::path::PathBuf)> {
    let arch = device_arch().ok()?;
    let defines = CudaOptions::from_env().ok()?.defines();
    let (missing, dir) = compile::uncached_sources(&arch, &defines).ok()?;
    (!missing.is_empty()).then_some((arch, missing, dir))
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
        let arch = arch_of(cc);
        // Programmatic dependent launch needs sm_90 (griddepcontrol); older parts launch plainly.
        let kernels = Kernels::load(
            &ctx,
            &arch,
            options.pdl != PdlMode::Off && cc.0 >= 9,
            &options.defines(),
        )?;
        ops::configure(&kernels)?;
        let weights = Weights::upload(&model, stream.cu_stream())?;
        let trace = trace::StepTrace::from_env(&ctx)?;
        Ok(CudaBackend {
            gpu: Gpu {
                ctx,
                stream,
                blas: None,
            },
            props,
            options,
            kernels,
            model,
            weights,
            arena: Arena::default(),
            graphs: Graphs::default(),
            sampling: Default::default(),
            snapshots: Default::default(),
            trace,
            f16_weights: HashMap::new(),
            f16_experts: HashMap::new(),
            cast_buf: None,
            router_counter: None,
            cast: ops::CastState::default(),
        })
    }

    /// The arena's buffer set of `plan` when it is the prepared one (graphs are keyed by it).
    fn prepared_set(&self, plan: &Plan) -> Option<u64> {
        if self.arena.holds(plan) {
            self.arena.current_id()
        } else {
            None
        }
    }

    fn cu_stream(&self) -> sys::CUstream {
        self.gpu.stream.cu_stream()
    }

    fn slot_buf(&self, plan: &Plan, id: tally_model::BufId) -> Result<&DevBuf, EngineError> {
        match self.arena.bufs().get(id.0 as usize) {
            Some(Slot::Own(b)) => Ok(b),
            Some(Slot::State(n)) => self
                .arena
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

    /// The cuBLAS handle, made on first use (prepare() makes it before any graph capture:
    /// creating one allocates, which a capturing stream does not allow).
    fn blas_handle(&mut self) -> Result<cudarc::cublas::sys::cublasHandle_t, EngineError> {
        if self.gpu.blas.is_none() {
            let h = cudarc::cublas::CudaBlas::new(self.gpu.stream.clone())
                .map_err(|e| EngineError::Cuda(format!("cuBLAS: {e:?}")))?;
            self.gpu.blas = Some(h);
        }
        Ok(self
            .gpu
            .blas
            .as_ref()
            .map(|h| *h.handle())
            .unwrap_or(std::ptr::null_mut()))
    }

    /// A workspace of at least `bytes`.
    fn workspace(&mut self, bytes: usize) -> Result<u64, EngineError> {
        // prepare() sizes the workspace for the whole plan; growing it here (standalone timing
        // of another shape) moves it, so a captured graph pointing at it must go: before the old
        // buffer is freed, so that a failed allocation leaves none pointing at freed memory.
        if self.arena.work.as_ref().is_none_or(|w| w.bytes < bytes) {
            self.graphs.by_set.clear();
        }
        self.arena.grow_work(bytes, &mut DevBuf::alloc)?;
        Ok(self.arena.work.as_ref().map(|w| w.ptr).unwrap_or(0))
    }

    /// Zeroes `bytes` at `ptr` on the stream and waits.
    fn zero(&self, ptr: u64, bytes: usize) -> Result<(), EngineError> {
        // SAFETY: callers pass a live allocation of the backend (a state buffer) of `bytes`.
        unsafe { result::memset_d8_async(ptr, 0, bytes, self.cu_stream()) }.map_err(cuda_err)?;
        self.sync()
    }

    fn sync(&self) -> Result<(), EngineError> {
        // SAFETY: the stream is live for the backend's lifetime.
        unsafe { result::stream::synchronize(self.cu_stream()) }.map_err(cuda_err)
    }

    /// Device memory in use and total, in bytes.
    pub fn memory_use(&self) -> (u64, u64) {
        let _ = self.gpu.ctx.bind_to_thread();
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
        self.gpu.ctx.bind_to_thread().map_err(cuda_err)?;
        // Whatever cast_buf holds belongs to the run before.
        self.cast.forget();
        if self.options.cublas_min_m.is_some() || self.options.f32_cublas {
            self.blas_handle()?;
        }
        let stream = self.cu_stream();
        if self.arena.select(plan) {
            let set = self.arena.current_id().ok_or_else(|| {
                EngineError::Internal("the arena selected a plan without a set".into())
            })?;
            // A set with a weight table was resolved with every weight of its plan on the
            // device: decode prepares its plan every step, and a thousand name lookups are
            // host time the GPU waits for.
            if !self.weights.has_table(plan, set) {
                self.weights.upload_missing(&self.model, plan, stream)?;
            }
            return self.weights.resolve(plan, set);
        }
        self.weights.upload_missing(&self.model, plan, stream)?;
        // New buffers. A captured graph points at the buffers of its own plan: the graphs of
        // plans whose buffers `rebuild` frees (before it allocates) go with them, and all of
        // them when a state buffer moved.
        let stream = self.cu_stream();
        let rebuilt = self
            .arena
            .rebuild(plan, &mut DevBuf::alloc, &mut |buf: &DevBuf| {
                // SAFETY: `buf` is the state allocation just made, `buf.bytes` long.
                unsafe { result::memset_d8_async(buf.ptr, 0, buf.bytes, stream) }.map_err(cuda_err)
            })?;
        if rebuilt.state_moved {
            self.graphs.by_set.clear();
        }
        for id in rebuilt.evicted {
            self.graphs.by_set.remove(&id);
            self.weights.forget(id);
        }
        let set = self.arena.current_id().ok_or_else(|| {
            EngineError::Internal("the arena rebuilt a plan without a set".into())
        })?;
        self.weights.resolve(plan, set)?;
        ops::keep_f16(self, plan)?;
        let mut work = 0;
        for i in 0..plan.nodes.len() {
            work = work.max(ops::work_bytes(self, plan, i)?);
        }
        self.workspace(work.max(256))?;
        if self.router_counter.is_none() {
            let buf = DevBuf::alloc(4 * ops::router::ROUTER_MAX_M, "the router's block counters")?;
            self.zero(buf.ptr, buf.bytes)?;
            self.router_counter = Some(buf);
        }
        let cast = ops::cast_bytes(self, plan)?;
        if cast > self.cast_buf.as_ref().map_or(0, |b| b.bytes) {
            // A graph pointing at the old buffer must go (as for the workspace), before the
            // buffer is freed.
            self.graphs.by_set.clear();
            self.cast_buf = None;
            self.cast_buf = Some(DevBuf::alloc(
                cast,
                "the f16 activations of cuBLAS projections",
            )?);
        }
        self.sync()
    }

    fn reset_state(&mut self) -> Result<(), EngineError> {
        self.cast.forget();
        let list: Vec<(u64, usize)> = self
            .arena
            .state
            .values()
            .map(|b| (b.ptr, b.bytes))
            .collect();
        for (p, n) in list {
            self.zero(p, n)?;
        }
        Ok(())
    }

    fn dispatch(&mut self, plan: &Plan, index: usize, target: Target) -> Result<(), EngineError> {
        launch::set_plan_pdl(self.options.pdl_for(plan.n_tokens));
        self.cast.dispatching(index);
        let before = launch::counts();
        ops::dispatch(self, plan, index, target).map_err(|e| e.in_node(&plan.nodes[index].name))?;
        if let Some(c) = self.graphs.capturing.as_mut() {
            let after = launch::counts();
            let (k, l) = (after.0 - before.0, after.1 - before.1);
            c.dispatches += 1;
            c.launches += k;
            c.library_calls += l;
            c.silent += u64::from(k + l == 0);
        }
        Ok(())
    }

    fn dispatch_fused(&mut self, plan: &Plan, index: usize) -> Result<usize, EngineError> {
        launch::set_plan_pdl(self.options.pdl_for(plan.n_tokens));
        // Noted as a dispatch (a fused launch may cast), undone when nothing was fused (the
        // executor then dispatches the node itself).
        let noted = self.cast;
        self.cast.dispatching(index);
        let before = launch::counts();
        let n = ops::fused::dispatch(self, plan, index)
            .map_err(|e| e.in_node(&plan.nodes[index].name))?;
        self.cast.fused(noted, index, n);
        if let (true, Some(c)) = (n > 0, self.graphs.capturing.as_mut()) {
            let after = launch::counts();
            c.dispatches += n as u64;
            c.launches += after.0 - before.0;
            c.library_calls += after.1 - before.1;
        }
        Ok(n)
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
        let id = self.prepared_set(plan)?;
        self.graphs.by_set.get(&id).map(|(_, c)| *c)
    }

    fn poison(&mut self) -> Result<(), EngineError> {
        self.poison_all()
    }

    fn graph_launch(&mut self, plan: &Plan) -> Result<bool, EngineError> {
        // A replayed graph rewrites cast_buf and the activations behind the host's back.
        self.cast.forget();
        let Some(id) = self.prepared_set(plan) else {
            return Ok(false);
        };
        match self.graphs.by_set.get(&id).map(|(g, _)| g) {
            Some(g) => {
                let trace = self.trace.as_mut().filter(|_| plan.n_tokens == 1);
                match trace {
                    Some(t) => {
                        t.before(&self.gpu.stream)?;
                        g.launch().map_err(cuda_err)?;
                        t.after(&self.gpu.stream)?;
                    }
                    None => g.launch().map_err(cuda_err)?,
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn capture_begin(&mut self, plan: &Plan) -> Result<bool, EngineError> {
        if !self.options.graph_for(plan.n_tokens) {
            return Ok(false);
        }
        let Some(id) = self.prepared_set(plan) else {
            return Ok(false);
        };
        self.graphs.by_set.remove(&id);
        self.cast.forget();
        self.graphs.capturing = Some(GraphCount::default());
        self.begin_capture()
    }

    fn capture_end(&mut self, plan: &Plan, keep: bool) -> Result<(), EngineError> {
        let count = self.graphs.capturing.take().unwrap_or_default();
        // A failed dispatch leaves a partial capture: end it without running it.
        let g = self.end_capture(keep)?;
        if let (true, Some(id)) = (keep, self.prepared_set(plan)) {
            let kernel_nodes = kernel_nodes(&g)?;
            self.graphs.by_set.insert(
                id,
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

    fn argmax_rows(&mut self, plan: &Plan) -> Result<Vec<u32>, EngineError> {
        self.argmax_rows_on_device(plan)
    }

    fn save_state(
        &mut self,
        slot: u64,
        extents: &[crate::backend::StateExtent],
    ) -> Result<usize, EngineError> {
        self.snapshot_save(slot, extents)
    }

    fn restore_state(&mut self, slot: u64) -> Result<(), EngineError> {
        self.cast.forget();
        self.snapshot_restore(slot)
    }

    fn drop_state(&mut self, slot: u64) {
        self.snapshots.remove(slot);
    }

    fn enable_token_states(
        &mut self,
        extents: &[crate::backend::StateExtent],
        max_tokens: usize,
    ) -> Result<bool, EngineError> {
        self.token_states_enable(extents, max_tokens)
    }

    fn restore_token_states(&mut self, index: usize, batch: usize) -> Result<bool, EngineError> {
        self.cast.forget();
        self.token_states_restore(index, batch)
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        if let Some(line) = self.trace.as_ref().and_then(|t| t.summary()) {
            eprintln!("{line}");
        }
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
    /// Fills the activation buffers (not state, token ids or the position), the workspace, the
    /// cuBLAS path's f16 activations and the replay scratch with NaN, and waits.
    fn poison_all(&mut self) -> Result<(), EngineError> {
        const NAN_BITS: u32 = 0x7fc0_0000;
        self.cast.forget();
        let mut spans: Vec<(u64, usize)> = Vec::new();
        for (slot, shape) in self.arena.bufs().iter().zip(self.arena.kinds()) {
            if let (Slot::Own(b), BufKind::Activation | BufKind::Logits) = (slot, shape) {
                spans.push((b.ptr, b.bytes));
            }
        }
        spans.extend(self.arena.work.iter().map(|w| (w.ptr, w.bytes)));
        spans.extend(self.cast_buf.iter().map(|w| (w.ptr, w.bytes)));
        spans.extend(
            self.arena
                .scratch
                .iter()
                .flatten()
                .map(|w| (w.ptr, w.bytes)),
        );
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
        self.gpu
            .stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cuda_err)?;
        Ok(true)
    }

    /// Ends the capture; with `launch`, runs the graph once (the captured work has not run yet).
    fn end_capture(&mut self, launch: bool) -> Result<CudaGraph, EngineError> {
        let g = self
            .gpu
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
        // The host may be rewriting an input that cast_buf holds a copy of.
        self.cast.forget();
        if data.len() != view.elems() {
            return Err(EngineError::Internal(format!(
                "{} values for a view of {} elements",
                data.len(),
                view.elems()
            )));
        }
        // Stream-ordered: the copy runs after the work already queued (which may still read
        // the buffer) and before anything queued after it; no wait on either side.
        let b = plan.buf(view.buf);
        let base = self.slot_buf(plan, view.buf)?;
        let stream = self.cu_stream();
        if view.col0 == 0 && view.cols == b.cols {
            return base.upload_ordered(view.row0 * b.cols * 4, data, stream);
        }
        for (i, row) in data.chunks_exact(view.cols).enumerate() {
            base.upload_ordered(((view.row0 + i) * b.cols + view.col0) * 4, row, stream)?;
        }
        Ok(())
    }
}
