//! Builds the plan of the forward pass from the config.
//!
//! Prefill-first: the last layer computes its query side, attention output, output projection and
//! MoE for the last token only; its K/V (and every linear layer's state) for all tokens. With
//! `prune_last_layer` off the last layer computes every row, which the dead-work analysis flags.

use tally_ledger::Category;

use crate::ModelError;
use crate::config::{Config, LayerKind};
use crate::plan::{BufDesc, BufId, BufKind, DType, Node, Op, OutLayout, Plan, View};

mod mtp;
pub use mtp::build_mtp_plan;

/// Choices that change the plan's shape (not its maths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOptions {
    /// Compute only what the logits need in the last layer.
    pub prune_last_layer: bool,
    /// How many of the batch's last tokens get logits (1 for prefill and decode; k + 1 to
    /// verify k drafts in one step). At most the batch length.
    pub logit_rows: usize,
    /// Also output the trunk's final hidden state (after `output_norm`) for every row of the
    /// batch ([`Plan::hidden`]): what the MTP draft head reads. It turns the last layer's
    /// pruning off, so it costs work: on only while an MTP draft is used.
    pub hidden: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            prune_last_layer: true,
            logit_rows: 1,
            hidden: false,
        }
    }
}

/// Builds the plan for batches of `n_tokens` new tokens, with state sized for `max_ctx`
/// positions. The plan holds no position: it serves a batch after any `n_past` with
/// `n_past + n_tokens <= max_ctx` (the caller writes `n_past` into [`Plan::pos`] and checks
/// that bound before each run).
pub fn build_plan(
    cfg: &Config,
    n_tokens: usize,
    max_ctx: usize,
    opts: &PlanOptions,
) -> Result<Plan, ModelError> {
    if n_tokens == 0 {
        return Err(ModelError::Batch("a batch needs at least one token".into()));
    }
    if n_tokens > max_ctx {
        return Err(ModelError::Batch(format!(
            "{n_tokens} new tokens exceed the context of {max_ctx} positions"
        )));
    }
    if opts.logit_rows == 0 || opts.logit_rows > n_tokens {
        return Err(ModelError::Batch(format!(
            "logits for {} rows of a batch of {n_tokens} tokens",
            opts.logit_rows
        )));
    }
    let mut b = Builder::new(cfg, n_tokens, max_ctx);
    b.build(opts);
    Ok(b.finish())
}

/// Per-run activation buffers, shared by all layers.
struct Acts {
    x: BufId,
    xn: BufId,
    mix: BufId,
    // linear attention
    qkv: BufId,
    qkv_c: BufId,
    z: BufId,
    b: BufId,
    a: BufId,
    beta: BufId,
    g: BufId,
    o_lin: BufId,
    // full attention
    qg: BufId,
    k: BufId,
    v: BufId,
    o_att: BufId,
    // moe
    rlogits: BufId,
    ids: BufId,
    wts: BufId,
    eg: BufId,
    eu: BufId,
    ed: BufId,
    moe: BufId,
    sg: BufId,
    su: BufId,
    sd: BufId,
    // head
    xf: BufId,
}

struct Builder<'a> {
    cfg: &'a Config,
    t: usize,
    max_ctx: usize,
    /// The position buffer (made first by `build`).
    pos: BufId,
    buffers: Vec<BufDesc>,
    nodes: Vec<Node>,
    layer_outputs: Vec<(usize, View)>,
    /// The hidden-state output and input views ([`Plan::hidden`], [`Plan::hidden_in`]).
    hidden: Option<View>,
    hidden_in: Option<View>,
}

impl<'a> Builder<'a> {
    fn new(cfg: &'a Config, t: usize, max_ctx: usize) -> Self {
        Builder {
            cfg,
            t,
            max_ctx,
            pos: BufId(0),
            buffers: Vec::new(),
            nodes: Vec::new(),
            layer_outputs: Vec::new(),
            hidden: None,
            hidden_in: None,
        }
    }

    fn buf(&mut self, name: &str, rows: usize, cols: usize, dtype: DType, kind: BufKind) -> BufId {
        let id = BufId(self.buffers.len() as u32);
        self.buffers.push(BufDesc {
            name: name.to_string(),
            rows,
            cols,
            dtype,
            kind,
            rows_per_token: 1,
        });
        id
    }
    /// An activation buffer with one row per (token, expert) pair.
    fn pairs(&mut self, name: &str, tokens: usize, cols: usize) -> BufId {
        let k = self.cfg.n_experts_used;
        let id = self.act(name, tokens * k, cols);
        self.buffers[id.0 as usize].rows_per_token = k;
        id
    }
    fn act(&mut self, name: &str, rows: usize, cols: usize) -> BufId {
        self.buf(name, rows, cols, DType::F32, BufKind::Activation)
    }
    fn all(&self, id: BufId) -> View {
        View::all(id, &self.buffers[id.0 as usize])
    }
    /// The first `rows` rows of a buffer.
    fn top(&self, id: BufId, rows: usize) -> View {
        self.all(id).rows(0, rows)
    }

    #[allow(clippy::too_many_arguments)]
    fn node(
        &mut self,
        name: String,
        op: Op,
        category: Category,
        layer: Option<usize>,
        inputs: Vec<View>,
        weights: Vec<String>,
        outputs: Vec<View>,
    ) {
        self.nodes.push(Node {
            name,
            op,
            category,
            layer,
            inputs,
            weights,
            outputs,
        });
    }

    /// The activation buffers; `xf_rows` rows of the final norm's output; the linear
    /// attention's buffers only when `has_linear` (the MTP block has none).
    fn acts(&mut self, xf_rows: usize, has_linear: bool) -> Acts {
        let c = self.cfg;
        let t = self.t;
        let k = c.n_experts_used;
        let has_full = !has_linear || c.n_full_layers() > 0;
        let lin = |n: usize| if has_linear { n } else { 0 };
        let full = |n: usize| if has_full { n } else { 0 };
        Acts {
            x: self.act("x", t, c.hidden),
            xn: self.act("xn", t, c.hidden),
            mix: self.act("mix", t, c.hidden),
            qkv: self.act("qkv", lin(t), c.conv_channels()),
            qkv_c: self.act("qkv_conv", lin(t), c.conv_channels()),
            z: self.act("z", lin(t), c.ssm_value_dim()),
            b: self.act("beta_raw", lin(t), c.ssm_v_heads),
            a: self.act("alpha_raw", lin(t), c.ssm_v_heads),
            beta: self.act("beta", lin(t), c.ssm_v_heads),
            g: self.act("gate_log", lin(t), c.ssm_v_heads),
            o_lin: self.act("delta_out", lin(t), c.ssm_value_dim()),
            qg: self.act("q_gate", full(t), c.q_proj_dim()),
            k: self.act("k", full(t), c.kv_dim()),
            v: self.act("v", full(t), c.kv_dim()),
            o_att: self.act("attn_out", full(t), c.attn_dim()),
            rlogits: self.act("router_logits", t, c.n_experts),
            ids: self.buf("expert_ids", t, k, DType::I32, BufKind::Activation),
            wts: self.act("expert_weights", t, k),
            // A fused gate/up file writes both halves into one buffer: [gate (F) | up (F)].
            eg: self.pairs(
                "exp_gate",
                t,
                if c.gate_up_fused { 2 } else { 1 } * c.expert_ffn,
            ),
            eu: self.pairs("exp_up", if c.gate_up_fused { 0 } else { t }, c.expert_ffn),
            ed: self.pairs("exp_down", t, c.hidden),
            moe: self.act("moe_out", t, c.hidden),
            sg: self.act("shexp_gate", t, c.shared_ffn),
            su: self.act("shexp_up", t, c.shared_ffn),
            sd: self.act("shexp_out", t, c.hidden),
            xf: self.act("x_final", xf_rows, c.hidden),
        }
    }

    fn build(&mut self, opts: &PlanOptions) {
        let c = self.cfg;
        let t = self.t;
        let tokens = self.buf("tokens", t, 1, DType::I32, BufKind::Tokens);
        self.pos = self.buf("pos", 1, 1, DType::I32, BufKind::Position);
        let rows = opts.logit_rows;
        // With the hidden output, the final norm runs over every row (the head reads the last).
        let xf_rows = if opts.hidden { t } else { rows };
        let acts = self.acts(xf_rows, c.n_linear_layers() > 0);
        let x_all = self.all(acts.x);
        self.node(
            "token_embd".into(),
            Op::Embed,
            Category::Embedding,
            None,
            vec![self.all(tokens)],
            vec!["token_embd.weight".into()],
            vec![x_all],
        );
        for il in 0..c.n_layers {
            let last = il + 1 == c.n_layers;
            // Rows of the residual stream that leave this layer: all, or the logits' rows only.
            let (r0, nr) = if last && opts.prune_last_layer && !opts.hidden {
                (t - rows, rows)
            } else {
                (0, t)
            };
            match c.layers[il] {
                LayerKind::Linear => self.linear_mixer(il, &acts, r0, nr),
                LayerKind::Full => self.full_mixer(il, &acts, r0, nr),
            }
            self.moe_block(il, &acts, r0, nr);
            self.layer_outputs
                .push((self.nodes.len() - 1, self.all(acts.x).rows(r0, nr)));
        }
        // The logits of the last `rows` tokens.
        let x_last = self.all(acts.x).rows(t - xf_rows, xf_rows);
        let xf_all = self.all(acts.xf);
        self.node(
            "output_norm".into(),
            Op::RmsNorm {
                eps: c.rms_eps,
                group: c.hidden,
            },
            Category::Norm,
            None,
            vec![x_last],
            vec!["output_norm.weight".into()],
            vec![xf_all],
        );
        if opts.hidden {
            self.hidden = Some(xf_all);
        }
        let xf = xf_all.rows(xf_rows - rows, rows);
        let logits = self.buf("logits", rows, c.vocab, DType::F32, BufKind::Logits);
        let lv = self.all(logits);
        self.node(
            "output".into(),
            Op::MatMul {
                layout: OutLayout::Plain,
            },
            Category::OutputHead,
            None,
            vec![xf],
            vec!["output.weight".into()],
            vec![lv],
        );
    }

    fn norm(&mut self, il: usize, name: &str, wname: &str, x: View, out: View, group: usize) {
        self.node(
            format!("blk.{il}.{name}"),
            Op::RmsNorm {
                eps: self.cfg.rms_eps,
                group,
            },
            Category::Norm,
            Some(il),
            vec![x],
            vec![format!("blk.{il}.{wname}")],
            vec![out],
        );
    }

    fn matmul(&mut self, il: usize, name: &str, cat: Category, x: View, out: View) {
        self.node(
            format!("blk.{il}.{name}"),
            Op::MatMul {
                layout: OutLayout::Plain,
            },
            cat,
            Some(il),
            vec![x],
            vec![format!("blk.{il}.{name}.weight")],
            vec![out],
        );
    }

    fn residual(&mut self, il: usize, name: &str, x: View, y: View) {
        self.node(
            format!("blk.{il}.{name}"),
            Op::Add,
            Category::Elementwise,
            Some(il),
            vec![x, y],
            vec![],
            vec![x],
        );
    }

    /// Gated DeltaRule mixer. The whole recurrence runs over all T tokens (state); only the rows
    /// `r0..r0+nr` of its output are read downstream.
    fn linear_mixer(&mut self, il: usize, a: &Acts, r0: usize, nr: usize) {
        let c = self.cfg;
        let t = self.t;
        let hd = c.hidden;
        let x = self.all(a.x);
        let xn = self.all(a.xn);
        self.norm(il, "attn_norm", "attn_norm.weight", x, xn, hd);
        let qkv = self.all(a.qkv);
        self.matmul(il, "attn_qkv", Category::DenseProj, xn, qkv);
        let z = self.top(a.z, nr);
        self.matmul(il, "attn_gate", Category::DenseProj, xn.rows(r0, nr), z);
        let (bv, av) = (self.all(a.b), self.all(a.a));
        self.matmul(il, "ssm_beta", Category::DenseProj, xn, bv);
        self.matmul(il, "ssm_alpha", Category::DenseProj, xn, av);

        let state_conv = self.buf(
            &format!("blk.{il}.conv_state"),
            c.conv_kernel - 1,
            c.conv_channels(),
            DType::F32,
            BufKind::State,
        );
        let sc = self.all(state_conv);
        let qkv_c = self.all(a.qkv_c);
        self.node(
            format!("blk.{il}.ssm_conv"),
            Op::ConvSilu,
            Category::Conv,
            Some(il),
            vec![qkv, sc],
            vec![format!("blk.{il}.ssm_conv1d.weight")],
            vec![qkv_c, sc],
        );
        let (beta, g) = (self.all(a.beta), self.all(a.g));
        self.node(
            format!("blk.{il}.ssm_gates"),
            Op::DeltaGates,
            Category::Elementwise,
            Some(il),
            vec![bv, av],
            vec![format!("blk.{il}.ssm_dt.bias"), format!("blk.{il}.ssm_a")],
            vec![beta, g],
        );
        let kd = c.ssm_key_dim();
        let q = qkv_c.cols(0, kd);
        let k = qkv_c.cols(kd, kd);
        let v = qkv_c.cols(2 * kd, c.ssm_value_dim());
        let q_rows = q.rows(r0, nr);
        self.node(
            format!("blk.{il}.ssm_q_l2norm"),
            Op::L2Norm {
                eps: c.rms_eps,
                group: c.ssm_k_dim,
                scale: 1.0 / (c.ssm_k_dim as f32).sqrt(),
            },
            Category::Norm,
            Some(il),
            vec![q_rows],
            vec![],
            vec![q_rows],
        );
        self.node(
            format!("blk.{il}.ssm_k_l2norm"),
            Op::L2Norm {
                eps: c.rms_eps,
                group: c.ssm_k_dim,
                scale: 1.0,
            },
            Category::Norm,
            Some(il),
            vec![k],
            vec![],
            vec![k],
        );
        let state = self.buf(
            &format!("blk.{il}.delta_state"),
            c.ssm_v_heads,
            c.ssm_k_dim * c.ssm_v_dim,
            DType::F32,
            BufKind::State,
        );
        let sv = self.all(state);
        let o = self.top(a.o_lin, nr);
        debug_assert!(o.rows <= t);
        self.node(
            format!("blk.{il}.delta_rule"),
            Op::DeltaRule {
                k_heads: c.ssm_k_heads,
                v_heads: c.ssm_v_heads,
                k_dim: c.ssm_k_dim,
                v_dim: c.ssm_v_dim,
            },
            Category::DeltaRule,
            Some(il),
            vec![q_rows, k, v, g, beta, sv],
            vec![],
            vec![o, sv],
        );
        self.norm(il, "ssm_norm", "ssm_norm.weight", o, o, c.ssm_v_dim);
        self.node(
            format!("blk.{il}.ssm_gate_silu"),
            Op::MulSilu,
            Category::Elementwise,
            Some(il),
            vec![o, z],
            vec![],
            vec![o],
        );
        let mix = self.top(a.mix, nr);
        self.matmul(il, "ssm_out", Category::DenseProj, o, mix);
        self.residual(il, "attn_residual", x.rows(r0, nr), mix);
    }

    /// Full-attention mixer: K/V for every token (they go to the cache at the batch position),
    /// the query side for the rows `r0..r0+nr` only.
    fn full_mixer(&mut self, il: usize, a: &Acts, r0: usize, nr: usize) {
        let c = self.cfg;
        let pos = self.all(self.pos);
        let x = self.all(a.x);
        let xn = self.all(a.xn);
        self.norm(il, "attn_norm", "attn_norm.weight", x, xn, c.hidden);
        let qg = self.top(a.qg, nr);
        self.node(
            format!("blk.{il}.attn_q"),
            Op::MatMul {
                layout: OutLayout::QGateSplit {
                    n_head: c.n_head,
                    head_dim: c.head_dim,
                },
            },
            Category::DenseProj,
            Some(il),
            vec![xn.rows(r0, nr)],
            vec![format!("blk.{il}.attn_q.weight")],
            vec![qg],
        );
        let k = self.all(a.k);
        self.matmul(il, "attn_k", Category::DenseProj, xn, k);
        let v = self.all(a.v);
        self.matmul(il, "attn_v", Category::DenseProj, xn, v);
        let kc = self.buf(
            &format!("blk.{il}.k_cache"),
            self.max_ctx,
            c.kv_dim(),
            DType::F32,
            BufKind::State,
        );
        let vc = self.buf(
            &format!("blk.{il}.v_cache"),
            self.max_ctx,
            c.kv_dim(),
            DType::F32,
            BufKind::State,
        );
        let (kc, vc) = (self.all(kc), self.all(vc));
        let q = qg.cols(0, c.attn_dim());
        let gate = qg.cols(c.attn_dim(), c.attn_dim());
        self.norm(il, "attn_q_norm", "attn_q_norm.weight", q, q, c.head_dim);
        self.norm(il, "attn_k_norm", "attn_k_norm.weight", k, k, c.head_dim);
        let rope = |offset| Op::Rope {
            head_dim: c.head_dim,
            dims: c.rope_dims,
            theta: c.rope_theta,
            offset,
        };
        self.node(
            format!("blk.{il}.attn_q_rope"),
            rope(r0),
            Category::Rope,
            Some(il),
            vec![q, pos],
            vec![],
            vec![q],
        );
        self.node(
            format!("blk.{il}.attn_k_rope"),
            rope(0),
            Category::Rope,
            Some(il),
            vec![k, pos],
            vec![],
            vec![k],
        );
        // Rows pos..pos+T of the caches: where they go is device data, so this plan serves
        // every position.
        self.node(
            format!("blk.{il}.attn_kv_store"),
            Op::KvStore,
            Category::Layout,
            Some(il),
            vec![k, v, pos],
            vec![],
            vec![kc, vc],
        );
        let o = self.top(a.o_att, nr);
        self.node(
            format!("blk.{il}.attn"),
            Op::Attention {
                n_head: c.n_head,
                n_head_kv: c.n_head_kv,
                head_dim: c.head_dim,
                scale: 1.0 / (c.head_dim as f32).sqrt(),
                q_offset: r0,
            },
            Category::Attention,
            Some(il),
            vec![q, kc, vc, pos],
            vec![],
            vec![o],
        );
        self.node(
            format!("blk.{il}.attn_gate_sigmoid"),
            Op::MulSigmoid,
            Category::Elementwise,
            Some(il),
            vec![o, gate],
            vec![],
            vec![o],
        );
        let mix = self.top(a.mix, nr);
        self.matmul(il, "attn_output", Category::DenseProj, o, mix);
        self.residual(il, "attn_residual", x.rows(r0, nr), mix);
    }

    /// Post-attention norm, routed experts and the gated shared expert, on rows `r0..r0+nr`.
    fn moe_block(&mut self, il: usize, a: &Acts, r0: usize, nr: usize) {
        let c = self.cfg;
        let k = c.n_experts_used;
        let x = self.all(a.x).rows(r0, nr);
        let xn = self.top(a.xn, nr);
        self.norm(
            il,
            "post_attention_norm",
            "post_attention_norm.weight",
            x,
            xn,
            c.hidden,
        );
        let rl = self.top(a.rlogits, nr);
        self.matmul(il, "ffn_gate_inp", Category::Router, xn, rl);
        let (ids, wts) = (self.top(a.ids, nr), self.top(a.wts, nr));
        self.node(
            format!("blk.{il}.moe_topk"),
            Op::TopK { k },
            Category::Router,
            Some(il),
            vec![rl],
            vec![],
            vec![ids, wts],
        );
        let pairs = nr * k;
        let (eg, eu, ed) = (
            self.top(a.eg, pairs),
            self.top(a.eu, pairs),
            self.top(a.ed, pairs),
        );
        let moe_mm = |pair_input| Op::MoeMatMul { k, pair_input };
        let f = c.expert_ffn;
        let (gate, up) = if c.gate_up_fused {
            self.node(
                format!("blk.{il}.ffn_gate_up_exps"),
                moe_mm(false),
                Category::MoeGateUp,
                Some(il),
                vec![xn, ids],
                vec![format!("blk.{il}.ffn_gate_up_exps.weight")],
                vec![eg],
            );
            (eg.cols(0, f), eg.cols(f, f))
        } else {
            self.node(
                format!("blk.{il}.ffn_gate_exps"),
                moe_mm(false),
                Category::MoeGateUp,
                Some(il),
                vec![xn, ids],
                vec![format!("blk.{il}.ffn_gate_exps.weight")],
                vec![eg],
            );
            self.node(
                format!("blk.{il}.ffn_up_exps"),
                moe_mm(false),
                Category::MoeGateUp,
                Some(il),
                vec![xn, ids],
                vec![format!("blk.{il}.ffn_up_exps.weight")],
                vec![eu],
            );
            (eg, eu)
        };
        self.node(
            format!("blk.{il}.moe_swiglu"),
            Op::SwiGlu,
            Category::Elementwise,
            Some(il),
            vec![gate, up],
            vec![],
            vec![gate],
        );
        // The shared expert's gate/up/SwiGlu right after the routed ones (the same input): the
        // CUDA backend runs the two as one launch at decode (cuda/ops/fused.rs).
        let (sg, su, sd) = (self.top(a.sg, nr), self.top(a.su, nr), self.top(a.sd, nr));
        self.matmul(il, "ffn_gate_shexp", Category::SharedExpert, xn, sg);
        self.matmul(il, "ffn_up_shexp", Category::SharedExpert, xn, su);
        self.node(
            format!("blk.{il}.shexp_swiglu"),
            Op::SwiGlu,
            Category::SharedExpert,
            Some(il),
            vec![sg, su],
            vec![],
            vec![sg],
        );
        self.node(
            format!("blk.{il}.ffn_down_exps"),
            moe_mm(true),
            Category::MoeDown,
            Some(il),
            vec![gate, ids],
            vec![format!("blk.{il}.ffn_down_exps.weight")],
            vec![ed],
        );
        self.matmul(il, "ffn_down_shexp", Category::SharedExpert, sg, sd);
        // The routed experts' combine comes after the shared expert (which does not read it), so
        // that it, the shared gate, both adds and the next norm are consecutive nodes: the CUDA
        // backend runs the five as one launch (cuda/ops/fused.rs).
        let moe = self.top(a.moe, nr);
        self.node(
            format!("blk.{il}.moe_combine"),
            Op::MoeCombine { k },
            Category::Elementwise,
            Some(il),
            vec![ed, wts],
            vec![],
            vec![moe],
        );
        self.node(
            format!("blk.{il}.shexp_gate"),
            Op::SharedGate,
            Category::SharedExpert,
            Some(il),
            vec![xn, sd],
            vec![format!("blk.{il}.ffn_gate_inp_shexp.weight")],
            vec![sd],
        );
        self.residual(il, "ffn_out", moe, sd);
        self.residual(il, "ffn_residual", x, moe);
    }

    fn finish(self) -> Plan {
        let tokens = BufId(
            self.buffers
                .iter()
                .position(|b| b.kind == BufKind::Tokens)
                .unwrap_or(0) as u32,
        );
        let logits_id = BufId(
            self.buffers
                .iter()
                .position(|b| b.kind == BufKind::Logits)
                .unwrap_or(0) as u32,
        );
        let logits = View::all(logits_id, &self.buffers[logits_id.0 as usize]);
        Plan {
            n_tokens: self.t,
            max_ctx: self.max_ctx,
            buffers: self.buffers,
            nodes: self.nodes,
            tokens,
            pos: self.pos,
            logits,
            layer_outputs: self.layer_outputs,
            hidden: self.hidden,
            hidden_in: self.hidden_in,
        }
    }
}
