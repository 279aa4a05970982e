//! tally-peer-llama: llama.cpp as the ledger's peer, measured with the same method as tally.
//!
//! [`LlamaPeer`] loads a GGUF file with llama.cpp (through the crates.io crate `llama-cpp-sys-2`,
//! which vendors llama.cpp; no llama.cpp code is in this repository) and implements
//! [`tally_ledger::subject::Subject`]:
//! - graph export from the real scheduled graph, through the scheduler's eval callback
//!   ([`probe`], [`export`], categories from the table in [`catmap`]);
//! - end-to-end timing as `llama-bench -fa 1` does it ([`timing`]);
//! - in-graph replay into scratch on a second backend instance ([`replay`]);
//! - standalone op timing on one-op ggml graphs ([`opbench`]);
//! - its tokenizer alone, on vocab-only files, as the oracle for tally's ([`vocab`]).
//! - its quantiser and dequantisers, as the oracle for tally's reading of quantised files
//!   ([`quantize_file`], [`dequantize`]).
//!
//! docs/peer-llama.md explains what each of these sees and does not see.

pub mod catmap;
pub mod config;
pub mod export;
mod ffi;
mod ggml;
pub mod mtp;
pub mod opbench;
mod probe;
mod quant;
pub mod replay;
pub mod timing;
pub mod vocab;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use tally_ledger::routing::{LayerTable, ModelRouting};
use tally_ledger::schema::{EngineInfo, GraphExport, ModelFacts, SCHEMA_VERSION};
use tally_ledger::subject::{
    OpTimingRequest, RunMode, RunOutcome, Subject, SubjectError, Workload,
};

pub use config::ModelConfig;
pub use quant::{dequantize, quantize_file};
pub use replay::ReplayStats;
pub use timing::BenchResult;
pub use vocab::LlamaVocab;

use crate::ffi::{Context, CtxConfig, Model};
use crate::opbench::{OpBench, Recipe};
use crate::probe::{Probe, ProbeMode, eval_callback};

/// Engine name in every record.
pub const ENGINE: &str = "llama.cpp";
/// The crates.io crate that provides llama.cpp (its version pins the llama.cpp sources).
pub const LLAMA_CPP_SYS: &str = "llama-cpp-sys-2 0.1.161";

/// Errors of the llama.cpp adapter.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The model could not be loaded.
    #[error("llama.cpp peer: {0}")]
    Load(String),
    /// llama.cpp or ggml failed at run time.
    #[error("llama.cpp peer: {0}")]
    Engine(String),
    /// A parameter is out of range.
    #[error("llama.cpp peer: bad parameter: {0}")]
    Param(String),
    /// An op cannot be timed standalone.
    #[error("llama.cpp peer cannot time op `{op}` standalone: {reason}")]
    Unsupported {
        /// The ggml op.
        op: String,
        /// Why.
        reason: String,
    },
}

impl From<PeerError> for SubjectError {
    fn from(e: PeerError) -> SubjectError {
        match e {
            PeerError::Unsupported { op, reason } => SubjectError::Unsupported {
                engine: ENGINE.into(),
                op,
                reason,
            },
            other => SubjectError::Engine {
                engine: ENGINE.into(),
                message: other.to_string(),
            },
        }
    }
}

/// How llama.cpp is run. Defaults follow `llama-bench -fa 1`.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerParams {
    /// Logical batch: tokens per `llama_decode` call (llama-bench default 2048).
    pub n_batch: u32,
    /// Physical batch: tokens per graph execution (llama-bench default 512).
    pub n_ubatch: u32,
    /// CPU threads (llama-bench default: the number of physical cores).
    pub threads: usize,
    /// Layers offloaded to the GPU; negative means all (llama-bench default 99). 0 on CPU builds.
    pub n_gpu_layers: i32,
    /// Flash attention (`-fa 1`).
    pub flash_attn: bool,
    /// Context size in tokens; 0 sizes it to the longest run requested so far.
    pub n_ctx: u32,
}

impl Default for PeerParams {
    fn default() -> PeerParams {
        PeerParams {
            n_batch: 2048,
            n_ubatch: 512,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            n_gpu_layers: -1,
            flash_attn: true,
            n_ctx: 0,
        }
    }
}

impl PeerParams {
    fn validate(&self) -> Result<(), PeerError> {
        if self.n_ubatch == 0 || self.n_batch == 0 {
            return Err(PeerError::Param(
                "n_batch and n_ubatch must be at least 1".into(),
            ));
        }
        if self.n_batch % self.n_ubatch != 0 {
            return Err(PeerError::Param(format!(
                "n_batch ({}) must be a multiple of n_ubatch ({}) so ubatch boundaries are fixed",
                self.n_batch, self.n_ubatch
            )));
        }
        if self.threads == 0 || self.threads > i32::MAX as usize {
            return Err(PeerError::Param(format!(
                "threads must be in 1..={}, got {}",
                i32::MAX,
                self.threads
            )));
        }
        Ok(())
    }
}

/// llama.cpp, loaded and ready to be measured.
pub struct LlamaPeer {
    /// Context without eval callback (the fast path: `RunMode::Plain`, decode, benches).
    plain: Option<Context>,
    /// Context with the eval callback installed (capture, observe, replay).
    probed: Option<Context>,
    /// Owned by the peer (freed in `Drop` after both contexts); the probed context holds it.
    probe: NonNull<Probe>,
    opbench: Option<OpBench>,
    /// Standalone-timing recipes of exported nodes, by [`opbench::recipe_key`].
    recipes: HashMap<String, Recipe>,
    /// Work nodes of the last export per workload (the `dispatches` of a plain run).
    work_nodes: HashMap<Workload, u64>,
    last_replay: ReplayStats,
    config: ModelConfig,
    params: PeerParams,
    info: EngineInfo,
    gpu: bool,
    model: Model,
    path: PathBuf,
}

impl LlamaPeer {
    /// Loads `path` with `params`.
    pub fn load(path: &Path, params: PeerParams) -> Result<LlamaPeer, PeerError> {
        params.validate()?;
        let gpu_dev = ffi::first_gpu();
        let n_gpu_layers = match gpu_dev {
            None => 0,
            Some(_) if params.n_gpu_layers < 0 => 999,
            Some(_) => params.n_gpu_layers,
        };
        let model = Model::load(path, n_gpu_layers)?;
        let config = ModelConfig::read(&model, path)?;
        let gpu = gpu_dev.is_some() && n_gpu_layers > 0;
        let (backend, device, threads) = match gpu_dev.filter(|_| gpu) {
            Some(d) => {
                let (name, descr, _) = ffi::device_info(d);
                ("cuda".to_string(), format!("{descr} ({name})"), None)
            }
            None => {
                let (_, descr, _) = ffi::device_info(ffi::cpu_device());
                (
                    "cpu".to_string(),
                    format!("{descr}, {} threads", params.threads),
                    Some(params.threads),
                )
            }
        };
        let info = EngineInfo {
            engine: ENGINE.into(),
            version: format!("{LLAMA_CPP_SYS}, ggml {}", ffi::ggml_version()),
            backend,
            device,
            threads,
            options: Vec::new(),
            model: ModelFacts {
                path: path.display().to_string(),
                file_bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
                arch: config.arch.clone(),
                n_layers: config.n_layer,
                n_vocab: config.n_vocab,
                n_experts: config.n_expert,
                n_experts_used: config.n_expert_used,
            },
        };
        let probe = NonNull::from(Box::leak(Box::new(Probe::new(params.threads as i32))));
        Ok(LlamaPeer {
            plain: None,
            probed: None,
            probe,
            opbench: None,
            recipes: HashMap::new(),
            work_nodes: HashMap::new(),
            last_replay: ReplayStats::default(),
            config,
            params,
            info,
            gpu,
            model,
            path: path.to_path_buf(),
        })
    }

    /// Loads `path` for the given backend (`cpu`: every layer on the CPU; `cuda`: every layer
    /// on the first GPU, an error when this llama.cpp has none) with `threads` CPU threads (0:
    /// one per available core); other parameters as [`PeerParams::default`] (llama-bench's).
    pub fn open(path: &Path, backend: &str, threads: usize) -> Result<LlamaPeer, PeerError> {
        let n_gpu_layers = match backend {
            "cpu" => 0,
            "cuda" => {
                if ffi::first_gpu().is_none() {
                    return Err(PeerError::Param(
                        "backend `cuda` requested, but this llama.cpp has no GPU device (build with the dynamic-link feature and run against CUDA libraries, see docs/peer-llama.md)".into(),
                    ));
                }
                -1
            }
            other => {
                return Err(PeerError::Param(format!(
                    "unknown backend `{other}` (cpu or cuda)"
                )));
            }
        };
        let defaults = PeerParams::default();
        LlamaPeer::load(
            path,
            PeerParams {
                n_gpu_layers,
                threads: if threads == 0 {
                    defaults.threads
                } else {
                    threads
                },
                ..defaults
            },
        )
    }

    /// The model configuration llama.cpp loaded.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The parameters in use.
    pub fn params(&self) -> &PeerParams {
        &self.params
    }

    /// Whether the model runs on a GPU.
    pub fn on_gpu(&self) -> bool {
        self.gpu
    }

    /// Makes every replay also compare its scratch output with the real node's output (bytes
    /// copied to the host: slow, for validation only). Aliased (in-place) nodes are not compared.
    pub fn set_replay_verify(&mut self, on: bool) {
        self.probe_mut().set_verify(on);
    }

    /// Replay statistics of the last `RunMode::Replay` prefill (aliased nodes, dispatches).
    pub fn last_replay(&self) -> &ReplayStats {
        &self.last_replay
    }

    fn ctx_config(&self, n_tokens: usize) -> CtxConfig {
        let want = (n_tokens as u32).max(self.params.n_ctx).max(256);
        CtxConfig {
            n_ctx: want.div_ceil(256) * 256,
            n_batch: self.params.n_batch,
            n_ubatch: self.params.n_ubatch,
            threads: self.params.threads as i32,
            flash_attn: self.params.flash_attn,
            op_offload: self.gpu,
        }
    }

    /// The context for a run of `n_tokens` (prompt plus generated), created or grown on demand.
    fn context(&mut self, probed: bool, n_tokens: usize) -> Result<&mut Context, PeerError> {
        let cfg = self.ctx_config(n_tokens);
        let slot = if probed {
            &mut self.probed
        } else {
            &mut self.plain
        };
        let fits = slot.as_ref().is_some_and(|c| c.config.n_ctx >= cfg.n_ctx);
        if !fits {
            *slot = None;
            let (cb, user) = if probed {
                (
                    Some(eval_callback as unsafe extern "C" fn(_, _, _) -> _),
                    self.probe.as_ptr().cast::<std::ffi::c_void>(),
                )
            } else {
                (None, std::ptr::null_mut())
            };
            *slot = Some(Context::new(&self.model, cfg, cb, user)?);
        }
        slot.as_mut()
            .ok_or_else(|| PeerError::Engine("context missing".into()))
    }

    fn probe_mut(&mut self) -> &mut Probe {
        // SAFETY: the probe is owned by `self` (leaked box freed in Drop); no llama_decode is
        // running while `&mut self` is held here, so nothing else reads it.
        unsafe { self.probe.as_mut() }
    }

    /// Prompt tokens for a graph export (the same generator the ledger uses for prompts).
    fn synthetic_prompt(&self, n_tokens: usize) -> Result<Vec<u32>, PeerError> {
        tally_ledger::rng::prompt_tokens(n_tokens, self.config.n_vocab, 0)
            .map_err(|e| PeerError::Param(e.to_string()))
    }

    /// Exports the graph of a prefill of `n_tokens`.
    pub fn export(&mut self, n_tokens: usize) -> Result<GraphExport, PeerError> {
        self.export_workload(Workload::prefill(n_tokens))
    }

    /// Exports the graph of the workload's batch: its context is prefilled first with the
    /// probe idle, then the batch's graph executions are captured (a decode step at depth D:
    /// one one-token ubatch at `n_past` = D).
    pub fn export_workload(&mut self, w: Workload) -> Result<GraphExport, PeerError> {
        if w.n_tokens == 0 {
            return Err(PeerError::Param(
                "a graph export needs at least 1 prompt token".into(),
            ));
        }
        let tokens = self.synthetic_prompt(w.total())?;
        let (context, batch) = tokens.split_at(w.n_past);
        let (n_batch, n_vocab) = (self.params.n_batch, self.config.n_vocab);
        self.probe_mut().start(ProbeMode::Idle);
        let restored = timing::restore_context(
            self.context(true, w.total())?,
            context,
            n_batch,
            n_vocab,
            if w.n_tokens == 1 {
                timing::STEP_WARMUP
            } else {
                0
            },
        );
        let idle_error = self.probe_mut().error.take();
        restored?;
        if let Some(e) = idle_error {
            return Err(PeerError::Engine(format!("context prefill failed: {e}")));
        }
        self.probe_mut().start(ProbeMode::Capture);
        let run = timing::run_batch(
            self.context(true, w.total())?,
            batch,
            w.n_past,
            n_batch,
            n_vocab,
        );
        let probe = self.probe_mut();
        probe.mode = ProbeMode::Idle;
        let captured = std::mem::take(&mut probe.captured);
        let graphs = probe.graphs() as u64;
        let error = probe.error.take();
        run?;
        if let Some(e) = error {
            return Err(PeerError::Engine(format!("graph capture failed: {e}")));
        }
        let ub = u64::from(self.params.n_ubatch);
        let n_past = w.n_past as u64;
        let nodes = export::build_nodes(&captured, w.n_tokens as u64, n_past, ub);
        for (node, cap) in nodes.iter().zip(&captured) {
            if !node.is_view {
                let at = n_past + cap.graph as u64 * ub;
                self.recipes
                    .insert(opbench::recipe_key(node), Recipe::from_snap(&cap.snap, at));
            }
        }
        self.work_nodes
            .insert(w, nodes.iter().filter(|n| !n.is_view).count() as u64);
        let expected = self.config.expected(graphs, 1, self.params.flash_attn);
        let mut notes = export_notes(graphs, &self.params, self.gpu);
        if self.gpu {
            let mut on_cpu: std::collections::BTreeMap<&str, u64> = Default::default();
            for (node, cap) in nodes.iter().zip(&captured) {
                if !node.is_view && cap.snap.device == 0 {
                    *on_cpu.entry(node.op.as_str()).or_default() += 1;
                }
            }
            if !on_cpu.is_empty() {
                let list: Vec<String> = on_cpu.iter().map(|(op, n)| format!("{op} x{n}")).collect();
                notes.push(format!(
                    "work nodes the scheduler ran on the CPU backend in this GPU run: {}",
                    list.join(", ")
                ));
            }
        }
        Ok(GraphExport {
            schema: SCHEMA_VERSION,
            engine: self.info.clone(),
            n_tokens: w.n_tokens as u64,
            n_past,
            nodes,
            expected,
            notes,
        })
    }

    /// The routing llama.cpp's router chooses for `tokens` after `context`: one instrumented
    /// run that stops after each MoE layer's top-k (`ffn_moe_topk-<layer>`) and reads its ids;
    /// a layer's ids of consecutive ubatches are joined in order.
    pub fn routing_after(
        &mut self,
        context: &[u32],
        tokens: &[u32],
    ) -> Result<ModelRouting, PeerError> {
        if tokens.is_empty() {
            return Err(PeerError::Param("a prefill needs at least 1 token".into()));
        }
        let run = self.probed_batch(context, tokens, ProbeMode::Routing, 0);
        let probe = self.probe_mut();
        probe.mode = ProbeMode::Idle;
        let error = probe.error.take();
        let read = std::mem::take(&mut probe.routing);
        run??;
        if let Some(e) = error {
            return Err(PeerError::Engine(format!("routing capture failed: {e}")));
        }
        let mut by_layer: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
        let mut k = 0;
        for (layer, kk, ids) in read {
            k = kk;
            by_layer.entry(layer).or_default().extend(ids);
        }
        let layers = by_layer
            .into_iter()
            .map(|(layer, ids)| LayerTable::of(layer, k, ids))
            .collect();
        ModelRouting::new(
            "llama.cpp".into(),
            tokens.len(),
            self.config.n_expert as usize,
            k,
            layers,
        )
        .map_err(|e| PeerError::Engine(format!("routing capture: {e}")))
    }

    /// In the instrumented context: restores the state `context` leaves with the probe idle
    /// (untimed; `tail` as `timing::restore_context` takes it), then runs `tokens` with the
    /// probe in `mode`. The outer error is the restore's; the inner one the run's, returned for
    /// the caller to report after it has read (and reset) the probe.
    fn probed_batch(
        &mut self,
        context: &[u32],
        tokens: &[u32],
        mode: ProbeMode,
        tail: usize,
    ) -> Result<Result<(f64, u64), PeerError>, PeerError> {
        let total = context.len() + tokens.len();
        let (n_batch, n_vocab) = (self.params.n_batch, self.config.n_vocab);
        self.probe_mut().start(ProbeMode::Idle);
        timing::restore_context(self.context(true, total)?, context, n_batch, n_vocab, tail)?;
        if let Some(e) = self.probe_mut().error.take() {
            return Err(PeerError::Engine(format!("context prefill failed: {e}")));
        }
        self.probe_mut().start(mode);
        Ok(timing::run_batch(
            self.context(true, total)?,
            tokens,
            context.len(),
            n_batch,
            n_vocab,
        ))
    }

    /// One prefill of `tokens` from a fresh state.
    pub fn run(&mut self, tokens: &[u32], mode: &RunMode) -> Result<RunOutcome, PeerError> {
        self.run_after(&[], tokens, mode)
    }

    /// Restores the state `context` leaves (cleared, then prefilled with the probe idle:
    /// untimed), then runs `tokens` at position `context.len()` as `mode` says; the outcome
    /// describes that batch only.
    pub fn run_after(
        &mut self,
        context: &[u32],
        tokens: &[u32],
        mode: &RunMode,
    ) -> Result<RunOutcome, PeerError> {
        let (probed, probe_mode) = match mode {
            RunMode::Plain => (false, ProbeMode::Idle),
            RunMode::Observe(c) => (true, ProbeMode::Observe(c.clone())),
            RunMode::Replay { categories, times } => (
                true,
                ProbeMode::Replay {
                    categories: categories.clone(),
                    times: *times,
                },
            ),
        };
        if tokens.is_empty() {
            return Err(PeerError::Param("a prefill needs at least 1 token".into()));
        }
        let tail = if tokens.len() == 1 {
            timing::STEP_WARMUP
        } else {
            0
        };
        let run = if probed {
            self.probed_batch(context, tokens, probe_mode, tail)?
        } else {
            let total = context.len() + tokens.len();
            let (n_batch, n_vocab) = (self.params.n_batch, self.config.n_vocab);
            timing::restore_context(self.context(false, total)?, context, n_batch, n_vocab, tail)?;
            timing::run_batch(
                self.context(false, total)?,
                tokens,
                context.len(),
                n_batch,
                n_vocab,
            )
        };
        if !probed {
            let (wall_ms, digest) = run?;
            let w = Workload {
                n_past: context.len(),
                n_tokens: tokens.len(),
            };
            let dispatches = self.work_nodes.get(&w).copied().unwrap_or(0);
            return Ok(RunOutcome {
                wall_ms,
                output_digest: digest,
                dispatches,
                in_node_ms: None,
            });
        }
        let probe = self.probe_mut();
        probe.mode = ProbeMode::Idle;
        let error = probe.error.take();
        let work = probe.counts.work_nodes;
        // Only when every work node was its own segment is the segments' time the nodes' time.
        let in_node_ms = (!probe.counts.unobserved_work).then_some(probe.counts.in_node_ms);
        let replay = probe.replay_stats().clone();
        self.last_replay = replay;
        let (wall_ms, digest) = run?;
        if let Some(e) = error {
            return Err(PeerError::Engine(format!("instrumented run failed: {e}")));
        }
        Ok(RunOutcome {
            wall_ms,
            output_digest: digest,
            dispatches: work,
            in_node_ms,
        })
    }

    /// One plain prefill of `tokens`, returning the last token's logits (for cross-engine
    /// correctness checks on the same file).
    pub fn prefill_logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>, PeerError> {
        let (n_batch, n_vocab) = (self.params.n_batch, self.config.n_vocab);
        let ctx = self.context(false, tokens.len())?;
        timing::run_prefill(ctx, tokens, n_batch, n_vocab)?;
        ctx.last_logits(n_vocab)
    }

    /// Standalone timing of one exported node.
    pub fn time_node(&mut self, req: &OpTimingRequest<'_>) -> Result<Vec<f64>, PeerError> {
        if req.node.is_view {
            return Err(PeerError::Unsupported {
                op: req.node.op.clone(),
                reason: format!(
                    "node `{}` is a view or a skipped node: it does no work",
                    req.node.name
                ),
            });
        }
        let key = opbench::recipe_key(req.node);
        let recipe = self.recipes.get(&key).cloned().ok_or_else(|| PeerError::Unsupported {
            op: req.node.op.clone(),
            reason: format!(
                "node `{}` was not exported by this peer (export the graph first: the op parameters come from it)",
                req.node.name
            ),
        })?;
        let threads = self.params.threads as i32;
        self.opbench
            .get_or_insert_with(|| OpBench::new(threads))
            .time(&recipe, req)
    }

    /// The model file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn export_notes(graphs: u64, p: &PeerParams, gpu: bool) -> Vec<String> {
    let mut v = vec![
        format!(
            "captured through ggml's scheduler eval callback answering \"no\" to every node: {graphs} graph execution(s) (n_batch {}, n_ubatch {}), nodes of all executions in order",
            p.n_batch, p.n_ubatch
        ),
        "the export lists the nodes of the graph the scheduler computes; backend fusions (e.g. CUDA rms_norm+mul, topk-moe, add chains) happen inside a backend's compute and are invisible: fused nodes still appear one by one".into(),
        "scheduler copies of split inputs between backends are not nodes and are not listed".into(),
        "nodes with no elements (e.g. output rows of a ubatch without outputs) and view ops are marked is_view".into(),
        format!("flash attention {}", if p.flash_attn { "on" } else { "off" }),
        "llama.cpp (this version) computes the last layer's MoE and residuals for every token and selects the output row after the final norm (`result_norm` GET_ROWS with out_ids): the dead-work analysis sees it through RowDep/rows".into(),
    ];
    if gpu {
        v.push("GPU run: instrumented runs split the graph at observed nodes, which breaks fusions and CUDA graphs for those splits; compare Replay with Observe, and report Observe vs Plain".into());
    }
    v
}

impl Drop for LlamaPeer {
    fn drop(&mut self) {
        // Contexts hold the probe pointer: drop them first.
        self.plain = None;
        self.probed = None;
        self.opbench = None;
        // SAFETY: the probe came from Box::leak in `load` and no context refers to it anymore.
        drop(unsafe { Box::from_raw(self.probe.as_ptr()) });
    }
}

impl Subject for LlamaPeer {
    fn info(&self) -> EngineInfo {
        self.info.clone()
    }

    fn graph(&mut self, w: Workload) -> Result<GraphExport, SubjectError> {
        Ok(self.export_workload(w)?)
    }

    fn prefill(
        &mut self,
        context: &[u32],
        tokens: &[u32],
        mode: &RunMode,
    ) -> Result<RunOutcome, SubjectError> {
        Ok(self.run_after(context, tokens, mode)?)
    }

    fn decode(&mut self, prompt: &[u32], n_gen: usize) -> Result<RunOutcome, SubjectError> {
        Ok(self.decode_steps(prompt, n_gen)?)
    }

    fn time_op(&mut self, req: &OpTimingRequest<'_>) -> Result<Vec<f64>, SubjectError> {
        Ok(self.time_node(req)?)
    }

    fn model_routing(
        &mut self,
        context: &[u32],
        tokens: &[u32],
    ) -> Result<Option<ModelRouting>, SubjectError> {
        Ok(Some(self.routing_after(context, tokens)?))
    }

    fn busy_reason(&mut self) -> Option<String> {
        if self.gpu {
            timing::gpu_busy_reason()
        } else {
            None
        }
    }
}
