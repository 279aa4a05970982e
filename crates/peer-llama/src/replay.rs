//! In-graph replay: re-dispatch one node of llama.cpp's running graph into a scratch tensor on
//! a second backend instance of the same device, so the real outputs are never written.
//!
//! Called from the scheduler's eval callback after the node was computed and its backend
//! synchronised (the barrier before). The replay is a one-node ggml graph whose node has the
//! real node's op, op parameters and *source tensors* (the real, already computed ones) and a
//! scratch destination; `ggml_backend_graph_compute` returns after the device finished (the
//! barrier after). What the replay reads is whatever the sources hold at that moment: when the
//! graph allocator made the node in-place (its output aliases a source), the source already
//! holds the node's output, so the replay computes on changed data. That is recorded per node
//! ([`ReplayStats::aliased`]) and reported, never hidden.

use std::collections::BTreeMap;

use llama_cpp_sys_2 as sys;

use crate::PeerError;
use crate::ffi;
use crate::ggml::{Backend, Buffer, Ctx, copy_op, poison, read_bytes};

/// What replays did during one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayStats {
    /// Extra dispatches executed.
    pub dispatches: u64,
    /// With verification on: replayed nodes (not aliased) whose scratch output was compared
    /// with the real output.
    pub verified: u64,
    /// With verification on: nodes whose scratch output differed from the real one.
    pub mismatched: Vec<String>,
    /// Names of replayed nodes whose output aliases one of their sources (in-place after
    /// allocation): their replay read the node's own output.
    pub aliased: Vec<String>,
}

/// Second backend instances per device, with a scratch buffer each.
pub(crate) struct ReplayEngine {
    threads: i32,
    /// Compare each replay's scratch output with the real output (slow: copies both to host).
    pub(crate) verify: bool,
    devices: BTreeMap<usize, (Backend, Option<Buffer>)>,
    pub(crate) stats: ReplayStats,
}

impl ReplayEngine {
    pub(crate) fn new(threads: i32) -> ReplayEngine {
        ReplayEngine {
            threads,
            verify: false,
            devices: BTreeMap::new(),
            stats: ReplayStats::default(),
        }
    }

    /// Dispatches `node` `times` more times into scratch.
    ///
    /// # Safety
    /// `node` must be a live, computed graph node whose sources are live and hold their values
    /// (true inside the scheduler callback's `ask == false` call).
    pub(crate) unsafe fn replay(
        &mut self,
        node: *mut sys::ggml_tensor,
        device: usize,
        times: u32,
    ) -> Result<(), PeerError> {
        let dev = if device == 0 {
            ffi::cpu_device()
        } else {
            device as sys::ggml_backend_dev_t
        };
        if !self.devices.contains_key(&(dev as usize)) {
            let backend = Backend::new(dev, self.threads)?;
            self.devices.insert(dev as usize, (backend, None));
        }
        let Some((backend, scratch)) = self.devices.get_mut(&(dev as usize)) else {
            return Err(PeerError::Engine("replay backend vanished".into()));
        };
        let ctx = Ctx::new(1, 1)?;
        // SAFETY: `node` is live (caller); we read its type, shape and name.
        let (type_, ne, name) = unsafe { ((*node).type_, (*node).ne, (*node).name) };
        let dst = ctx.tensor(type_, ne);
        // SAFETY: `dst` is a fresh descriptor of the same type and shape; the sources are live
        // for this call.
        unsafe {
            copy_op(dst, node);
            (*dst).name = name;
        }
        if !backend.supports(dst) {
            return Err(PeerError::Engine(format!(
                "the replay backend cannot run node `{}` ({})",
                node_name(node),
                // SAFETY: live node.
                ffi::op_name(unsafe { (*node).op })
            )));
        }
        let need = Buffer::alloc_size(backend, dst);
        if scratch.as_ref().is_none_or(|b| b.size_bytes < need) {
            // Grow geometrically so a run settles on one buffer quickly.
            let size = need.max(scratch.as_ref().map_or(0, |b| b.size_bytes * 2));
            *scratch = None;
            *scratch = Some(Buffer::new(backend, size)?);
        }
        let Some(buf) = scratch.as_ref() else {
            return Err(PeerError::Engine("replay scratch missing".into()));
        };
        buf.place(dst, 0)?;
        if self.verify {
            poison(dst, 0xFF);
        }
        let graph = ctx.graph_of(&[dst]);
        for _ in 0..times {
            backend.compute(graph)?;
            self.stats.dispatches += 1;
        }
        // SAFETY: live node and sources.
        let aliased = unsafe { aliases_a_source(node) };
        if aliased {
            self.stats.aliased.push(node_name(node));
        } else if self.verify && times > 0 {
            // Comparable when the real output has the scratch's layout; a SET_ROWS scratch
            // holds only the written rows (the real one is a whole cache).
            // SAFETY: `node` and `dst` are live descriptors.
            let (same_layout, op) = unsafe { ((*node).nb == (*dst).nb, (*node).op) };
            if same_layout && op != sys::GGML_OP_SET_ROWS {
                self.stats.verified += 1;
                if read_bytes(node) != read_bytes(dst) {
                    self.stats.mismatched.push(node_name(node));
                }
            }
        }
        Ok(())
    }
}

fn node_name(node: *const sys::ggml_tensor) -> String {
    // SAFETY: callers pass live tensors; the name is a NUL-terminated array inside the struct.
    unsafe { std::ffi::CStr::from_ptr((*node).name.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Whether the node's output memory overlaps one of its sources (in-place op, either built
/// that way or made so by the graph allocator).
///
/// # Safety
/// `node` and its sources must be live.
unsafe fn aliases_a_source(node: *const sys::ggml_tensor) -> bool {
    // SAFETY: guaranteed by the caller.
    unsafe {
        let d0 = (*node).data as usize;
        let d1 = d0 + sys::ggml_nbytes(node);
        // The destination operand of a copy is written, not read: aliasing it is by design.
        let dst_operand = match (*node).op {
            sys::GGML_OP_CPY => 1,
            sys::GGML_OP_SET_ROWS => 0,
            _ => usize::MAX,
        };
        (*node)
            .src
            .iter()
            .enumerate()
            .filter(|(k, s)| !s.is_null() && *k != dst_operand)
            .any(|(_, &s)| {
                let s0 = (*s).data as usize;
                let s1 = s0 + sys::ggml_nbytes(s);
                s0 != 0 && d0 != 0 && s0 < d1 && d0 < s1
            })
    }
}
