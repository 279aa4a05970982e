//! Command-line values checked before anything is sized or opened from them. Each failure is an
//! [`InputError`] (exit code 2) whose message names the flag.

use anyhow::Result;
use tally_engine::Session;
use tally_engine::finite::{FirstNonFinite, first_non_finite};

use super::InputError;

/// The backends `--backend` accepts.
pub const BACKENDS: [&str; 2] = ["cpu", "cuda"];

/// Fewest clean windows the noise gate can judge: its outlier test needs a median and a spread.
pub const MIN_REPEATS: usize = 3;

/// `--backend`: one of [`BACKENDS`].
pub fn backend(name: &str) -> Result<()> {
    if BACKENDS.contains(&name) {
        return Ok(());
    }
    Err(InputError(format!(
        "--backend {name}: unknown backend (choose {})",
        BACKENDS.join(" or ")
    ))
    .into())
}

/// Most CPU threads `-t` accepts: four per core (more only adds contention; a thread pool of
/// 100 000 threads never finishes starting), and never more than 1024.
pub fn max_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (4 * cores).min(1024)
}

/// `-t`/`--threads`: 0 (one per core) up to [`max_threads`].
pub fn threads(t: usize) -> Result<usize> {
    let max = max_threads();
    if t > max {
        return Err(InputError(format!(
            "-t {t}: too many threads (at most {max}: four per core of this machine; 0 means one \
             per core)"
        ))
        .into());
    }
    Ok(t)
}

/// `-r`/`--repeats`: at least [`MIN_REPEATS`].
pub fn repeats(r: usize) -> Result<usize> {
    if r < MIN_REPEATS {
        return Err(InputError(format!(
            "-r {r}: the noise gate needs at least {MIN_REPEATS} clean windows per test (its outlier \
             test takes a median and a spread); use -r {MIN_REPEATS} or more"
        ))
        .into());
    }
    Ok(r)
}

/// Largest `--max-retries`: past it a run on a host that never settles takes hours before it
/// says "no verdict".
pub const MAX_RETRIES: usize = 100;

/// The noise gate's retry budget per group.
pub fn max_retries(n: usize) -> Result<usize> {
    if n > MAX_RETRIES {
        return Err(InputError(format!(
            "--max-retries {n}: at most {MAX_RETRIES} (each re-measures one window of every series \
             in the group; a host that needs more will not give a verdict)"
        ))
        .into());
    }
    Ok(n)
}

/// Largest `--outlier-floor`: past it the gate keeps windows disturbed by a quarter of a run.
pub const MAX_OUTLIER_FLOOR: f64 = 0.25;

/// The noise gate's outlier floor (a fraction of a series' median).
pub fn outlier_floor(f: f64) -> Result<f64> {
    if !(0.0..=MAX_OUTLIER_FLOOR).contains(&f) {
        return Err(InputError(format!(
            "--outlier-floor {f}: a fraction of the median from 0 to {MAX_OUTLIER_FLOOR} (0.02: a run \
             2% off its series' median discards the window)"
        ))
        .into());
    }
    Ok(f)
}

/// Largest `--best-of`.
pub const MAX_BEST_OF: usize = 10;

/// Runs per timing sample.
pub fn best_of(n: usize) -> Result<usize> {
    if n == 0 || n > MAX_BEST_OF {
        return Err(InputError(format!(
            "--best-of {n}: runs per sample must be within 1..={MAX_BEST_OF}"
        ))
        .into());
    }
    Ok(n)
}

/// A prompt length (`-p`, `--tokens`): positive and within the model's context.
pub fn prompt_len(flag: &str, n: usize, context: usize) -> Result<usize> {
    if n == 0 {
        return Err(InputError(format!("{flag} 0: a prompt needs at least one token")).into());
    }
    if n > context {
        return Err(InputError(format!(
            "{flag} {n}: longer than the model's context of {context} positions"
        ))
        .into());
    }
    Ok(n)
}

/// `--step-at D`: a decode step after a context of `d` tokens needs `d` >= 1 and `d + 1`
/// positions.
pub fn step_depth(d: usize, context: usize) -> Result<usize> {
    if d == 0 {
        return Err(InputError(
            "--step-at 0: a decode step needs a context of at least one token (for a prefill from a fresh state use -p)".into(),
        )
        .into());
    }
    if d >= context {
        return Err(InputError(format!(
            "--step-at {d}: a step after {d} tokens needs {} positions, more than the model's context of {context}",
            d.saturating_add(1)
        ))
        .into());
    }
    Ok(d)
}

/// Positions a prompt of `prompt` tokens plus `decode` decoded ones needs, checked against the
/// model's context (and for overflow).
pub fn total_len(prompt: usize, decode: usize, context: usize) -> Result<usize> {
    match prompt.checked_add(decode) {
        Some(n) if n <= context => Ok(n),
        _ => Err(InputError(format!(
            "{prompt} prompt tokens + -n {decode} decoded tokens exceed the model's context of \
             {context} positions"
        ))
        .into()),
    }
}

/// A non-finite result is an error naming the first node that produced one: the weights are bad
/// (exit code 2). Checking only the logits is cheap; only when they are bad is the prompt run
/// again, node by node, to find where the values went wrong.
pub fn finite_logits<B: tally_engine::Backend>(
    s: &mut Session<B>,
    prompt: &[u32],
    logits: &[f32],
    what: &str,
) -> Result<()> {
    let Some(k) = first_non_finite(logits) else {
        return Ok(());
    };
    let mut hook = FirstNonFinite::default();
    let rerun = s.prefill_with(prompt, &mut hook);
    let where_ = match (&hook.found, rerun) {
        (Some(f), _) => f.to_string(),
        (None, Err(e)) => format!("the node-by-node rerun failed: {e}"),
        (None, Ok(_)) => "the node-by-node rerun of the prompt stayed finite".to_string(),
    };
    Err(InputError(format!(
        "{what}: logit {k} is {} (not finite): {where_}. The model's weights hold NaN or Inf \
         values, or the file changed while it was read",
        logits[k]
    ))
    .into())
}
