//! Coverage-guided fuzzing of everything a model file reaches before any weight is read: the
//! GGUF header and tensor table, the `qwen35moe` configuration (bounds, products, every tensor's
//! shape and type) and plan building for a few batch shapes.
//!
//! The invariant: no input makes any of these panic, abort or allocate without bound; each
//! either succeeds, with results that are internally consistent, or returns an error.
//! Seeds: `fuzz/seeds/model_file/` (tiny valid models, `tools/fuzz-seeds.sh`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tally_gguf::GgufFile;
use tally_model::{Config, PlanOptions, build_plan};

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec(), "fuzz.gguf") else {
        return;
    };
    for t in file.tensors() {
        assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes());
    }
    let Ok(cfg) = Config::from_gguf(&file) else {
        return;
    };
    // A validated config must survive plan building for any batch that fits its context.
    let ctx = cfg.context_length.min(16);
    for n_tokens in [1, 3, ctx] {
        for prune in [true, false] {
            let opts = PlanOptions {
                prune_last_layer: prune,
                ..PlanOptions::default()
            };
            if let Ok(plan) = build_plan(&cfg, n_tokens, ctx, &opts) {
                assert!(!plan.nodes.is_empty());
                // Buffer sizes are products of header values: computing them must not overflow.
                let total: usize = plan.buffers.iter().map(|b| b.elems()).sum();
                assert!(total > 0);
            }
        }
    }
});
