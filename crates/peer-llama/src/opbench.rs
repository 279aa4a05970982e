//! Standalone op timing: one exported node rebuilt as a one-op ggml graph on the model's
//! backend, with generated inputs, timed alone.
//!
//! The node is rebuilt from its *recipe*, recorded at export: op, op parameters, output type and
//! shape, and each source's type, shape and strides (a strided source is rebuilt as a view with
//! the same strides into a larger buffer). Inputs are generated, never zeros: weights are
//! random floats quantised to the recorded type with ggml's own quantiser (valid blocks);
//! activations are uniform in [-1, 1); index inputs are valid for the op (token rows, positions,
//! cache slots); attention masks are causal; MoE expert ids come from
//! [`tally_ledger::routing::route`] with the requested routing (`Realistic` by default).

use std::collections::BTreeMap;
use std::time::Instant;

use llama_cpp_sys_2 as sys;
use tally_ledger::rng::SplitMix64;
use tally_ledger::schema::GraphNode;
use tally_ledger::subject::OpTimingRequest;

use crate::PeerError;
use crate::ffi::{self, NodeSnap, SrcSnap};
use crate::ggml::{Backend, Buffer, COMPUTE_FLAG, Ctx, poison, read_bytes};

/// What is needed to rebuild one node alone.
#[derive(Debug, Clone)]
pub struct Recipe {
    op: sys::ggml_op,
    op_name: String,
    op_params: [i32; 16],
    dst_type: sys::ggml_type,
    dst_ne: [i64; 4],
    srcs: Vec<SrcSnap>,
    n_past: u64,
    name: String,
    noop: bool,
    /// Device the node ran on in the real graph (0: the CPU backend).
    device: usize,
}

impl Recipe {
    pub(crate) fn from_snap(s: &NodeSnap, n_past: u64) -> Recipe {
        Recipe {
            op: s.src_.op,
            op_name: s.op_name.clone(),
            op_params: s.op_params,
            dst_type: s.src_.type_,
            dst_ne: s.src_.ne,
            srcs: s.srcs.clone(),
            n_past,
            name: s.name().to_string(),
            noop: s.is_noop,
            device: s.device,
        }
    }
}

/// Identity of a node across exports: name, op and every shape and dtype.
pub fn recipe_key(n: &GraphNode) -> String {
    let mut k = format!(
        "{}|{}|{:?}:{}",
        n.name, n.op, n.output.shape, n.output.dtype
    );
    for i in &n.inputs {
        k.push_str(&format!("|{:?}:{}", i.tensor.shape, i.tensor.dtype));
    }
    k
}

/// Backends standalone ops run on: the device each node ran on in the real graph (on a GPU run
/// the scheduler leaves some nodes on the CPU, e.g. the embedding lookup and ops the GPU backend
/// does not support).
pub(crate) struct OpBench {
    threads: i32,
    backends: BTreeMap<usize, Backend>,
}

fn unsupported(r: &Recipe, reason: impl Into<String>) -> PeerError {
    PeerError::Unsupported {
        op: r.op_name.clone(),
        reason: format!("node `{}`: {}", r.name, reason.into()),
    }
}

fn packed(s: &SrcSnap) -> bool {
    // SAFETY: pure type-traits lookups.
    let (ts, bs) = unsafe {
        (
            sys::ggml_type_size(s.type_),
            sys::ggml_blck_size(s.type_) as i64,
        )
    };
    let mut expect = ts;
    if s.nb[0] != ts {
        return false;
    }
    expect *= (s.ne[0] / bs.max(1)) as usize;
    for d in 1..4 {
        if s.ne[d] > 1 && s.nb[d] != expect {
            return false;
        }
        expect *= s.ne[d].max(1) as usize;
    }
    true
}

impl OpBench {
    pub(crate) fn new(threads: i32) -> OpBench {
        OpBench {
            threads,
            backends: BTreeMap::new(),
        }
    }

    fn backend(&mut self, device: usize) -> Result<&Backend, PeerError> {
        if !self.backends.contains_key(&device) {
            let dev = if device == 0 {
                ffi::cpu_device()
            } else {
                device as sys::ggml_backend_dev_t
            };
            self.backends
                .insert(device, Backend::new(dev, self.threads)?);
        }
        self.backends
            .get(&device)
            .ok_or_else(|| PeerError::Engine("op bench backend missing".into()))
    }

    /// Times `recipe` as `req` asks; per-call samples in ms.
    pub(crate) fn time(
        &mut self,
        r: &Recipe,
        req: &OpTimingRequest<'_>,
    ) -> Result<Vec<f64>, PeerError> {
        if r.noop {
            return Err(unsupported(r, "view ops do no work"));
        }
        if let Some(s) = r.srcs.iter().find(|s| {
            // SAFETY: pure type-traits lookup.
            s.is_weight && unsafe { sys::ggml_quantize_requires_imatrix(s.type_) }
        }) {
            return Err(unsupported(
                r,
                format!(
                    "weight type {} needs an importance matrix to quantise",
                    ffi::type_name(s.type_)
                ),
            ));
        }
        let ctx = Ctx::new(2 * r.srcs.len() + 2, 1)?;
        // (tensor to compute with, tensor owning the memory to fill)
        let mut srcs: Vec<(*mut sys::ggml_tensor, *mut sys::ggml_tensor)> = Vec::new();
        let dst = ctx.tensor(r.dst_type, r.dst_ne);
        for (k, s) in r.srcs.iter().enumerate() {
            if r.op == sys::GGML_OP_CPY && k == 1 {
                // CPY's second operand is its destination (ggml-cuda writes there): the output.
                srcs.push((dst, dst));
            } else if packed(s) || ffi::is_quantized(s.type_) {
                let t = ctx.tensor(s.type_, s.ne);
                srcs.push((t, t));
            } else {
                // SAFETY: pure type-traits lookup.
                let ts = unsafe { sys::ggml_type_size(s.type_) };
                let span: usize = ts
                    + (0..4)
                        .map(|d| (s.ne[d].max(1) as usize - 1) * s.nb[d])
                        .sum::<usize>();
                let parent = ctx.tensor(s.type_, [span.div_ceil(ts) as i64, 1, 1, 1]);
                // SAFETY: `parent` is a live descriptor of `ctx`; the view covers `span` bytes
                // of it because its strides and extents are those recorded.
                let view = unsafe {
                    let v = sys::ggml_view_1d(ctx.as_ptr(), parent, 1, 0);
                    (*v).ne = s.ne;
                    (*v).nb = s.nb;
                    v
                };
                srcs.push((view, parent));
            }
        }
        // SAFETY: `dst` is a fresh descriptor; its sources are descriptors of the same context.
        unsafe {
            (*dst).op = r.op;
            (*dst).op_params = r.op_params;
            (*dst).flags = COMPUTE_FLAG;
            for (k, &(t, _)) in srcs.iter().enumerate() {
                (*dst).src[k] = t;
            }
        }
        let backend = self.backend(r.device)?;
        let buffer = Buffer::for_ctx(&ctx, backend)?;
        if !backend.supports(dst) {
            return Err(unsupported(
                r,
                format!(
                    "the {} backend does not support this node",
                    if backend.is_gpu { "GPU" } else { "CPU" }
                ),
            ));
        }
        let mut rng = SplitMix64::new(req.seed ^ 0x006f_7062_656e_6368);
        for (k, s) in r.srcs.iter().enumerate() {
            if srcs[k].1 != dst {
                fill(r, k, s, srcs[k].1, req, &mut rng)?;
            }
        }
        let graph = ctx.graph_of(&[dst]);
        // Poison the output, then check the first dispatch wrote it: a node the backend skips
        // would otherwise be timed as free.
        poison(dst, 0xFF);
        backend.compute(graph)?;
        if read_bytes(dst).iter().all(|&b| b == 0xFF) {
            return Err(PeerError::Engine(format!(
                "standalone `{}` ({}) left its output untouched",
                r.name, r.op_name
            )));
        }
        for _ in 0..req.warmup {
            backend.compute(graph)?;
        }
        let mut samples = Vec::with_capacity(req.reps);
        for _ in 0..req.reps {
            let t0 = Instant::now();
            backend.compute(graph)?;
            backend.synchronize();
            samples.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        drop(buffer);
        Ok(samples)
    }
}

/// Writes generated data for source `k` into `t` (the tensor owning the memory).
fn fill(
    r: &Recipe,
    k: usize,
    s: &SrcSnap,
    t: *mut sys::ggml_tensor,
    req: &OpTimingRequest<'_>,
    rng: &mut SplitMix64,
) -> Result<(), PeerError> {
    // SAFETY: `t` is a live, allocated tensor of our context.
    let (ne, type_, nbytes) = unsafe { ((*t).ne, (*t).type_, sys::ggml_nbytes(t)) };
    let n: usize = ne.iter().map(|&d| d.max(1) as usize).product();
    let op = r.op_name.as_str();
    let uni = |rng: &mut SplitMix64| (rng.next_u64() >> 11) as f32 / (1u64 << 53) as f32;
    if type_ == sys::GGML_TYPE_I32 || type_ == sys::GGML_TYPE_I64 {
        // Indices are generated in the source's logical order and scattered through its
        // recorded strides (MoE ids are a strided view of the router's argsort): every element
        // the op reads is valid, the gaps hold 0 (also valid).
        let n_log: usize = s.ne.iter().map(|&d| d.max(1) as usize).product();
        let vals: Vec<i64> = match (op, k) {
            ("MUL_MAT_ID", 2) => {
                let n_expert = r.srcs[0].ne[2].max(1) as usize;
                let (k_used, tokens) = (s.ne[0].max(1) as usize, s.ne[1].max(1) as usize);
                tally_ledger::routing::table_for(
                    req.routing,
                    req.recorded,
                    req.layers,
                    tokens,
                    n_expert,
                    k_used,
                    req.seed,
                )
                .map_err(|e| PeerError::Engine(format!("standalone `{}`: {e}", r.name)))?
                .into_iter()
                .map(i64::from)
                .collect()
            }
            ("GET_ROWS", 1) => {
                let rows = r.srcs[0].ne[1].max(1) as u64;
                (0..n_log).map(|_| rng.below(rows) as i64).collect()
            }
            ("ROPE", 1) => {
                let tokens = r.srcs[0].ne[2].max(1) as u64;
                (0..n_log)
                    .map(|i| (r.n_past + i as u64 % tokens) as i64)
                    .collect()
            }
            ("SET_ROWS", 2) => {
                let rows = r.dst_ne[1].max(1) as u64;
                (0..n_log)
                    .map(|i| ((r.n_past + i as u64) % rows) as i64)
                    .collect()
            }
            _ => (0..n_log).map(|i| (i % 2) as i64).collect(),
        };
        let es = if type_ == sys::GGML_TYPE_I32 { 4 } else { 8 };
        let mut bytes = vec![0u8; nbytes];
        let d = s.ne.map(|v| v.max(1) as usize);
        for (i, &v) in vals.iter().enumerate().take(n_log) {
            let (i0, i1, i2, i3) = (
                i % d[0],
                i / d[0] % d[1],
                i / (d[0] * d[1]) % d[2],
                i / (d[0] * d[1] * d[2]),
            );
            let off = i0 * s.nb[0] + i1 * s.nb[1] + i2 * s.nb[2] + i3 * s.nb[3];
            let Some(slot) = bytes.get_mut(off..off + es) else {
                return Err(unsupported(r, "index source larger than its buffer"));
            };
            if es == 4 {
                slot.copy_from_slice(&(v as i32).to_le_bytes());
            } else {
                slot.copy_from_slice(&v.to_le_bytes());
            }
        }
        return upload(t, &bytes, nbytes);
    }
    let row = ne[0].max(1) as usize;
    let scale = 1.0 / (row as f32).sqrt();
    let generate = |rng: &mut SplitMix64, i: usize| -> f32 {
        match (op, k) {
            ("FLASH_ATTN_EXT", 3) | ("SOFT_MAX", 1) => {
                // Causal mask: query row q sees keys 0..=n_past+q.
                let (key, q) = ((i % row) as u64, (i / row) as u64);
                if key <= r.n_past + q {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            }
            ("GATED_DELTA_NET", 0) | ("GATED_DELTA_NET", 1) => (2.0 * uni(rng) - 1.0) * scale,
            ("GATED_DELTA_NET", 3) => -(0.01 + 0.99 * uni(rng)),
            ("GATED_DELTA_NET", 4) => uni(rng),
            ("GATED_DELTA_NET", 5) => 0.1 * (2.0 * uni(rng) - 1.0),
            _ if s.is_weight => (2.0 * uni(rng) - 1.0) * scale,
            _ => 2.0 * uni(rng) - 1.0,
        }
    };
    if ffi::is_quantized(type_) {
        // Quantise in slabs of rows so a 1 GB expert tensor never needs 4 GB of floats at once.
        let n_rows = n / row;
        let row_bytes = ffi::row_bytes(type_, row as i64) as usize;
        let slab = (1 << 22) / row + 1;
        let mut f = Vec::new();
        let mut q = Vec::new();
        let mut done = 0;
        while done < n_rows {
            let rows = slab.min(n_rows - done);
            f.clear();
            f.extend((0..rows * row).map(|i| generate(rng, i)));
            q.resize(rows * row_bytes, 0u8);
            // SAFETY: `f` holds rows*row floats, `q` rows*row_bytes bytes; the type needs no
            // importance matrix (checked by the caller).
            unsafe {
                sys::ggml_quantize_chunk(
                    type_,
                    f.as_ptr(),
                    q.as_mut_ptr().cast(),
                    0,
                    rows as i64,
                    row as i64,
                    std::ptr::null(),
                )
            };
            // SAFETY: the slab lies inside the tensor (offset + len <= nbytes).
            unsafe {
                sys::ggml_backend_tensor_set(t, q.as_ptr().cast(), done * row_bytes, q.len())
            };
            done += rows;
        }
        return Ok(());
    }
    let f: Vec<f32> = (0..n).map(|i| generate(rng, i)).collect();
    let bytes: Vec<u8> = match type_ {
        sys::GGML_TYPE_F32 => f.iter().flat_map(|v| v.to_le_bytes()).collect(),
        sys::GGML_TYPE_F16 => {
            let mut h = vec![0u16; n];
            // SAFETY: both buffers hold n elements.
            unsafe { sys::ggml_fp32_to_fp16_row(f.as_ptr(), h.as_mut_ptr(), n as i64) };
            h.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        sys::GGML_TYPE_BF16 => {
            let mut h = vec![sys::ggml_bf16_t { bits: 0 }; n];
            // SAFETY: both buffers hold n elements.
            unsafe { sys::ggml_fp32_to_bf16_row(f.as_ptr(), h.as_mut_ptr(), n as i64) };
            h.iter().flat_map(|v| v.bits.to_le_bytes()).collect()
        }
        other => {
            return Err(unsupported(
                r,
                format!("cannot generate inputs of type {}", ffi::type_name(other)),
            ));
        }
    };
    upload(t, &bytes, nbytes)
}

fn upload(t: *mut sys::ggml_tensor, bytes: &[u8], nbytes: usize) -> Result<(), PeerError> {
    let len = bytes.len().min(nbytes);
    // SAFETY: `t` is allocated with `nbytes` bytes; we write at most that many.
    unsafe { sys::ggml_backend_tensor_set(t, bytes.as_ptr().cast(), 0, len) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_layouts() {
        let mut s = SrcSnap {
            addr: 0,
            name: "x".into(),
            op: 0,
            type_: sys::GGML_TYPE_F32,
            ne: [8, 4, 1, 1],
            nb: [4, 32, 128, 128],
            nbytes: 128,
            is_weight: false,
        };
        assert!(packed(&s));
        s.nb[1] = 64;
        assert!(!packed(&s));
    }
}
