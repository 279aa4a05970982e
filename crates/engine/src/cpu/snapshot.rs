//! Saved sequence states on the CPU: copies of the leading elements of each state buffer.

use crate::EngineError;
use crate::backend::StateExtent;

use super::CpuBackend;

impl CpuBackend {
    pub(crate) fn snapshot_save(
        &mut self,
        slot: u64,
        extents: &[StateExtent],
    ) -> Result<usize, EngineError> {
        let mut saved = Vec::with_capacity(extents.len());
        let mut total = 0;
        for e in extents {
            let live = self
                .state
                .get(&e.name)
                .ok_or_else(|| EngineError::Internal(format!("state {} missing", e.name)))?;
            let n = e.bytes / 4;
            if n > live.len() || e.bytes % 4 != 0 {
                return Err(EngineError::Internal(format!(
                    "snapshot of {} bytes of {} ({} floats)",
                    e.bytes,
                    e.name,
                    live.len()
                )));
            }
            saved.push((e.name.clone(), live[..n].to_vec()));
            total += e.bytes;
        }
        self.snapshots.insert(slot, saved);
        Ok(total)
    }

    pub(crate) fn snapshot_restore(&mut self, slot: u64) -> Result<(), EngineError> {
        let saved = self
            .snapshots
            .get(&slot)
            .ok_or_else(|| EngineError::Internal(format!("no saved state in slot {slot}")))?;
        for (name, copy) in saved {
            let live = self
                .state
                .get_mut(name)
                .ok_or_else(|| EngineError::Internal(format!("state {name} missing")))?;
            if copy.len() > live.len() {
                return Err(EngineError::Internal(format!(
                    "saved {} floats of {name} into {}",
                    copy.len(),
                    live.len()
                )));
            }
            live[..copy.len()].copy_from_slice(copy);
        }
        Ok(())
    }
}
