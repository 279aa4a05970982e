//! The model's weights on the device, bytes as in the file, and each prepared plan's nodes
//! resolved to them once: a launch indexes a table instead of hashing a name.
//!
//! Tables are keyed by the plan's identity, the id of its buffer set in the arena (what the
//! captured graphs are keyed by too), so plans of the same batch length (decode and the MTP
//! step are both one token) each keep their own, and a launch reads the prepared plan's table
//! with no name compared.

use std::collections::HashMap;

use tally_gguf::GgmlType;
use tally_model::{Model, Plan};

use super::mem::DevBuf;
use crate::EngineError;

/// A weight tensor on the device, bytes as in the file.
pub struct DevWeight {
    pub name: String,
    pub buf: DevBuf,
    pub ty: GgmlType,
    pub dims: Vec<u64>,
    pub row_bytes: usize,
}

impl DevWeight {
    /// Elements of the tensor.
    pub fn elems(&self) -> usize {
        self.dims.iter().product::<u64>() as usize
    }
}

/// No weight in this slot of a node.
const NONE: u32 = u32::MAX;

#[derive(Default)]
pub struct Weights {
    list: Vec<DevWeight>,
    by_name: HashMap<String, u32>,
    tables: Tables,
    /// Bytes of weights on the device.
    pub bytes: u64,
    /// Seconds spent uploading them.
    pub load_seconds: f64,
}

impl Weights {
    /// Uploads every tensor of the model's trunk (on `stream`, waiting for each); the MTP
    /// block's tensors wait for a plan that reads them ([`Weights::upload_missing`]).
    pub fn upload(
        model: &Model,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<Weights, EngineError> {
        let t0 = std::time::Instant::now();
        let mut w = Weights::default();
        for (name, _) in model.config.tensor_shapes() {
            w.upload_one(model, name, stream)?;
        }
        w.load_seconds = t0.elapsed().as_secs_f64();
        Ok(w)
    }

    fn upload_one(
        &mut self,
        model: &Model,
        name: String,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<(), EngineError> {
        let (info, bytes) = model.weight(&name)?;
        let buf = DevBuf::alloc(bytes.len(), &name)?;
        // Chunks keep the driver's staging of pageable memory bounded.
        for (i, chunk) in bytes.chunks(64 << 20).enumerate() {
            buf.upload_at(i * (64 << 20), chunk, stream)?;
        }
        self.bytes += bytes.len() as u64;
        let row_bytes = info.ty.row_bytes(info.dims[0])? as usize;
        self.by_name.insert(name.clone(), self.list.len() as u32);
        self.list.push(DevWeight {
            name,
            buf,
            ty: info.ty,
            dims: info.dims.clone(),
            row_bytes,
        });
        Ok(())
    }

    /// Uploads the tensors `plan` reads that are not on the device yet (the MTP block's, the
    /// first time an MTP step is prepared).
    pub fn upload_missing(
        &mut self,
        model: &Model,
        plan: &Plan,
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<(), EngineError> {
        for node in &plan.nodes {
            for name in &node.weights {
                if !self.by_name.contains_key(name) {
                    let t0 = std::time::Instant::now();
                    self.upload_one(model, name.clone(), stream)?;
                    self.load_seconds += t0.elapsed().as_secs_f64();
                }
            }
        }
        Ok(())
    }

    /// Resolves every node's weights of `plan`, whose buffers are the arena's set `set`, once
    /// per set, and makes its table the one launches read.
    pub fn resolve(&mut self, plan: &Plan, set: u64) -> Result<(), EngineError> {
        let by_name = &self.by_name;
        self.tables.resolve(plan, set, |name| {
            by_name
                .get(name)
                .copied()
                .ok_or_else(|| EngineError::Internal(format!("weight {name} not on the device")))
        })
    }

    /// Whether `plan`'s table for set `set` is built (every weight it names was on the device
    /// when it was).
    pub fn has_table(&self, plan: &Plan, set: u64) -> bool {
        self.tables
            .plans
            .get(&set)
            .is_some_and(|t| t.len() == plan.nodes.len())
    }

    /// Drops the table of a buffer set the arena freed.
    pub fn forget(&mut self, set: u64) {
        self.tables.forget(set);
    }

    /// Weight `i` of node `index` of the prepared plan (`plan`, resolved by
    /// [`Weights::resolve`] when it was prepared).
    pub fn of(&self, plan: &Plan, index: usize, i: usize) -> Result<&DevWeight, EngineError> {
        let node = &plan.nodes[index];
        let id = self.tables.id(index, i).ok_or_else(|| {
            EngineError::Internal(format!(
                "{} has no weight {i} in the prepared plan's table",
                node.name
            ))
        })?;
        let w = &self.list[id as usize];
        debug_assert_eq!(
            Some(&w.name),
            node.weights.get(i),
            "weight table of another plan"
        );
        Ok(w)
    }
}

/// Each resolved plan's nodes' weights as indices into the weight list, by the id of the
/// plan's buffer set in the arena, and which one is the prepared plan's.
#[derive(Default)]
struct Tables {
    plans: HashMap<u64, Vec<[u32; 2]>>,
    current: Option<u64>,
}

impl Tables {
    fn resolve(
        &mut self,
        plan: &Plan,
        set: u64,
        find: impl Fn(&str) -> Result<u32, EngineError>,
    ) -> Result<(), EngineError> {
        self.current = None;
        if self
            .plans
            .get(&set)
            .is_none_or(|t| t.len() != plan.nodes.len())
        {
            let mut table = Vec::with_capacity(plan.nodes.len());
            for node in &plan.nodes {
                if node.weights.len() > 2 {
                    return Err(EngineError::Internal(format!(
                        "{} has {} weights; the table holds 2",
                        node.name,
                        node.weights.len()
                    )));
                }
                let mut ids = [NONE; 2];
                for (slot, name) in ids.iter_mut().zip(&node.weights) {
                    *slot = find(name)?;
                }
                table.push(ids);
            }
            self.plans.insert(set, table);
        }
        self.current = Some(set);
        Ok(())
    }

    fn forget(&mut self, set: u64) {
        self.plans.remove(&set);
        if self.current == Some(set) {
            self.current = None;
        }
    }

    fn id(&self, index: usize, i: usize) -> Option<u32> {
        self.current
            .and_then(|set| self.plans.get(&set))
            .and_then(|t| t.get(index))
            .and_then(|ids| ids.get(i).copied())
            .filter(|&id| id != NONE)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::HashMap;

    use tally_model::synth::Preset;
    use tally_model::{PlanOptions, build_plan};

    use super::*;

    /// Two different one-token plans (decode and the MTP step are both one token) alternate, as
    /// they do at every speculative step: each keeps its own table, nothing is resolved again,
    /// and a launch reads the prepared plan's weights, not the other's. Keyed by batch length
    /// (before), the second plan replaced the first's table on every switch.
    #[test]
    fn plans_of_one_length_keep_their_own_tables() {
        let cfg = Preset::Tiny.config();
        let a = build_plan(&cfg, 1, 64, &PlanOptions::default()).expect("plan");
        let mut b = a.clone();
        let k = b
            .nodes
            .iter()
            .position(|n| n.weights.len() == 1 && n.weights[0].ends_with("attn_qkv.weight"))
            .expect("a qkv projection");
        b.nodes[k].weights[0] = "blk.0.ssm_out.weight".into();
        let mut names: HashMap<String, u32> = HashMap::new();
        for p in [&a, &b] {
            for n in &p.nodes {
                for w in &n.weights {
                    let id = names.len() as u32;
                    names.entry(w.clone()).or_insert(id);
                }
            }
        }
        let calls = Cell::new(0usize);
        let find = |name: &str| {
            calls.set(calls.get() + 1);
            names
                .get(name)
                .copied()
                .ok_or_else(|| EngineError::Internal(name.into()))
        };
        let mut t = Tables::default();
        t.resolve(&a, 7, find).expect("a");
        t.resolve(&b, 8, find).expect("b");
        let after_both = calls.get();
        assert!(after_both > 0);
        for _ in 0..3 {
            t.resolve(&a, 7, find).expect("a again");
            assert_eq!(t.id(k, 0), Some(names[&a.nodes[k].weights[0]]));
            t.resolve(&b, 8, find).expect("b again");
            assert_eq!(t.id(k, 0), Some(names["blk.0.ssm_out.weight"]));
        }
        assert_eq!(calls.get(), after_both, "a switch resolved names again");
        assert_eq!(t.plans.len(), 2);
        // A slot with no weight, and a forgotten (evicted) set, read as absent.
        let norm = a
            .nodes
            .iter()
            .position(|n| n.weights.is_empty())
            .expect("weightless");
        assert_eq!(t.id(norm, 0), None);
        t.forget(8);
        assert_eq!(t.id(k, 0), None, "the prepared set was evicted");
        assert_eq!(t.plans.len(), 1);
    }
}
