//! The one executor loop. Every dispatch of the engine passes through [`execute`], which is where
//! timing, replay, counting and export hook in: probes cannot miss work.

use std::time::Instant;

use tally_ledger::Category;
use tally_ledger::subject::{CategorySet, RunMode};
use tally_model::{Op, Plan, View};

use crate::EngineError;
use crate::backend::{Backend, Target};

/// Called around every node the executor dispatches.
pub trait Hook {
    fn before(&mut self, _b: &mut dyn Backend, _plan: &Plan, _i: usize) -> Result<(), EngineError> {
        Ok(())
    }
    fn after(&mut self, _b: &mut dyn Backend, _plan: &Plan, _i: usize) -> Result<(), EngineError> {
        Ok(())
    }
    /// Whether the backend may run several nodes in one launch ([`Backend::dispatch_fused`]):
    /// only when nothing watches the nodes one by one.
    fn fuses(&self) -> bool {
        false
    }
}

/// No instrumentation: the plain path, where the backend's fused launches run.
pub struct NoHook;
impl Hook for NoHook {
    fn fuses(&self) -> bool {
        true
    }
}

/// What one pass of the loop did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecStats {
    /// Real dispatches (one per plan node).
    pub dispatches: u64,
    /// Extra dispatches into scratch made by replay.
    pub replays: u64,
    /// A graph run: what the graph holds against what its capture launched.
    pub graph: Option<crate::backend::GraphCount>,
}

/// Runs every node of `plan` in order through `hook`.
pub fn execute(
    b: &mut dyn Backend,
    plan: &Plan,
    hook: &mut dyn Hook,
) -> Result<ExecStats, EngineError> {
    let mut stats = ExecStats::default();
    let fuses = hook.fuses();
    let mut i = 0;
    while i < plan.nodes.len() {
        if fuses {
            let n = b.dispatch_fused(plan, i)?;
            if n > 0 {
                stats.dispatches += n as u64;
                i += n;
                continue;
            }
        }
        hook.before(b, plan, i)?;
        b.dispatch(plan, i, Target::Real)?;
        stats.dispatches += 1;
        hook.after(b, plan, i)?;
        i += 1;
    }
    Ok(stats)
}

/// The ledger's instrumentation: barriers around the nodes of some categories (`Observe`), and
/// extra dispatches of them into scratch (`Replay`).
pub struct Instrument {
    categories: CategorySet,
    times: u32,
    pub replays: u64,
    /// Time inside the watched nodes, from the barrier before each to the barrier after it
    /// (replays excluded): [`tally_ledger::subject::RunOutcome::in_node_ms`].
    pub in_node_ms: f64,
    start: Option<Instant>,
}

impl Instrument {
    pub fn new(mode: &RunMode) -> Instrument {
        let (categories, times) = match mode {
            RunMode::Plain => (CategorySet::new(), 0),
            RunMode::Observe(c) => (c.clone(), 0),
            RunMode::Replay { categories, times } => (categories.clone(), *times),
        };
        Instrument {
            categories,
            times,
            replays: 0,
            in_node_ms: 0.0,
            start: None,
        }
    }
    fn watched(&self, plan: &Plan, i: usize) -> bool {
        self.categories.contains(&plan.nodes[i].category)
    }
}

impl Hook for Instrument {
    fn before(&mut self, b: &mut dyn Backend, plan: &Plan, i: usize) -> Result<(), EngineError> {
        if self.watched(plan, i) {
            b.barrier()?;
            self.start = Some(Instant::now());
        }
        Ok(())
    }
    fn after(&mut self, b: &mut dyn Backend, plan: &Plan, i: usize) -> Result<(), EngineError> {
        if self.watched(plan, i) {
            b.barrier()?;
            if let Some(t) = self.start.take() {
                self.in_node_ms += t.elapsed().as_secs_f64() * 1e3;
            }
            for _ in 0..self.times {
                b.dispatch(plan, i, Target::Scratch)?;
                b.barrier()?;
                self.replays += 1;
            }
        }
        Ok(())
    }
}

/// Per-node wall time with a barrier on each side (an upper bound: no overlap with neighbours).
#[derive(Default)]
pub struct Probe {
    start: Option<Instant>,
    /// (node index, milliseconds), in execution order.
    pub times_ms: Vec<(usize, f64)>,
}

impl Hook for Probe {
    fn before(&mut self, b: &mut dyn Backend, _plan: &Plan, _i: usize) -> Result<(), EngineError> {
        b.barrier()?;
        self.start = Some(Instant::now());
        Ok(())
    }
    fn after(&mut self, b: &mut dyn Backend, _plan: &Plan, i: usize) -> Result<(), EngineError> {
        b.barrier()?;
        if let Some(s) = self.start.take() {
            self.times_ms.push((i, s.elapsed().as_secs_f64() * 1e3));
        }
        Ok(())
    }
}

impl Probe {
    /// Milliseconds per category.
    pub fn by_category(&self, plan: &Plan) -> Vec<(Category, f64)> {
        let mut out: Vec<(Category, f64)> = Vec::new();
        for &(i, ms) in &self.times_ms {
            let c = plan.nodes[i].category;
            match out.iter_mut().find(|(k, _)| *k == c) {
                Some((_, t)) => *t += ms,
                None => out.push((c, ms)),
            }
        }
        out
    }
}

/// Reads views after chosen nodes (e.g. each layer's residual stream, or the router's choices).
pub struct Capture {
    /// (node index, view to read after it, label).
    pub points: Vec<(usize, View, String)>,
    pub values: Vec<(String, Vec<f32>)>,
}

impl Capture {
    /// Captures every layer's output rows (as the plan marks them).
    pub fn layer_outputs(plan: &Plan) -> Capture {
        Capture {
            points: plan
                .layer_outputs
                .iter()
                .enumerate()
                .map(|(l, (i, v))| (*i, *v, format!("hidden.{}", l + 1)))
                .collect(),
            values: Vec::new(),
        }
    }
}

impl Capture {
    /// Captures every top-k node's expert ids (output 0, labelled `"{node}:ids"`); with `all`
    /// also its weights (`"{node}:weights"`) and router logits (`"{node}:logits"`).
    pub fn topk(plan: &Plan, all: bool) -> Capture {
        let mut points = Vec::new();
        for (i, n) in plan.nodes.iter().enumerate() {
            if matches!(n.op, Op::TopK { .. }) {
                points.push((i, n.outputs[0], format!("{i}:ids")));
                if all {
                    points.push((i, n.outputs[1], format!("{i}:weights")));
                    points.push((i, n.inputs[0], format!("{i}:logits")));
                }
            }
        }
        Capture {
            points,
            values: Vec::new(),
        }
    }
}

impl Hook for Capture {
    fn after(&mut self, b: &mut dyn Backend, plan: &Plan, i: usize) -> Result<(), EngineError> {
        let mut k = 0;
        while k < self.points.len() {
            if self.points[k].0 == i {
                b.barrier()?;
                let v = b.read(plan, self.points[k].1)?;
                self.values.push((self.points[k].2.clone(), v));
            }
            k += 1;
        }
        Ok(())
    }
}

/// Two hooks in sequence.
pub struct Both<'a>(pub &'a mut dyn Hook, pub &'a mut dyn Hook);

impl Hook for Both<'_> {
    fn before(&mut self, b: &mut dyn Backend, plan: &Plan, i: usize) -> Result<(), EngineError> {
        self.0.before(b, plan, i)?;
        self.1.before(b, plan, i)
    }
    fn after(&mut self, b: &mut dyn Backend, plan: &Plan, i: usize) -> Result<(), EngineError> {
        self.0.after(b, plan, i)?;
        self.1.after(b, plan, i)
    }
}
