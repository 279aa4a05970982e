//! The multi-token-prediction ("nextn") blocks that real `qwen35moe` files carry after the trunk.
//!
//! With `qwen35moe.nextn_predict_layers = n`, `block_count` is the trunk plus `n`, and each extra
//! block `blk.L` (L >= trunk) is a full-attention decoder block with MoE (the same tensors as a
//! trunk full-attention layer) plus `nextn.eh_proj` (`[2 d, d]`: the concatenation
//! `[enorm(embed(next token)) | hnorm(h)]` back to `d`), `nextn.enorm` and `nextn.hnorm`
//! (`[d]`), and optionally `nextn.shared_head_norm` (`[d]`; else `output_norm` is used),
//! `nextn.embed_tokens` and `nextn.shared_head_head` (`[d, vocab]`; else `token_embd` /
//! `output`). That is llama.cpp's `load_block_mtp` (`src/models/qwen35moe.cpp`) and what its
//! converter writes from a checkpoint's `mtp.*` tensors.
//!
//! tally parses and validates these blocks and keeps their description ([`Mtp`]) for
//! speculative decoding; prefill and decode run the trunk only. The MTP step's plan is
//! [`crate::build::build_mtp_plan`]; a GPU backend uploads the block's tensors the first time
//! such a plan is prepared.

use tally_gguf::{GgmlType, GgufFile};

use crate::ModelError;
use crate::config::{Config, LayerKind};

/// The `nextn.*` tensors of an MTP block, with whether llama.cpp requires them.
const NEXTN: [(&str, bool); 6] = [
    ("nextn.eh_proj.weight", true),
    ("nextn.enorm.weight", true),
    ("nextn.hnorm.weight", true),
    ("nextn.shared_head_norm.weight", false),
    ("nextn.embed_tokens.weight", false),
    ("nextn.shared_head_head.weight", false),
];

/// The tensors of MTP block `il`: `(name, ggml dims, required)`.
pub fn block_shapes(cfg: &Config, il: usize) -> Vec<(String, Vec<u64>, bool)> {
    let d = cfg.hidden as u64;
    let v = cfg.vocab as u64;
    let mut out: Vec<_> = cfg
        .block_shapes(il, LayerKind::Full)
        .into_iter()
        .map(|(n, dims)| (n, dims, true))
        .collect();
    for (short, required) in NEXTN {
        let dims = match short {
            "nextn.eh_proj.weight" => vec![2 * d, d],
            "nextn.embed_tokens.weight" | "nextn.shared_head_head.weight" => vec![d, v],
            _ => vec![d],
        };
        out.push((format!("blk.{il}.{short}"), dims, required));
    }
    out
}

/// One tensor of an MTP block as the file holds it (dims in the loader's spelling).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MtpTensor {
    pub name: String,
    /// ggml dims, row length first.
    pub dims: Vec<u64>,
    #[serde(serialize_with = "type_name")]
    pub ty: GgmlType,
    /// Bytes of data in the file.
    pub bytes: u64,
}

fn type_name<S: serde::Serializer>(ty: &GgmlType, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(ty.name())
}

/// One validated MTP block, kept for speculative decoding (issue 13): what it holds, not its data
/// (the data stays in the mapped file, found by name).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Mtp {
    /// Its block index (`blk.{layer}`), at least the trunk's layer count.
    pub layer: usize,
    /// Every tensor the block holds, required ones first, in [`block_shapes`] order.
    pub tensors: Vec<MtpTensor>,
    /// The block has its own token embedding (else the draft reuses `token_embd`).
    pub own_embed_tokens: bool,
    /// The block has its own output head (else the draft reuses `output`).
    pub own_head: bool,
    /// The block has its own final norm (else the draft reuses `output_norm`).
    pub own_head_norm: bool,
}

impl Mtp {
    /// The MTP blocks of a file whose config ([`Config::from_gguf`]) has already checked every
    /// shape and type.
    pub fn from_file(cfg: &Config, file: &GgufFile) -> Result<Vec<Mtp>, ModelError> {
        (cfg.n_layers..cfg.block_count())
            .map(|layer| {
                let mut tensors = Vec::new();
                for (name, dims, required) in block_shapes(cfg, layer) {
                    let Some(t) = file.tensor(&name) else {
                        if required {
                            return Err(ModelError::MissingTensor(name));
                        }
                        continue;
                    };
                    tensors.push(MtpTensor {
                        name,
                        dims,
                        ty: t.ty,
                        bytes: t.n_bytes(),
                    });
                }
                let has = |short: &str| {
                    let n = format!("blk.{layer}.{short}");
                    tensors.iter().any(|t| t.name == n)
                };
                Ok(Mtp {
                    layer,
                    own_embed_tokens: has("nextn.embed_tokens.weight"),
                    own_head: has("nextn.shared_head_head.weight"),
                    own_head_norm: has("nextn.shared_head_norm.weight"),
                    tensors,
                })
            })
            .collect()
    }

    /// Bytes of all the block's tensors.
    pub fn bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{Preset, QuantMix, SynthSpec, write_model};
    use crate::{Model, build_plan};

    fn synth(mtp: usize) -> Model {
        let mut config = Preset::TinyOdd.config();
        config.n_mtp_layers = mtp;
        let spec = SynthSpec {
            preset: Preset::TinyOdd,
            config,
            quant: QuantMix::Q8_0,
            seed: 5,
            fill: Default::default(),
        };
        let mut out = Vec::new();
        write_model(&spec, &mut out, &mut |_, _| {}).expect("synth");
        let file = GgufFile::from_bytes(out, "mem").expect("parse");
        Model::from_file(std::path::Path::new("mem"), file).expect("load")
    }

    #[test]
    fn an_mtp_file_keeps_its_block_and_plans_the_trunk_only() {
        let plain = synth(0);
        let m = synth(1);
        let l = plain.config.n_layers;
        assert_eq!(m.config.n_layers, l);
        assert_eq!(m.config.block_count(), l + 1);
        assert_eq!(m.config.layers, plain.config.layers);
        assert!(plain.mtp.is_empty());
        let [b] = m.mtp.as_slice() else {
            panic!("one block")
        };
        assert_eq!(b.layer, l);
        assert!(b.own_head_norm && !b.own_head && !b.own_embed_tokens);
        // The converter's [d, 1] spelling of the shared-expert gate is respelled [d] at open.
        let g = format!("blk.{l}.ffn_gate_inp_shexp.weight");
        assert_eq!(m.file.tensor(&g).map(|t| t.dims.clone()), Some(vec![512]));
        let p = build_plan(&m.config, 3, 8, &Default::default()).expect("plan");
        let q = build_plan(&plain.config, 3, 8, &Default::default()).expect("plan");
        assert_eq!(p.nodes.len(), q.nodes.len());
        assert!(p.nodes.iter().all(|n| n.layer.is_none_or(|il| il < l)));
    }
}
