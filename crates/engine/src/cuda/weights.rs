//! The model's weights on the device, bytes as in the file, and each prepared plan's nodes
//! resolved to them once: a launch indexes a table instead of hashing a name.

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
    /// Per plan resolved (by batch length, as the captured graphs are): each node's weights as
    /// indices into `list`.
    plans: HashMap<usize, Vec<[u32; 2]>>,
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

    fn find(&self, name: &str) -> Result<u32, EngineError> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| EngineError::Internal(format!("weight {name} not on the device")))
    }

    /// Resolves every node's weights of `plan` (once per batch length and node count).
    pub fn resolve(&mut self, plan: &Plan) -> Result<(), EngineError> {
        if self
            .plans
            .get(&plan.n_tokens)
            .is_some_and(|t| t.len() == plan.nodes.len())
        {
            return Ok(());
        }
        let mut table = Vec::with_capacity(plan.nodes.len());
        for node in &plan.nodes {
            let mut ids = [NONE; 2];
            for (slot, name) in ids.iter_mut().zip(&node.weights) {
                *slot = self.find(name)?;
            }
            if node.weights.len() > 2 {
                return Err(EngineError::Internal(format!(
                    "{} has {} weights; the table holds 2",
                    node.name,
                    node.weights.len()
                )));
            }
            table.push(ids);
        }
        self.plans.insert(plan.n_tokens, table);
        Ok(())
    }

    /// Weight `i` of node `index` of `plan`: from the plan's table when it was resolved (and the
    /// entry names the same tensor), else by name.
    pub fn of(&self, plan: &Plan, index: usize, i: usize) -> Result<&DevWeight, EngineError> {
        let name = plan.nodes[index].weights.get(i).ok_or_else(|| {
            EngineError::Internal(format!("{} has no weight {i}", plan.nodes[index].name))
        })?;
        let id = self
            .plans
            .get(&plan.n_tokens)
            .and_then(|t| t.get(index))
            .and_then(|ids| ids.get(i).copied())
            .filter(|&id| id != NONE && self.list[id as usize].name == *name);
        let id = match id {
            Some(id) => id,
            None => self.find(name)?,
        };
        Ok(&self.list[id as usize])
    }
}
