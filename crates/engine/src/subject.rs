//! tally as a ledger subject: the same protocols measure tally's backends and llama.cpp.

use std::sync::Arc;
use std::time::Instant;

use tally_ledger::routing::{LayerTable, ModelRouting, table_for};
use tally_ledger::schema::{EngineInfo, GraphExport, ModelFacts};
use tally_ledger::subject::{
    OpTimingRequest, RunMode, RunOutcome, Subject, SubjectError, Workload,
};
use tally_model::export::export_graph;
use tally_model::rng::Rng;
use tally_model::{Model, Op, Plan};

use crate::EngineError;
use crate::backend::{Backend, Target};
use crate::exec::{Capture, Instrument};
use crate::sample::{SampleStep, SamplingParams};
use crate::session::Session;

/// A tally session under measurement.
pub struct TallySubject<B: Backend> {
    pub session: Session<B>,
    /// Build identity (git commit).
    pub version: String,
    /// Workload of the last exported graph: standalone timing uses its plan and state.
    graph_workload: Option<Workload>,
}

/// FNV-1a over the logits' bytes: replay must leave it unchanged.
pub fn digest(v: &[f32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in v {
        for b in x.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
    h
}

impl<B: Backend> TallySubject<B> {
    pub fn new(session: Session<B>, version: String) -> Self {
        TallySubject {
            session,
            version,
            graph_workload: None,
        }
    }

    fn err(&self, e: EngineError) -> SubjectError {
        SubjectError::Engine {
            engine: "tally".into(),
            message: e.to_string(),
        }
    }

    fn model(&self) -> &Arc<Model> {
        &self.session.model
    }

    /// Restores the state `context` leaves: a fresh state when it is empty, else a plain
    /// prefill of it (untimed by the callers). Re-prefilling is the simplest restore that is
    /// correct on every backend; it costs a prefill of the context per run.
    fn restore_context(&mut self, context: &[u32]) -> Result<(), SubjectError> {
        if context.is_empty() {
            self.session.clear();
            return Ok(());
        }
        self.session.prefill(context).map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Runs `tokens` as one batch at the session's position (a fresh prefill when it holds
    /// nothing), on the fastest path or through the instrumenting hook.
    fn run_batch(
        &mut self,
        tokens: &[u32],
        mode: &RunMode,
    ) -> Result<(Vec<f32>, crate::exec::ExecStats, Option<f64>), EngineError> {
        match mode {
            RunMode::Plain => {
                let (logits, stats) = self.session.append(tokens)?;
                Ok((logits, stats, None))
            }
            other => {
                let mut hook = Instrument::new(other);
                let (logits, stats) = self.session.append_with(tokens, &mut hook)?;
                Ok((logits, stats, Some(hook.in_node_ms)))
            }
        }
    }

    /// Fills the inputs of node `i` for a standalone timing: the values of a real prefill of the
    /// same length are already in the buffers; MoE routing is replaced as requested (under
    /// `model`, by the recorded table every engine is fed).
    fn impose_routing(
        &mut self,
        plan: &Plan,
        i: usize,
        req: &OpTimingRequest<'_>,
    ) -> Result<(), SubjectError> {
        let node = &plan.nodes[i];
        let Op::MoeMatMul { k, .. } = node.op else {
            return Ok(());
        };
        let ids_view = node.inputs[1];
        let n_experts = self.model().config.n_experts;
        let table = table_for(
            req.routing,
            req.recorded,
            req.layers,
            ids_view.rows,
            n_experts,
            k,
            req.seed,
        )
        .map_err(|e| SubjectError::Engine {
            engine: "tally".into(),
            message: e.to_string(),
        })?;
        let ids: Vec<i32> = table.into_iter().map(|x| x as i32).collect();
        self.session
            .backend
            .write_i32(plan, ids_view, &ids)
            .map_err(|e| self.err(e))
    }
}

impl<B: Backend> Subject for TallySubject<B> {
    fn info(&self) -> EngineInfo {
        let m = self.model();
        let c = &m.config;
        EngineInfo {
            engine: "tally".into(),
            version: self.version.clone(),
            backend: self.session.backend.name().into(),
            device: self.session.backend.device(),
            threads: self.session.backend.threads(),
            options: self.session.backend.options(),
            model: ModelFacts {
                path: m.path.display().to_string(),
                file_bytes: m.file.file_bytes(),
                arch: tally_model::config::ARCH.into(),
                n_layers: c.n_layers as u32,
                n_vocab: c.vocab as u32,
                n_experts: c.n_experts as u32,
                n_experts_used: c.n_experts_used as u32,
            },
        }
    }

    fn graph(&mut self, w: Workload) -> Result<GraphExport, SubjectError> {
        if w.total() > self.session.max_ctx() {
            return Err(self.err(EngineError::TooLong {
                tokens: w.total(),
                max: self.session.max_ctx(),
                why: "this session's context",
            }));
        }
        // Plans hold no position: the batch's plan, exported as run after `n_past` tokens (the
        // attention nodes see `n_past` cached keys more).
        let plan = self.session.plan(w.n_tokens).map_err(|e| self.err(e))?;
        self.graph_workload = Some(w);
        let info = self.info();
        let m = self.model();
        Ok(export_graph(&plan, w.n_past, &m.config, &m.file, info))
    }

    fn prefill(
        &mut self,
        context: &[u32],
        tokens: &[u32],
        mode: &RunMode,
    ) -> Result<RunOutcome, SubjectError> {
        self.restore_context(context)?;
        let t0 = Instant::now();
        let (logits, stats, in_node_ms) = self.run_batch(tokens, mode).map_err(|e| self.err(e))?;
        let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(RunOutcome {
            wall_ms,
            output_digest: digest(&logits),
            dispatches: stats.dispatches,
            in_node_ms,
        })
    }

    fn decode(&mut self, prompt: &[u32], n_gen: usize) -> Result<RunOutcome, SubjectError> {
        let vocab = self.model().config.vocab as u64;
        self.session.prefill(prompt).map_err(|e| self.err(e))?;
        let mut rng = Rng::new(prompt.len() as u64 ^ 0x5eed);
        let mut last = Vec::new();
        // Each step ends as a generation's does: the backend's greedy sampler picks a token
        // from the logits (on the GPU: an argmax kernel, then the id is downloaded), and the
        // next step waits for it. The token fed is a random one, not the sampled one, so the
        // experts routed to stay realistic (a random model's greedy text repeats itself, and
        // the same experts would stay in L2). The last step's logits are read for the digest.
        let greedy = SamplingParams::default();
        let t0 = Instant::now();
        for i in 0..n_gen {
            let id = rng.below(vocab) as u32;
            let plan = self.session.decode_run(id).map_err(|e| self.err(e))?;
            if i + 1 == n_gen {
                let b = &mut self.session.backend;
                last = b
                    .barrier()
                    .and_then(|()| b.read(&plan, plan.logits))
                    .map_err(|e| self.err(e))?;
            } else {
                let step = SampleStep {
                    params: &greedy,
                    window: &[],
                    random: 0,
                };
                self.session
                    .backend
                    .sample(&plan, &step)
                    .map_err(|e| self.err(e))?;
            }
        }
        let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
        let dispatches = n_gen as u64
            * self
                .session
                .plan(1)
                .map(|p| p.nodes.len() as u64)
                .unwrap_or(0);
        Ok(RunOutcome {
            wall_ms,
            output_digest: digest(&last),
            dispatches,
            in_node_ms: None,
        })
    }

    /// One hooked run of `tokens` after `context`, reading every top-k node's ids back.
    fn model_routing(
        &mut self,
        context: &[u32],
        tokens: &[u32],
    ) -> Result<Option<ModelRouting>, SubjectError> {
        let c = &self.model().config;
        let (n_experts, k) = (c.n_experts, c.n_experts_used);
        if n_experts == 0 || tokens.is_empty() {
            return Ok(None);
        }
        self.restore_context(context)?;
        let plan = self.session.plan(tokens.len()).map_err(|e| self.err(e))?;
        let mut cap = Capture::topk(&plan, false);
        self.session
            .append_with(tokens, &mut cap)
            .map_err(|e| self.err(e))?;
        model_routing_of(&plan, &cap, n_experts, k)
            .map(Some)
            .map_err(|e| self.err(e))
    }

    fn busy_reason(&mut self) -> Option<String> {
        if self.session.backend.name() == "cuda" {
            tally_ledger::machine::gpu_busy()
        } else {
            None
        }
    }

    fn time_op(&mut self, req: &OpTimingRequest<'_>) -> Result<Vec<f64>, SubjectError> {
        let w = self.graph_workload.ok_or_else(|| {
            self.err(EngineError::Internal(
                "time_op before graph(): the node's plan is unknown".into(),
            ))
        })?;
        let n_tokens = w.n_tokens;
        let plan = self.session.plan(n_tokens).map_err(|e| self.err(e))?;
        let i = req.node.index as usize;
        if plan.nodes.get(i).is_none_or(|n| n.name != req.node.name) {
            return Err(self.err(EngineError::Internal(format!(
                "node {} ({}) is not in the plan of {n_tokens} tokens",
                req.node.index, req.node.name
            ))));
        }
        // Realistic inputs: the values a real run of the same batch at the same position leaves
        // in the buffers (and the position itself, so attention sees `n_past + 1..` keys).
        let vocab = self.model().config.vocab as u64;
        let mut rng = Rng::new(req.seed);
        let ids: Vec<u32> = (0..w.total()).map(|_| rng.below(vocab) as u32).collect();
        let (context, batch) = ids.split_at(w.n_past);
        self.restore_context(context)?;
        self.run_batch(batch, &RunMode::Plain)
            .map_err(|e| self.err(e))?;
        self.impose_routing(&plan, i, req)?;
        time_dispatch(&mut self.session.backend, &plan, i, req.warmup, req.reps)
            .map_err(|e| self.err(e))
    }
}

/// The model routing a run of `plan` hooked with [`Capture::topk`] read back: one table per
/// top-k node, by its layer (recorded by "tally").
pub fn model_routing_of(
    plan: &Plan,
    cap: &Capture,
    n_experts: usize,
    k: usize,
) -> Result<ModelRouting, EngineError> {
    let mut layers = Vec::new();
    for (label, v) in &cap.values {
        let Some(i) = label
            .strip_suffix(":ids")
            .and_then(|i| i.parse::<usize>().ok())
        else {
            continue; // weights or logits of a capture with `all`
        };
        let Some(layer) = plan.nodes.get(i).and_then(|n| n.layer) else {
            return Err(EngineError::Internal(format!(
                "top-k capture `{label}` names no layer of the plan"
            )));
        };
        // The ids travel as f32 (exact below 2^24); a value that is not a valid id is an
        // error for ModelRouting::new to report.
        let ids = v.iter().map(|&x| x as u32).collect();
        layers.push(LayerTable::of(layer as u32, k, ids));
    }
    ModelRouting::new("tally".into(), plan.n_tokens, n_experts, k, layers)
        .map_err(|e| EngineError::Internal(e.to_string()))
}

/// Times dispatches of node `i` alone (outputs to scratch, a barrier on each side).
pub fn time_dispatch<B: Backend>(
    b: &mut B,
    plan: &Plan,
    i: usize,
    warmup: usize,
    reps: usize,
) -> Result<Vec<f64>, EngineError> {
    for _ in 0..warmup {
        b.dispatch(plan, i, Target::Scratch)?;
    }
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        b.barrier()?;
        let t0 = Instant::now();
        b.dispatch(plan, i, Target::Scratch)?;
        b.barrier()?;
        samples.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(samples)
}
