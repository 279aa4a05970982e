//! Finding where a forward pass first produced a non-finite value.
//!
//! Checking every node's output costs a device-to-host copy per node, so runs check only the
//! logits; when those are not finite, the caller reruns the same batch with [`FirstNonFinite`]
//! to name the node. A NaN or Inf from finite inputs means the weights (or the file) are bad.

use tally_model::{DType, Plan};

use crate::EngineError;
use crate::backend::Backend;
use crate::exec::Hook;

/// The first non-finite output a pass produced.
#[derive(Debug, Clone, PartialEq)]
pub struct NonFinite {
    /// Index of the node in its plan.
    pub index: usize,
    /// The node's name (`blk.3.attn_q`).
    pub node: String,
    /// The offending value (NaN, inf or -inf).
    pub value: f32,
    /// Weights the node read, as GGUF tensor names: the likely culprits.
    pub weights: Vec<String>,
}

impl std::fmt::Display for NonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node {} (#{}) is the first to produce a non-finite value ({})",
            self.node, self.index, self.value
        )?;
        if !self.weights.is_empty() {
            write!(f, "; it reads {}", self.weights.join(", "))?;
        }
        Ok(())
    }
}

/// Index of the first non-finite value of `xs`, if any.
pub fn first_non_finite(xs: &[f32]) -> Option<usize> {
    xs.iter().position(|x| !x.is_finite())
}

/// A hook that reads every f32 output after its node and records the first non-finite one in
/// [`FirstNonFinite::found`]; the pass still completes, later outputs are no longer read.
#[derive(Debug, Default)]
pub struct FirstNonFinite {
    pub found: Option<NonFinite>,
}

impl Hook for FirstNonFinite {
    fn after(&mut self, b: &mut dyn Backend, plan: &Plan, i: usize) -> Result<(), EngineError> {
        if self.found.is_some() {
            return Ok(());
        }
        let node = &plan.nodes[i];
        for v in &node.outputs {
            if plan.buf(v.buf).dtype != DType::F32 {
                continue;
            }
            b.barrier()?;
            let xs = b.read(plan, *v)?;
            if let Some(k) = first_non_finite(&xs) {
                self.found = Some(NonFinite {
                    index: i,
                    node: node.name.clone(),
                    value: xs[k],
                    weights: node.weights.clone(),
                });
                return Ok(());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_non_finite_value() {
        assert_eq!(first_non_finite(&[1.0, -2.0, 0.0]), None);
        assert_eq!(first_non_finite(&[1.0, f32::NAN, f32::INFINITY]), Some(1));
        assert_eq!(first_non_finite(&[f32::NEG_INFINITY]), Some(0));
    }
}
