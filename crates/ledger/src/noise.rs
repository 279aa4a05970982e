//! The noise gate's rules: configuration, machine-load readings, discard reasons, interleaving
//! order and the verdict of a comparison. The gate that runs windows is in [`crate::gate`].
//!
//! No timing is a single number. Runs are repeated in interleaved windows; a window in which the
//! machine was visibly busy (CPU load of other processes, the subject's own report of other GPU
//! work or clock drops) or which holds an outlier is discarded, re-measured and recorded.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::LedgerError;

/// Where machine-load readings come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProbeChoice {
    /// `/proc/loadavg` and `/proc/stat` (Linux); no readings elsewhere.
    Proc,
    /// No machine readings (tests; the subject's own `busy_reason` still applies).
    Off,
}

/// Order of the runs inside successive windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Interleave {
    /// Every window runs its series in the same order: A B, A B, ...
    Forward,
    /// Odd windows run the series in reverse: A B, B A, A B, ... A linear drift (thermal,
    /// caches warming) then biases neither side, and pairs stay adjacent.
    Mirror,
}

fn default_settle_ratio() -> f64 {
    0.05
}

fn default_max_warmup() -> usize {
    4
}

/// The noise gate's settings. Every rule below is applied identically to every subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NoiseConfig {
    /// Clean windows wanted per group (each window runs every series once). Under mirrored
    /// interleaving a group of several series keeps at least half of them (rounded up) in each
    /// run order, so an odd count keeps one more ([`crate::gate`]'s `orders_balanced`).
    pub windows: usize,
    /// Untimed-for-statistics windows first (recorded as warm-up).
    pub warmup_windows: usize,
    /// After those, warm-up goes on while the machine is still settling: a clean window faster
    /// than the warm-up window before it on some series by more than `settle_ratio` (of its
    /// own time) counts as warm-up too, until `max_warmup_windows` have run. Seen on a 2-core VM: the first windows of a run were
    /// 50% slower than later ones, which biased every paired difference taken from them.
    /// 0 warm-up windows turns warm-up off entirely.
    #[serde(default = "default_settle_ratio")]
    pub settle_ratio: f64,
    /// See `settle_ratio` (at least `warmup_windows`).
    #[serde(default = "default_max_warmup")]
    pub max_warmup_windows: usize,
    /// Windows the gate may discard in one group before it stops re-measuring; the group is
    /// then marked `exhausted` and every report shows it.
    pub max_retries: usize,
    /// Outlier rule: `|x - median| > max(outlier_mads * 1.4826 * MAD, outlier_floor_ratio * median)`.
    pub outlier_mads: f64,
    /// See `outlier_mads`; keeps perfectly repeatable series from flagging tiny wobbles.
    pub outlier_floor_ratio: f64,
    /// A standalone op timing is re-measured when more than this share of its samples are
    /// outliers.
    pub max_outlier_ratio: f64,
    /// CPU cores busy beyond the subject's own threads (from `/proc/stat` over the window)
    /// above which the window is discarded. On machines with more than 8 CPUs the limit is at
    /// least one CPU in 16: a GPU subject drives the device from a few host threads, and a
    /// 16-core GPU host keeps about one core busy with its own services.
    pub max_other_busy_cores: f64,
    /// 1-minute load average beyond the subject's threads above which the window is discarded.
    pub max_load_excess: f64,
    /// Run order inside windows.
    pub interleave: Interleave,
    /// Source of machine-load readings.
    pub probe: ProbeChoice,
    /// Fewer samples than this on either side of a comparison give "no verdict".
    pub min_samples: usize,
    /// Runs per sample: each series runs this many times in its window and the sample is the
    /// fastest (1: every run is a sample). The runs go in rounds over each subject's
    /// consecutive series of the window (see `Gate::run_window`), so they spread over the
    /// block's span. For hosts whose slowdowns come and go (shared cores, speed levels held
    /// for seconds): noise that only ever adds time leaves the minimum closest to the work
    /// itself. The raw times of the other runs are not kept.
    #[serde(default = "one_run")]
    pub best_of: usize,
}

fn one_run() -> usize {
    1
}

impl Default for NoiseConfig {
    fn default() -> Self {
        NoiseConfig {
            windows: 5,
            warmup_windows: 1,
            settle_ratio: default_settle_ratio(),
            max_warmup_windows: default_max_warmup(),
            max_retries: 6,
            outlier_mads: 5.0,
            outlier_floor_ratio: 0.02,
            max_outlier_ratio: 0.2,
            max_other_busy_cores: 0.5,
            max_load_excess: 1.5,
            interleave: Interleave::Mirror,
            probe: ProbeChoice::Proc,
            min_samples: 3,
            best_of: 1,
        }
    }
}

impl NoiseConfig {
    /// Checks every field's range.
    pub fn validate(&self) -> Result<(), LedgerError> {
        let bad = |what: &str| Err(LedgerError::Config(format!("noise gate: {what}")));
        if self.windows == 0 {
            return bad("windows must be at least 1");
        }
        if self.best_of == 0 {
            return bad("best_of must be at least 1");
        }
        if self.outlier_mads.is_nan() || self.outlier_mads <= 0.0 {
            return bad("outlier_mads must be > 0");
        }
        if !(0.0..).contains(&self.outlier_floor_ratio) {
            return bad("outlier_floor_ratio must be >= 0");
        }
        if !(0.0..=1.0).contains(&self.max_outlier_ratio) {
            return bad("max_outlier_ratio must be within [0, 1]");
        }
        if !(0.0..).contains(&self.max_other_busy_cores) || !(0.0..).contains(&self.max_load_excess)
        {
            return bad("busy-machine limits must be >= 0");
        }
        if self.settle_ratio.is_nan() || self.settle_ratio <= 0.0 {
            return bad("settle_ratio must be > 0");
        }
        Ok(())
    }
}

/// Cumulative CPU time of the whole machine, in clock ticks (first line of `/proc/stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    /// user + nice + system + irq + softirq + steal.
    pub busy_ticks: u64,
    /// busy + idle + iowait.
    pub total_ticks: u64,
}

/// One machine-load reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadSample {
    /// 1-minute load average.
    pub loadavg_1m: f64,
    /// Cumulative CPU ticks, when readable.
    pub cpu: Option<CpuTimes>,
    /// CPUs counted in `/proc/stat` (`cpuN` lines).
    pub n_cpus: usize,
    /// CPU ticks this process and its waited-for children have used (`/proc/self/stat` utime +
    /// stime + cutime + cstime), when readable: the subject runs in this process, and the gate's
    /// own probes (`nvidia-smi`, about half a core-second each) are its children, so the rest of
    /// the machine's busy time is someone else's.
    pub self_ticks: Option<u64>,
}

/// utime + stime + cutime + cstime (clock ticks) from `/proc/self/stat` text.
pub fn parse_self_stat(text: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces: fields are counted after its ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ')', field 3 (state) is f[0]; utime is field 14, stime 15, cutime 16, cstime 17.
    let mut ticks = 0u64;
    for i in 11..=14 {
        ticks += f.get(i)?.parse::<u64>().ok()?;
    }
    Some(ticks)
}

/// Parses the 1-minute load average from `/proc/loadavg` text.
pub fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// Parses the aggregate `cpu` line and counts `cpuN` lines of `/proc/stat` text.
pub fn parse_proc_stat(text: &str) -> Option<(CpuTimes, usize)> {
    let mut lines = text.lines();
    let first = lines.next()?;
    let mut fields = first.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.map(|f| f.parse().ok()).collect::<Option<_>>()?;
    if v.len() < 4 {
        return None;
    }
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal (guest time is already inside user).
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    let total = busy + at(3) + at(4);
    let n_cpus = text
        .lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .and_then(|r| r.chars().next())
                .is_some_and(|c| c.is_ascii_digit())
        })
        .count();
    Some((
        CpuTimes {
            busy_ticks: busy,
            total_ticks: total,
        },
        n_cpus,
    ))
}

/// A source of machine-load readings.
pub trait MachineProbe {
    /// Reads the machine's load now; None when it cannot be read.
    fn sample(&mut self) -> Option<LoadSample>;
}

/// Reads `/proc/loadavg` and `/proc/stat`.
#[derive(Debug, Default)]
pub struct ProcProbe;

impl MachineProbe for ProcProbe {
    fn sample(&mut self) -> Option<LoadSample> {
        let loadavg_1m = parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)?;
        let stat = std::fs::read_to_string("/proc/stat").ok();
        let parsed = stat.as_deref().and_then(parse_proc_stat);
        Some(LoadSample {
            loadavg_1m,
            cpu: parsed.map(|p| p.0),
            n_cpus: parsed.map_or(0, |p| p.1),
            self_ticks: std::fs::read_to_string("/proc/self/stat")
                .ok()
                .as_deref()
                .and_then(parse_self_stat),
        })
    }
}

/// Never reads anything.
#[derive(Debug, Default)]
pub struct NoProbe;

impl MachineProbe for NoProbe {
    fn sample(&mut self) -> Option<LoadSample> {
        None
    }
}

/// The machine's load over one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WindowLoad {
    /// Load average before the window.
    pub loadavg_1m_before: f64,
    /// Load average after the window.
    pub loadavg_1m_after: f64,
    /// Cores busy on average during the window (all processes), from `/proc/stat` deltas.
    pub machine_busy_cores: Option<f64>,
    /// `machine_busy_cores - subject_threads`, floored at 0: an estimate of other processes'
    /// CPU use (an underestimate when the subject's threads are not all busy).
    pub other_busy_cores: Option<f64>,
    /// Threads the subjects of the window use (the largest).
    pub subject_threads: usize,
    /// CPUs of the machine (0 when unknown).
    #[serde(default)]
    pub n_cpus: usize,
}

/// Combines two readings around a window.
pub fn window_load(before: &LoadSample, after: &LoadSample, subject_threads: usize) -> WindowLoad {
    let machine_busy_cores = match (before.cpu, after.cpu) {
        (Some(b), Some(a)) if a.total_ticks > b.total_ticks && after.n_cpus > 0 => {
            let busy = a.busy_ticks.saturating_sub(b.busy_ticks) as f64;
            let total = (a.total_ticks - b.total_ticks) as f64;
            Some(busy / total * after.n_cpus as f64)
        }
        _ => None,
    };
    // This process's own busy cores over the window, where readable.
    let self_cores = match (before.cpu, after.cpu, before.self_ticks, after.self_ticks) {
        (Some(b), Some(a), Some(sb), Some(sa)) if a.total_ticks > b.total_ticks => {
            let total = (a.total_ticks - b.total_ticks) as f64;
            Some(sa.saturating_sub(sb) as f64 / total * after.n_cpus as f64)
        }
        _ => None,
    };
    WindowLoad {
        loadavg_1m_before: before.loadavg_1m,
        loadavg_1m_after: after.loadavg_1m,
        machine_busy_cores,
        other_busy_cores: machine_busy_cores
            .map(|c| (c - self_cores.unwrap_or(subject_threads as f64)).max(0.0)),
        subject_threads,
        n_cpus: after.n_cpus,
    }
}

/// Why the gate discarded a window or an op timing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DiscardReason {
    /// Other processes kept CPU cores busy during the window.
    CpuBusy {
        /// Estimated cores busy with other work.
        other_busy_cores: f64,
        /// The limit.
        limit_cores: f64,
    },
    /// The load average exceeds what the subject's threads explain.
    LoadAverage {
        /// Larger of the before/after 1-minute load averages.
        loadavg_1m: f64,
        /// Threads of the subjects.
        subject_threads: usize,
        /// Allowed excess.
        limit_excess: f64,
    },
    /// The subject reported the machine busy (other GPU processes, clocks).
    SubjectBusy {
        /// Engine that said so.
        engine: String,
        /// Its reason.
        reason: String,
    },
    /// A sample of the window is an outlier of its series.
    Outlier {
        /// Series label.
        series: String,
        /// The sample.
        value_ms: f64,
        /// Median of the series' kept windows.
        median_ms: f64,
        /// Allowed distance from the median.
        threshold_ms: f64,
    },
    /// Too many samples of one standalone op timing are outliers.
    TooManyOutliers {
        /// Outlying samples.
        outliers: usize,
        /// Samples.
        samples: usize,
        /// Allowed share.
        limit_ratio: f64,
    },
}

impl fmt::Display for DiscardReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiscardReason::CpuBusy {
                other_busy_cores,
                limit_cores,
            } => write!(
                f,
                "CPU busy: {other_busy_cores:.2} cores used by other processes (limit {limit_cores:.2})"
            ),
            DiscardReason::LoadAverage {
                loadavg_1m,
                subject_threads,
                limit_excess,
            } => write!(
                f,
                "load average {loadavg_1m:.2} with {subject_threads} subject threads (limit +{limit_excess:.2})"
            ),
            DiscardReason::SubjectBusy { engine, reason } => write!(f, "{engine} busy: {reason}"),
            DiscardReason::Outlier {
                series,
                value_ms,
                median_ms,
                threshold_ms,
            } => write!(
                f,
                "outlier in {series}: {value_ms:.3} ms vs median {median_ms:.3} ms (threshold {threshold_ms:.3} ms)"
            ),
            DiscardReason::TooManyOutliers {
                outliers,
                samples,
                limit_ratio,
            } => write!(
                f,
                "{outliers} of {samples} samples are outliers (limit {:.0}%)",
                limit_ratio * 100.0
            ),
        }
    }
}

/// The busy-machine reasons a window's load gives under `cfg`.
pub fn load_reasons(load: &WindowLoad, cfg: &NoiseConfig) -> Vec<DiscardReason> {
    let mut reasons = Vec::new();
    let limit_cores = cfg.max_other_busy_cores.max(load.n_cpus as f64 / 16.0);
    if let Some(other) = load.other_busy_cores.filter(|&c| c > limit_cores) {
        reasons.push(DiscardReason::CpuBusy {
            other_busy_cores: other,
            limit_cores,
        });
    }
    // The load average trails real load by a minute (a build that just finished still shows):
    // it decides only when the per-window CPU accounting is unreadable.
    let loadavg = load.loadavg_1m_before.max(load.loadavg_1m_after);
    if load.other_busy_cores.is_none()
        && loadavg - load.subject_threads as f64 > cfg.max_load_excess
    {
        reasons.push(DiscardReason::LoadAverage {
            loadavg_1m: loadavg,
            subject_threads: load.subject_threads,
            limit_excess: cfg.max_load_excess,
        });
    }
    reasons
}

/// The order in which a window with `n` series runs them.
pub fn window_order(n: usize, window: usize, interleave: Interleave) -> Vec<usize> {
    match interleave {
        Interleave::Mirror if window % 2 == 1 => (0..n).rev().collect(),
        _ => (0..n).collect(),
    }
}

/// Outcome of comparing A with B (A = ours).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A is faster by more than the noise.
    Faster,
    /// A is slower by more than the noise.
    Slower,
    /// Both figures are exactly equal with zero spread (deterministic subjects, absent work).
    Even,
    /// The spread is at least the effect, or too few samples: no conclusion.
    NoVerdict,
}

impl Verdict {
    /// Words for reports, from A's side.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Faster => "A faster",
            Verdict::Slower => "A slower",
            Verdict::Even => "even",
            Verdict::NoVerdict => "no verdict",
        }
    }
}

/// A timing figure with its spread, as compared by the noise gate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Figure {
    /// The figure (a median, or a sum of medians).
    pub value_ms: f64,
    /// Its spread (an IQR, or a sum of IQRs).
    pub spread_ms: f64,
    /// Samples behind it (the smallest count when it is a sum).
    pub samples: usize,
}

/// The noise gate's comparison of two figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Comparison {
    /// A's figure.
    pub a_ms: f64,
    /// B's figure.
    pub b_ms: f64,
    /// `a_ms - b_ms` (positive: A slower).
    pub effect_ms: f64,
    /// `max(spread_a, spread_b)`.
    pub noise_ms: f64,
    /// The outcome.
    pub verdict: Verdict,
    /// Either side had fewer than `min_samples` samples.
    pub too_few_samples: bool,
}

/// Differences below this share of the larger figure are floating-point rounding (figures are
/// sums and differences of medians), not an effect.
pub const ROUNDING_RATIO: f64 = 1e-9;

/// Compares A with B. Rule: with fewer than `min_samples` on either side, no verdict; else
/// `noise = max(spread_a, spread_b)`; `|a - b| > noise` gives Faster/Slower; `a == b` (up to
/// [`ROUNDING_RATIO`]) with zero noise gives Even; anything else (the spread is at least the
/// effect) gives no verdict.
pub fn compare(a: &Figure, b: &Figure, min_samples: usize) -> Comparison {
    let raw = a.value_ms - b.value_ms;
    let rounding = ROUNDING_RATIO * a.value_ms.abs().max(b.value_ms.abs());
    let effect_ms = if raw.abs() <= rounding { 0.0 } else { raw };
    let noise_ms = a.spread_ms.max(b.spread_ms);
    let too_few_samples = a.samples < min_samples || b.samples < min_samples;
    let verdict = if too_few_samples {
        Verdict::NoVerdict
    } else if effect_ms.abs() > noise_ms {
        if effect_ms < 0.0 {
            Verdict::Faster
        } else {
            Verdict::Slower
        }
    } else if effect_ms == 0.0 && noise_ms == 0.0 {
        Verdict::Even
    } else {
        Verdict::NoVerdict
    };
    Comparison {
        a_ms: a.value_ms,
        b_ms: b.value_ms,
        effect_ms,
        noise_ms,
        verdict,
        too_few_samples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(value_ms: f64, spread_ms: f64) -> Figure {
        Figure {
            value_ms,
            spread_ms,
            samples: 5,
        }
    }

    #[test]
    fn verdicts_by_hand() {
        assert_eq!(
            compare(&fig(10.0, 0.5), &fig(12.0, 1.0), 3).verdict,
            Verdict::Faster
        );
        assert_eq!(
            compare(&fig(12.0, 0.5), &fig(10.0, 1.0), 3).verdict,
            Verdict::Slower
        );
        // Effect 1.0 equals the spread 1.0: not more than the noise.
        let c = compare(&fig(11.0, 0.2), &fig(10.0, 1.0), 3);
        assert_eq!(
            (c.verdict, c.effect_ms, c.noise_ms),
            (Verdict::NoVerdict, 1.0, 1.0)
        );
        assert_eq!(
            compare(&fig(4.0, 0.0), &fig(4.0, 0.0), 3).verdict,
            Verdict::Even
        );
        // Rounding of sums of medians is not an effect.
        let c = compare(
            &fig(0.3999999999999986, 0.0),
            &fig(0.4000000000000003, 0.0),
            3,
        );
        assert_eq!((c.verdict, c.effect_ms), (Verdict::Even, 0.0));
        let few = Figure {
            samples: 2,
            ..fig(1.0, 0.0)
        };
        let c = compare(&few, &fig(9.0, 0.0), 3);
        assert_eq!((c.verdict, c.too_few_samples), (Verdict::NoVerdict, true));
    }

    #[test]
    fn interleaving_orders() {
        assert_eq!(window_order(3, 0, Interleave::Mirror), vec![0, 1, 2]);
        assert_eq!(window_order(3, 1, Interleave::Mirror), vec![2, 1, 0]);
        assert_eq!(window_order(3, 1, Interleave::Forward), vec![0, 1, 2]);
    }

    #[test]
    fn proc_parsers() {
        assert_eq!(parse_loadavg("0.52 0.58 0.59 2/345 12345\n"), Some(0.52));
        assert_eq!(parse_loadavg(""), None);
        let stat = "cpu  100 5 50 800 20 3 2 1 0 0\ncpu0 50 2 25 400 10 1 1 0 0 0\n\
                    cpu1 50 3 25 400 10 2 1 1 0 0\nintr 1 2 3\n";
        let (t, n) = parse_proc_stat(stat).unwrap();
        assert_eq!(n, 2);
        assert_eq!(t.busy_ticks, 100 + 5 + 50 + 3 + 2 + 1);
        assert_eq!(t.total_ticks, 161 + 800 + 20);
        assert_eq!(parse_proc_stat("intr 1 2\n"), None);
        assert_eq!(parse_proc_stat("cpu 1 x 3 4\n"), None);
    }

    #[test]
    fn window_load_and_reasons_by_hand() {
        let cfg = NoiseConfig::default();
        let before = LoadSample {
            loadavg_1m: 1.0,
            cpu: Some(CpuTimes {
                busy_ticks: 1000,
                total_ticks: 4000,
            }),
            n_cpus: 4,
            self_ticks: None,
        };
        // 300 of 400 ticks busy on 4 cpus = 3 busy cores; subject uses 1 thread -> 2 others.
        let after = LoadSample {
            loadavg_1m: 3.0,
            cpu: Some(CpuTimes {
                busy_ticks: 1300,
                total_ticks: 4400,
            }),
            n_cpus: 4,
            self_ticks: None,
        };
        let load = window_load(&before, &after, 1);
        assert_eq!(load.machine_busy_cores, Some(3.0));
        assert_eq!(load.other_busy_cores, Some(2.0));
        let reasons = load_reasons(&load, &cfg);
        // With CPU accounting readable, the lagging load average does not decide.
        assert_eq!(reasons.len(), 1);
        assert_eq!(
            reasons[0].to_string(),
            "CPU busy: 2.00 cores used by other processes (limit 0.50)"
        );
        // A 16-CPU host is allowed one other busy core; a 64-CPU host four.
        let big = WindowLoad {
            n_cpus: 16,
            other_busy_cores: Some(0.9),
            ..load.clone()
        };
        assert!(load_reasons(&big, &cfg).is_empty());
        let big = WindowLoad {
            n_cpus: 64,
            other_busy_cores: Some(4.2),
            ..load.clone()
        };
        assert_eq!(
            load_reasons(&big, &cfg)[0].to_string(),
            "CPU busy: 4.20 cores used by other processes (limit 4.00)"
        );
        // Without it, the load average does.
        let blind = WindowLoad {
            other_busy_cores: None,
            machine_busy_cores: None,
            ..load.clone()
        };
        let reasons = load_reasons(&blind, &cfg);
        assert_eq!(
            reasons[0].to_string(),
            "load average 3.00 with 1 subject threads (limit +1.50)"
        );
        // This process's own ticks: 200 of 400 on 4 cpus = 2 cores; 3 busy - 2 own = 1 other.
        let own_before = LoadSample {
            self_ticks: Some(100),
            ..before
        };
        let own_after = LoadSample {
            self_ticks: Some(300),
            ..after
        };
        assert_eq!(
            window_load(&own_before, &own_after, 1).other_busy_cores,
            Some(1.0)
        );
        // A 4-thread subject explains the same load: no reason.
        assert!(load_reasons(&window_load(&before, &after, 4), &cfg).is_empty());
    }

    #[test]
    fn config_validation_texts() {
        let cfg = NoiseConfig {
            windows: 0,
            ..NoiseConfig::default()
        };
        assert_eq!(
            cfg.validate().unwrap_err().to_string(),
            "invalid configuration: noise gate: windows must be at least 1"
        );
        let cfg = NoiseConfig {
            max_outlier_ratio: 1.5,
            ..NoiseConfig::default()
        };
        assert_eq!(
            cfg.validate().unwrap_err().to_string(),
            "invalid configuration: noise gate: max_outlier_ratio must be within [0, 1]"
        );
        assert!(NoiseConfig::default().validate().is_ok());
    }
}

#[cfg(test)]
mod self_stat_tests {
    use super::*;

    #[test]
    fn self_stat_parsing_counts_fields_after_the_name() {
        // pid (comm with spaces) state ppid pgrp session tty tpgid flags minflt cminflt majflt
        // cmajflt utime stime cutime cstime ...
        let t = "42 (my prog) R 1 42 42 0 -1 4194304 100 0 0 0 250 50 7 3 20 0 4 0";
        assert_eq!(parse_self_stat(t), Some(310));
        assert_eq!(parse_self_stat("garbage"), None);
    }
}
