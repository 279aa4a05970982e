//! `TALLY_STEP_TRACE=1`: where a decode step's wall time goes. Every relaunch of the one-token
//! plan's graph is bracketed by two CUDA events; the interval between consecutive relaunches
//! (host clock) is the step's wall time, the events' interval its time on the device. Their
//! difference is the time the device waited for the host: the sampler's download, the writes
//! of the next token and position, the host's own work. Printed to stderr when the backend
//! closes (a diagnostic: nothing reads it back). Before each relaunch it waits for the previous
//! step's end event, which a decode loop has already waited for (it read the sampled token);
//! a caller that queues steps ahead without reading them would be slowed by the trace.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, sys};
use tally_ledger::stats::median;

use super::mem::cuda_err;
use crate::EngineError;

pub(crate) struct StepTrace {
    start: CudaEvent,
    end: CudaEvent,
    /// The events bracket a launch whose interval has not been read yet.
    pending: bool,
    last: Option<Instant>,
    wall_ms: Vec<f64>,
    device_ms: Vec<f64>,
}

impl StepTrace {
    /// A trace when `TALLY_STEP_TRACE` is set (to anything but `0`).
    pub(crate) fn from_env(ctx: &Arc<CudaContext>) -> Result<Option<StepTrace>, EngineError> {
        if std::env::var("TALLY_STEP_TRACE").map_or(true, |v| v.is_empty() || v == "0") {
            return Ok(None);
        }
        let ev = || {
            ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(cuda_err)
        };
        Ok(Some(StepTrace {
            start: ev()?,
            end: ev()?,
            pending: false,
            last: None,
            wall_ms: Vec::new(),
            device_ms: Vec::new(),
        }))
    }

    /// Before a relaunch of the decode graph on `stream`.
    pub(crate) fn before(&mut self, stream: &CudaStream) -> Result<(), EngineError> {
        let now = Instant::now();
        if self.pending {
            self.end.synchronize().map_err(cuda_err)?;
            let ms = self.start.elapsed_ms(&self.end).map_err(cuda_err)?;
            self.device_ms.push(f64::from(ms));
            if let Some(t) = self.last {
                self.wall_ms.push(now.duration_since(t).as_secs_f64() * 1e3);
            }
        }
        self.last = Some(now);
        self.start.record(stream).map_err(cuda_err)
    }

    /// After the relaunch.
    pub(crate) fn after(&mut self, stream: &CudaStream) -> Result<(), EngineError> {
        self.end.record(stream).map_err(cuda_err)?;
        self.pending = true;
        Ok(())
    }

    /// Medians of the steps seen (none: `None`).
    pub(crate) fn summary(&self) -> Option<String> {
        let wall = median(&self.wall_ms)?;
        let dev = median(&self.device_ms)?;
        Some(format!(
            "step trace: {} decode steps, median wall {wall:.3} ms, on the device {dev:.3} ms, \
             the device waiting for the host {:.3} ms ({:.1}% of the step)",
            self.wall_ms.len(),
            wall - dev,
            100.0 * (wall - dev) / wall
        ))
    }
}
