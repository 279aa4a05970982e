//! The operator-category taxonomy shared by every engine the ledger measures.
//!
//! Categories are data: one enum, and one mapping table per engine (tally's plan builder assigns a
//! category to each node; the llama.cpp adapter maps ggml ops and node names). The ledger compares
//! engines category by category, so both sides must put the same kind of work in the same row.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What kind of work a graph node does.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Dense weight projections of the mixers: attention q/k/v/o, delta-net qkv, z-gate, beta,
    /// alpha and output projections.
    DenseProj,
    /// Routed-expert gate and up projections (split or fused).
    MoeGateUp,
    /// Routed-expert down projection.
    MoeDown,
    /// Router logits, softmax, top-k selection and renormalisation, grouping tokens by expert.
    Router,
    /// Shared expert: its gate/up/down projections, activation and sigmoid scalar gate.
    SharedExpert,
    /// The gated delta rule: the recurrence of the linear-attention layers (state update and
    /// readout). Measurements recorded before the rename name it `delta_net`, still read.
    #[serde(alias = "delta_net")]
    DeltaRule,
    /// Causal depthwise convolution of the linear-attention layers (with its state).
    Conv,
    /// Softmax attention of the full-attention layers (scores, softmax, weighted sum).
    Attention,
    /// RMS / L2 normalisations (model, per-head q/k, delta-net output norm).
    Norm,
    /// Rotary position embedding.
    Rope,
    /// Element-wise work: activations, gates, residual adds, expert-weighted sums.
    Elementwise,
    /// Layout work that moves data without computing: copies, transposes, concatenations,
    /// cache stores, splits.
    Layout,
    /// Token embedding lookup.
    Embedding,
    /// Final norm's projection to vocabulary logits.
    OutputHead,
    /// Anything else (engine bookkeeping); a large value here is a mapping bug.
    Other,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 15] = [
        Category::DenseProj,
        Category::MoeGateUp,
        Category::MoeDown,
        Category::Router,
        Category::SharedExpert,
        Category::DeltaRule,
        Category::Conv,
        Category::Attention,
        Category::Norm,
        Category::Rope,
        Category::Elementwise,
        Category::Layout,
        Category::Embedding,
        Category::OutputHead,
        Category::Other,
    ];

    /// Stable machine name (the serde name).
    pub fn name(self) -> &'static str {
        match self {
            Category::DenseProj => "dense_proj",
            Category::MoeGateUp => "moe_gate_up",
            Category::MoeDown => "moe_down",
            Category::Router => "router",
            Category::SharedExpert => "shared_expert",
            Category::DeltaRule => "delta_rule",
            Category::Conv => "conv",
            Category::Attention => "attention",
            Category::Norm => "norm",
            Category::Rope => "rope",
            Category::Elementwise => "elementwise",
            Category::Layout => "layout",
            Category::Embedding => "embedding",
            Category::OutputHead => "output_head",
            Category::Other => "other",
        }
    }

    /// Human label for reports.
    pub fn label(self) -> &'static str {
        match self {
            Category::DenseProj => "Dense projections",
            Category::MoeGateUp => "MoE experts gate/up",
            Category::MoeDown => "MoE experts down",
            Category::Router => "Router and top-k",
            Category::SharedExpert => "Shared expert",
            Category::DeltaRule => "Delta rule (linear-attention recurrence)",
            Category::Conv => "Causal conv",
            Category::Attention => "Attention",
            Category::Norm => "Norms",
            Category::Rope => "RoPE",
            Category::Elementwise => "Element-wise / activations",
            Category::Layout => "Layout copies / transposes",
            Category::Embedding => "Embedding",
            Category::OutputHead => "Output head",
            Category::Other => "Other",
        }
    }

    /// Parses a machine name (as produced by [`Category::name`], or an older name of it:
    /// `delta_net` for [`Category::DeltaRule`]).
    pub fn from_name(s: &str) -> Option<Category> {
        if s == "delta_net" {
            return Some(Category::DeltaRule);
        }
        Category::ALL.into_iter().find(|c| c.name() == s)
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delta_rule_keeps_reading_its_old_name() {
        assert_eq!(Category::DeltaRule.name(), "delta_rule");
        assert_eq!(Category::from_name("delta_net"), Some(Category::DeltaRule));
        let old: Category = serde_json::from_str("\"delta_net\"").expect("old name");
        assert_eq!(old, Category::DeltaRule);
        assert_eq!(
            serde_json::to_string(&Category::DeltaRule).expect("json"),
            "\"delta_rule\""
        );
    }

    #[test]
    fn names_round_trip_and_match_serde() {
        for c in Category::ALL {
            assert_eq!(Category::from_name(c.name()), Some(c));
            let json = serde_json::to_string(&c).expect("serialise");
            assert_eq!(json, format!("\"{}\"", c.name()));
        }
    }
}
