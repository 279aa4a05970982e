//! Generation on the CPU reference: resuming a sequence (live state, saved state) gives the
//! logits and greedy tokens of a full re-prefill; the generator's stop rules; the engine handle.

mod common;

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use common::{random_ids, rel_err, session, synth_model};
use tally_engine::generate::{
    Engine, Finish, Generator, Request, SubmitError, TokenEvent, TokenText,
};
use tally_engine::prefix::PrefixCache;
use tally_engine::sample::{SamplingParams, argmax};
use tally_model::synth::{Preset, QuantMix};

/// Tokens print as `<id>`; `END` ends generation.
struct Ids;
const END: u32 = 7;
impl TokenText for Ids {
    fn token_bytes(&self, id: u32) -> Vec<u8> {
        format!("<{id}>").into_bytes()
    }
    fn is_end(&self, id: u32) -> bool {
        id == END
    }
}

fn greedy(n: usize) -> SamplingParams {
    SamplingParams {
        max_tokens: n,
        stop_at_eos: false,
        ..SamplingParams::default()
    }
}

fn continue_flow(_: &TokenEvent<'_>) -> ControlFlow<()> {
    ControlFlow::Continue(())
}

#[test]
fn chunked_prefill_after_decode_equals_full_prefill() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 21);
    let vocab = model.config.vocab;
    let p1 = random_ids(9, vocab, 1);
    let p2 = random_ids(6, vocab, 2);
    // Turn 1: prefill, two greedy tokens; turn 2 appended as one chunk after n_past > 0.
    let mut a = session(&model, 64);
    let l = a.prefill(&p1).unwrap();
    let g1 = argmax(&l);
    let l = a.decode(g1).unwrap();
    let g2 = argmax(&l);
    let mut turn2 = vec![g2];
    turn2.extend(&p2);
    let resumed = a.extend(&turn2).unwrap();
    // The same tokens from scratch.
    let mut full: Vec<u32> = p1.clone();
    full.extend([g1]);
    full.extend(&turn2);
    let mut b = session(&model, 64);
    let fresh = b.prefill(&full).unwrap();
    let e = rel_err(&resumed, &fresh);
    assert!(e < 1e-5, "resumed vs re-prefilled logits: rel err {e}");
    // Greedy continuations agree token for token.
    let (mut ta, mut tb) = (argmax(&resumed), argmax(&fresh));
    for _ in 0..6 {
        assert_eq!(ta, tb);
        ta = argmax(&a.decode(ta).unwrap());
        tb = argmax(&b.decode(tb).unwrap());
    }
}

#[test]
fn restored_snapshot_resumes_after_another_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q4KM, 22);
    let vocab = model.config.vocab;
    let p1 = random_ids(11, vocab, 3);
    let other = random_ids(14, vocab, 4);
    let suffix = random_ids(5, vocab, 5);
    let mut s = session(&model, 64);
    s.prefill(&p1).unwrap();
    let saved = s.save(1).unwrap();
    // Another sequence overwrites every state buffer.
    s.prefill(&other).unwrap();
    s.restore(1, p1.len()).unwrap();
    let resumed = s.extend(&suffix).unwrap();
    let mut full = p1.clone();
    full.extend(&suffix);
    let fresh = session(&model, 64).prefill(&full).unwrap();
    let e = rel_err(&resumed, &fresh);
    assert!(e < 1e-5, "restored vs re-prefilled: rel err {e}");
    // Saving at 64 positions holds more KV rows than at 11.
    s.extend(&random_ids(40, vocab, 6)).unwrap();
    assert!(s.save(2).unwrap() > saved);
}

#[test]
fn generator_turn_two_resumes_and_matches_a_fresh_generator() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 23);
    let vocab = model.config.vocab;
    let cancel = AtomicBool::new(false);
    let mut g = Generator::new(session(&model, 96)).with_cache(PrefixCache::new(usize::MAX, 4));
    let p1 = random_ids(10, vocab, 7);
    let t1 = g
        .generate(&p1, &greedy(5), &Ids, &cancel, &mut continue_flow)
        .unwrap();
    assert_eq!(t1.tokens.len(), 5);
    assert_eq!(t1.finish, Finish::Length);
    assert_eq!(t1.cached_tokens, 0);
    // Turn 2: the conversation so far plus new tokens.
    let mut p2 = p1.clone();
    p2.extend(&t1.tokens);
    p2.extend(random_ids(4, vocab, 8));
    let t2 = g
        .generate(&p2, &greedy(6), &Ids, &cancel, &mut continue_flow)
        .unwrap();
    // The last sampled token of turn 1 was never fed: everything before it was resumed.
    assert_eq!(t2.cached_tokens, p1.len() + t1.tokens.len() - 1);
    let mut fresh = Generator::new(session(&model, 96));
    let f2 = fresh
        .generate(&p2, &greedy(6), &Ids, &cancel, &mut continue_flow)
        .unwrap();
    assert_eq!(f2.cached_tokens, 0);
    assert_eq!(t2.tokens, f2.tokens);
    // A different conversation in between: turn 2 of the first comes from the saved state.
    let other = random_ids(12, vocab, 9);
    g.generate(&other, &greedy(2), &Ids, &cancel, &mut continue_flow)
        .unwrap();
    let mut p3 = p2.clone();
    p3.extend(&t2.tokens);
    p3.push(3);
    let t3 = g
        .generate(&p3, &greedy(4), &Ids, &cancel, &mut continue_flow)
        .unwrap();
    assert_eq!(t3.cached_tokens, p2.len() + t2.tokens.len() - 1);
    let f3 = Generator::new(session(&model, 96))
        .generate(&p3, &greedy(4), &Ids, &cancel, &mut continue_flow)
        .unwrap();
    assert_eq!(t3.tokens, f3.tokens);
    assert!(g.cache().unwrap().len() <= 4);
}

#[test]
fn stop_rules_end_generation() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 24);
    let vocab = model.config.vocab;
    let cancel = AtomicBool::new(false);
    let mut g = Generator::new(session(&model, 64));
    let p = random_ids(8, vocab, 10);
    let sampled = SamplingParams {
        temperature: 1.0,
        seed: 3,
        ..greedy(12)
    };
    let base = g
        .generate(&p, &sampled, &Ids, &cancel, &mut continue_flow)
        .unwrap();
    assert_eq!(base.tokens.len(), 12);
    // Same seed, same tokens (a fresh state: the prompt is not an extension of the last one).
    let again = g
        .generate(&p, &sampled, &Ids, &cancel, &mut continue_flow)
        .unwrap();
    assert_eq!(base.tokens, again.tokens);
    assert_eq!(base.text, again.text);
    // A stop string made of the 3rd token's text: output ends before it.
    let stop = format!("<{}>", base.tokens[2]);
    let first = base.text.find(&stop).unwrap();
    let s = g
        .generate(
            &p,
            &SamplingParams {
                stop: vec![stop.clone()],
                ..sampled.clone()
            },
            &Ids,
            &cancel,
            &mut continue_flow,
        )
        .unwrap();
    assert_eq!(s.finish, Finish::Stop);
    assert_eq!(s.text, base.text[..first]);
    // The callback stops it.
    let mut n = 0;
    let c = g
        .generate(&p, &sampled, &Ids, &cancel, &mut |_| {
            n += 1;
            if n == 4 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!((c.finish, c.tokens.len()), (Finish::Cancelled, 4));
    // The cancel flag stops it after the first token.
    let set = AtomicBool::new(true);
    let c = g
        .generate(&p, &sampled, &Ids, &set, &mut continue_flow)
        .unwrap();
    assert_eq!((c.finish, c.tokens.len()), (Finish::Cancelled, 1));
}

#[test]
fn engine_runs_requests_on_its_worker_and_bounds_its_queue() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth_model(&dir, Preset::Tiny, QuantMix::Q8_0, 25);
    let vocab = model.config.vocab;
    let m = model.clone();
    let engine = Engine::spawn(
        move || Ok(Generator::new(session(&m, 64))),
        Arc::new(Ids),
        1,
    )
    .unwrap();
    let p = random_ids(6, vocab, 11);
    let want = Generator::new(session(&model, 64))
        .generate(
            &p,
            &greedy(3),
            &Ids,
            &AtomicBool::new(false),
            &mut continue_flow,
        )
        .unwrap();
    // The first request blocks in its callback until released, so the queue fills up.
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    let blocker = engine
        .submit(Request {
            prompt: p.clone(),
            params: greedy(3),
            on_token: Box::new(move |_| {
                let _ = started_tx.send(());
                let _ = release_rx.recv();
                ControlFlow::Continue(())
            }),
        })
        .unwrap();
    started_rx.recv().unwrap();
    let queued = engine
        .submit(Request {
            prompt: p.clone(),
            params: greedy(3),
            on_token: Box::new(continue_flow),
        })
        .unwrap();
    assert_eq!(engine.queue_depth(), 1);
    let full = engine.submit(Request {
        prompt: p.clone(),
        params: greedy(3),
        on_token: Box::new(continue_flow),
    });
    assert!(matches!(full, Err(SubmitError::QueueFull(1))));
    drop(release_tx);
    assert_eq!(blocker.wait().unwrap().tokens, want.tokens);
    assert_eq!(queued.wait().unwrap().tokens, want.tokens);
}
