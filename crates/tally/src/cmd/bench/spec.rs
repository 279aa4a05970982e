//! `tally bench --spec`: the speculative-decoding row.

use std::time::Instant;

use anyhow::Result;

use super::{Args, Facts, Row, SpecRow, mean_sd, row};

/// The `--spec` row at depth `depth`: speculative greedy decoding of the tgN test's length
/// after a one-token prompt (depth 0, as before depths existed) or a prompt of `depth` tokens
/// (the `tgN @ dD` rows' prompt: the ledger's tokens of seed 0x5EED), window by window against
/// plain greedy decoding of the same tokens (interleaved: plain, then speculative, in each
/// window; one untimed warm-up window first; the prompt's prefill is untimed). Replayed
/// drafts follow tally's own greedy continuation (recorded once, untimed); without an
/// acceptance, the file's MTP block drafts ([`tally_engine::spec::MtpDraft`]).
pub(super) fn spec_row(
    session: &mut tally_engine::Session<Box<dyn tally_engine::Backend>>,
    facts: &Facts,
    a: &Args,
    acceptance: Option<f64>,
    depth: usize,
) -> Result<Row> {
    use tally_engine::spec::{Draft, MtpDraft, ReplayDraft, greedy, greedy_plain};
    let vocab = session.model.config.vocab;
    let prompt = if depth == 0 {
        vec![(0x5EED_u64 % vocab as u64) as u32]
    } else {
        tally_ledger::rng::prompt_tokens(depth, vocab as u32, 0x5EED)?
    };
    let n = a.n_gen;
    let reference = greedy_plain(session, &prompt, n)?;
    let (mut plain_ts, mut spec_ts, mut verify, mut save, mut recompute) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut last = None;
    for w in 0..=a.repeats {
        session.prefill(&prompt)?;
        let t0 = Instant::now();
        let mut t = reference[0];
        // The plain tgN row's way: the argmax on the backend (a GPU downloads the id only).
        for _ in 1..n {
            t = session.decode_greedy(t)?;
        }
        let plain_s = t0.elapsed().as_secs_f64();
        let mut draft: Box<dyn Draft<_>> = match acceptance {
            Some(acc) => Box::new(ReplayDraft::new(
                prompt.len(),
                reference.clone(),
                acc,
                vocab,
                7 + w as u64,
            )),
            None => Box::new(MtpDraft::new(&session.model)?),
        };
        let (got, st) = greedy(session, &prompt, n, a.draft_max, draft.as_mut())?;
        if got != reference {
            let at = got
                .iter()
                .zip(&reference)
                .take_while(|(x, y)| x == y)
                .count();
            let why = match (reference.get(at), got.get(at)) {
                (Some(&want), Some(&pick)) => {
                    // The one-token logits that chose reference[at], recomputed (untimed).
                    let mut logits = session.prefill(&prompt)?;
                    for &t in &reference[..at] {
                        logits = session.decode(t)?;
                    }
                    divergence_verdict(&logits, want, pick)
                }
                _ => format!("the speculative run gave {} tokens", got.len()),
            };
            return Err(anyhow::anyhow!(
                "speculative decoding diverged from greedy decoding at token {at} of {n} \
                 (window {w}): {why}"
            ));
        }
        if w == 0 {
            continue; // warm-up
        }
        plain_ts.push((n - 1) as f64 / plain_s);
        spec_ts.push(st.decode_tok_s());
        verify.push(st.verify_s);
        save.push(st.save_s);
        recompute.push(st.recompute_s);
        last = Some(st);
    }
    let st = last.ok_or_else(|| anyhow::anyhow!("no timed window"))?;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let (avg_ts, _) = mean_sd(&spec_ts);
    let (plain_avg, _) = mean_sd(&plain_ts);
    let spec_ms: Vec<f64> = spec_ts.iter().map(|ts| (n - 1) as f64 * 1e3 / ts).collect();
    let test = match depth {
        0 => format!("tg{n} spec k={}", a.draft_max),
        d => format!("tg{n} @ d{d} spec k={}", a.draft_max),
    };
    Ok(Row {
        spec: Some(SpecRow {
            draft: if acceptance.is_some() {
                "replay"
            } else {
                "mtp"
            }
            .into(),
            draft_max: a.draft_max,
            target_acceptance: acceptance,
            conditional_acceptance: st.conditional_acceptance(),
            acceptance: st.acceptance(),
            plain_avg_ts: plain_avg,
            speedup: if plain_avg > 0.0 {
                avg_ts / plain_avg
            } else {
                0.0
            },
            verify_s: median(&mut verify),
            save_s: median(&mut save),
            recompute_s: median(&mut recompute),
            steps: st.steps,
            rollbacks: st.rollbacks,
            recomputes: st.recomputes,
        }),
        n_depth: depth as u64,
        ..row(
            facts,
            "tally",
            test,
            (0, n as u64, (n - 1) as u64),
            &spec_ms,
        )
    })
}

/// Relative margin under which two tokens' logits are a near-tie: the CUDA backend's logits
/// differ from the CPU reference's by up to ~1e-3 relative (`tally check`'s tables), and the
/// batched verification and the one-token step differ from each other by the same kind of
/// rounding, so a margin below this can flip either way.
const NEAR_TIE: f32 = 1e-3;

/// What a divergence at one token says: plain greedy decoding's logits there (`logits`), the
/// token it chose (`want`) and the one the speculative run kept (`pick`). A margin below
/// [`NEAR_TIE`] of the logits' scale (their largest magnitude) is a near-tie, anything larger is
/// a bug.
fn divergence_verdict(logits: &[f32], want: u32, pick: u32) -> String {
    let at = |t: u32| logits.get(t as usize).copied().unwrap_or(f32::NAN);
    let (lw, lp) = (at(want), at(pick));
    let margin = lw - lp;
    let scale = logits.iter().fold(0f32, |m, x| m.max(x.abs()));
    let rel = margin / scale.max(f32::MIN_POSITIVE);
    let verdict = if rel.is_finite() && rel.abs() < NEAR_TIE {
        "a near-tie between batched and one-token logits (within the backend's rounding), \
         not a bug"
    } else {
        "wider than the backend's rounding: a bug in the verification or the rollback"
    };
    format!(
        "plain greedy chose {want} (logit {lw:.6}), the speculative run {pick} (logit {lp:.6}); \
         margin {margin:.3e}, {rel:.1e} relative: {verdict}"
    )
}

#[cfg(test)]
mod tests {
    use super::divergence_verdict;

    #[test]
    fn a_divergence_names_its_margin_and_whether_it_is_a_tie() {
        let mut logits = vec![0.5f32; 16];
        logits[3] = 12.0;
        logits[7] = 11.9995;
        let tie = divergence_verdict(&logits, 3, 7);
        assert!(tie.contains("chose 3") && tie.contains("run 7"), "{tie}");
        assert!(
            tie.contains("near-tie") && !tie.contains("a bug in"),
            "{tie}"
        );
        logits[7] = 11.0;
        let bug = divergence_verdict(&logits, 3, 7);
        assert!(bug.contains("a bug") && bug.contains("1.000e0"), "{bug}");
        let out = divergence_verdict(&logits, 3, 99);
        assert!(out.contains("a bug"), "{out}");
    }
}
