//! The CPU backend runs every quantisation mix `tally synth` writes: the same seed's weights in
//! each mix give logits close to the bf16 file's, within a bound set by the mix's bits per weight
//! (the quantisation noise of every projection adds up through the layers). A block decoded
//! with the wrong layout gives logits uncorrelated with bf16's (relative error near 1.4), so
//! each check can fail.

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
    // (mix, bound on the relative L2 error of the logits against bf16)
    let mixes = [
        (QuantMix::Q8_0, 0.02),
        (QuantMix::Q6K, 0.05),
        (QuantMix::Q5KM, 0.1),
        (QuantMix::Q4KM, 0.15),
        (QuantMix::IQ4XS, 0.15),
        (QuantMix::IQ4NL, 0.15),
        (QuantMix::Q4_0, 0.2),
        (QuantMix::Mxfp4Moe, 0.25),
        (QuantMix::Q3KM, 0.3),
        (QuantMix::Q2K, 0.6),
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
