//! Routing tables for standalone MoE timing, and the expert-load histogram.
//!
//! A standalone MoE benchmark measures what its routing table lets it measure: route every token
//! to experts 0..k-1 and the weights of k experts sit in cache, so the op looks far faster than
//! in a real prefill where 512 tokens x top-8 of 256 touch nearly every expert. `Realistic` is
//! the default everywhere; `FirstK` exists to show how much the naive table undercounts.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::LedgerError;
use crate::rng::SplitMix64;
use crate::schema::Routing;

/// Generates a token-major routing table: `k` distinct expert ids per token, `n_tokens * k`
/// entries. `Realistic` draws each token's k experts uniformly without replacement from all
/// `n_experts`; `FirstK` gives every token experts `0..k` in a per-token shuffled order.
/// Deterministic in `seed`. `Model` is an error: only the engine running the model knows it.
pub fn route(
    n_tokens: usize,
    n_experts: usize,
    k: usize,
    routing: Routing,
    seed: u64,
) -> Result<Vec<u32>, LedgerError> {
    if k == 0 || k > n_experts || u32::try_from(n_experts).is_err() {
        return Err(LedgerError::RoutingK { k, n_experts });
    }
    let pool = match routing {
        Routing::Realistic => n_experts,
        Routing::FirstK => k,
        Routing::Model => return Err(LedgerError::ModelRouting),
    };
    let mut rng = SplitMix64::new(seed);
    // A permutation of the pool, partially shuffled per token: a partial Fisher-Yates over any
    // permutation yields a uniform k-subset in uniform order, so the array never needs a reset.
    let mut perm: Vec<u32> = (0..pool as u32).collect();
    let mut out = Vec::with_capacity(n_tokens * k);
    for _ in 0..n_tokens {
        for i in 0..k {
            let j = i + rng.below((pool - i) as u64) as usize;
            perm.swap(i, j);
        }
        out.extend_from_slice(&perm[..k]);
    }
    Ok(out)
}

/// How a routing table spreads tokens over experts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExpertHistogram {
    /// Experts in the layer.
    pub n_experts: usize,
    /// Token-expert pairs in the table.
    pub pairs: usize,
    /// Experts that received at least one token (their weights are read).
    pub experts_touched: usize,
    /// Tokens routed to the busiest expert.
    pub max_tokens_per_expert: u64,
    /// Mean tokens per expert over all experts (`pairs / n_experts`).
    pub mean_tokens_per_expert: f64,
    /// Mean tokens per touched expert (`pairs / experts_touched`; 0 when none is touched).
    pub mean_tokens_per_touched_expert: f64,
    /// Tokens per expert, indexed by expert id.
    pub tokens_per_expert: Vec<u64>,
}

/// Counts tokens per expert in a routing table; an id `>= n_experts` is an error.
pub fn expert_histogram(ids: &[u32], n_experts: usize) -> Result<ExpertHistogram, LedgerError> {
    let mut counts = vec![0u64; n_experts];
    for (position, &id) in ids.iter().enumerate() {
        let slot = counts
            .get_mut(id as usize)
            .ok_or(LedgerError::ExpertOutOfRange {
                id,
                position,
                n_experts,
            })?;
        *slot += 1;
    }
    let touched = counts.iter().filter(|&&c| c > 0).count();
    let pairs = ids.len();
    Ok(ExpertHistogram {
        n_experts,
        pairs,
        experts_touched: touched,
        max_tokens_per_expert: counts.iter().copied().max().unwrap_or(0),
        mean_tokens_per_expert: if n_experts == 0 {
            0.0
        } else {
            pairs as f64 / n_experts as f64
        },
        mean_tokens_per_touched_expert: if touched == 0 {
            0.0
        } else {
            pairs as f64 / touched as f64
        },
        tokens_per_expert: counts,
    })
}

/// A routing mode's table summarised for one prompt length: what a standalone MoE timing under
/// that mode actually exercised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RoutingSummary {
    /// The mode.
    pub routing: Routing,
    /// Tokens routed.
    pub n_tokens: usize,
    /// Experts per token.
    pub k: usize,
    /// The resulting load.
    pub histogram: ExpertHistogram,
}

/// Builds the table for `routing` and summarises it.
pub fn routing_summary(
    n_tokens: usize,
    n_experts: usize,
    k: usize,
    routing: Routing,
    seed: u64,
) -> Result<RoutingSummary, LedgerError> {
    let ids = route(n_tokens, n_experts, k, routing, seed)?;
    Ok(RoutingSummary {
        routing,
        n_tokens,
        k,
        histogram: expert_histogram(&ids, n_experts)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn distinct_per_token(ids: &[u32], k: usize) -> bool {
        ids.chunks(k).all(|t| {
            let mut v = t.to_vec();
            v.sort_unstable();
            v.dedup();
            v.len() == k
        })
    }

    #[test]
    fn realistic_touches_nearly_all_experts() {
        let ids = route(512, 256, 8, Routing::Realistic, 1).unwrap();
        assert_eq!(ids.len(), 512 * 8);
        assert!(distinct_per_token(&ids, 8));
        let h = expert_histogram(&ids, 256).unwrap();
        // Each expert is missed by all 512 tokens with probability (1 - 8/256)^512 ~ 1e-7.
        assert_eq!(h.experts_touched, 256);
        assert_eq!(h.mean_tokens_per_expert, 16.0);
        assert_eq!(h.tokens_per_expert.iter().sum::<u64>(), 4096);
        assert!(h.max_tokens_per_expert < 40, "{}", h.max_tokens_per_expert);
    }

    #[test]
    fn first_k_touches_only_k_experts_in_shuffled_order() {
        let ids = route(512, 256, 8, Routing::FirstK, 1).unwrap();
        assert!(ids.iter().all(|&e| e < 8));
        assert!(distinct_per_token(&ids, 8));
        let h = expert_histogram(&ids, 256).unwrap();
        assert_eq!(h.experts_touched, 8);
        assert_eq!(h.max_tokens_per_expert, 512);
        assert_eq!(h.mean_tokens_per_touched_expert, 512.0);
        // The order is shuffled per token, not 0..8 every time.
        assert!(ids.chunks(8).any(|t| t != [0, 1, 2, 3, 4, 5, 6, 7]));
    }

    #[test]
    fn deterministic_by_seed() {
        let a = route(64, 32, 4, Routing::Realistic, 9).unwrap();
        assert_eq!(a, route(64, 32, 4, Routing::Realistic, 9).unwrap());
        assert_ne!(a, route(64, 32, 4, Routing::Realistic, 10).unwrap());
    }

    #[test]
    fn histogram_by_hand() {
        let h = expert_histogram(&[0, 1, 1, 3, 3, 3], 4).unwrap();
        assert_eq!(h.tokens_per_expert, vec![1, 2, 0, 3]);
        assert_eq!(h.experts_touched, 3);
        assert_eq!(h.max_tokens_per_expert, 3);
        assert_eq!(h.mean_tokens_per_expert, 1.5);
        assert_eq!(h.mean_tokens_per_touched_expert, 2.0);
    }

    #[test]
    fn bad_inputs_are_errors_with_clear_text() {
        let e = route(4, 4, 5, Routing::Realistic, 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "routing: cannot draw 5 distinct experts per token from 4 experts"
        );
        let e = route(4, 4, 0, Routing::FirstK, 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "routing: cannot draw 0 distinct experts per token from 4 experts"
        );
        let e = route(4, 8, 2, Routing::Model, 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "routing `model` is produced by the engine itself: the ledger cannot generate it"
        );
        let e = expert_histogram(&[0, 7], 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "expert id 7 at position 1 is out of range for 4 experts"
        );
    }
}
