//! The CPU reference backend: plain f32 maths, multi-threaded with rayon. It is the specification
//! every other backend is tested against, and the embedded default on machines without a GPU.
//!
//! Each dispatch gathers its input views into contiguous matrices, runs the op on them, and
//! scatters the results into the output views (or into scratch for a replay). The copies keep
//! every op a plain function of contiguous inputs, at a cost that is small next to the maths.

mod ops;
mod snapshot;

use std::collections::HashMap;
use std::sync::Arc;

use tally_gguf::GgmlType;
use tally_model::{BufKind, DType, Model, Op, Plan, View};

use crate::EngineError;
use crate::backend::{Backend, Target};

pub use ops::{Mat, Weight};

/// A gathered input of either element type.
#[derive(Debug, Clone)]
pub enum Input {
    F(Mat),
    I(IMat),
}

impl Input {
    pub fn f(&self) -> Result<&Mat, EngineError> {
        match self {
            Input::F(m) => Ok(m),
            Input::I(_) => Err(EngineError::Internal("expected an f32 input".into())),
        }
    }
    pub fn i(&self) -> Result<&IMat, EngineError> {
        match self {
            Input::I(m) => Ok(m),
            Input::F(_) => Err(EngineError::Internal("expected an i32 input".into())),
        }
    }
}

/// A contiguous i32 matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct IMat {
    pub data: Vec<i32>,
    pub rows: usize,
    pub cols: usize,
}

enum Store {
    F32(Vec<f32>),
    I32(Vec<i32>),
    /// A persistent buffer, kept by name in `CpuBackend::state`.
    State(String),
}

pub struct CpuBackend {
    model: Arc<Model>,
    pool: rayon::ThreadPool,
    threads: usize,
    bufs: Vec<Store>,
    /// (rows, cols, dtype) of each buffer of the prepared plan, to skip re-allocation.
    shapes: Vec<(usize, usize, DType)>,
    state: HashMap<String, Vec<f32>>,
    scratch: Vec<Vec<f32>>,
    /// Saved sequence states by slot: (state buffer name, its leading elements).
    snapshots: HashMap<u64, Vec<(String, Vec<f32>)>>,
}

impl CpuBackend {
    /// A backend over `model` with `threads` worker threads (0: one per core).
    pub fn new(model: Arc<Model>, threads: usize) -> Result<CpuBackend, EngineError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| EngineError::Internal(format!("thread pool: {e}")))?;
        let threads = pool.current_num_threads();
        Ok(CpuBackend {
            model,
            pool,
            threads,
            bufs: Vec::new(),
            shapes: Vec::new(),
            state: HashMap::new(),
            scratch: Vec::new(),
            snapshots: HashMap::new(),
        })
    }

    fn cols_of(&self, plan: &Plan, v: &View) -> usize {
        plan.buf(v.buf).cols
    }

    fn storage(&self, plan: &Plan, v: &View) -> Result<StoreRef<'_>, EngineError> {
        let store = self
            .bufs
            .get(v.buf.0 as usize)
            .ok_or_else(|| EngineError::Internal(format!("buffer {} not prepared", v.buf.0)))?;
        Ok(match store {
            Store::F32(d) => StoreRef::F(d),
            Store::I32(d) => StoreRef::I(d),
            Store::State(name) => StoreRef::F(self.state.get(name).ok_or_else(|| {
                EngineError::Internal(format!("state {name} missing for {}", plan.buf(v.buf).name))
            })?),
        })
    }

    fn gather(&self, plan: &Plan, v: &View) -> Result<Input, EngineError> {
        let stride = self.cols_of(plan, v);
        Ok(match self.storage(plan, v)? {
            StoreRef::F(d) => {
                let mut out = Vec::with_capacity(v.elems());
                for r in v.row0..v.row0 + v.rows {
                    out.extend_from_slice(&d[r * stride + v.col0..r * stride + v.col0 + v.cols]);
                }
                Input::F(Mat {
                    data: out,
                    rows: v.rows,
                    cols: v.cols,
                })
            }
            StoreRef::I(d) => {
                let mut out = Vec::with_capacity(v.elems());
                for r in v.row0..v.row0 + v.rows {
                    out.extend_from_slice(&d[r * stride + v.col0..r * stride + v.col0 + v.cols]);
                }
                Input::I(IMat {
                    data: out,
                    rows: v.rows,
                    cols: v.cols,
                })
            }
        })
    }

    fn store_mut(&mut self, v: &View) -> Result<StoreMut<'_>, EngineError> {
        let store = self
            .bufs
            .get_mut(v.buf.0 as usize)
            .ok_or_else(|| EngineError::Internal(format!("buffer {} not prepared", v.buf.0)))?;
        Ok(match store {
            Store::F32(d) => StoreMut::F(d),
            Store::I32(d) => StoreMut::I(d),
            Store::State(name) => StoreMut::F(
                self.state
                    .get_mut(name.as_str())
                    .ok_or_else(|| EngineError::Internal(format!("state {name} missing")))?,
            ),
        })
    }

    fn scatter(&mut self, plan: &Plan, v: &View, out: &Output) -> Result<(), EngineError> {
        let stride = self.cols_of(plan, v);
        match (self.store_mut(v)?, out) {
            (StoreMut::F(d), Output::F(m)) => {
                for (i, r) in (v.row0..v.row0 + v.rows).enumerate() {
                    d[r * stride + v.col0..r * stride + v.col0 + v.cols]
                        .copy_from_slice(&m.data[i * v.cols..(i + 1) * v.cols]);
                }
            }
            (StoreMut::I(d), Output::I(m)) => {
                for (i, r) in (v.row0..v.row0 + v.rows).enumerate() {
                    d[r * stride + v.col0..r * stride + v.col0 + v.cols]
                        .copy_from_slice(&m.data[i * v.cols..(i + 1) * v.cols]);
                }
            }
            _ => {
                return Err(EngineError::Internal(format!(
                    "dtype mismatch writing {}",
                    plan.buf(v.buf).name
                )));
            }
        }
        Ok(())
    }

    /// The batch position: the plan's position buffer, as the session wrote it.
    fn position(&self, plan: &Plan) -> Result<usize, EngineError> {
        let v = View::all(plan.pos, plan.buf(plan.pos));
        let p = self
            .gather(plan, &v)?
            .i()?
            .data
            .first()
            .copied()
            .unwrap_or(-1);
        usize::try_from(p).map_err(|_| EngineError::Internal(format!("batch position {p}")))
    }

    /// The views a node reads and writes at the current position. The plan's cache views are
    /// whole; the rows a position selects are narrowed to here, once, so the ops stay plain
    /// functions of contiguous matrices: `KvStore` writes rows `pos..pos+T` of the caches (and
    /// only those), `Attention` reads the rows its last query sees.
    fn at_position(
        &self,
        plan: &Plan,
        node: &tally_model::Node,
    ) -> Result<(Vec<View>, Vec<View>), EngineError> {
        let (mut ins, mut outs) = (node.inputs.clone(), node.outputs.clone());
        match &node.op {
            Op::KvStore => {
                let (pos, t) = (self.position(plan)?, node.inputs[0].rows);
                for v in outs.iter_mut() {
                    if pos + t > v.rows {
                        return Err(EngineError::Internal(format!(
                            "{t} rows at position {pos} past the cache's {} rows",
                            v.rows
                        )));
                    }
                    *v = v.rows(pos, t);
                }
            }
            Op::Attention { q_offset, .. } => {
                let seen = self.position(plan)? + q_offset + node.inputs[0].rows;
                for v in ins.iter_mut().skip(1).take(2) {
                    if seen > v.rows {
                        return Err(EngineError::Internal(format!(
                            "attention over {seen} positions of a cache of {}",
                            v.rows
                        )));
                    }
                    *v = v.rows(0, seen);
                }
            }
            _ => {}
        }
        Ok((ins, outs))
    }

    fn weight(&self, name: &str) -> Result<Weight<'_>, EngineError> {
        let (t, bytes) = self.model.weight(name)?;
        Ok(Weight {
            name: &t.name,
            ty: t.ty,
            dims: &t.dims,
            bytes,
        })
    }
}

enum StoreRef<'a> {
    F(&'a [f32]),
    I(&'a [i32]),
}
enum StoreMut<'a> {
    F(&'a mut [f32]),
    I(&'a mut [i32]),
}

/// An op's output before it is scattered.
#[derive(Debug, Clone)]
pub enum Output {
    F(Mat),
    I(IMat),
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn device(&self) -> String {
        format!("{} ({} threads)", cpu_model(), self.threads)
    }

    fn threads(&self) -> Option<usize> {
        Some(self.threads)
    }

    fn options(&self) -> Vec<String> {
        vec![format!("threads={}", self.threads)]
    }

    fn prepare(&mut self, plan: &Plan) -> Result<(), EngineError> {
        let shapes: Vec<(usize, usize, DType)> = plan
            .buffers
            .iter()
            .map(|b| (b.rows, b.cols, b.dtype))
            .collect();
        if shapes == self.shapes && self.bufs.len() == plan.buffers.len() {
            return Ok(());
        }
        let mut bufs = Vec::with_capacity(plan.buffers.len());
        for b in &plan.buffers {
            bufs.push(match (b.kind, b.dtype) {
                (BufKind::State, _) => {
                    let entry = self.state.entry(b.name.clone()).or_default();
                    if entry.len() != b.elems() {
                        *entry = vec![0.0; b.elems()];
                    }
                    Store::State(b.name.clone())
                }
                (_, DType::F32) => Store::F32(vec![0.0; b.elems()]),
                (_, DType::I32) => Store::I32(vec![0; b.elems()]),
            });
        }
        self.bufs = bufs;
        self.shapes = shapes;
        Ok(())
    }

    fn reset_state(&mut self) -> Result<(), EngineError> {
        for v in self.state.values_mut() {
            v.fill(0.0);
        }
        Ok(())
    }

    fn dispatch(&mut self, plan: &Plan, index: usize, target: Target) -> Result<(), EngineError> {
        let node = &plan.nodes[index];
        let (in_views, out_views) = self
            .at_position(plan, node)
            .map_err(|e| e.in_node(&node.name))?;
        let ins = in_views
            .iter()
            .map(|v| self.gather(plan, v))
            .collect::<Result<Vec<_>, _>>()?;
        let mut outs: Vec<Output> = out_views
            .iter()
            .map(|v| match plan.buf(v.buf).dtype {
                // Poisoned, so an element an op forgets to write shows up as NaN.
                DType::F32 => Output::F(Mat::filled(v.rows, v.cols, f32::NAN)),
                DType::I32 => Output::I(IMat {
                    data: vec![i32::MIN; v.elems()],
                    rows: v.rows,
                    cols: v.cols,
                }),
            })
            .collect();
        {
            let ws = node
                .weights
                .iter()
                .map(|n| self.weight(n))
                .collect::<Result<Vec<_>, _>>()?;
            self.pool
                .install(|| ops::run(&node.op, &ins, &ws, &mut outs))
                .map_err(|e| e.in_node(&node.name))?;
        }
        match target {
            Target::Real => {
                for (v, o) in out_views.iter().zip(&outs) {
                    self.scatter(plan, v, o)?;
                }
            }
            Target::Scratch => {
                for (slot, o) in outs.iter().enumerate() {
                    if self.scratch.len() <= slot {
                        self.scratch.resize_with(slot + 1, Vec::new);
                    }
                    let s = &mut self.scratch[slot];
                    match o {
                        Output::F(m) => {
                            s.clear();
                            s.extend_from_slice(&m.data);
                        }
                        Output::I(m) => {
                            s.clear();
                            s.extend(m.data.iter().map(|&x| x as f32));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn barrier(&mut self) -> Result<(), EngineError> {
        // Every CPU dispatch completes before it returns.
        Ok(())
    }

    fn read(&mut self, plan: &Plan, view: View) -> Result<Vec<f32>, EngineError> {
        match self.gather(plan, &view)? {
            Input::F(m) => Ok(m.data),
            Input::I(m) => Ok(m.data.into_iter().map(|x| x as f32).collect()),
        }
    }

    fn read_i32(&mut self, plan: &Plan, view: View) -> Result<Vec<i32>, EngineError> {
        match self.gather(plan, &view)? {
            Input::I(m) => Ok(m.data),
            Input::F(_) => Err(EngineError::Internal(format!(
                "{} is not an i32 buffer",
                plan.buf(view.buf).name
            ))),
        }
    }

    fn write_i32(&mut self, plan: &Plan, view: View, data: &[i32]) -> Result<(), EngineError> {
        check_len(plan, &view, data.len())?;
        self.scatter(
            plan,
            &view,
            &Output::I(IMat {
                data: data.to_vec(),
                rows: view.rows,
                cols: view.cols,
            }),
        )
    }

    fn write(&mut self, plan: &Plan, view: View, data: &[f32]) -> Result<(), EngineError> {
        check_len(plan, &view, data.len())?;
        self.scatter(
            plan,
            &view,
            &Output::F(Mat {
                data: data.to_vec(),
                rows: view.rows,
                cols: view.cols,
            }),
        )
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
        self.snapshots.remove(&slot);
    }
}

fn check_len(plan: &Plan, view: &View, n: usize) -> Result<(), EngineError> {
    if n != view.elems() {
        return Err(EngineError::Internal(format!(
            "{} values for a view of {} elements of {}",
            n,
            view.elems(),
            plan.buf(view.buf).name
        )));
    }
    Ok(())
}

/// The CPU's model name from /proc/cpuinfo (or the architecture).
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Dequantises rows `row0..row0+n` of a weight (rows of `dims[0]` elements) into `out`.
pub fn dequant_rows(
    w: &Weight<'_>,
    row0: usize,
    n: usize,
    out: &mut [f32],
) -> Result<(), EngineError> {
    let k = w.dims[0] as usize;
    let rb = w.ty.row_bytes(k as u64)? as usize;
    for i in 0..n {
        let src = &w.bytes[(row0 + i) * rb..(row0 + i + 1) * rb];
        tally_gguf::dequantize_row(w.ty, src, &mut out[i * k..(i + 1) * k])?;
    }
    Ok(())
}

/// Whether a type's rows are stored as plain f32 (so rows can be borrowed without a copy).
pub fn is_f32(ty: GgmlType) -> bool {
    ty == GgmlType::F32
}
