//! The narrow interface every backend implements. Backends execute plan nodes; they never decide
//! what the model computes.

use tally_model::{Plan, View};

use crate::EngineError;
use crate::sample::SampleStep;

/// How much of one persistent state buffer a snapshot keeps: its first `bytes` (a KV cache keeps
/// only the rows of the positions filled so far; conv and recurrent states keep everything).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateExtent {
    pub name: String,
    pub bytes: usize,
}

/// Where a dispatch writes its outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The plan's own buffers (a normal run).
    Real,
    /// Scratch buffers of the same shapes: an in-graph replay that must not change real outputs.
    Scratch,
}

/// What a kept graph holds against what its capture launched into it: the probe that a graph
/// run did all of the plan's work (a launch that never reached the capture, or a node that
/// launched nothing, shows here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphCount {
    /// Plan nodes dispatched while capturing.
    pub dispatches: u64,
    /// Of those, nodes that launched nothing at all.
    pub silent: u64,
    /// Kernel launches the dispatches made (the engine's own kernels).
    pub launches: u64,
    /// Library calls (cuBLAS) made into the capture; each adds kernels of its own.
    pub library_calls: u64,
    /// Kernel nodes the captured graph holds.
    pub kernel_nodes: u64,
}

impl GraphCount {
    /// Work the graph lacks, in dispatches: launches that are not among its kernel nodes, plus
    /// nodes that launched nothing (0 when the graph holds every launch). Without library calls
    /// the counts must be equal: extra kernel nodes count too.
    pub fn missing(&self) -> u64 {
        let short = (self.launches + self.library_calls).saturating_sub(self.kernel_nodes);
        let extra = if self.library_calls == 0 {
            self.kernel_nodes.saturating_sub(self.launches)
        } else {
            0
        };
        short + extra + self.silent
    }
}

pub trait Backend {
    /// `cpu` or `cuda`.
    fn name(&self) -> &'static str;

    /// What it runs on (CPU model and threads, or GPU name).
    fn device(&self) -> String;

    /// Threads used (CPU backends).
    fn threads(&self) -> Option<usize> {
        None
    }

    /// Makes the plan's buffers exist: activation buffers for this plan, state buffers by name
    /// (kept across plans, created zeroed when missing).
    fn prepare(&mut self, plan: &Plan) -> Result<(), EngineError>;

    /// Zeroes every persistent state buffer (a fresh sequence).
    fn reset_state(&mut self) -> Result<(), EngineError>;

    /// Runs node `index` of `plan` (possibly asynchronously).
    fn dispatch(&mut self, plan: &Plan, index: usize, target: Target) -> Result<(), EngineError>;

    /// Runs nodes `index..` of `plan` as one fused launch where the backend has one for them
    /// (the plain path only: see [`crate::exec::Hook::fuses`]); returns the nodes covered, or 0
    /// when nothing was launched (then node `index` is dispatched alone). A fused launch writes
    /// every output of the nodes it covers, equal to their own dispatches' bit for bit.
    fn dispatch_fused(&mut self, _plan: &Plan, _index: usize) -> Result<usize, EngineError> {
        Ok(0)
    }

    /// Waits until every dispatched node has completed.
    fn barrier(&mut self) -> Result<(), EngineError>;

    /// Copies a view of a buffer to the host (after a barrier).
    fn read(&mut self, plan: &Plan, view: View) -> Result<Vec<f32>, EngineError>;

    /// Copies an i32 view (token or expert ids) to the host.
    fn read_i32(&mut self, plan: &Plan, view: View) -> Result<Vec<i32>, EngineError>;

    /// Overwrites an i32 view (used by standalone timing to impose a routing).
    fn write_i32(&mut self, plan: &Plan, view: View, data: &[i32]) -> Result<(), EngineError>;

    /// Overwrites an f32 view (used by standalone timing to fill inputs).
    fn write(&mut self, plan: &Plan, view: View, data: &[f32]) -> Result<(), EngineError>;

    /// Device memory in use on the whole device, where the backend can tell (GPU backends):
    /// includes CUDA contexts and any other engine in the process.
    fn memory_in_use(&self) -> Option<u64> {
        None
    }

    /// The most device memory tally's own allocations have held in this process (GPU backends).
    fn memory_peak(&self) -> Option<u64> {
        None
    }

    /// The backend's switches in effect, `name=value` (recorded in every measurement).
    fn options(&self) -> Vec<String> {
        Vec::new()
    }

    /// The counts of the kept graph of `plan` (see [`GraphCount`]), if the backend holds one.
    fn graph_count(&self, _plan: &Plan) -> Option<GraphCount> {
        None
    }

    /// Fills every activation buffer and scratch or workspace memory with NaN (state, token ids
    /// and the position are left alone), so an output that a kernel forgets to write shows in a
    /// check. Backends whose dispatches poison their own outputs (the CPU) do nothing.
    fn poison(&mut self) -> Result<(), EngineError> {
        Ok(())
    }

    /// Launches the kept graph of `plan` if the backend holds one; `false` if it does not. A
    /// plan holds no position (the session writes it into the plan's position buffer), so one
    /// kept graph serves every position.
    fn graph_launch(&mut self, _plan: &Plan) -> Result<bool, EngineError> {
        Ok(false)
    }

    /// Starts capturing the dispatches of `plan` into a graph; `false` if graphs are unsupported
    /// (or turned off for this plan).
    fn capture_begin(&mut self, _plan: &Plan) -> Result<bool, EngineError> {
        Ok(false)
    }

    /// Ends the capture started by `capture_begin`: with `keep`, keeps the graph and launches it
    /// once; without (a dispatch failed), throws it away unlaunched.
    fn capture_end(&mut self, _plan: &Plan, _keep: bool) -> Result<(), EngineError> {
        Ok(())
    }

    /// Chooses the next token from `plan`'s logits after its dispatches (see [`crate::sample`]
    /// for the procedure). The default reads the logits and samples on the host; a GPU backend
    /// samples on the device and downloads only the id.
    fn sample(&mut self, plan: &Plan, step: &SampleStep<'_>) -> Result<u32, EngineError> {
        self.barrier()?;
        let logits = self.read(plan, plan.logits)?;
        Ok(crate::sample::sample_logits(&logits, step))
    }

    /// The greedy token after each row of `plan`'s logits view (all its rows: one per token of
    /// a verification plan), after its dispatches: [`crate::sample::argmax`] of each row (largest
    /// value, lowest id on ties, NaN below everything). The default reads the logits and takes
    /// the argmax on the host; a GPU backend takes it on the device and downloads only the ids.
    fn argmax_rows(&mut self, plan: &Plan) -> Result<Vec<u32>, EngineError> {
        self.barrier()?;
        let logits = self.read(plan, plan.logits)?;
        let vocab = plan.logits.cols.max(1);
        Ok(logits.chunks(vocab).map(crate::sample::argmax).collect())
    }

    /// Copies the leading `bytes` of each named state buffer into snapshot `slot` (replacing
    /// what the slot held); returns the bytes the slot now holds. The buffers must exist (a plan
    /// using them was prepared).
    fn save_state(&mut self, _slot: u64, _extents: &[StateExtent]) -> Result<usize, EngineError> {
        Err(EngineError::Unsupported(format!(
            "the {} backend keeps no state snapshots",
            self.name()
        )))
    }

    /// Copies snapshot `slot` back into the live state buffers (bytes past each saved extent are
    /// left as they are: a KV cache's rows past the saved positions are written before read).
    fn restore_state(&mut self, _slot: u64) -> Result<(), EngineError> {
        Err(EngineError::Unsupported(format!(
            "the {} backend keeps no state snapshots",
            self.name()
        )))
    }

    /// Frees snapshot `slot` (nothing if it does not exist).
    fn drop_state(&mut self, _slot: u64) {}

    /// Keeps, from now on, the state after each token of every batch of 2..=`max_tokens`
    /// tokens for the named conv and recurrent state buffers (a speculative verification's
    /// rollback points; see [`Backend::restore_token_states`]). False (the default) when the
    /// backend does not: the caller saves and recomputes instead.
    fn enable_token_states(
        &mut self,
        _extents: &[StateExtent],
        _max_tokens: usize,
    ) -> Result<bool, EngineError> {
        Ok(false)
    }

    /// Puts the states after token `index` of the last batch (of `batch` tokens) back into the
    /// live buffers. False when they were not kept (not enabled, or the batch too long).
    fn restore_token_states(&mut self, _index: usize, _batch: usize) -> Result<bool, EngineError> {
        Ok(false)
    }
}

/// A boxed backend is a backend (so the CLI can choose one at run time).
impl<B: Backend + ?Sized> Backend for Box<B> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn device(&self) -> String {
        (**self).device()
    }
    fn threads(&self) -> Option<usize> {
        (**self).threads()
    }
    fn prepare(&mut self, plan: &Plan) -> Result<(), EngineError> {
        (**self).prepare(plan)
    }
    fn reset_state(&mut self) -> Result<(), EngineError> {
        (**self).reset_state()
    }
    fn dispatch(&mut self, plan: &Plan, index: usize, target: Target) -> Result<(), EngineError> {
        (**self).dispatch(plan, index, target)
    }
    fn dispatch_fused(&mut self, plan: &Plan, index: usize) -> Result<usize, EngineError> {
        (**self).dispatch_fused(plan, index)
    }
    fn barrier(&mut self) -> Result<(), EngineError> {
        (**self).barrier()
    }
    fn read(&mut self, plan: &Plan, view: View) -> Result<Vec<f32>, EngineError> {
        (**self).read(plan, view)
    }
    fn read_i32(&mut self, plan: &Plan, view: View) -> Result<Vec<i32>, EngineError> {
        (**self).read_i32(plan, view)
    }
    fn write_i32(&mut self, plan: &Plan, view: View, data: &[i32]) -> Result<(), EngineError> {
        (**self).write_i32(plan, view, data)
    }
    fn write(&mut self, plan: &Plan, view: View, data: &[f32]) -> Result<(), EngineError> {
        (**self).write(plan, view, data)
    }
    fn graph_launch(&mut self, plan: &Plan) -> Result<bool, EngineError> {
        (**self).graph_launch(plan)
    }
    fn memory_in_use(&self) -> Option<u64> {
        (**self).memory_in_use()
    }
    fn options(&self) -> Vec<String> {
        (**self).options()
    }
    fn graph_count(&self, plan: &Plan) -> Option<GraphCount> {
        (**self).graph_count(plan)
    }
    fn poison(&mut self) -> Result<(), EngineError> {
        (**self).poison()
    }
    fn memory_peak(&self) -> Option<u64> {
        (**self).memory_peak()
    }
    fn capture_begin(&mut self, plan: &Plan) -> Result<bool, EngineError> {
        (**self).capture_begin(plan)
    }
    fn capture_end(&mut self, plan: &Plan, keep: bool) -> Result<(), EngineError> {
        (**self).capture_end(plan, keep)
    }
    fn sample(&mut self, plan: &Plan, step: &SampleStep<'_>) -> Result<u32, EngineError> {
        (**self).sample(plan, step)
    }
    fn argmax_rows(&mut self, plan: &Plan) -> Result<Vec<u32>, EngineError> {
        (**self).argmax_rows(plan)
    }
    fn save_state(&mut self, slot: u64, extents: &[StateExtent]) -> Result<usize, EngineError> {
        (**self).save_state(slot, extents)
    }
    fn restore_state(&mut self, slot: u64) -> Result<(), EngineError> {
        (**self).restore_state(slot)
    }
    fn drop_state(&mut self, slot: u64) {
        (**self).drop_state(slot)
    }
    fn enable_token_states(
        &mut self,
        extents: &[StateExtent],
        max_tokens: usize,
    ) -> Result<bool, EngineError> {
        (**self).enable_token_states(extents, max_tokens)
    }
    fn restore_token_states(&mut self, index: usize, batch: usize) -> Result<bool, EngineError> {
        (**self).restore_token_states(index, batch)
    }
}

/// Opens a backend by name: `cpu` (with `threads`, 0 = one per core) or `cuda`.
pub fn open(
    name: &str,
    model: std::sync::Arc<tally_model::Model>,
    threads: usize,
) -> Result<Box<dyn Backend>, EngineError> {
    match name {
        "cpu" => Ok(Box::new(crate::cpu::CpuBackend::new(model, threads)?)),
        "cuda" => Ok(Box::new(crate::cuda::CudaBackend::new(model)?)),
        other => Err(EngineError::Unsupported(format!(
            "unknown backend `{other}` (choose cpu or cuda)"
        ))),
    }
}
