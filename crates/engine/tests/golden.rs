//! The CPU reference against transformers' Qwen3_5MoeForCausalLM (goldens made by
//! tools/reference/golden.py, float64): every layer's hidden state, the last-token logits, and
//! four teacher-forced decode steps, within 1e-4 relative error.

mod common;

use std::path::Path;

use common::*;
use sha2::{Digest, Sha256};
use tally_engine::exec::Capture;
use tally_gguf::{GgmlType, GgufFile};
use tally_model::synth::{Preset, QuantMix};

const TOL: f64 = 1e-4;

struct Golden {
    file: GgufFile,
}

impl Golden {
    fn open(name: &str) -> Golden {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tools/reference/golden")
            .join(name);
        Golden {
            file: GgufFile::open(&path).expect("golden file"),
        }
    }
    fn f32s(&self, name: &str) -> Vec<f32> {
        let t = self
            .file
            .tensor(name)
            .unwrap_or_else(|| panic!("golden lacks {name}"));
        assert_eq!(t.ty, GgmlType::F32, "{name}");
        self.file
            .tensor_data(t)
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }
    fn ids(&self, name: &str) -> Vec<u32> {
        let t = self
            .file
            .tensor(name)
            .unwrap_or_else(|| panic!("golden lacks {name}"));
        assert_eq!(t.ty, GgmlType::I32, "{name}");
        self.file
            .tensor_data(t)
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
            .collect()
    }
    fn source_sha(&self) -> String {
        self.file
            .get("golden.source_sha256")
            .and_then(|v| v.as_str())
            .expect("golden.source_sha256")
            .to_string()
    }
}

fn check(golden: &str, preset: Preset, quant: QuantMix, seed: u64) {
    let g = Golden::open(golden);
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, preset, quant, seed);
    let sha = format!(
        "{:x}",
        Sha256::digest(std::fs::read(&model.path).expect("read model"))
    );
    assert_eq!(
        sha,
        g.source_sha(),
        "{golden}: `tally synth` no longer writes the file this golden was made from; \
         regenerate the goldens (tools/reference/README.md)"
    );
    let prompt = g.ids("prompt_ids");
    let decode_ids = g.ids("decode_ids");
    let t = prompt.len();
    let d = model.config.hidden;
    let layers = model.config.n_layers;
    let mut s = session(&model, t + decode_ids.len());
    let plan = s.plan(t).expect("plan");
    let mut cap = Capture::layer_outputs(&plan);
    cap.points
        .push((0, plan.nodes[0].outputs[0], "hidden.0".to_string()));
    let (logits, _) = s.prefill_with(&prompt, &mut cap).expect("prefill");
    let mut worst = 0.0f64;
    for (name, got) in &cap.values {
        let want = g.f32s(name);
        // The last layer computes only the last row (pruned); compare what it computed.
        let want = if got.len() == d && want.len() == t * d {
            want[(t - 1) * d..].to_vec()
        } else {
            want
        };
        let e = rel_err(got, &want);
        worst = worst.max(e);
        assert!(e < TOL, "{golden} {name}: rel err {e:.3e}");
    }
    assert_eq!(cap.values.len(), layers + 1);
    let e = rel_err(&logits, &g.f32s("logits"));
    assert!(e < TOL, "{golden} logits: rel err {e:.3e}");
    worst = worst.max(e);
    for (j, &id) in decode_ids.iter().enumerate() {
        let plan = s.plan(1).expect("decode plan");
        let mut cap = Capture::layer_outputs(&plan);
        let got_logits = s.decode_with(id, &mut cap).expect("decode");
        for (name, got) in &cap.values {
            let key = format!("decode.{j}.{name}");
            let e = rel_err(got, &g.f32s(&key));
            worst = worst.max(e);
            assert!(e < TOL, "{golden} {key}: rel err {e:.3e}");
        }
        let e = rel_err(&got_logits, &g.f32s(&format!("decode.{j}.logits")));
        worst = worst.max(e);
        assert!(e < TOL, "{golden} decode.{j}.logits: rel err {e:.3e}");
    }
    eprintln!("{golden}: worst relative error {worst:.2e} over every layer, logits and decode");
}

#[test]
fn tiny_q8_0_matches_transformers() {
    check("tiny-q8_0.gguf", Preset::Tiny, QuantMix::Q8_0, 1);
}

#[test]
fn tiny_odd_bf16_matches_transformers() {
    check("tiny-odd-bf16.gguf", Preset::TinyOdd, QuantMix::Bf16, 2);
}

#[test]
fn tiny_q4_k_m_matches_transformers() {
    check("tiny-q4_k_m.gguf", Preset::Tiny, QuantMix::Q4KM, 3);
}
