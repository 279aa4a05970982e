//! The plan of one step of the MTP ("nextn") draft head, built with the trunk's own layer
//! builders.
//!
//! Row i of a batch at position `p` is the pair (token `t_{p+i}`, hidden state `h_{p+i-1}`):
//! the token's embedding and the hidden state of the position before it (the trunk's final
//! hidden state after `output_norm`, or, for a chained draft step, the MTP step's own output
//! hidden state after its head norm; zeros before position 0). Then
//! `x = eh_proj([enorm(embed(t)) | hnorm(h)])` (that concat order), one full-attention decoder
//! block with MoE (layer `L`'s tensors and its own KV cache, rows by position), the head norm
//! (`nextn.shared_head_norm`, else `output_norm`) giving the step's hidden output for every row,
//! and the head (`nextn.shared_head_head`, else `output`) on the last row: logits for the token
//! after `t_{p+T-1}`. That is llama.cpp's `graph_mtp` (`src/models/qwen35moe.cpp`) and how its
//! `draft-mtp` driver pairs tokens with hidden states (`common/speculative.cpp`).

use tally_ledger::Category;

use super::Builder;
use crate::ModelError;
use crate::config::Config;
use crate::mtp::Mtp;
use crate::plan::{BufKind, DType, Op, OutLayout, Plan};

/// Builds the MTP step's plan for batches of `n_tokens` rows, with its KV cache sized for
/// `max_ctx` positions (like the trunk's plan, it holds no position: [`Plan::pos`] is written
/// before each run, and the hidden-state input [`Plan::hidden_in`] too).
pub fn build_mtp_plan(
    cfg: &Config,
    mtp: &Mtp,
    n_tokens: usize,
    max_ctx: usize,
) -> Result<Plan, ModelError> {
    if n_tokens == 0 || n_tokens > max_ctx {
        return Err(ModelError::Batch(format!(
            "an MTP batch of {n_tokens} tokens in a context of {max_ctx} positions"
        )));
    }
    let mut b = Builder::new(cfg, n_tokens, max_ctx);
    b.build_mtp(mtp);
    Ok(b.finish())
}

impl Builder<'_> {
    fn build_mtp(&mut self, mtp: &Mtp) {
        let c = self.cfg;
        let t = self.t;
        let d = c.hidden;
        let il = mtp.layer;
        let name = |short: &str| format!("blk.{il}.nextn.{short}");
        let tokens = self.buf("tokens", t, 1, DType::I32, BufKind::Tokens);
        self.pos = self.buf("pos", 1, 1, DType::I32, BufKind::Position);
        let h_in = self.act("mtp_h_in", t, d);
        let cat = self.act("mtp_concat", t, 2 * d);
        let acts = self.acts(t, false);
        let (e, g) = (self.all(cat).cols(0, d), self.all(cat).cols(d, d));
        let embd = if mtp.own_embed_tokens {
            name("embed_tokens.weight")
        } else {
            "token_embd.weight".into()
        };
        self.node(
            name("embed"),
            Op::Embed,
            Category::Embedding,
            Some(il),
            vec![self.all(tokens)],
            vec![embd],
            vec![e],
        );
        let norm = Op::RmsNorm {
            eps: c.rms_eps,
            group: d,
        };
        self.node(
            name("enorm"),
            norm.clone(),
            Category::Norm,
            Some(il),
            vec![e],
            vec![name("enorm.weight")],
            vec![e],
        );
        let hv = self.all(h_in);
        self.node(
            name("hnorm"),
            norm.clone(),
            Category::Norm,
            Some(il),
            vec![hv],
            vec![name("hnorm.weight")],
            vec![g],
        );
        let x = self.all(acts.x);
        self.node(
            name("eh_proj"),
            Op::MatMul {
                layout: OutLayout::Plain,
            },
            Category::DenseProj,
            Some(il),
            vec![self.all(cat)],
            vec![name("eh_proj.weight")],
            vec![x],
        );
        self.full_mixer(il, &acts, 0, t);
        self.moe_block(il, &acts, 0, t);
        self.layer_outputs.push((self.nodes.len() - 1, x));
        let hout = self.all(acts.xf);
        let head_norm = if mtp.own_head_norm {
            name("shared_head_norm.weight")
        } else {
            "output_norm.weight".into()
        };
        self.node(
            name("shared_head_norm"),
            norm,
            Category::Norm,
            Some(il),
            vec![x],
            vec![head_norm],
            vec![hout],
        );
        let logits = self.buf("logits", 1, c.vocab, DType::F32, BufKind::Logits);
        let head = if mtp.own_head {
            name("shared_head_head.weight")
        } else {
            "output.weight".into()
        };
        let lv = self.all(logits);
        self.node(
            name("shared_head_head"),
            Op::MatMul {
                layout: OutLayout::Plain,
            },
            Category::OutputHead,
            Some(il),
            vec![hout.rows(t - 1, 1)],
            vec![head],
            vec![lv],
        );
        self.hidden = Some(hout);
        self.hidden_in = Some(hv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{Preset, QuantMix, SynthSpec, write_model};
    use crate::{Model, PlanOptions, build_plan};

    fn synth() -> Model {
        let mut config = Preset::TinyOdd.config();
        config.n_mtp_layers = 1;
        let spec = SynthSpec {
            preset: Preset::TinyOdd,
            config,
            quant: QuantMix::Q8_0,
            seed: 9,
            fill: Default::default(),
        };
        let mut out = Vec::new();
        write_model(&spec, &mut out, &mut |_, _| {}).expect("synth");
        let file = tally_gguf::GgufFile::from_bytes(out, "mem").expect("parse");
        Model::from_file(std::path::Path::new("mem"), file).expect("load")
    }

    #[test]
    fn the_mtp_plan_reads_only_the_block_and_the_shared_tensors_that_exist() {
        let m = synth();
        let mtp = &m.mtp[0];
        let p = build_mtp_plan(&m.config, mtp, 3, 16).expect("plan");
        let l = mtp.layer;
        for n in &p.nodes {
            assert_eq!(n.layer, Some(l), "{}", n.name);
            for w in &n.weights {
                assert!(m.file.tensor(w).is_some(), "{} reads missing {w}", n.name);
            }
        }
        // No linear-attention work, one full-attention block with its own cache.
        assert!(
            p.nodes
                .iter()
                .all(|n| !matches!(n.op, Op::DeltaRule { .. }))
        );
        let caches: Vec<_> = p
            .buffers
            .iter()
            .filter(|b| b.kind == BufKind::State)
            .map(|b| b.name.clone())
            .collect();
        assert_eq!(
            caches,
            [format!("blk.{l}.k_cache"), format!("blk.{l}.v_cache")]
        );
        let (h, hi) = (
            p.hidden.expect("hidden out"),
            p.hidden_in.expect("hidden in"),
        );
        assert_eq!((h.rows, h.cols, hi.rows, hi.cols), (3, 512, 3, 512));
        assert_eq!(p.logits.rows, 1);
        assert!(build_mtp_plan(&m.config, mtp, 0, 16).is_err());
    }

    #[test]
    fn the_trunk_hidden_output_costs_nothing_when_off() {
        let m = synth();
        let off = build_plan(&m.config, 4, 16, &PlanOptions::default()).expect("plan");
        assert!(off.hidden.is_none());
        let on = PlanOptions {
            hidden: true,
            ..PlanOptions::default()
        };
        let p = build_plan(&m.config, 4, 16, &on).expect("plan");
        let h = p.hidden.expect("hidden");
        assert_eq!((h.rows, h.cols), (4, m.config.hidden));
        // The last layer runs every row, so there is more work than the pruned plan.
        assert_eq!(p.nodes.len(), off.nodes.len());
        let rows = |p: &Plan| p.nodes.iter().map(|n| n.outputs[0].rows).sum::<usize>();
        assert!(rows(&p) > rows(&off));
    }
}
