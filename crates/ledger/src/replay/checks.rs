//! The replay protocol's validations as pure functions and typed outcomes.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::category::Category;
use crate::stats::{LinearFit, linear_fit};

/// A failed validation or a suspect figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum ReplayProblem {
    /// (a) failed.
    AllAtOnce {
        /// Increment of replaying every category once.
        increment_ms: f64,
        /// The observe-all run's time inside its nodes (its wall time when the engine cannot
        /// tell).
        baseline_ms: f64,
        /// `baseline_ms` is the time inside the nodes (false: the wall time).
        #[serde(default)]
        node_time: bool,
        /// Allowed relative deviation.
        tolerance_ratio: f64,
        /// Measured inside the replay-all runs (`increment_ms`: what their replays took,
        /// `baseline_ms`: the time inside their real nodes; see `replay::same_run_replays`);
        /// false in records judged before 2026-12-07 and where the engine does not time its
        /// nodes: `replay - observe` against the observe-all run.
        #[serde(default)]
        same_run: bool,
    },
    /// (b) failed.
    SumOfParts {
        /// Sum of per-category increments.
        sum_ms: f64,
        /// As in `AllAtOnce`.
        baseline_ms: f64,
        /// As in `AllAtOnce`.
        #[serde(default)]
        node_time: bool,
        /// Allowed relative deviation.
        tolerance_ratio: f64,
    },
    /// (c) failed.
    Linearity {
        /// Category replayed.
        category: Category,
        /// The fit (None: could not fit).
        fit: Option<LinearFit>,
        /// Required R^2.
        min_r2: f64,
        /// Allowed intercept relative to slope.
        max_intercept_ratio: f64,
    },
    /// (d) failed: a replay or observation changed the real outputs.
    DigestChanged {
        /// The run that changed them.
        series: String,
    },
    /// Plain runs disagree with each other: there is no reference output to compare with.
    NonDeterministic {
        /// Distinct digests seen in plain runs.
        distinct_digests: usize,
    },
    /// Replaying a category made the run faster (in-place writes or broken fusion).
    NegativeIncrement {
        /// Category.
        category: Category,
        /// The increment.
        increment_ms: f64,
    },
    /// The noise gate gave up re-measuring a group.
    GateExhausted {
        /// The group.
        what: String,
    },
}

impl fmt::Display for ReplayProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |a: f64, b: f64| {
            if b == 0.0 {
                "n/a".to_string()
            } else {
                format!("{:+.1}%", (a - b) / b * 100.0)
            }
        };
        match self {
            ReplayProblem::AllAtOnce {
                increment_ms,
                baseline_ms,
                tolerance_ratio,
                same_run: true,
                ..
            } => write!(
                f,
                "(a) replaying every category at once: the replays took {increment_ms:.3} ms \
                 against the {baseline_ms:.3} ms of the nodes they repeat, in the same runs \
                 ({}, tolerance {:.0}%)",
                pct(*increment_ms, *baseline_ms),
                tolerance_ratio * 100.0
            ),
            ReplayProblem::AllAtOnce {
                increment_ms,
                baseline_ms,
                node_time,
                tolerance_ratio,
                ..
            } => write!(
                f,
                "(a) replaying every category at once added {increment_ms:.3} ms vs the \
                 observe-all run's {baseline_ms:.3} ms {} ({}, tolerance {:.0}%)",
                reference_words(*node_time),
                pct(*increment_ms, *baseline_ms),
                tolerance_ratio * 100.0
            ),
            ReplayProblem::SumOfParts {
                sum_ms,
                baseline_ms,
                node_time,
                tolerance_ratio,
            } => write!(
                f,
                "(b) per-category increments sum to {sum_ms:.3} ms vs the observe-all run's \
                 {baseline_ms:.3} ms {} ({}, tolerance {:.0}%)",
                reference_words(*node_time),
                pct(*sum_ms, *baseline_ms),
                tolerance_ratio * 100.0
            ),
            ReplayProblem::Linearity {
                category,
                fit,
                min_r2,
                max_intercept_ratio,
            } => match fit {
                Some(fit) => write!(
                    f,
                    "(c) replays of {category} do not grow linearly: slope {:.3} ms, intercept \
                     {:.3} ms, R^2 {:.4} (need R^2 >= {min_r2} and |intercept| <= {:.0}% of slope)",
                    fit.slope_ms,
                    fit.intercept_ms,
                    fit.r2,
                    max_intercept_ratio * 100.0
                ),
                None => write!(f, "(c) replays of {category}: no line could be fitted"),
            },
            ReplayProblem::DigestChanged { series } => {
                write!(f, "(d) {series} changed the output digest")
            }
            ReplayProblem::NonDeterministic { distinct_digests } => write!(
                f,
                "(d) plain runs gave {distinct_digests} different output digests: no reference"
            ),
            ReplayProblem::NegativeIncrement {
                category,
                increment_ms,
            } => write!(
                f,
                "replaying {category} made the run faster ({increment_ms:.3} ms): in-place \
                 writes or a broken fusion"
            ),
            ReplayProblem::GateExhausted { what } => {
                write!(f, "noise gate exhausted its retries in {what}")
            }
        }
    }
}

/// What the reference of checks (a) and (b) is, in words.
fn reference_words(node_time: bool) -> &'static str {
    if node_time {
        "inside its nodes"
    } else {
        "of wall time (the engine does not time its nodes)"
    }
}

/// A relative-tolerance check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToleranceCheck {
    /// What was measured.
    pub measured_ms: f64,
    /// What it should be close to.
    pub reference_ms: f64,
    /// `|measured - reference| / reference` (None when the reference is not positive).
    pub deviation_ratio: Option<f64>,
    /// Allowed deviation.
    pub tolerance_ratio: f64,
    /// `deviation_ratio <= tolerance_ratio`.
    pub pass: bool,
}

/// Compares `measured` with `reference` within a relative tolerance.
pub fn tolerance_check(
    measured_ms: f64,
    reference_ms: f64,
    tolerance_ratio: f64,
) -> ToleranceCheck {
    let deviation_ratio =
        (reference_ms > 0.0).then(|| (measured_ms - reference_ms).abs() / reference_ms);
    ToleranceCheck {
        measured_ms,
        reference_ms,
        deviation_ratio,
        tolerance_ratio,
        pass: deviation_ratio.is_some_and(|d| d <= tolerance_ratio),
    }
}

/// The linearity check (c).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LinearityCheck {
    /// Category replayed.
    pub category: Category,
    /// Replay counts.
    pub replays: Vec<u32>,
    /// The count the increments are measured from: the smallest replay count (each increment
    /// is `replay xk - replay xbase`, fitted against `k - base`, so a fixed cost of entering
    /// replay is in neither), or 0 in records made before: `replay xk - observe` against `k`.
    #[serde(default)]
    pub base_replays: u32,
    /// Median increment per count.
    pub increments_ms: Vec<f64>,
    /// Least-squares line of increment against `count - base_replays`.
    pub fit: Option<LinearFit>,
    /// Required R^2.
    pub min_r2: f64,
    /// Allowed `|intercept| / slope`.
    pub max_intercept_ratio: f64,
    /// `r2 >= min_r2`, `slope > 0` and `|intercept| <= max_intercept_ratio * slope`.
    pub pass: bool,
}

/// Fits increments against replay counts above `base_replays` and applies the pass rule.
pub fn linearity_check(
    category: Category,
    replays: &[u32],
    base_replays: u32,
    increments_ms: &[f64],
    min_r2: f64,
    max_intercept_ratio: f64,
) -> LinearityCheck {
    let xs: Vec<f64> = replays
        .iter()
        .map(|&k| f64::from(k) - f64::from(base_replays))
        .collect();
    let fit = linear_fit(&xs, increments_ms);
    let pass = fit.as_ref().is_some_and(|f| {
        f.r2 >= min_r2
            && f.slope_ms > 0.0
            && f.intercept_ms.abs() <= max_intercept_ratio * f.slope_ms
    });
    LinearityCheck {
        category,
        replays: replays.to_vec(),
        base_replays,
        increments_ms: increments_ms.to_vec(),
        fit,
        min_r2,
        max_intercept_ratio,
        pass,
    }
}

/// The digest check (d).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DigestCheck {
    /// Digest of the plain runs.
    pub reference_digest: u64,
    /// Distinct digests among plain runs (1 when deterministic).
    pub distinct_plain_digests: usize,
    /// Replay series whose digest differed from the observe run of the same window.
    pub changed_by: Vec<String>,
    /// One plain digest and no replay changed its observe run's digest.
    pub pass: bool,
    /// Observing (barriers at every node) changed the output against the plain run: a fusion
    /// or graph split rounds differently. Reported; does not make the replay untrusted.
    #[serde(default)]
    pub observation_changes_output: bool,
}

/// The four validations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Validations {
    /// (a) all categories at once: inside the replay-all runs, what their replays took vs the
    /// time inside the real nodes they repeat (`all_at_once_same_run`); where the engine does
    /// not time its nodes (and in records judged before 2026-12-07), `replay - observe` vs the
    /// observe-all run's time inside its nodes (its wall time when the engine cannot tell).
    pub all_at_once: ToleranceCheck,
    /// (a) was measured inside the replay-all runs (see `all_at_once`).
    #[serde(default)]
    pub all_at_once_same_run: bool,
    /// (b) sum of per-category increments vs the same.
    pub sum_of_parts: ToleranceCheck,
    /// (c) 1, 2, 4 replays.
    pub linearity: LinearityCheck,
    /// (d) outputs unchanged.
    pub digest: DigestCheck,
}
