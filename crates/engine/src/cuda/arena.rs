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

fn shapes_of(plan: &Plan) -> impl Iterator<Item = Shape> + '_ {
    plan.buffers.iter().map(|b| Shape {
        rows: b.rows,
        cols: b.cols,
        dtype: b.dtype,
        name: b.name.clone(),
    })
}

/// One plan's own buffers (state buffers are shared by name across plans).
struct BufSet<B> {
    /// Unique for the arena's lifetime: what a captured graph of this plan is keyed by.
    id: u64,
    shapes: Vec<Shape>,
    kinds: Vec<BufKind>,
    bufs: Vec<Slot<B>>,
    /// Bytes of its own buffers.
    bytes: usize,
    /// When it was last selected (larger is later).
    used: u64,
}

impl<B> BufSet<B> {
    fn is(&self, plan: &Plan) -> bool {
        // Compared in place, without building shapes: decode asks once a token.
        self.shapes.len() == plan.buffers.len()
            && self.shapes.iter().zip(&plan.buffers).all(|(s, b)| {
                s.rows == b.rows && s.cols == b.cols && s.dtype == b.dtype && s.name == b.name
            })
    }
}

/// Bytes of other plans' buffers kept beside the current plan's by default: decode (1 token),
/// speculative verification (k + 1) and the recompute after a rejection alternate every step,
/// and rebuilding their buffers (and dropping their captured graphs) on each switch cost more
/// than the step itself. A long prompt's batch plan is far larger than this and is never kept
/// beside another large one.
pub const RETAIN_BYTES: usize = 256 << 20;

/// Most other plans kept beside the current one (each may also hold a captured graph).
pub const RETAIN_PLANS: usize = 6;

/// What [`Arena::rebuild`] did to the buffers that captured graphs point at.
#[derive(Debug, Default, PartialEq)]
pub struct Rebuilt {
    /// Plans (by set id) whose buffers were freed.
    pub evicted: Vec<u64>,
    /// A state buffer changed size and moved: every captured graph is stale.
    pub state_moved: bool,
}

pub struct Arena<B = DevBuf> {
    sets: Vec<BufSet<B>>,
    /// Index into `sets` of the prepared plan's buffers.
    current: Option<usize>,
    next_id: u64,
    clock: u64,
    /// Bytes of other plans' buffers kept beside the current plan's.
    pub retain_bytes: usize,
    pub state: HashMap<String, B>,
    /// Replay scratch by output slot (None while being replaced).
    pub scratch: Vec<Option<B>>,
    /// Workspace for kernels that need one (delta rule, MoE routing, flash decoding, cuBLAS).
    pub work: Option<B>,
}

impl<B> Default for Arena<B> {
    fn default() -> Self {
        Arena {
            sets: Vec::new(),
            current: None,
            next_id: 0,
            clock: 0,
            retain_bytes: RETAIN_BYTES,
            state: HashMap::new(),
            scratch: Vec::new(),
            work: None,
        }
    }
}

impl<B: Buffer> Arena<B> {
    /// The prepared plan's buffers, by plan buffer index.
    pub fn bufs(&self) -> &[Slot<B>] {
        self.current.map_or(&[], |i| &self.sets[i].bufs)
    }

    /// What each buffer of the prepared plan holds.
    pub fn kinds(&self) -> &[BufKind] {
        self.current.map_or(&[], |i| &self.sets[i].kinds)
    }

    /// The id of the prepared plan's buffer set (captured graphs are keyed by it).
    pub fn current_id(&self) -> Option<u64> {
        self.current.map(|i| self.sets[i].id)
    }

    /// Number of plans whose buffers are held.
    #[cfg(test)]
    pub fn plans_held(&self) -> usize {
        self.sets.len()
    }

    /// Makes `plan`'s buffers the prepared ones if they are held; false if they must be built.
    pub fn select(&mut self, plan: &Plan) -> bool {
        let found = self
            .current
            .filter(|&i| self.sets[i].is(plan))
            .or_else(|| self.sets.iter().position(|s| s.is(plan)));
        if let Some(i) = found {
            self.clock += 1;
            self.sets[i].used = self.clock;
            self.current = Some(i);
        }
        found.is_some()
    }

    /// Whether `plan`'s buffers are the prepared ones.
    pub fn holds(&self, plan: &Plan) -> bool {
        self.current.is_some_and(|i| self.sets[i].is(plan))
    }

    /// Makes `plan`'s buffers and prepares them. Before anything new is allocated, other plans'
    /// buffers are freed, least recently used first, until at most `retain_bytes` of them
    /// remain (all of them when a state buffer changes size), and any state buffer whose size
    /// changes is freed: a long prompt's batch plans never hold device memory beside each other.
    /// `fresh` is called on every newly made state buffer (to zero it).
    pub fn rebuild(
        &mut self,
        plan: &Plan,
        alloc: Alloc<'_, B>,
        fresh: &mut dyn FnMut(&B) -> Result<(), EngineError>,
    ) -> Result<Rebuilt, EngineError> {
        let mut out = Rebuilt::default();
        for b in &plan.buffers {
            let bytes = b.elems() * b.dtype.size_bytes();
            if b.kind == BufKind::State
                && self.state.get(&b.name).is_some_and(|s| s.bytes() != bytes)
            {
                self.state.remove(&b.name);
                out.state_moved = true;
            }
        }
        self.current = None;
        let keep = if out.state_moved {
            0
        } else {
            self.retain_bytes
        };
        self.sets.sort_by_key(|s| std::cmp::Reverse(s.used));
        let mut kept = 0;
        let mut i = 0;
        while i < self.sets.len() {
            if i < RETAIN_PLANS && kept + self.sets[i].bytes <= keep {
                kept += self.sets[i].bytes;
                i += 1;
            } else {
                out.evicted.push(self.sets.remove(i).id);
            }
        }
        let mut bufs = Vec::with_capacity(plan.buffers.len());
        let mut own = 0;
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
                own += bytes;
            }
        }
        self.clock += 1;
        self.next_id += 1;
        self.sets.push(BufSet {
            id: self.next_id,
            shapes: shapes_of(plan).collect(),
            kinds: plan.buffers.iter().map(|b| b.kind).collect(),
            bufs,
            bytes: own,
            used: self.clock,
        });
        self.current = Some(self.sets.len() - 1);
        Ok(out)
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
            hidden: None,
            hidden_in: None,
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
        let mut arena: Arena<Fake> = Arena {
            retain_bytes: 0,
            ..Arena::default()
        };
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

    #[test]
    fn small_plans_keep_their_buffers_and_a_large_one_evicts_them_first() {
        let live = Rc::new((Cell::new(0usize), Cell::new(0usize)));
        let l = live.clone();
        let allocs = Rc::new(Cell::new(0usize));
        let a = allocs.clone();
        let mut alloc = move |bytes: usize, _: &str| -> Result<Fake, EngineError> {
            a.set(a.get() + 1);
            l.0.set(l.0.get() + bytes);
            l.1.set(l.1.get().max(l.0.get()));
            Ok(Fake {
                bytes,
                live: l.clone(),
            })
        };
        let own = |p: &Plan| 2 * p.n_tokens * 256 * 4;
        let (one, four, big) = (plan(1, 64), plan(4, 64), plan(4096, 64));
        let mut arena: Arena<Fake> = Arena {
            retain_bytes: own(&four),
            ..Arena::default()
        };
        fn ok(_: &Fake) -> Result<(), EngineError> {
            Ok(())
        }
        assert!(!arena.select(&one));
        let r = arena.rebuild(&one, &mut alloc, &mut ok).expect("one");
        assert_eq!(r, Rebuilt::default());
        let id_one = arena.current_id().expect("prepared");
        let r = arena.rebuild(&four, &mut alloc, &mut ok).expect("four");
        assert_eq!(r, Rebuilt::default());
        let id_four = arena.current_id().expect("prepared");
        assert_ne!(id_one, id_four);
        // Decode and verification alternate without allocating, and keep their ids.
        let before = allocs.get();
        for _ in 0..3 {
            assert!(arena.select(&one) && arena.holds(&one) && !arena.holds(&four));
            assert_eq!(arena.current_id(), Some(id_one));
            assert!(arena.select(&four) && arena.holds(&four));
            assert_eq!(arena.current_id(), Some(id_four));
        }
        assert_eq!(allocs.get(), before);
        assert_eq!(arena.plans_held(), 2);
        // A batch plan: other plans' buffers beyond `retain_bytes` are freed before it is made,
        // least recently used first, so the peak is the new plan plus at most that much.
        let r = arena.rebuild(&big, &mut alloc, &mut ok).expect("big");
        assert_eq!(r.evicted, vec![id_one]);
        assert!(!r.state_moved);
        assert_eq!(live.1.get(), own(&big) + own(&four) + 64 * 256 * 4);
        assert_eq!(arena.plans_held(), 2);
        assert!(arena.select(&four) && !arena.select(&one));
        // A state that changes size moves: every plan's buffers go, and the caller is told.
        arena.rebuild(&one, &mut alloc, &mut ok).expect("one again");
        let r = arena
            .rebuild(&plan(1, 128), &mut alloc, &mut ok)
            .expect("ctx");
        assert!(r.state_moved);
        assert_eq!(r.evicted.len(), 2);
        assert_eq!(live.0.get(), own(&one) + 128 * 256 * 4);
        assert_eq!(arena.plans_held(), 1);
    }
}
