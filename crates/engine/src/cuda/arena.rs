//! The device buffers of the prepared plan: its own activation buffers, the persistent state
//! (KV caches, conv and recurrent states, by name, kept across plans), the replay scratch and the
//! kernels' workspace. Generic over the buffer so the allocation order is testable without a GPU.

use std::collections::HashMap;

use tally_model::{BufKind, DType, Plan};

use super::mem::DevBuf;
use crate::EngineError;

/// A device allocation of some size.
pub trait Buffer {
    fn bytes(&self) -> usize;
}

impl Buffer for DevBuf {
    fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Allocates `bytes` for the named purpose.
pub type Alloc<'a, B> = &'a mut dyn FnMut(usize, &str) -> Result<B, EngineError>;

pub enum Slot<B> {
    Own(B),
    State(String),
}

/// What a plan buffer is, for deciding whether the next plan can keep it.
#[derive(PartialEq)]
struct Shape {
    rows: usize,
    cols: usize,
    dtype: DType,
    name: String,
}

pub struct Arena<B = DevBuf> {
    pub bufs: Vec<Slot<B>>,
    shapes: Vec<Shape>,
    /// What each buffer of the prepared plan holds.
    pub kinds: Vec<BufKind>,
    pub state: HashMap<String, B>,
    /// Replay scratch by output slot (None while being replaced).
    pub scratch: Vec<Option<B>>,
    /// Workspace for kernels that need one (delta rule, MoE routing, flash decoding, cuBLAS).
    pub work: Option<B>,
}

impl<B> Default for Arena<B> {
    fn default() -> Self {
        Arena {
            bufs: Vec::new(),
            shapes: Vec::new(),
            kinds: Vec::new(),
            state: HashMap::new(),
            scratch: Vec::new(),
            work: None,
        }
    }
}

impl<B: Buffer> Arena<B> {
    /// Whether the buffers prepared are `plan`'s (compared in place: decode asks once a token).
    pub fn holds(&self, plan: &Plan) -> bool {
        self.bufs.len() == plan.buffers.len()
            && self.shapes.len() == plan.buffers.len()
            && self.shapes.iter().zip(&plan.buffers).all(|(s, b)| {
                s.rows == b.rows && s.cols == b.cols && s.dtype == b.dtype && s.name == b.name
            })
    }

    /// Makes `plan`'s buffers. The previous plan's own buffers, and any state buffer whose size
    /// changes, are freed before anything new is allocated, so the old and the new plan never
    /// hold device memory at the same time (chunked prefill switches plans). `fresh` is called
    /// on every newly made state buffer (to zero it).
    pub fn rebuild(
        &mut self,
        plan: &Plan,
        alloc: Alloc<'_, B>,
        fresh: &mut dyn FnMut(&B) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        self.bufs.clear();
        self.shapes.clear();
        self.kinds.clear();
        for b in &plan.buffers {
            let bytes = b.elems() * b.dtype.size_bytes();
            if b.kind == BufKind::State
                && self.state.get(&b.name).is_some_and(|s| s.bytes() != bytes)
            {
                self.state.remove(&b.name);
            }
        }
        let mut bufs = Vec::with_capacity(plan.buffers.len());
        for b in &plan.buffers {
            let bytes = b.elems() * b.dtype.size_bytes();
            if b.kind == BufKind::State {
                if !self.state.contains_key(&b.name) {
                    let buf = alloc(bytes, &b.name)?;
                    fresh(&buf)?;
                    self.state.insert(b.name.clone(), buf);
                }
                bufs.push(Slot::State(b.name.clone()));
            } else {
                bufs.push(Slot::Own(alloc(bytes, &b.name)?));
            }
        }
        self.bufs = bufs;
        self.shapes = plan
            .buffers
            .iter()
            .map(|b| Shape {
                rows: b.rows,
                cols: b.cols,
                dtype: b.dtype,
                name: b.name.clone(),
            })
            .collect();
        self.kinds = plan.buffers.iter().map(|b| b.kind).collect();
        Ok(())
    }

    /// Makes the workspace hold at least `bytes` (freeing the old one first); true if it moved.
    pub fn grow_work(&mut self, bytes: usize, alloc: Alloc<'_, B>) -> Result<bool, EngineError> {
        if self.work.as_ref().is_some_and(|w| w.bytes() >= bytes) {
            return Ok(false);
        }
        self.work = None;
        self.work = Some(alloc(bytes, "kernel workspace")?);
        Ok(true)
    }

    /// Scratch slot `slot` holding at least `bytes` (a smaller one is freed first).
    pub fn scratch_at(
        &mut self,
        slot: usize,
        bytes: usize,
        alloc: Alloc<'_, B>,
    ) -> Result<&B, EngineError> {
        while self.scratch.len() <= slot {
            self.scratch.push(None);
        }
        if self.scratch[slot]
            .as_ref()
            .is_none_or(|s| s.bytes() < bytes)
        {
            self.scratch[slot] = None;
            self.scratch[slot] = Some(alloc(bytes.max(1), "replay scratch")?);
        }
        self.scratch[slot]
            .as_ref()
            .ok_or_else(|| EngineError::Internal("replay scratch".into()))
    }
}

impl Arena<DevBuf> {
    /// The device address of scratch slot `slot` holding at least `bytes`.
    pub fn scratch(&mut self, slot: usize, bytes: usize) -> Result<u64, EngineError> {
        Ok(self.scratch_at(slot, bytes, &mut DevBuf::alloc)?.ptr)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use tally_model::{BufDesc, BufId, View};

    use super::*;

    /// A buffer that counts the bytes alive, and the most ever alive.
    struct Fake {
        bytes: usize,
        live: Rc<(Cell<usize>, Cell<usize>)>,
    }
    impl Buffer for Fake {
        fn bytes(&self) -> usize {
            self.bytes
        }
    }
    impl Drop for Fake {
        fn drop(&mut self) {
            self.live.0.set(self.live.0.get() - self.bytes);
        }
    }

    fn plan(rows: usize, state_rows: usize) -> Plan {
        let buf = |name: &str, rows: usize, kind: BufKind| BufDesc {
            name: name.into(),
            rows,
            cols: 256,
            dtype: DType::F32,
            kind,
            rows_per_token: 1,
        };
        let view = View {
            buf: BufId(0),
            row0: 0,
            rows: 1,
            col0: 0,
            cols: 1,
        };
        Plan {
            n_tokens: rows,
            max_ctx: state_rows,
            buffers: vec![
                buf("x", rows, BufKind::Activation),
                buf("y", rows, BufKind::Activation),
                buf("kv", state_rows, BufKind::State),
            ],
            nodes: Vec::new(),
            tokens: BufId(0),
            pos: BufId(0),
            logits: view,
            layer_outputs: Vec::new(),
        }
    }

    #[test]
    fn a_new_plan_frees_the_old_buffers_before_allocating() {
        let live = Rc::new((Cell::new(0usize), Cell::new(0usize)));
        let l = live.clone();
        let mut alloc = move |bytes: usize, _: &str| -> Result<Fake, EngineError> {
            l.0.set(l.0.get() + bytes);
            l.1.set(l.1.get().max(l.0.get()));
            Ok(Fake {
                bytes,
                live: l.clone(),
            })
        };
        let mut zeroed = 0;
        let mut arena: Arena<Fake> = Arena::default();
        let (big, small) = (plan(512, 64), plan(1, 64));
        let bytes = |p: &Plan| p.buffers.iter().map(|b| b.elems() * 4).sum::<usize>();
        arena
            .rebuild(&big, &mut alloc, &mut |_| {
                zeroed += 1;
                Ok(())
            })
            .expect("big");
        assert!(arena.holds(&big) && !arena.holds(&small));
        arena
            .rebuild(&small, &mut alloc, &mut |_| {
                zeroed += 1;
                Ok(())
            })
            .expect("small");
        arena
            .rebuild(&big, &mut alloc, &mut |_| {
                zeroed += 1;
                Ok(())
            })
            .expect("big again");
        // The state is kept (zeroed once), and the peak is one plan's buffers, never two.
        assert_eq!(zeroed, 1);
        assert_eq!(live.0.get(), bytes(&big));
        assert_eq!(live.1.get(), bytes(&big));
        // A state of another size is freed before its replacement is made.
        arena
            .rebuild(&plan(512, 128), &mut alloc, &mut |_| Ok(()))
            .expect("bigger state");
        assert_eq!(live.1.get(), bytes(&plan(512, 128)));
        // The workspace too.
        assert!(arena.grow_work(1 << 20, &mut alloc).expect("work"));
        assert!(!arena.grow_work(1 << 10, &mut alloc).expect("kept"));
        assert!(arena.grow_work(2 << 20, &mut alloc).expect("grown"));
        assert_eq!(live.1.get(), bytes(&plan(512, 128)) + (2 << 20));
    }
}
