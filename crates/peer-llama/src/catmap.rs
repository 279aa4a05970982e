//! The llama.cpp side of the category taxonomy: one table from (ggml op, weight read, node name)
//! to [`Category`], and the row-dependency rules the dead-work analysis walks.
//!
//! The table is data, read top to bottom, first match wins. A rule matches on any combination
//! of: the op, a substring of the name of a *weight* the node reads (weights carry their GGUF
//! names, so `blk.7.ffn_up_shexp.weight` identifies the shared expert even where the node name
//! is the generic `ffn_up-7`), and a prefix of the node's base name (the name llama.cpp's graph
//! builder gave it, without the `-<layer>` suffix). docs/peer-llama.md reproduces the table.
//! Classification is a pure function of one node, so export, observation and replay agree.

use tally_ledger::Category;
use tally_ledger::schema::RowDep;

/// What the classifier looks at.
#[derive(Debug, Clone, Copy)]
pub struct NodeKey<'a> {
    /// ggml op name (`MUL_MAT`, `GLU`, ...).
    pub op: &'a str,
    /// Node name as llama.cpp set it (`ffn_moe_probs-3`, `node_17`, `Qcur-3 (view)`).
    pub name: &'a str,
    /// Names of the model weights among the node's sources, in source order.
    pub weights: &'a [&'a str],
}

/// One row of the mapping table.
#[derive(Debug)]
pub struct Rule {
    /// Ops the rule applies to (empty: any op).
    pub ops: &'static [&'static str],
    /// Substrings, one of which must occur in the name of a weight the node reads.
    pub weight: &'static [&'static str],
    /// Prefixes, one of which the node's base name must start with.
    pub name: &'static [&'static str],
    /// The category assigned.
    pub category: Category,
}

const fn rule(
    ops: &'static [&'static str],
    weight: &'static [&'static str],
    name: &'static [&'static str],
    category: Category,
) -> Rule {
    Rule {
        ops,
        weight,
        name,
        category,
    }
}

use Category::*;

/// The mapping table, first match wins.
pub const RULES: &[Rule] = &[
    // Weight-driven: what a matmul computes is decided by the weight it reads.
    rule(
        &["MUL_MAT_ID"],
        &["ffn_gate_up_exps", "ffn_gate_exps", "ffn_up_exps"],
        &[],
        MoeGateUp,
    ),
    rule(&["MUL_MAT_ID"], &["ffn_down_exps"], &[], MoeDown),
    rule(&[], &["_shexp"], &[], SharedExpert),
    rule(&["MUL_MAT"], &["ffn_gate_inp"], &[], Router),
    rule(&["MUL_MAT"], &["output.weight"], &[], OutputHead),
    rule(
        &["MUL_MAT"],
        &[
            "attn_qkv",
            "attn_gate",
            "attn_q.",
            "attn_k.",
            "attn_v.",
            "attn_output",
            "ssm_beta",
            "ssm_alpha",
            "ssm_out",
        ],
        &[],
        DenseProj,
    ),
    rule(&["GET_ROWS"], &["token_embd"], &[], Embedding),
    // Norm weights (attn_norm, post_attention_norm, attn_q_norm, attn_k_norm, ssm_norm, output_norm).
    rule(&["MUL", "ADD"], &["_norm"], &[], Norm),
    // Op-driven.
    rule(
        &["RMS_NORM", "L2_NORM", "NORM", "GROUP_NORM"],
        &[],
        &[],
        Norm,
    ),
    rule(&["ROPE"], &[], &[], Rope),
    rule(&["FLASH_ATTN_EXT"], &[], &[], Attention),
    rule(&["SSM_CONV"], &[], &[], Conv),
    rule(&["GATED_DELTA_NET", "SSM_SCAN"], &[], &[], DeltaRule),
    rule(&["ARGSORT", "TOP_K"], &[], &[], Router),
    // Name-driven (llama-graph.cpp's build_moe_ffn and qwen35moe.cpp's shared expert).
    rule(
        &[],
        &[],
        &[
            "ffn_moe_logits",
            "ffn_moe_probs",
            "ffn_moe_argsort",
            "ffn_moe_topk",
            "ffn_moe_weights",
        ],
        Router,
    ),
    // In qwen35moe the only dense FFN is the shared expert, so build_ffn's generic names are its.
    rule(
        &[],
        &[],
        &[
            "shared_expert_gate",
            "ffn_shexp",
            "ffn_swiglu",
            "ffn_gate_par",
            "ffn_silu",
        ],
        SharedExpert,
    ),
    // The L2 norm of q and k in delta-net layers is rms_norm followed by this scale.
    rule(
        &["SCALE"],
        &[],
        &["q_conv_predelta", "k_conv_predelta"],
        Norm,
    ),
    // Writes into state caches that are not copies (zeroing of recurrent state slots).
    rule(&[], &[], &["cache_"], Layout),
    // Remaining ops by kind.
    rule(&["SOFT_MAX"], &[], &[], Attention),
    rule(
        &[
            "CPY",
            "CONT",
            "DUP",
            "SET_ROWS",
            "GET_ROWS",
            "CONCAT",
            "REPEAT",
            "PAD",
            "SET",
            "ACC",
            "VIEW",
            "RESHAPE",
            "PERMUTE",
            "TRANSPOSE",
            "NONE",
        ],
        &[],
        &[],
        Layout,
    ),
    rule(
        &[
            "ADD", "ADD1", "SUB", "MUL", "DIV", "SCALE", "UNARY", "GLU", "CLAMP", "SQR", "SQRT",
            "LOG", "SIN", "COS", "SUM", "SUM_ROWS", "MEAN", "FILL", "TRI", "CUMSUM", "DIAG",
        ],
        &[],
        &[],
        Elementwise,
    ),
];

/// The node name without llama.cpp's `-<layer>` suffix and ggml's ` (view)`-style suffixes.
pub fn base_name(name: &str) -> &str {
    let name = name.split(" (").next().unwrap_or(name);
    match name.rsplit_once('-') {
        Some((head, tail)) if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) => head,
        _ => name,
    }
}

/// The layer a node belongs to, from its `-<layer>` name suffix.
pub fn layer_of(name: &str) -> Option<u32> {
    let name = name.split(" (").next().unwrap_or(name);
    let (_, tail) = name.rsplit_once('-')?;
    tail.parse().ok()
}

/// The layer of a weight (`blk.7.attn_q.weight` -> 7).
pub fn weight_layer(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("blk.")?;
    rest.split('.').next()?.parse().ok()
}

impl Rule {
    fn matches(&self, key: &NodeKey<'_>, base: &str) -> bool {
        (self.ops.is_empty() || self.ops.contains(&key.op))
            && (self.weight.is_empty()
                || key
                    .weights
                    .iter()
                    .any(|w| self.weight.iter().any(|p| weight_matches(w, p))))
            && (self.name.is_empty() || self.name.iter().any(|p| base.starts_with(p)))
    }
}

/// `output.weight` must match the global output head only, not `blk.N.attn_output.weight`.
/// Weight names are the original ones (scheduler copies are mapped back by the caller).
fn weight_matches(weight: &str, pattern: &str) -> bool {
    if pattern == "output.weight" {
        weight == "output.weight"
    } else {
        weight.contains(pattern)
    }
}

/// The category of a node, and the index of the rule that decided it (None: fell through to
/// [`Category::Other`]).
pub fn classify(key: &NodeKey<'_>) -> (Category, Option<usize>) {
    let base = base_name(key.name);
    RULES
        .iter()
        .position(|r| r.matches(key, base))
        .map_or((Other, None), |i| (RULES[i].category, Some(i)))
}

/// How output rows of `op` need rows of its `src_index`-th source (weights never matter).
///
/// When in doubt the answer is `All`: it can only hide dead work, never invent it.
pub fn row_dep(op: &str, src_index: usize, src_is_weight: bool) -> RowDep {
    match op {
        // Q rows are per token; K, V, mask (and sinks) are read for every query.
        "FLASH_ATTN_EXT" => {
            if src_index == 0 {
                RowDep::Same
            } else {
                RowDep::All
            }
        }
        // Mixes tokens along the sequence.
        "SSM_CONV" | "GATED_DELTA_NET" | "SSM_SCAN" | "CONCAT" | "CUMSUM" | "SOLVE_TRI"
        | "RWKV_WKV6" | "RWKV_WKV7" | "GATED_LINEAR_ATTN" => RowDep::All,
        // Activation x activation (non-FA attention, chunked delta rule): the first operand is
        // the "keys" side.
        "MUL_MAT" if src_index == 0 && !src_is_weight => RowDep::All,
        // The mask of a masked softmax.
        "SOFT_MAX" if src_index >= 1 => RowDep::All,
        _ => RowDep::Same,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat(op: &str, name: &str, weights: &[&str]) -> Category {
        classify(&NodeKey { op, name, weights }).0
    }

    #[test]
    fn matmuls_follow_their_weight() {
        assert_eq!(
            cat(
                "MUL_MAT",
                "linear_attn_qkv_mixed-0",
                &["blk.0.attn_qkv.weight"]
            ),
            DenseProj
        );
        assert_eq!(
            cat("MUL_MAT", "z-0", &["blk.0.attn_gate.weight"]),
            DenseProj
        );
        assert_eq!(
            cat("MUL_MAT", "Qcur_full-3", &["blk.3.attn_q.weight"]),
            DenseProj
        );
        assert_eq!(
            cat("MUL_MAT", "attn_output-3", &["blk.3.attn_output.weight"]),
            DenseProj
        );
        assert_eq!(
            cat("MUL_MAT", "ffn_up-3", &["blk.3.ffn_up_shexp.weight"]),
            SharedExpert
        );
        assert_eq!(
            cat(
                "MUL_MAT",
                "shared_expert_gate-3",
                &["blk.3.ffn_gate_inp_shexp.weight"]
            ),
            SharedExpert
        );
        assert_eq!(
            cat(
                "MUL_MAT",
                "ffn_moe_logits-3",
                &["blk.3.ffn_gate_inp.weight"]
            ),
            Router
        );
        assert_eq!(
            cat("MUL_MAT", "result_output", &["output.weight"]),
            OutputHead
        );
        assert_eq!(
            cat("MUL_MAT_ID", "ffn_moe_up-1", &["blk.1.ffn_up_exps.weight"]),
            MoeGateUp
        );
        assert_eq!(
            cat(
                "MUL_MAT_ID",
                "ffn_moe_gate_up-1",
                &["blk.1.ffn_gate_up_exps.weight"]
            ),
            MoeGateUp
        );
        assert_eq!(
            cat(
                "MUL_MAT_ID",
                "ffn_moe_down-1",
                &["blk.1.ffn_down_exps.weight"]
            ),
            MoeDown
        );
        assert_eq!(
            cat("GET_ROWS", "model.input_embed", &["token_embd.weight"]),
            Embedding
        );
    }

    #[test]
    fn names_and_ops_decide_the_rest() {
        assert_eq!(cat("MUL", "attn_norm-0", &["blk.0.attn_norm.weight"]), Norm);
        assert_eq!(cat("RMS_NORM", "norm-0", &[]), Norm);
        assert_eq!(cat("SOFT_MAX", "ffn_moe_probs-2", &[]), Router);
        assert_eq!(cat("ARGSORT", "ffn_moe_argsort-2", &[]), Router);
        assert_eq!(cat("GET_ROWS", "ffn_moe_weights-2", &[]), Router);
        assert_eq!(cat("DIV", "ffn_moe_weights_norm-2", &[]), Router);
        assert_eq!(cat("GLU", "ffn_moe_swiglu-2", &[]), Elementwise);
        assert_eq!(cat("GLU", "ffn_swiglu-2", &[]), SharedExpert);
        assert_eq!(
            cat("UNARY", "shared_expert_gate_sigmoid-2", &[]),
            SharedExpert
        );
        assert_eq!(cat("GET_ROWS", "result_norm", &[]), Layout);
        assert_eq!(cat("SET_ROWS", "cache_k_l3 (view)", &[]), Layout);
        assert_eq!(cat("ADD", "node_41", &[]), Elementwise);
        assert_eq!(cat("MUL", "gate-0", &["blk.0.ssm_a"]), Elementwise);
        assert_eq!(cat("GATED_DELTA_NET", "node_50", &[]), DeltaRule);
        assert_eq!(cat("SSM_CONV", "conv_output_raw-0", &[]), Conv);
        assert_eq!(cat("FLASH_ATTN_EXT", "__fattn__-3", &[]), Attention);
        assert_eq!(cat("SCALE", "q_conv_predelta-0", &[]), Norm);
        assert_eq!(
            cat("SCALE", "cache_r_l0 (reshaped) (view) (view)", &[]),
            Layout
        );
        assert_eq!(cat("OPT_STEP_ADAMW", "x", &[]), Other);
    }

    #[test]
    fn names_parse() {
        assert_eq!(base_name("ffn_moe_probs-12"), "ffn_moe_probs");
        assert_eq!(base_name("Qcur-3 (view)"), "Qcur");
        assert_eq!(base_name("model.input_embed"), "model.input_embed");
        assert_eq!(base_name("node_12"), "node_12");
        assert_eq!(layer_of("Qcur-3 (view)"), Some(3));
        assert_eq!(layer_of("node_12"), None);
        assert_eq!(layer_of("result_output"), None);
        assert_eq!(weight_layer("blk.17.ffn_down_exps.weight"), Some(17));
        assert_eq!(weight_layer("output.weight"), None);
    }

    #[test]
    fn row_deps_are_conservative() {
        assert_eq!(row_dep("FLASH_ATTN_EXT", 0, false), RowDep::Same);
        assert_eq!(row_dep("FLASH_ATTN_EXT", 1, false), RowDep::All);
        assert_eq!(row_dep("GATED_DELTA_NET", 0, false), RowDep::All);
        assert_eq!(row_dep("MUL_MAT", 0, true), RowDep::Same);
        assert_eq!(row_dep("MUL_MAT", 0, false), RowDep::All);
        assert_eq!(row_dep("GET_ROWS", 0, false), RowDep::Same);
    }
}
