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

/// The routing the model itself chose for one prompt: each MoE layer's router output,
/// token-major (`n_tokens * k` expert ids; token t's at `t * k..(t + 1) * k`). Recorded by an
/// engine running the model ([`crate::subject::Subject::model_routing`]) and fed to every
/// engine's standalone MoE timings alike under [`Routing::Model`].
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRouting {
    /// Engine that recorded it.
    pub recorded_by: String,
    /// Tokens routed (the measured batch).
    pub n_tokens: usize,
    /// Experts in a layer.
    pub n_experts: usize,
    /// Experts per token.
    pub k: usize,
    /// One table per MoE layer, in layer order.
    pub layers: Vec<LayerTable>,
}

/// One MoE layer's recorded routing.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerTable {
    /// The layer.
    pub layer: u32,
    /// Tokens the layer routed: the batch's, or fewer where the engine computes only the rows
    /// it needs (the last layer of a prefill routes the last token only).
    pub n_tokens: usize,
    /// `n_tokens * k` expert ids, token-major.
    pub ids: Vec<u32>,
}

impl LayerTable {
    /// Layer `layer`'s table of `ids`, `k` a token: its token count follows from them
    /// ([`ModelRouting::new`] checks that they divide).
    pub fn of(layer: u32, k: usize, ids: Vec<u32>) -> LayerTable {
        LayerTable {
            layer,
            n_tokens: ids.len() / k.max(1),
            ids,
        }
    }
}

impl ModelRouting {
    /// Checks the tables (at least one of all `n_tokens` tokens; distinct layers, sorted; each
    /// of at most `n_tokens` tokens with `k` ids a token, every id below `n_experts`, a token's
    /// ids distinct) and returns the routing.
    pub fn new(
        recorded_by: String,
        n_tokens: usize,
        n_experts: usize,
        k: usize,
        mut layers: Vec<LayerTable>,
    ) -> Result<ModelRouting, LedgerError> {
        if k == 0 || k > n_experts || u32::try_from(n_experts).is_err() {
            return Err(LedgerError::RoutingK { k, n_experts });
        }
        let bad = |what: String| Err(LedgerError::RecordedRouting { what });
        if layers.is_empty() {
            return bad("no MoE layer was recorded".into());
        }
        layers.sort_by_key(|t| t.layer);
        if let Some(w) = layers.windows(2).find(|w| w[0].layer == w[1].layer) {
            return bad(format!("layer {} was recorded twice", w[0].layer));
        }
        for t in &layers {
            if t.n_tokens > n_tokens {
                return bad(format!(
                    "layer {} routed {} tokens, the batch has {n_tokens}",
                    t.layer, t.n_tokens
                ));
            }
            if t.ids.len() != t.n_tokens * k {
                return bad(format!(
                    "layer {} has {} ids, {} tokens x {k} experts need {}",
                    t.layer,
                    t.ids.len(),
                    t.n_tokens,
                    t.n_tokens * k
                ));
            }
            expert_histogram(&t.ids, n_experts)?;
            if let Some(tok) = t.ids.chunks(k).position(|c| {
                let mut v = c.to_vec();
                v.sort_unstable();
                v.windows(2).any(|w| w[0] == w[1])
            }) {
                return bad(format!(
                    "layer {}: token {tok} is routed to one expert twice",
                    t.layer
                ));
            }
        }
        if !layers.iter().any(|t| t.n_tokens == n_tokens) {
            return bad(format!("no layer routed all {n_tokens} tokens"));
        }
        Ok(ModelRouting {
            recorded_by,
            n_tokens,
            n_experts,
            k,
            layers,
        })
    }

    /// The table a standalone timing of an op of `n_tokens` rows in `layers` feeds: of those
    /// layers' tables of `n_tokens` tokens (of every layer's of that many when none of them has
    /// one; `None` when no layer routed that many), the one whose busiest expert is the median,
    /// ties to the lower layer. A standalone key stands for all its layers but is timed with one
    /// table; the median layer's load is the fairest single choice (the busiest expert sets how
    /// many row tiles an expert needs, the quantity that moved the MoE kernels' times most).
    /// The token count is the op's, not the key's layers': engines differ in which layers they
    /// prune to the last token (tally prunes a prefill's last MoE layer, llama.cpp does not),
    /// so one engine's key may hold a layer the recording engine routed with fewer tokens.
    pub fn pick(&self, layers: &[u32], n_tokens: usize) -> Option<&LayerTable> {
        let mut cand: Vec<&LayerTable> = self
            .layers
            .iter()
            .filter(|t| t.n_tokens == n_tokens && layers.contains(&t.layer))
            .collect();
        if cand.is_empty() {
            cand = self
                .layers
                .iter()
                .filter(|t| t.n_tokens == n_tokens)
                .collect();
        }
        if cand.is_empty() {
            return None;
        }
        let busiest = |t: &LayerTable| {
            let mut c = vec![0u32; self.n_experts];
            for &e in &t.ids {
                c[e as usize] += 1;
            }
            c.into_iter().max().unwrap_or(0)
        };
        let mut keyed: Vec<(u32, u32, &LayerTable)> =
            cand.into_iter().map(|t| (busiest(t), t.layer, t)).collect();
        keyed.sort_by_key(|&(b, l, _)| (b, l));
        Some(keyed[(keyed.len() - 1) / 2].2)
    }

    /// The whole-batch table the pick gives for `layers`, summarised as [`routing_summary`]
    /// does for a generated one.
    pub fn summary(&self, layers: &[u32]) -> Result<RoutingSummary, LedgerError> {
        let t = self
            .pick(layers, self.n_tokens)
            .ok_or_else(|| LedgerError::RecordedRouting {
                what: format!("no layer routed all {} tokens", self.n_tokens),
            })?;
        Ok(RoutingSummary {
            routing: Routing::Model,
            n_tokens: t.n_tokens,
            k: self.k,
            histogram: expert_histogram(&t.ids, self.n_experts)?,
            layer: Some(t.layer),
            recorded_by: Some(self.recorded_by.clone()),
        })
    }
}

/// How two engines' routings of one prompt agree (each recorded by its own engine): the
/// cross-check that feeding one engine's table to both is fair. On the same file both routers
/// should choose the same experts except at near-ties, where the engines' roundings differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RoutingAgreement {
    /// The engine whose tables the standalone timings use.
    pub a: String,
    /// The engine compared with it.
    pub b: String,
    /// MoE layers both recorded.
    pub layers: usize,
    /// (layer, token) expert sets compared: tokens both routed in those layers.
    pub sets: usize,
    /// Sets with the same k experts in both (order aside).
    pub equal_sets: usize,
    /// Token-expert pairs compared (`sets * k`).
    pub pairs: usize,
    /// Pairs of A's that B chose too.
    pub shared_pairs: usize,
}

impl RoutingAgreement {
    /// Share of equal sets (0 when nothing could be compared: a different k, or no layer of
    /// the same token count, is no agreement).
    pub fn equal_share(&self) -> f64 {
        if self.sets == 0 {
            0.0
        } else {
            self.equal_sets as f64 / self.sets as f64
        }
    }
}

/// Compares two recorded routings layer by layer, token by token.
pub fn agreement(a: &ModelRouting, b: &ModelRouting) -> RoutingAgreement {
    let mut r = RoutingAgreement {
        a: a.recorded_by.clone(),
        b: b.recorded_by.clone(),
        layers: 0,
        sets: 0,
        equal_sets: 0,
        pairs: 0,
        shared_pairs: 0,
    };
    if a.k != b.k || a.k == 0 {
        return r;
    }
    let k = a.k;
    for ta in &a.layers {
        let Some(tb) = b.layers.iter().find(|t| t.layer == ta.layer) else {
            continue;
        };
        if ta.n_tokens != tb.n_tokens {
            continue;
        }
        r.layers += 1;
        for (sa, sb) in ta.ids.chunks(k).zip(tb.ids.chunks(k)) {
            let shared = sa.iter().filter(|e| sb.contains(e)).count();
            r.sets += 1;
            r.pairs += k;
            r.shared_pairs += shared;
            r.equal_sets += usize::from(shared == k);
        }
    }
    r
}

/// The table a standalone MoE timing of an op in `layers` feeds for `n_tokens` tokens of `k`
/// experts: under [`Routing::Model`] the recorded one ([`ModelRouting::pick`] of `recorded`,
/// its shape and ids checked against the op), else a generated one ([`route`]).
pub fn table_for(
    routing: Routing,
    recorded: Option<&ModelRouting>,
    layers: &[u32],
    n_tokens: usize,
    n_experts: usize,
    k: usize,
    seed: u64,
) -> Result<Vec<u32>, LedgerError> {
    if routing != Routing::Model {
        return route(n_tokens, n_experts, k, routing, seed);
    }
    let rec = recorded.ok_or(LedgerError::ModelRouting)?;
    if rec.k != k || rec.n_experts != n_experts {
        return Err(LedgerError::RecordedRouting {
            what: format!(
                "recorded top-{} of {} experts, the op routes top-{k} of {n_experts}",
                rec.k, rec.n_experts
            ),
        });
    }
    let t = rec
        .pick(layers, n_tokens)
        .ok_or_else(|| LedgerError::RecordedRouting {
            what: format!("no recorded layer routed {n_tokens} tokens, as the op does"),
        })?;
    // What the pick promises, checked where the table is fed: a table of another length would
    // leave ids unwritten (or be cut) in the op's input.
    if t.ids.len() != n_tokens * k {
        return Err(LedgerError::RecordedRouting {
            what: format!(
                "layer {}'s {} ids fed to an op of {n_tokens} tokens x {k} experts",
                t.layer,
                t.ids.len()
            ),
        });
    }
    Ok(t.ids.clone())
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
    /// `model`: the MoE layer whose recorded table this is ([`ModelRouting::pick`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<u32>,
    /// `model`: the engine that recorded the routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_by: Option<String>,
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
        layer: None,
        recorded_by: None,
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

    fn layer(layer: u32, ids: &[u32]) -> LayerTable {
        LayerTable {
            layer,
            n_tokens: ids.len() / 2,
            ids: ids.to_vec(),
        }
    }

    #[test]
    fn recorded_tables_are_checked_with_clear_text() {
        let new = |layers| {
            ModelRouting::new("t".into(), 2, 4, 2, layers)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(new(vec![]), "recorded routing: no MoE layer was recorded");
        let odd = LayerTable {
            n_tokens: 2,
            ..layer(0, &[0, 1, 2])
        };
        assert_eq!(
            new(vec![odd]),
            "recorded routing: layer 0 has 3 ids, 2 tokens x 2 experts need 4"
        );
        assert_eq!(
            new(vec![layer(0, &[0, 1, 2, 3, 0, 1])]),
            "recorded routing: layer 0 routed 3 tokens, the batch has 2"
        );
        assert_eq!(
            new(vec![layer(0, &[0, 1])]),
            "recorded routing: no layer routed all 2 tokens"
        );
        assert_eq!(
            new(vec![layer(3, &[0, 1, 2, 4])]),
            "expert id 4 at position 3 is out of range for 4 experts"
        );
        assert_eq!(
            new(vec![layer(1, &[0, 1, 2, 2])]),
            "recorded routing: layer 1: token 1 is routed to one expert twice"
        );
        assert_eq!(
            new(vec![layer(1, &[0, 1, 2, 3]), layer(1, &[0, 1, 2, 3])]),
            "recorded routing: layer 1 was recorded twice"
        );
    }

    #[test]
    fn pick_takes_the_median_layer_by_busiest_expert() {
        // Busiest expert: layer 0 -> 3 tokens, layer 4 -> 1, layer 2 -> 2; median is layer 2.
        // Layer 5 routed its last token only (a prefill's last layer): never a fallback.
        let r = ModelRouting::new(
            "t".into(),
            3,
            6,
            2,
            vec![
                layer(4, &[0, 1, 2, 3, 4, 5]),
                layer(0, &[0, 1, 0, 2, 0, 3]),
                layer(2, &[0, 1, 0, 2, 3, 4]),
                layer(5, &[4, 5]),
            ],
        )
        .unwrap();
        let pick = |layers: &[u32], n| r.pick(layers, n).map(|t| t.layer);
        assert_eq!(r.layers[0].layer, 0, "sorted by layer");
        assert_eq!(pick(&[], 3), Some(2));
        assert_eq!(pick(&[0, 4], 3), Some(4), "of two, the lower load");
        assert_eq!(pick(&[0], 3), Some(0));
        assert_eq!(
            pick(&[7], 3),
            Some(2),
            "no table of the key's layers: all layers"
        );
        // The op's token count decides: an op of 3 rows in layers 2 and 5 (an engine that
        // does not prune layer 5) gets layer 2's table, an op of 1 row layer 5's.
        assert_eq!(pick(&[2, 5], 3), Some(2));
        assert_eq!(pick(&[2, 5], 1), Some(5));
        assert_eq!(pick(&[0], 2), None, "no layer routed 2 tokens");
        let s = r.summary(&[]).unwrap();
        assert_eq!((s.layer, s.histogram.max_tokens_per_expert), (Some(2), 2));
    }

    #[test]
    fn agreement_counts_sets_and_pairs_by_hand() {
        let rec = |by: &str, layers| ModelRouting::new(by.into(), 3, 6, 2, layers).unwrap();
        let a = rec(
            "a",
            vec![
                layer(0, &[0, 1, 2, 3, 4, 5]),
                layer(1, &[0, 1, 2, 3, 4, 5]),
                layer(3, &[0, 1]),
            ],
        );
        // Layer 0: token 1 swaps order (equal), token 2 differs in one expert; layer 1 only in
        // A; layer 3 (one token) equal; layer 4 only in B.
        let b = rec(
            "b",
            vec![
                layer(0, &[0, 1, 3, 2, 4, 0]),
                layer(3, &[1, 0]),
                layer(4, &[0, 1, 2, 3, 4, 5]),
            ],
        );
        let g = agreement(&a, &b);
        assert_eq!((g.a.as_str(), g.b.as_str()), ("a", "b"));
        assert_eq!((g.layers, g.sets, g.equal_sets), (2, 4, 3));
        assert_eq!((g.pairs, g.shared_pairs), (8, 7));
        assert_eq!(g.equal_share(), 0.75);
        // A different k compares nothing, and nothing compared is no agreement.
        let top1 = LayerTable {
            n_tokens: 3,
            ..layer(0, &[0, 1, 2])
        };
        let c = ModelRouting::new("c".into(), 3, 6, 1, vec![top1]).unwrap();
        let g = agreement(&a, &c);
        assert_eq!((g.sets, g.equal_share()), (0, 0.0));
    }

    #[test]
    fn table_for_model_routing_is_the_recorded_one() {
        let rec = ModelRouting::new(
            "t".into(),
            2,
            4,
            2,
            vec![
                layer(0, &[1, 0, 3, 2]),
                layer(1, &[0, 1, 0, 2]),
                layer(3, &[3, 1]),
            ],
        )
        .unwrap();
        let t = |layers: &[u32], n, e, k| table_for(Routing::Model, Some(&rec), layers, n, e, k, 0);
        assert_eq!(t(&[0], 2, 4, 2).unwrap(), [1, 0, 3, 2]);
        assert_eq!(
            t(&[1, 3], 1, 4, 2).unwrap(),
            [3, 1],
            "the op's token count decides"
        );
        let e = table_for(Routing::Model, None, &[0], 2, 4, 2, 0).unwrap_err();
        assert!(matches!(e, LedgerError::ModelRouting));
        assert_eq!(
            t(&[0], 3, 4, 2).unwrap_err().to_string(),
            "recorded routing: no recorded layer routed 3 tokens, as the op does"
        );
        assert_eq!(
            t(&[0], 2, 8, 2).unwrap_err().to_string(),
            "recorded routing: recorded top-2 of 4 experts, the op routes top-2 of 8"
        );
        // Other routings ignore it.
        assert_eq!(
            table_for(Routing::Realistic, Some(&rec), &[0], 2, 4, 2, 5).unwrap(),
            route(2, 4, 2, Routing::Realistic, 5).unwrap()
        );
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
