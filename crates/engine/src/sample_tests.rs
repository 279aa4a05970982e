//! Tests of the sampling specification, and of the device kernel's algorithm (radix select over
//! per-thread chunks in id order) emulated on the CPU against the sort-based reference.

// The emulation indexes by thread and id on purpose: it mirrors the kernel's loops.
#![allow(clippy::needless_range_loop)]

use proptest::prelude::*;
use tally_model::rng::Rng;

use super::*;

fn logits(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut r = Rng::new(seed);
    let mut v = vec![0.0f32; n];
    r.fill_normal(&mut v, scale);
    v
}

fn params(t: f32) -> SamplingParams {
    SamplingParams {
        temperature: t,
        ..SamplingParams::default()
    }
}

fn draw(l: &[f32], p: &SamplingParams, window: &[u32], n: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            sample_logits(
                l,
                &SampleStep {
                    params: p,
                    window,
                    random: rng.next_u64(),
                },
            )
        })
        .collect()
}

fn ranked(l: &[f32]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..l.len() as u32).collect();
    order.sort_by(|&a, &b| key(l[b as usize]).cmp(&key(l[a as usize])).then(a.cmp(&b)));
    order
}

fn softmax(l: &[f32], t: f32) -> Vec<f64> {
    let m = l.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = l
        .iter()
        .map(|&x| ((f64::from(x) - f64::from(m)) / f64::from(t)).exp())
        .collect();
    let z: f64 = e.iter().sum();
    e.into_iter().map(|x| x / z).collect()
}

#[test]
fn key_orders_like_floats() {
    let xs = [
        f32::NEG_INFINITY,
        -3.5,
        -1e-30,
        -0.0,
        0.0,
        1e-30,
        2.0,
        f32::INFINITY,
    ];
    for w in xs.windows(2) {
        assert!(key(w[0]) < key(w[1]), "{} {}", w[0], w[1]);
    }
    assert_eq!(key(f32::NAN), key(f32::NEG_INFINITY));
}

#[test]
fn greedy_takes_the_max_and_breaks_ties_by_lowest_id() {
    let mut l = logits(1, 1000, 1.0);
    let top = ranked(&l)[0];
    assert_eq!(draw(&l, &params(0.0), &[], 1, 0), vec![top]);
    l[700] = 9.0;
    l[300] = 9.0;
    assert_eq!(draw(&l, &params(0.0), &[], 1, 0), vec![300]);
    l[5] = f32::NAN; // NaN is -inf, never the max
    assert_eq!(argmax(&l), 300);
}

#[test]
fn temperature_near_zero_is_greedy() {
    let l = logits(2, 5000, 2.0);
    let g = argmax(&l);
    let out = draw(&l, &params(1e-4), &[], 200, 9);
    assert!(out.iter().all(|&t| t == g));
}

#[test]
fn same_seed_same_tokens_other_seed_other_tokens() {
    let l = logits(3, 2000, 1.0);
    let p = params(1.0);
    assert_eq!(draw(&l, &p, &[], 100, 5), draw(&l, &p, &[], 100, 5));
    assert_ne!(draw(&l, &p, &[], 100, 5), draw(&l, &p, &[], 100, 6));
}

#[test]
fn top_k_never_leaves_the_top_k() {
    let l = logits(4, 3000, 1.5);
    let p = SamplingParams {
        top_k: 7,
        ..params(2.0)
    };
    let top: Vec<u32> = ranked(&l)[..7].to_vec();
    let out = draw(&l, &p, &[], 4000, 1);
    assert!(out.iter().all(|t| top.contains(t)));
    // With a high temperature every one of them appears.
    for t in &top {
        assert!(out.contains(t), "token {t} of the top 7 never drawn");
    }
}

#[test]
fn top_k_ties_keep_the_lowest_ids() {
    let mut l = vec![-5.0f32; 50];
    for i in [40, 10, 30, 20] {
        l[i] = 1.0;
    }
    let p = SamplingParams {
        top_k: 2,
        ..params(1.0)
    };
    let s: Vec<u32> = survivors(&l, &p).iter().map(|&(i, _)| i).collect();
    assert_eq!(s, vec![10, 20]);
}

#[test]
fn empirical_frequencies_follow_the_softmax() {
    let l = logits(5, 20, 1.0);
    let t = 0.8;
    let n = 40_000;
    let out = draw(&l, &params(t), &[], n, 2);
    let want = softmax(&l, t);
    for (i, &pw) in want.iter().enumerate() {
        let got = out.iter().filter(|&&x| x == i as u32).count() as f64 / n as f64;
        let sd = (pw * (1.0 - pw) / n as f64).sqrt();
        assert!(
            (got - pw).abs() < 5.0 * sd + 1e-4,
            "token {i}: {got} vs {pw}"
        );
    }
}

#[test]
fn top_p_keeps_the_smallest_head_reaching_p() {
    let l = logits(6, 500, 2.0);
    let p = SamplingParams {
        top_p: 0.6,
        ..params(1.0)
    };
    let probs = softmax(&l, 1.0);
    let order = ranked(&l);
    let mut acc = 0.0;
    let mut head = 0;
    while acc < 0.6 {
        acc += probs[order[head] as usize];
        head += 1;
    }
    let s: Vec<u32> = survivors(&l, &p).iter().map(|&(i, _)| i).collect();
    let mut want: Vec<u32> = order[..head].to_vec();
    want.sort();
    assert_eq!(s, want);
    let kept: f64 = s.iter().map(|&i| probs[i as usize]).sum();
    let without_last = kept - probs[order[head - 1] as usize];
    assert!(
        kept >= 0.6 - 1e-6 && without_last < 0.6,
        "{kept} {without_last}"
    );
    let out = draw(&l, &p, &[], 2000, 3);
    assert!(out.iter().all(|t| s.contains(t)));
}

#[test]
fn min_p_keeps_tokens_near_the_top() {
    let l = logits(7, 1000, 2.0);
    let p = SamplingParams {
        min_p: 0.1,
        ..params(1.5)
    };
    let probs = softmax(&l, 1.5);
    let pmax = probs.iter().cloned().fold(0.0, f64::max);
    let s: Vec<u32> = survivors(&l, &p).iter().map(|&(i, _)| i).collect();
    for (i, &pi) in probs.iter().enumerate() {
        // Away from the boundary the rule is exact.
        if pi > 0.1 * pmax * (1.0 + 1e-6) {
            assert!(s.contains(&(i as u32)), "{i} dropped");
        } else if pi < 0.1 * pmax * (1.0 - 1e-6) {
            assert!(!s.contains(&(i as u32)), "{i} kept");
        }
    }
    assert!(s.len() > 1 && s.len() < 1000);
}

#[test]
fn penalties_change_exactly_the_window_tokens() {
    let l = logits(8, 100, 1.0);
    let mut l2 = l.clone();
    let p = SamplingParams {
        repetition_penalty: 1.3,
        presence_penalty: 0.5,
        frequency_penalty: 0.25,
        ..params(1.0)
    };
    let window = [3u32, 9, 3, 3, 50];
    penalise(&mut l2, &p, &window);
    for i in 0..100 {
        let c = window.iter().filter(|&&t| t == i as u32).count() as f32;
        if c == 0.0 {
            assert_eq!(l2[i].to_bits(), l[i].to_bits(), "token {i} changed");
        } else {
            let r = if l[i] > 0.0 { l[i] / 1.3 } else { l[i] * 1.3 };
            assert_eq!(l2[i], r - c * 0.25 - 0.5, "token {i}");
            assert!(l2[i] < l[i]);
        }
    }
    // A penalised favourite loses greedy to the runner-up.
    let mut l3 = vec![0.0f32; 10];
    l3[4] = 2.0;
    l3[6] = 1.9;
    let g = SamplingParams {
        repetition_penalty: 1.5,
        ..params(0.0)
    };
    assert_eq!(draw(&l3, &g, &[], 1, 0), vec![4]);
    assert_eq!(draw(&l3, &g, g.window(&[4]), 1, 0), vec![6]);
}

#[test]
fn window_is_the_last_n_and_empty_without_penalties() {
    let h: Vec<u32> = (0..100).collect();
    let p = SamplingParams {
        presence_penalty: 1.0,
        penalty_last_n: 10,
        ..params(1.0)
    };
    assert_eq!(p.window(&h), &h[90..]);
    assert!(params(1.0).window(&h).is_empty());
}

#[test]
fn validate_names_the_bad_field() {
    let bad = SamplingParams {
        top_p: 0.0,
        ..params(1.0)
    };
    assert!(bad.validate().unwrap_err().contains("top_p"));
    let bad = SamplingParams {
        temperature: -1.0,
        ..params(1.0)
    };
    assert!(bad.validate().unwrap_err().contains("temperature"));
    assert!(SamplingParams::default().validate().is_ok());
}

// ---------------------------------------------------------------------------------------------
// The kernel's algorithm, emulated: THREADS contiguous chunks, radix select by 8-bit digits,
// exclusive prefix sums over threads, the draw found by the thread whose range holds r.

const THREADS: usize = 1024;

fn radix_select(
    w: &[f32],
    target: u64,
    weight: &mut dyn FnMut(usize, u32, &mut u64) -> u64,
    eq_before: &[u64],
) -> (u32, u64) {
    let chunk = w.len().div_ceil(THREADS);
    let (mut prefix, mut mask, mut rem) = (0u32, 0u32, target);
    for d in (0..4).rev() {
        let mut hist = [0u64; 256];
        for t in 0..THREADS {
            let mut eq = eq_before[t];
            for i in (t * chunk).min(w.len())..((t + 1) * chunk).min(w.len()) {
                let k = key(w[i]);
                let x = weight(i, k, &mut eq);
                if x != 0 && k & mask == prefix {
                    hist[((k >> (8 * d)) & 255) as usize] += x;
                }
            }
        }
        let mut pick = 0;
        for b in (0..256).rev() {
            if hist[b] >= rem {
                pick = b as u32;
                break;
            }
            rem -= hist[b];
        }
        prefix |= pick << (8 * d);
        mask |= 255 << (8 * d);
    }
    (prefix, rem)
}

fn exclusive(v: &[u64]) -> Vec<u64> {
    let mut acc = 0;
    v.iter()
        .map(|&x| {
            let b = acc;
            acc += x;
            b
        })
        .collect()
}

fn kernel_emulation(logits: &[f32], step: &SampleStep<'_>) -> u32 {
    let p = step.params;
    let mut w = logits.to_vec();
    penalise(&mut w, p, step.window);
    let top = argmax(&w);
    if p.is_greedy() || w.len() <= 1 || key(w[top as usize]) == key(f32::NEG_INFINITY) {
        return top;
    }
    let m = w[top as usize];
    let chunk = w.len().div_ceil(THREADS);
    let range = |t: usize| (t * chunk).min(w.len())..((t + 1) * chunk).min(w.len());
    let zero = vec![0u64; THREADS];
    let (mut cut, mut ties, mut eq0, topk) =
        (0u32, 0u64, zero.clone(), p.top_k > 0 && p.top_k < w.len());
    if topk {
        (cut, ties) = radix_select(&w, p.top_k as u64, &mut |_, _, _| 1, &zero);
        let eq: Vec<u64> = (0..THREADS)
            .map(|t| range(t).filter(|&i| key(w[i]) == cut).count() as u64)
            .collect();
        eq0 = exclusive(&eq);
    }
    let keep_k = |k: u32, eq: &mut u64| {
        if !topk || k > cut {
            return true;
        }
        if k == cut {
            let r = *eq < ties;
            *eq += 1;
            return r;
        }
        false
    };
    let mut km = |i: usize, k: u32, eq: &mut u64| {
        if keep_k(k, eq) {
            mass(w[i], m, p.temperature)
        } else {
            0
        }
    };
    let topp = p.top_p < 1.0;
    let mut cut_p = 0;
    if topp {
        let mut zk = 0;
        for t in 0..THREADS {
            let mut eq = eq0[t];
            for i in range(t) {
                zk += km(i, key(w[i]), &mut eq);
            }
        }
        (cut_p, _) = radix_select(&w, top_p_target(p.top_p, zk), &mut km, &eq0);
    }
    let floor = min_p_weight(p.min_p);
    let mut kept = |t: usize| -> Vec<(usize, u64)> {
        let mut eq = eq0[t];
        range(t)
            .filter_map(|i| {
                let k = key(w[i]);
                let x = km(i, k, &mut eq);
                (x >= floor && (!topp || k >= cut_p) && x != 0).then_some((i, x))
            })
            .collect()
    };
    let per: Vec<Vec<(usize, u64)>> = (0..THREADS).map(&mut kept).collect();
    let mine: Vec<u64> = per
        .iter()
        .map(|v| v.iter().map(|&(_, x)| x).sum())
        .collect();
    let before = exclusive(&mine);
    let z: u64 = mine.iter().sum();
    if z == 0 {
        return top;
    }
    let r = draw_point(step.random, z);
    for t in 0..THREADS {
        if r >= before[t] && r < before[t] + mine[t] {
            let mut acc = before[t];
            for &(i, x) in &per[t] {
                acc += x;
                if acc > r {
                    return i as u32;
                }
            }
        }
    }
    u32::MAX
}

fn arb_params() -> impl Strategy<Value = SamplingParams> {
    (
        prop_oneof![Just(0.0f32), 0.05f32..3.0],
        prop_oneof![Just(0usize), 1usize..40],
        prop_oneof![Just(1.0f32), 0.05f32..1.0],
        prop_oneof![Just(0.0f32), 0.0f32..0.5],
        prop_oneof![Just(1.0f32), 0.5f32..2.0],
        prop_oneof![Just(0.0f32), -1.0f32..1.0],
    )
        .prop_map(
            |(temperature, top_k, top_p, min_p, rep, pres)| SamplingParams {
                temperature,
                top_k,
                top_p,
                min_p,
                repetition_penalty: rep,
                presence_penalty: pres,
                frequency_penalty: pres / 2.0,
                ..SamplingParams::default()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn kernel_algorithm_matches_the_reference(
        p in arb_params(),
        n in prop_oneof![1usize..50, 900usize..3100],
        seed in any::<u64>(),
        coarse in any::<bool>(),
        window in proptest::collection::vec(0u32..60, 0..20),
    ) {
        // Coarse logits (a few distinct values) exercise ties at every cut.
        let mut l = logits(seed, n, 2.0);
        if coarse {
            for x in &mut l {
                *x = (*x * 2.0).round();
            }
        }
        let mut rng = Rng::new(seed ^ 1);
        for _ in 0..4 {
            let step = SampleStep { params: &p, window: p.window(&window), random: rng.next_u64() };
            prop_assert_eq!(kernel_emulation(&l, &step), sample_logits(&l, &step));
        }
    }
}
