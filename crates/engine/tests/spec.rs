//! Speculative decoding reproduces plain greedy decoding token for token, whatever the drafts:
//! replayed drafts right with probability 0, 0.6 and 1, k = 1, 2, 4, several models, seeds
//! and prompt lengths; and the draft and acceptance counts are what the drafts imply.

mod common;

use common::*;
use tally_engine::spec::{Draft, ReplayDraft, greedy, greedy_plain};
use tally_model::synth::{Preset, QuantMix};

/// Proposes nothing: speculative decoding must fall back to plain steps.
struct NoDraft;
impl<B: tally_engine::Backend> Draft<B> for NoDraft {
    fn propose(
        &mut self,
        _session: &mut tally_engine::Session<B>,
        _sequence: &[u32],
        _k: usize,
    ) -> Result<Vec<u32>, tally_engine::EngineError> {
        Ok(Vec::new())
    }
}

#[test]
fn speculative_greedy_is_plain_greedy() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (preset, quant, seed) in [
        (Preset::Tiny, QuantMix::Q8_0, 31),
        (Preset::TinyOdd, QuantMix::Bf16, 32),
        (Preset::Tiny, QuantMix::Q4KM, 33),
    ] {
        let model = synth_model(&dir, preset, quant, seed);
        let vocab = model.config.vocab;
        for (p_len, n_gen) in [(1, 14), (9, 18)] {
            let prompt = random_ids(p_len, vocab, seed * 7 + p_len as u64);
            let want = greedy_plain(&mut session(&model, 64), &prompt, n_gen).expect("plain");
            assert_eq!(want.len(), n_gen);
            // greedy_plain takes the backend's argmax (Session::decode_greedy); the reference
            // is the logits read back and the host's argmax, step by step.
            let mut s = session(&model, 64);
            let mut t = tally_engine::sample::argmax(&s.prefill(&prompt).expect("prefill"));
            let mut by_logits = vec![t];
            while by_logits.len() < n_gen {
                t = tally_engine::sample::argmax(&s.decode(t).expect("decode"));
                by_logits.push(t);
            }
            assert_eq!(want, by_logits, "{preset:?} {quant:?}: decode_greedy");
            let (got, st) = greedy(&mut session(&model, 64), &prompt, n_gen, 3, &mut NoDraft)
                .expect("no drafts");
            assert_eq!(got, want, "{preset:?} {quant:?}: no drafts");
            assert_eq!((st.drafted, st.steps), (0, n_gen - 1));
            for k in [1, 2, 4] {
                for acc in [0.0, 0.6, 1.0] {
                    let mut d = ReplayDraft::new(p_len, want.clone(), acc, vocab, seed + k as u64);
                    let mut s = session(&model, 64);
                    let (got, st) = greedy(&mut s, &prompt, n_gen, k, &mut d).expect("spec");
                    assert_eq!(
                        got, want,
                        "{preset:?} {quant:?} prompt {p_len} k {k} acceptance {acc}: {st:?}"
                    );
                    assert_eq!(st.tokens, n_gen);
                    assert_eq!(
                        s.n_past(),
                        p_len + n_gen - 1,
                        "every token but the last ran"
                    );
                    if acc == 0.0 {
                        // Every draft differs from greedy's token: none may be kept.
                        assert_eq!(st.accepted, 0, "{st:?}");
                        // One token per step; each step but the last (no room to draft)
                        // verified drafts, rejected the first and recomputed.
                        assert_eq!(st.steps, n_gen - 1, "{st:?}");
                        assert_eq!(st.recomputes, st.steps - 1, "{st:?}");
                    }
                    if acc == 1.0 {
                        assert_eq!(st.accepted, st.drafted, "{st:?}");
                        assert_eq!(st.recomputes, 0);
                        // Each step yields k + 1 tokens (the last step fewer).
                        assert!(st.steps <= (n_gen - 1).div_ceil(k + 1) + 1, "{st:?}");
                    }
                }
            }
        }
    }
}

/// Session::verify_greedy gives each row's argmax of Session::verify's logits (the same batch
/// on the same state), for batches of 1 to 5 tokens.
#[test]
fn verify_greedy_is_the_argmax_of_each_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q4KM, 41);
    let vocab = model.config.vocab;
    let prompt = random_ids(7, vocab, 41);
    for n in 1..=5 {
        let batch = random_ids(n, vocab, 100 + n as u64);
        let mut a = session(&model, 64);
        a.prefill(&prompt).expect("prefill");
        let rows = a.verify(&batch).expect("verify");
        assert_eq!(rows.len(), n * vocab);
        let want: Vec<u32> = rows
            .chunks(vocab)
            .map(tally_engine::sample::argmax)
            .collect();
        let mut b = session(&model, 64);
        b.prefill(&prompt).expect("prefill");
        let got = b.verify_greedy(&batch).expect("verify_greedy");
        assert_eq!(got, want, "batch of {n}");
        assert_eq!(b.n_past(), prompt.len() + n);
    }
}

/// A replayed draft of acceptance a measures close to a (per position, given the one before).
#[test]
fn replayed_acceptance_is_measured() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 41);
    let vocab = model.config.vocab;
    let prompt = random_ids(4, vocab, 41);
    let n_gen = 240;
    let want = greedy_plain(&mut session(&model, 256), &prompt, n_gen).expect("plain");
    for acc in [0.5, 0.7, 0.9] {
        let mut d = ReplayDraft::new(prompt.len(), want.clone(), acc, vocab, 99);
        let (got, st) = greedy(&mut session(&model, 256), &prompt, n_gen, 3, &mut d).expect("spec");
        assert_eq!(got, want);
        let a = st.conditional_acceptance();
        assert!(
            (a - acc).abs() < 0.12,
            "acceptance {acc}: measured {a} ({st:?})"
        );
        assert!(st.accepted < st.drafted);
    }
}

/// With sampling, speculative decoding keeps plain sampling's distribution: the first three
/// tokens after a prompt, over 300 seeds each way (top-k 3, temperature 1.2), have the same
/// joint frequencies within a chi-square bound (df <= 26; p ~ 1e-4 at the bound). Seeds are
/// fixed, so the test is deterministic.
#[test]
fn speculative_sampling_keeps_the_distribution() {
    use tally_engine::sample::SamplingParams;
    use tally_engine::spec::generate;
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 51);
    let vocab = model.config.vocab;
    let prompt = random_ids(5, vocab, 51);
    let reference = greedy_plain(&mut session(&model, 32), &prompt, 3).expect("greedy");
    let runs = 300;
    let mut plain = std::collections::HashMap::<Vec<u32>, f64>::new();
    let mut spec = std::collections::HashMap::<Vec<u32>, f64>::new();
    let mut kept = 0;
    for seed in 0..runs {
        let params = SamplingParams {
            temperature: 1.2,
            top_k: 3,
            seed,
            ..SamplingParams::default()
        };
        let (a, _) = generate(
            &mut session(&model, 32),
            &prompt,
            3,
            0,
            &mut NoDraft,
            &params,
        )
        .expect("plain sampling");
        *plain.entry(a).or_default() += 1.0;
        // Drafts: greedy's tokens, right (as greedy) 70% of the time.
        let mut d = ReplayDraft::new(prompt.len(), reference.clone(), 0.7, vocab, seed + 1000);
        let (b, st) = generate(&mut session(&model, 32), &prompt, 3, 2, &mut d, &params)
            .expect("speculative sampling");
        kept += st.accepted;
        *spec.entry(b).or_default() += 1.0;
    }
    assert!(
        kept > 0,
        "some drafts must be kept for the rule to be exercised"
    );
    let keys: std::collections::BTreeSet<&Vec<u32>> = plain.keys().chain(spec.keys()).collect();
    let mut chi2 = 0.0;
    for k in &keys {
        let (x, y) = (
            plain.get(*k).copied().unwrap_or(0.0),
            spec.get(*k).copied().unwrap_or(0.0),
        );
        if x + y > 0.0 {
            chi2 += (x - y).powi(2) / (x + y);
        }
    }
    let df = keys.len().saturating_sub(1) as f64;
    // Chi-square critical value at p = 1e-4 for df <= 26 is under 60.
    assert!(
        chi2 < 60.0 && df <= 26.0,
        "chi2 {chi2:.1} over {df} degrees of freedom: the distributions differ ({kept} kept)"
    );
}

/// The CPU backend keeps no per-token states: speculative decoding there saves, restores and
/// recomputes (the CUDA backend rolls back from the states its verification kept instead;
/// `scripts/gpu/spec-rollback.sh` holds that path to plain greedy decoding), a rollback asked
/// of it changes nothing, and a rollback outside the last batch is an error.
#[test]
fn cpu_rejections_recompute_and_rollbacks_are_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 34);
    let vocab = model.config.vocab;
    let prompt = random_ids(5, vocab, 3);
    let mut s = session(&model, 64);
    assert!(!s.enable_token_states(4).expect("before the first batch"));
    s.prefill(&prompt).expect("prefill");
    assert!(!s.enable_token_states(4).expect("enable"));
    let n0 = s.n_past();
    s.extend_run(&[1, 2, 3]).expect("a 3-token batch");
    assert!(!s.rollback_to_token(n0, 1, 3).expect("rollback"));
    assert_eq!(s.n_past(), n0 + 3, "a refused rollback moved the position");
    assert!(
        s.rollback_to_token(n0, 3, 3).is_err(),
        "token past the batch"
    );
    assert!(
        s.rollback_to_token(n0 + 1, 0, 3).is_err(),
        "not the last batch"
    );
    let want = greedy_plain(&mut session(&model, 64), &prompt, 16).expect("plain");
    let mut d = ReplayDraft::new(prompt.len(), want.clone(), 0.6, vocab, 9);
    let (got, st) = greedy(&mut session(&model, 64), &prompt, 16, 2, &mut d).expect("spec");
    assert_eq!(got, want);
    assert_eq!(st.rollbacks, 0);
    assert!(st.recomputes > 0, "{st:?}");
}
