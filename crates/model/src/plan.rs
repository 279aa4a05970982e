//! The forward pass as an explicit plan: a list of nodes over named buffers.
//!
//! A plan is built once per batch length from the config; the position of the batch (how many
//! tokens are already in the state) is device data, the plan's [`BufKind::Position`] buffer, so
//! one plan serves every position (one decode plan, one captured CUDA graph). Backends execute
//! plans; they never decide what the model computes. Graph export, dead-work analysis, replay and probes
//! are functions of the plan and of the one executor loop that runs it.
//!
//! Conventions: every buffer is a row-major matrix `[rows, cols]`; rows are tokens (or cache
//! positions, or heads for recurrent state). A [`View`] selects a rectangle of a buffer. Weights are
//! named by their GGUF tensor name; a weight with ggml dims `[K, N]` is used as `N` rows of `K`.

use tally_ledger::Category;

/// Index of a buffer in [`Plan::buffers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    F32,
    I32,
}

impl DType {
    pub fn size_bytes(self) -> usize {
        4
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
        }
    }
}

/// What a buffer holds and how long it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufKind {
    /// Token ids of the batch (`[T, 1]`, i32).
    Tokens,
    /// The batch's first position (`[1, 1]`, i32): `n_past`, the tokens already in the state.
    /// Written before each run, like the token ids; the ops that depend on the position read it.
    Position,
    /// Intermediate activations of one run; reused across layers.
    Activation,
    /// Persistent state that survives between runs: KV cache, conv state, recurrent state.
    State,
    /// The final output (`[1, vocab]` logits of the last token).
    Logits,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BufDesc {
    /// Role name (`x`, `xn`, `blk.3.k_cache`).
    pub name: String,
    pub rows: usize,
    pub cols: usize,
    pub dtype: DType,
    pub kind: BufKind,
    /// Rows per token: 1, or k for the routed-expert buffers that hold one row per
    /// (token, expert) pair. Token counts in exports divide by it.
    pub rows_per_token: usize,
}

impl BufDesc {
    pub fn elems(&self) -> usize {
        self.rows * self.cols
    }
}

/// A rectangle of a buffer: rows `row0..row0+rows`, columns `col0..col0+cols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    pub buf: BufId,
    pub row0: usize,
    pub rows: usize,
    pub col0: usize,
    pub cols: usize,
}

impl View {
    /// The whole buffer.
    pub fn all(buf: BufId, desc: &BufDesc) -> View {
        View {
            buf,
            row0: 0,
            rows: desc.rows,
            col0: 0,
            cols: desc.cols,
        }
    }
    /// The same columns, rows `row0..row0+rows` of this view.
    pub fn rows(self, row0: usize, rows: usize) -> View {
        View {
            row0: self.row0 + row0,
            rows,
            ..self
        }
    }
    /// The same rows, columns `col0..col0+cols` of this view.
    pub fn cols(self, col0: usize, cols: usize) -> View {
        View {
            col0: self.col0 + col0,
            cols,
            ..self
        }
    }
    pub fn elems(&self) -> usize {
        self.rows * self.cols
    }
    /// Whether two views share any element.
    pub fn overlaps(&self, other: &View) -> bool {
        self.buf == other.buf
            && self.row0 < other.row0 + other.rows
            && other.row0 < self.row0 + self.rows
            && self.col0 < other.col0 + other.cols
            && other.col0 < self.col0 + self.cols
    }
}

/// Where a projection writes its output columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutLayout {
    /// Column n of the output is weight row n.
    Plain,
    /// The full-attention q projection: weight rows come per head as `[query (d) | gate (d)]`;
    /// the output is written de-interleaved as `[all queries (heads*d) | all gates (heads*d)]`
    /// so the downstream ops read contiguous columns (no layout copy).
    QGateSplit { n_head: usize, head_dim: usize },
}

/// One operation. Inputs, weights and outputs are listed in the order documented per variant;
/// the CPU backend's implementation is the reference semantics.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `out[t] = token_embd[ids[t]]`. in: `[ids (T,1) i32]`, w: `[token_embd]`, out: `[x (T,D)]`.
    Embed,
    /// RMS norm over groups of `group` columns: `y = x * rsqrt(mean(x^2) + eps) * w[0..group]`.
    /// in: `[x]`, w: `[norm (group)]`, out: `[y]` (may be the same view as x).
    RmsNorm { eps: f32, group: usize },
    /// L2 norm over groups of `group` columns, then a scale: `y = x / sqrt(sum(x^2) + eps) * scale`.
    /// in: `[x]`, out: `[y]` (may alias x).
    L2Norm { eps: f32, group: usize, scale: f32 },
    /// `out[r, n] = sum_k x[r, k] * W[n, k]`. in: `[x (R,K)]`, w: `[W (N rows of K)]`, out: `[y (R,N)]`.
    MatMul { layout: OutLayout },
    /// `out = a + b`. in: `[a, b]`, out: `[y]` (may alias a).
    Add,
    /// Causal depthwise conv over time, kernel K, then SiLU, with K-1 rows of carried state:
    /// `y[t,c] = silu(sum_j w[c,j] * xe[t+j, c])` where `xe = [state; x]`; afterwards the state
    /// holds the last K-1 rows of `xe`. in: `[x (T,C), state (K-1,C)]`, w: `[conv (C rows of K)]`,
    /// out: `[y (T,C), state]`.
    ConvSilu,
    /// Delta-net gates: `beta = sigmoid(b)`, `g = ssm_a * softplus(a + dt_bias)` (log of the decay).
    /// in: `[b (T,H), a (T,H)]`, w: `[dt_bias (H), ssm_a (H)]`, out: `[beta (T,H), g (T,H)]`.
    DeltaGates,
    /// The gated delta rule over T tokens, one state per value head (`[k_dim, v_dim]`, f32):
    /// `S = S*exp(g_t); S += k_t (x) (beta_t * (v_t - S^T k_t)); o_t = S^T q_t`; value head j uses
    /// key head `j % k_heads` (GGUF order). q holds the last R tokens only (R <= T): outputs are
    /// produced for those tokens. in: `[q (R,Hk*dk), k (T,Hk*dk), v (T,Hv*dv), g (T,Hv),
    /// beta (T,Hv), state (Hv, dk*dv)]`, out: `[o (R, Hv*dv), state]`.
    DeltaRule {
        k_heads: usize,
        v_heads: usize,
        k_dim: usize,
        v_dim: usize,
    },
    /// `out = x * silu(z)`. in: `[x, z]`, out: `[y]` (may alias x).
    MulSilu,
    /// `out = x * sigmoid(z)`. in: `[x, z]`, out: `[y]` (may alias x).
    MulSigmoid,
    /// NeoX RoPE on the first `dims` columns of every head of `head_dim`; row r is at position
    /// `pos + offset + r` (`pos` the batch position); frequencies `theta^(-2i/dims)`.
    /// in: `[x (R, heads*head_dim), pos (1,1) i32]`, out: `[y]` (may alias x).
    Rope {
        head_dim: usize,
        dims: usize,
        theta: f32,
        /// Rows of the batch before the first row of x (the pruned last layer's query side
        /// starts at the last token).
        offset: usize,
    },
    /// Writes the batch's keys and values into rows `pos..pos+T` of the caches (`pos` the batch
    /// position); every other row is left as it was. in: `[k (T, Hkv*d), v (T, Hkv*d),
    /// pos (1,1) i32]`, out: `[k_cache (max_ctx, Hkv*d), v_cache (max_ctx, Hkv*d)]` (whole).
    KvStore,
    /// Causal softmax attention with grouped KV heads (query head h reads KV head
    /// `h / (n_head / n_head_kv)`); query row r is at position `p = pos + q_offset + r` and sees
    /// cache rows `0..=p`. in: `[q (R, H*d), k_cache (max_ctx, Hkv*d), v_cache (max_ctx, Hkv*d),
    /// pos (1,1) i32]` (the caches whole: how many rows are valid is the position, device
    /// data), out: `[o (R, H*d)]`.
    Attention {
        n_head: usize,
        n_head_kv: usize,
        head_dim: usize,
        scale: f32,
        /// Rows of the batch before the first query row.
        q_offset: usize,
    },
    /// Router: softmax over experts (f32), top-k, renormalised to sum 1.
    /// in: `[logits (T,E)]`, out: `[ids (T,k) i32, weights (T,k)]`.
    TopK { k: usize },
    /// Routed-expert projection over only the routed (token, expert) pairs: output row `t*k+j` is
    /// `W[ids[t,j]] * x[row]` where row = t (`pair_input` false) or `t*k+j` (true: the input
    /// already holds one row per pair, as for the down projection).
    /// in: `[x, ids (T,k)]`, w: `[W (E x N rows of K)]`, out: `[y (T*k, N)]`.
    MoeMatMul { k: usize, pair_input: bool },
    /// `out = silu(g) * u`. in: `[g, u]`, out: `[y]` (may alias g).
    SwiGlu,
    /// `out[t] = sum_j w[t,j] * y[t*k+j]`. in: `[y (T*k, D), weights (T,k)]`, out: `[(T,D)]`.
    MoeCombine { k: usize },
    /// Shared-expert gate: `out[t] = s[t] * sigmoid(x[t] . w)`.
    /// in: `[x (T,D), s (T,D)]`, w: `[gate_inp_shexp (D)]`, out: `[y]` (may alias s).
    SharedGate,
}

impl Op {
    /// Stable op name used in graph exports and op keys.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Embed => "embed",
            Op::RmsNorm { .. } => "rms_norm",
            Op::L2Norm { .. } => "l2_norm",
            Op::MatMul { .. } => "matmul",
            Op::Add => "add",
            Op::ConvSilu => "conv_silu",
            Op::DeltaGates => "delta_gates",
            Op::DeltaRule { .. } => "delta_rule",
            Op::MulSilu => "mul_silu",
            Op::MulSigmoid => "mul_sigmoid",
            Op::Rope { .. } => "rope",
            Op::KvStore => "kv_store",
            Op::Attention { .. } => "attention",
            Op::TopK { .. } => "topk",
            Op::MoeMatMul { .. } => "moe_matmul",
            Op::SwiGlu => "swiglu",
            Op::MoeCombine { .. } => "moe_combine",
            Op::SharedGate => "shared_gate",
        }
    }
}

/// One node of the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Stable human name (`blk.7.attn_q`, `blk.7.ffn_gate_exps`).
    pub name: String,
    pub op: Op,
    pub category: Category,
    pub layer: Option<usize>,
    pub inputs: Vec<View>,
    /// GGUF tensor names, in the op's documented order.
    pub weights: Vec<String>,
    pub outputs: Vec<View>,
}

/// The forward pass for one batch of `n_tokens` new tokens, at any position: how many tokens are
/// already in the state is the [`Plan::pos`] buffer, written before each run.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub n_tokens: usize,
    /// Capacity of the KV cache (positions) the state buffers are sized for.
    pub max_ctx: usize,
    pub buffers: Vec<BufDesc>,
    pub nodes: Vec<Node>,
    /// The token-id input buffer.
    pub tokens: BufId,
    /// The position input buffer (`[1, 1]` i32, [`BufKind::Position`]).
    pub pos: BufId,
    /// The logits output view (`[1, vocab]`, last token).
    pub logits: View,
    /// After which node each layer's residual stream is final, and the rows that are valid then
    /// (all T, or only the last row in a pruned last layer). Used by tests and probes.
    pub layer_outputs: Vec<(usize, View)>,
    /// The final hidden state of every row of the batch, after the final norm (`[T, D]`): the
    /// trunk's with [`crate::PlanOptions::hidden`] (what the MTP head reads), the MTP step's
    /// own (what a chained draft step reads). `None` when the plan does not output it.
    pub hidden: Option<View>,
    /// The MTP step's hidden-state input (`[T, D]`, written before each run like the token
    /// ids): row i is the hidden state of the position before token i. `None` in the trunk.
    pub hidden_in: Option<View>,
}

impl Plan {
    pub fn buf(&self, id: BufId) -> &BufDesc {
        &self.buffers[id.0 as usize]
    }
    /// Nodes of one category.
    pub fn nodes_of(&self, cat: Category) -> impl Iterator<Item = (usize, &Node)> {
        self.nodes
            .iter()
            .enumerate()
            .filter(move |(_, n)| n.category == cat)
    }
}
