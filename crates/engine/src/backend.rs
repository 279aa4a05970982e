//! The narrow interface every backend implements. Backends execute plan nodes; they never decide
//! what the model computes.

use tally_model::{Plan, View};

use crate::EngineError;

/// Where a dispatch writes its outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The plan's own buffers (a normal run).
    Real,
    /// Scratch buffers of the same shapes: an in-graph replay that must not change real outputs.
    Scratch,
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

    /// Writes the batch's token ids into the plan's token buffer.
    fn upload_tokens(&mut self, plan: &Plan, ids: &[u32]) -> Result<(), EngineError>;

    /// Runs node `index` of `plan` (possibly asynchronously).
    fn dispatch(&mut self, plan: &Plan, index: usize, target: Target) -> Result<(), EngineError>;

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
}
