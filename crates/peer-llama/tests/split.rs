//! The split fixture (conv-a-mtp-q8_0 cut into three parts by llama.cpp's gguf-py writer,
//! tools/convert/split_fixture.py) is a split model as llama.cpp reads one: its loader, given
//! the first part, finds the others and computes the whole file's logits bit for bit; and tally's
//! CPU logits on the split file agree with llama.cpp's.

use std::path::Path;
use std::sync::Arc;

use tally_peer_llama::LlamaPeer;

mod common;
use common::{converter_fixture, cpu_logits, params, rel_err};

fn llama_logits(path: &Path, tokens: &[u32]) -> Vec<f32> {
    LlamaPeer::load(path, params())
        .unwrap()
        .prefill_logits(tokens)
        .unwrap()
}

#[test]
fn llama_cpp_reads_the_split_fixture_as_the_whole_file() {
    let split = converter_fixture("split/conv-a-mtp-q8_0-00001-of-00003.gguf");
    let tokens = tally_ledger::rng::prompt_tokens(9, 320, 11).unwrap();
    let theirs = llama_logits(&split, &tokens);
    let whole = llama_logits(&converter_fixture("conv-a-mtp-q8_0.gguf"), &tokens);
    assert_eq!(theirs.len(), 320);
    assert!(
        theirs
            .iter()
            .zip(&whole)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "llama.cpp's logits on the split file differ from its logits on the whole file"
    );

    let model = Arc::new(tally_model::Model::open(&split).unwrap());
    let ours = cpu_logits(model, &tokens);
    let err = rel_err(&ours, &theirs);
    // The engines' activation precisions differ (llama.cpp rounds activations to 8 bits in its
    // Q8_0 matmuls): ~1e-2, as on the whole file (tests/quantize.rs).
    assert!(
        err < 0.05,
        "tally vs llama.cpp on the split file: rel err {err:.4}"
    );
    println!(
        "split fixture: llama.cpp split == whole bit for bit; tally vs llama.cpp rel err {err:.4}"
    );
}
