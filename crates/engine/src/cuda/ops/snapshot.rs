//! Saved sequence states on the device: device-to-device copies of the leading bytes of each
//! persistent state buffer into a slot, and back. A slot holds exactly the extents it was given
//! (a KV cache's filled rows, the whole conv and recurrent states), so its size is the state's
//! real extent, not the session's capacity.

use std::collections::HashMap;

use cudarc::driver::result;

use crate::EngineError;
use crate::backend::StateExtent;
use crate::cuda::CudaBackend;
use crate::cuda::mem::{DevBuf, cuda_err};

/// One saved extent: its copy (possibly larger, when reused) and the bytes saved.
pub struct Saved {
    buf: DevBuf,
    bytes: usize,
}

/// Slots of saved state: per slot, (buffer name, copy).
#[derive(Default)]
pub struct Snapshots {
    slots: HashMap<u64, Vec<(String, Saved)>>,
    /// Per-token states (`Backend::enable_token_states`): for each conv and recurrent state
    /// buffer by name, `max_tokens` copies of `bytes` each, which `conv_silu` and
    /// `delta_rule_step` fill with the state after each token of a 2..=max_tokens-token batch.
    tokens: HashMap<String, TokenStates>,
    max_tokens: usize,
}

/// One state buffer's per-token copies.
pub struct TokenStates {
    buf: DevBuf,
    bytes: usize,
}

impl Snapshots {
    pub fn remove(&mut self, slot: u64) {
        self.slots.remove(&slot);
    }
}

impl CudaBackend {
    /// The live state buffer `name` (it exists once a plan using it was prepared).
    fn live_state(&self, name: &str) -> Result<&DevBuf, EngineError> {
        self.arena
            .state
            .get(name)
            .ok_or_else(|| EngineError::Internal(format!("state {name} missing")))
    }

    /// Where a launch over `t` tokens whose state view starts at `view` writes its per-token
    /// states: (pointer to the copy of token 0 at the view's offset, floats between tokens), or
    /// (0, 0) when none is kept for this state or `t` is outside 2..=max_tokens.
    pub(crate) fn token_states_for(&self, view: u64, t: usize) -> (u64, i64) {
        let s = &self.snapshots;
        if t < 2 || t > s.max_tokens {
            return (0, 0);
        }
        for (name, live) in &self.arena.state {
            if view >= live.ptr && view < live.ptr + live.bytes as u64 {
                return match s.tokens.get(name) {
                    Some(ts) if live.bytes <= ts.bytes => {
                        (ts.buf.ptr + (view - live.ptr), (ts.bytes / 4) as i64)
                    }
                    _ => (0, 0),
                };
            }
        }
        (0, 0)
    }

    pub(crate) fn token_states_enable(
        &mut self,
        extents: &[StateExtent],
        max_tokens: usize,
    ) -> Result<bool, EngineError> {
        // Already kept for these buffers at this depth (every speculative generation asks):
        // nothing to do, and the captured graphs, which write them, stay.
        let same = self.snapshots.max_tokens == max_tokens
            && self.snapshots.tokens.len() == extents.len()
            && extents.iter().all(|e| {
                match (
                    self.snapshots.tokens.get(&e.name),
                    self.arena.state.get(&e.name),
                ) {
                    (Some(ts), Some(live)) => live.bytes <= ts.bytes,
                    _ => false,
                }
            });
        if same && max_tokens >= 2 {
            return Ok(true);
        }
        self.gpu.ctx.bind_to_thread().map_err(cuda_err)?;
        self.snapshots.tokens.clear();
        self.snapshots.max_tokens = 0;
        // Longer batches take the chunked delta rule, which keeps no per-token states: those
        // callers save, restore and recompute.
        if !(2..=super::delta::STEP_MAX_T).contains(&max_tokens) {
            return Ok(false);
        }
        for e in extents {
            let live = self.live_state(&e.name)?;
            // Whole buffers, so a state view anywhere in one has its copies.
            let bytes = live.bytes;
            let buf = DevBuf::alloc(bytes * max_tokens, "per-token sequence states")?;
            self.snapshots
                .tokens
                .insert(e.name.clone(), TokenStates { buf, bytes });
        }
        self.snapshots.max_tokens = max_tokens;
        // Graphs captured before hold launches without the copies.
        self.graphs.by_set.clear();
        Ok(true)
    }

    /// Copies the states after token `index` of the last 2..=max_tokens-token batch into the
    /// live buffers. False when that batch could not have written them (more tokens than
    /// enabled, or a state buffer larger than its copies).
    pub(crate) fn token_states_restore(
        &mut self,
        index: usize,
        batch: usize,
    ) -> Result<bool, EngineError> {
        let s = &self.snapshots;
        if s.tokens.is_empty() || batch < 2 || batch > s.max_tokens || index >= batch {
            return Ok(false);
        }
        self.gpu.ctx.bind_to_thread().map_err(cuda_err)?;
        let stream = self.cu_stream();
        for (name, ts) in &s.tokens {
            let live = self.live_state(name)?;
            if live.bytes > ts.bytes {
                return Ok(false);
            }
        }
        for (name, ts) in &s.tokens {
            let live = &self.arena.state[name];
            // SAFETY: the copy of token `index` lies inside the per-token buffer (index <
            // max_tokens copies of ts.bytes), the live buffer holds at least live.bytes <=
            // ts.bytes (checked above); the backend's stream orders it after the batch.
            unsafe {
                result::memcpy_dtod_async(
                    live.ptr,
                    ts.buf.ptr + (index * ts.bytes) as u64,
                    live.bytes,
                    stream,
                )
            }
            .map_err(cuda_err)?;
        }
        Ok(true)
    }
}

impl CudaBackend {
    pub(crate) fn snapshot_save(
        &mut self,
        slot: u64,
        extents: &[StateExtent],
    ) -> Result<usize, EngineError> {
        self.gpu.ctx.bind_to_thread().map_err(cuda_err)?;
        // A slot saved again (speculative decoding saves every step) reuses its copies when
        // they are large enough: allocating ~60 device buffers per save cost 3.6 ms a step on
        // the 35B file, half a decode step.
        let mut old: HashMap<String, DevBuf> = self
            .snapshots
            .slots
            .remove(&slot)
            .unwrap_or_default()
            .into_iter()
            .map(|(n, c)| (n, c.buf))
            .collect();
        // Keep the copies that fit; free the others before anything new is allocated.
        let mut reuse: HashMap<&str, DevBuf> = HashMap::new();
        for e in extents {
            if let Some(b) = old.remove(&e.name)
                && b.bytes >= e.bytes
                && b.bytes <= 2 * e.bytes.max(1)
            {
                reuse.insert(e.name.as_str(), b);
            }
        }
        drop(old);
        let stream = self.cu_stream();
        let mut saved = Vec::with_capacity(extents.len());
        let mut total = 0;
        for e in extents {
            let live = self.live_state(&e.name)?;
            if e.bytes > live.bytes {
                return Err(EngineError::Internal(format!(
                    "snapshot of {} bytes of {} ({} bytes)",
                    e.bytes, e.name, live.bytes
                )));
            }
            let copy = match reuse.remove(e.name.as_str()) {
                Some(b) => b,
                None => DevBuf::alloc(e.bytes, "saved sequence state")?,
            };
            if e.bytes > 0 {
                // SAFETY: both ranges lie in live allocations of at least `e.bytes` (checked
                // above); the stream is the backend's, synchronised below.
                unsafe { result::memcpy_dtod_async(copy.ptr, live.ptr, e.bytes, stream) }
                    .map_err(cuda_err)?;
            }
            total += e.bytes;
            saved.push((
                e.name.clone(),
                Saved {
                    buf: copy,
                    bytes: e.bytes,
                },
            ));
        }
        self.sync()?;
        self.snapshots.slots.insert(slot, saved);
        Ok(total)
    }

    pub(crate) fn snapshot_restore(&mut self, slot: u64) -> Result<(), EngineError> {
        self.gpu.ctx.bind_to_thread().map_err(cuda_err)?;
        let stream = self.cu_stream();
        let saved = self
            .snapshots
            .slots
            .get(&slot)
            .ok_or_else(|| EngineError::Internal(format!("no saved state in slot {slot}")))?;
        for (name, copy) in saved {
            let live = self.live_state(name)?;
            if copy.bytes > live.bytes || copy.bytes > copy.buf.bytes {
                return Err(EngineError::Internal(format!(
                    "saved {} bytes of {name} into {} bytes",
                    copy.bytes, live.bytes
                )));
            }
            if copy.bytes > 0 {
                // SAFETY: as in snapshot_save, with the direction reversed (the saved
                // allocation holds at least `copy.bytes`, the live one too, checked above).
                unsafe { result::memcpy_dtod_async(live.ptr, copy.buf.ptr, copy.bytes, stream) }
                    .map_err(cuda_err)?;
            }
        }
        self.sync()
    }
}
