//! The scheduler eval callback: the one place where llama.cpp's running graph is observed.
//!
//! ggml's scheduler (`ggml_backend_sched_compute_splits`) calls the callback with `ask == true`
//! for every node of every split, in execution order. Answering "no" lets it run on; answering
//! "yes" makes it compute the nodes up to and including this one as one graph view, synchronise
//! the backend, and call again with `ask == false` (returning false there aborts the graph).
//!
//! - capture: answer "no" to every node and snapshot it (graph export);
//! - observe: answer "yes" for the nodes of the chosen categories, do nothing in the second call;
//! - replay: like observe, and re-dispatch the node into scratch in the second call.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

use llama_cpp_sys_2 as sys;
use tally_ledger::Category;

use crate::catmap::{NodeKey, classify};
use crate::ffi::{self, NodeSnap};
use crate::replay::{ReplayEngine, ReplayStats};

/// What the callback does.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum ProbeMode {
    /// Answer "no" to everything, record nothing.
    #[default]
    Idle,
    /// Snapshot every node (graph export).
    Capture,
    /// Split the graph at the nodes of these categories.
    Observe(BTreeSet<Category>),
    /// Split, and re-dispatch each such node `times` times into scratch.
    Replay {
        categories: BTreeSet<Category>,
        times: u32,
    },
    /// Split at each MoE layer's top-k ids (`ffn_moe_topk-<layer>`) and read them back into
    /// [`Probe::routing`].
    Routing,
}

/// The name prefix llama.cpp gives the router's chosen experts (`cb(.., "ffn_moe_topk", il)`:
/// `ffn_moe_topk-<il>`), a `[n_expert_used, n_tokens]` i32 view of the argsort.
const TOPK_PREFIX: &[u8] = b"ffn_moe_topk-";

/// One captured node with the graph execution it belongs to.
#[derive(Debug, Clone)]
pub(crate) struct Captured {
    pub snap: NodeSnap,
    /// Index of the graph execution (ubatch) within the capture.
    pub graph: usize,
}

/// Counters of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ProbeCounts {
    /// Nodes the scheduler showed (views included).
    pub nodes_seen: u64,
    /// Nodes that do work (no view op, not empty).
    pub work_nodes: u64,
    /// Nodes the graph was split at.
    pub observed: u64,
    /// Time inside the observed nodes: from the callback's "yes" for a node to its second call
    /// (the scheduler computes the graph segment ending at the node and synchronises in
    /// between), replays excluded. With every work node observed, each segment is one node
    /// and the views before it.
    pub in_node_ms: f64,
    /// A work node was answered "no" in an observe or replay run: its work is inside the next
    /// segment, so `in_node_ms` is not the observed nodes' time alone.
    pub unobserved_work: bool,
}

/// Cached classification of one tensor address (llama.cpp reuses graphs, so addresses repeat).
struct CacheEntry {
    op: sys::ggml_op,
    ne: [i64; 4],
    src0: usize,
    name: [std::ffi::c_char; 64],
    category: Category,
    noop: bool,
    device: usize,
}

/// State behind the callback's `user_data` pointer.
pub(crate) struct Probe {
    pub mode: ProbeMode,
    pub captured: Vec<Captured>,
    /// `Routing` mode: each top-k node's ids as read, in execution order: (layer, experts per
    /// token, token-major ids).
    pub routing: Vec<(u32, usize, Vec<u32>)>,
    pub counts: ProbeCounts,
    /// First failure inside the callback (the callback cannot return errors).
    pub error: Option<String>,
    replay: ReplayEngine,
    graph_index: usize,
    graph_ended: bool,
    seen_in_graph: HashSet<usize>,
    cache: HashMap<usize, CacheEntry>,
    /// When the callback last answered "yes" (the segment it asked for is computing).
    segment_start: Option<std::time::Instant>,
}

impl Probe {
    pub(crate) fn new(threads: i32) -> Probe {
        Probe {
            mode: ProbeMode::Idle,
            captured: Vec::new(),
            routing: Vec::new(),
            counts: ProbeCounts::default(),
            error: None,
            replay: ReplayEngine::new(threads),
            graph_index: 0,
            graph_ended: false,
            seen_in_graph: HashSet::new(),
            cache: HashMap::new(),
            segment_start: None,
        }
    }

    /// Resets per-run state and sets the mode.
    pub(crate) fn start(&mut self, mode: ProbeMode) {
        self.mode = mode;
        self.captured.clear();
        self.routing.clear();
        self.counts = ProbeCounts::default();
        self.error = None;
        self.graph_index = 0;
        self.graph_ended = false;
        self.seen_in_graph.clear();
        self.replay.stats = ReplayStats::default();
        self.segment_start = None;
    }

    /// Turns replay verification on or off.
    pub(crate) fn set_verify(&mut self, on: bool) {
        self.replay.verify = on;
    }

    /// Replay statistics of the current run.
    pub(crate) fn replay_stats(&self) -> &ReplayStats {
        &self.replay.stats
    }

    /// Graph executions seen in the current run.
    pub(crate) fn graphs(&self) -> usize {
        if self.counts.nodes_seen == 0 {
            0
        } else {
            self.graph_index + 1
        }
    }

    /// The classification of a live node, cached by address.
    ///
    /// # Safety
    /// `t` must be a live graph node with live sources.
    unsafe fn classify_live(&mut self, t: *const sys::ggml_tensor) -> (Category, bool, usize) {
        // SAFETY: guaranteed by the caller.
        let (op, ne, name, src0) = unsafe { ((*t).op, (*t).ne, (*t).name, (*t).src[0] as usize) };
        if let Some(e) = self.cache.get(&(t as usize)) {
            if e.op == op && e.ne == ne && e.src0 == src0 && e.name == name {
                return (e.category, e.noop, e.device);
            }
        }
        // SAFETY: guaranteed by the caller.
        let snap = unsafe { ffi::snapshot(t) };
        let category = classify_snap(&snap);
        self.cache.insert(
            t as usize,
            CacheEntry {
                op,
                ne,
                src0,
                name,
                category,
                noop: snap.is_noop,
                device: snap.device,
            },
        );
        (category, snap.is_noop, snap.device)
    }

    fn on_node(&mut self, t: *mut sys::ggml_tensor, ask: bool) -> bool {
        if self.error.is_some() {
            return false;
        }
        if ask {
            // A graph execution ends with llama.cpp's logits node `result_output`; each node is
            // also asked only once per execution, so a repeated address starts the next one too
            // (a reused graph keeps its addresses, a rebuilt one may not).
            if self.graph_ended || !self.seen_in_graph.insert(t as usize) {
                if self.counts.nodes_seen > 0 {
                    self.graph_index += 1;
                }
                self.seen_in_graph.clear();
                self.seen_in_graph.insert(t as usize);
                self.graph_ended = false;
            }
            // SAFETY: inside the callback `t` is a live node; the name is a NUL-terminated array.
            let name = unsafe { std::ffi::CStr::from_ptr((*t).name.as_ptr()) };
            self.graph_ended = name.to_bytes() == b"result_output";
            self.counts.nodes_seen += 1;
            match &self.mode {
                ProbeMode::Idle => {
                    // SAFETY: inside the callback `t` is a live node with live sources.
                    let (_, noop, _) = unsafe { self.classify_live(t) };
                    self.counts.work_nodes += u64::from(!noop);
                    false
                }
                ProbeMode::Routing => {
                    // SAFETY: as above.
                    let (_, noop, _) = unsafe { self.classify_live(t) };
                    self.counts.work_nodes += u64::from(!noop);
                    name.to_bytes().starts_with(TOPK_PREFIX)
                }
                ProbeMode::Capture => {
                    // SAFETY: as above.
                    let snap = unsafe { ffi::snapshot(t) };
                    self.counts.work_nodes += u64::from(!snap.is_noop);
                    self.captured.push(Captured {
                        snap,
                        graph: self.graph_index,
                    });
                    false
                }
                ProbeMode::Observe(_) | ProbeMode::Replay { .. } => {
                    // SAFETY: as above.
                    let (category, noop, _) = unsafe { self.classify_live(t) };
                    self.counts.work_nodes += u64::from(!noop);
                    let selected = match &self.mode {
                        ProbeMode::Observe(c) | ProbeMode::Replay { categories: c, .. } => {
                            c.contains(&category)
                        }
                        _ => false,
                    };
                    let split = !noop && selected;
                    self.counts.unobserved_work |= !noop && !selected;
                    if split {
                        self.segment_start = Some(std::time::Instant::now());
                    }
                    split
                }
            }
        } else {
            if let Some(t) = self.segment_start.take() {
                self.counts.in_node_ms += t.elapsed().as_secs_f64() * 1e3;
            }
            self.counts.observed += 1;
            if self.mode == ProbeMode::Routing {
                // SAFETY: the node was just computed and its backend synchronised.
                match unsafe { read_topk(t) } {
                    Ok(r) => self.routing.push(r),
                    Err(e) => {
                        self.error = Some(e);
                        return false;
                    }
                }
                return true;
            }
            if let ProbeMode::Replay { times, .. } = self.mode {
                // SAFETY: the node was just computed and its backend synchronised; it and its
                // sources are live until the callback returns.
                let (_, _, device) = unsafe { self.classify_live(t) };
                // SAFETY: as above.
                if let Err(e) = unsafe { self.replay.replay(t, device, times) } {
                    self.error = Some(e.to_string());
                    return false;
                }
            }
            true
        }
    }
}

/// Reads a computed `ffn_moe_topk-<layer>` node: (layer, k, token-major ids), through its
/// strides (it is a view of the argsort's wider rows).
///
/// # Safety
/// `t` must be a live, computed node whose backend has been synchronised.
unsafe fn read_topk(t: *const sys::ggml_tensor) -> Result<(u32, usize, Vec<u32>), String> {
    // SAFETY: guaranteed by the caller; the name is a NUL-terminated array.
    let (name, ty, ne, nb) = unsafe {
        (
            std::ffi::CStr::from_ptr((*t).name.as_ptr())
                .to_string_lossy()
                .into_owned(),
            (*t).type_,
            (*t).ne,
            (*t).nb,
        )
    };
    let layer = name
        .as_bytes()
        .strip_prefix(TOPK_PREFIX)
        .and_then(|l| std::str::from_utf8(l).ok())
        .and_then(|l| l.parse::<u32>().ok())
        .ok_or_else(|| format!("top-k node `{name}` names no layer"))?;
    if ty != sys::GGML_TYPE_I32 || ne[2] != 1 || ne[3] != 1 || ne[0] < 1 {
        return Err(format!(
            "top-k node `{name}` is not a [k, tokens] i32 tensor"
        ));
    }
    let (k, tokens) = (ne[0] as usize, ne[1].max(0) as usize);
    if tokens == 0 {
        return Ok((layer, k, Vec::new()));
    }
    let bytes = crate::ggml::read_bytes(t);
    let mut ids = Vec::with_capacity(k * tokens);
    for tok in 0..tokens {
        for j in 0..k {
            let off = j * nb[0] + tok * nb[1];
            let b = bytes
                .get(off..off + 4)
                .ok_or_else(|| format!("top-k node `{name}`: strides past its bytes"))?;
            let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            ids.push(u32::try_from(v).map_err(|_| format!("top-k node `{name}`: expert {v}"))?);
        }
    }
    Ok((layer, k, ids))
}

/// Classifies a snapshotted node with the mapping table.
pub(crate) fn classify_snap(snap: &NodeSnap) -> Category {
    let weights: Vec<&str> = snap
        .srcs
        .iter()
        .filter(|s| s.is_weight)
        .map(|s| ffi::orig_name(&s.name))
        .collect();
    classify(&NodeKey {
        op: &snap.op_name,
        name: snap.name(),
        weights: &weights,
    })
    .0
}

/// The C callback installed in the instrumented context.
///
/// # Safety
/// `user` must point to the `Probe` owned by the peer for as long as the context lives, and
/// no other reference to it may be active while llama_decode runs.
pub(crate) unsafe extern "C" fn eval_callback(
    t: *mut sys::ggml_tensor,
    ask: bool,
    user: *mut c_void,
) -> bool {
    if user.is_null() || t.is_null() {
        return false;
    }
    // SAFETY: guaranteed by the caller (the peer hands out the pointer of its boxed probe and
    // does not touch the probe while llama_decode runs).
    let probe = unsafe { &mut *user.cast::<Probe>() };
    // A panic must not unwind into C: record it and abort the graph instead.
    match catch_unwind(AssertUnwindSafe(|| probe.on_node(t, ask))) {
        Ok(v) => v,
        Err(_) => {
            probe.error = Some("panic inside the eval callback".into());
            false
        }
    }
}
