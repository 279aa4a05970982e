//! The CPU backend runs every quantisation mix `tally synth` writes: the same seed's weights in
//! each mix give logits correlated with the bf16 file's. The error is not a smooth function of
//! the bits per weight (on the tiny model a little noise flips top-2 expert choices, measured:
//! q8_0 0.045, q6_k 0.055, q5_k_m 0.069, mxfp4_moe 0.078, iq4_nl/iq4_xs 0.13, q4_0 0.18, q4_k_m
//! 0.23, q3_k_m 0.34, q2_k 0.40), so the bound is one that only correlated logits meet: logits
//! unrelated to bf16's, as a block decoded with the wrong layout gives, have a relative error
//! near 1.4. Per-element precision is tested in tally-gguf (tests/quant_error.rs).

mod common;

use common::{all_finite, random_ids, rel_err, session, synth_model};
use tally_model::synth::{Preset, QuantMix};

#[test]
fn every_mix_runs_on_the_cpu_close_to_bf16() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seed = 21;
    let reference = synth_model(&dir, Preset::Tiny, QuantMix::Bf16, seed);
    let ids = random_ids(12, reference.config.vocab, seed);
    let want = session(&reference, 12).prefill(&ids).expect("bf16 prefill");
    // (mix, bound on the relative L2 error of the logits against bf16): about twice the value
    // measured, still far below 1.4.
    let mixes = [
        (QuantMix::Q8_0, 0.15),
        (QuantMix::Q6K, 0.15),
        (QuantMix::Q5KM, 0.2),
        (QuantMix::Q4KM, 0.5),
        (QuantMix::IQ4XS, 0.3),
        (QuantMix::IQ4NL, 0.3),
        (QuantMix::Q4_0, 0.4),
        (QuantMix::Mxfp4Moe, 0.2),
        (QuantMix::Q3KM, 0.7),
        (QuantMix::Q2K, 0.8),
    ];
    let mut report = Vec::new();
    let mut failed = false;
    for (mix, bound) in mixes {
        let model = synth_model(&dir, Preset::Tiny, mix, seed);
        let got = session(&model, 12).prefill(&ids).expect("prefill");
        let err = rel_err(&got, &want);
        let ok = all_finite(&got) && err < bound;
        failed |= !ok;
        report.push(format!(
            "{:9} rel err {err:.4} (bound {bound}) {}",
            mix.name(),
            if ok { "ok" } else { "FAIL" }
        ));
    }
    println!("{}", report.join("\n"));
    assert!(!failed, "{}", report.join("\n"));
}
