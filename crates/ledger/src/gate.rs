//! The noise gate at work: runs interleaved windows of several series (subjects x run modes),
//! reads the machine's load and the subjects' busy reports around each window, discards busy
//! or outlier-ridden windows, re-measures them within a retry budget, and records everything.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::LedgerError;
use crate::noise::{
    DiscardReason, Interleave, MachineProbe, NoProbe, NoiseConfig, ProbeChoice, ProcProbe,
    load_reasons, window_load, window_order,
};
use crate::stats::{Stats, outliers};
use crate::subject::{OpTimingRequest, Prompt, RunMode, Subject};

/// What one run of a series does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// The measured batch of the prompt after its context is restored (a prefill when there is
    /// no context), instrumented as `mode` says.
    Prefill {
        /// Instrumentation.
        mode: RunMode,
    },
    /// `n_gen` decode steps after an untimed prefill of the prompt.
    Decode {
        /// Tokens generated.
        n_gen: u32,
    },
}

/// One series of a group: which engine does what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SeriesSpec {
    /// Position of the subject in the run (0 = A, 1 = B): engines may share a name when one
    /// engine is compared at two commits.
    pub subject: u32,
    /// Engine name.
    pub engine: String,
    /// Human label (`plain`, `observe(dense_proj)`, `replay(dense_proj) x2`).
    pub label: String,
    /// The run.
    pub action: Action,
}

/// A series to run, with the index of its subject in the slice given to [`Gate::run_group`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEntry {
    /// Index into the subjects slice.
    pub subject: usize,
    /// The series.
    pub spec: SeriesSpec,
}

/// What one run returned.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunSample {
    /// Wall time.
    pub wall_ms: f64,
    /// Hash of the real outputs.
    pub output_digest: u64,
    /// Dispatches through the engine's executor.
    pub dispatches: u64,
    /// Time inside the observed nodes ([`crate::subject::RunOutcome::in_node_ms`]); absent in
    /// plain runs, from engines that cannot tell, and in records made before 2026-12-05.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_node_ms: Option<f64>,
}

/// Whether a window counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WindowStatus {
    /// Warm-up: recorded, not used.
    Warmup,
    /// Used for statistics.
    Kept,
    /// Discarded by the gate (see its reasons) and re-measured.
    Discarded,
}

/// One window: every series of the group run once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WindowRecord {
    /// Sequence number in the group (warm-ups included).
    pub seq: u32,
    /// Whether it counts.
    pub status: WindowStatus,
    /// One run per series, indexed like `GroupRecord::series`.
    pub runs: Vec<RunSample>,
    /// Machine load over the window, when read.
    pub load: Option<crate::noise::WindowLoad>,
    /// Why it was discarded (empty when kept).
    pub reasons: Vec<DiscardReason>,
    /// The machine's speed level in this window (1 = typical): the median, over the window's
    /// series, of each run's time over its series' median across the kept windows
    /// ([`window_levels`]). Every statistic divides a kept run's time by it. 1 for groups of
    /// fewer than [`LEVEL_MIN_SERIES`] series and for windows that are not kept.
    #[serde(default = "one")]
    pub level: f64,
}

/// Whether a group's kept windows hold at least half of `windows` (rounded up) of each run
/// order: always under forward interleaving and for a group of one series; under mirrored
/// interleaving the windows of even sequence numbers run the series forward and the odd ones in
/// reverse. The second of two adjacent runs is often faster by about the same amount (caches,
/// clocks: ~0.4 ms on llama.cpp's 19 ms passes on the 2-core VM, both orders seen in one demo
/// run), so a paired difference carries that amount with its window's sign, and the median of
/// differences from unequal numbers of each order carries it too. Discarded windows are
/// re-measured at the next sequence number, which can leave 4 of one order and 1 of the other:
/// the gate then measures on until the orders are even (an odd `windows` keeps one more).
pub(crate) fn orders_balanced(
    record: &GroupRecord,
    windows: usize,
    interleave: Interleave,
) -> bool {
    if interleave != Interleave::Mirror || record.series.len() < 2 {
        return true;
    }
    let need = windows.div_ceil(2);
    let even = record.kept().filter(|w| w.seq % 2 == 0).count();
    let odd = record.kept().count() - even;
    even >= need && odd >= need
}

pub(crate) fn one() -> f64 {
    1.0
}

/// Groups with at least this many series get per-window levels: the median over the window's
/// series is then robust to one slow run (with fewer, a spike in one run would move the level
/// and with it every other run of the window).
pub const LEVEL_MIN_SERIES: usize = 4;

/// Per-window machine levels of `windows` over the kept ones (1 elsewhere): hosts that share
/// cores or change frequency run whole windows a fixed factor slower for seconds at a time
/// (the 2-core VMs this runs on switch between two levels ~30% apart). A window runs all its
/// series within a fraction of a second, so such a switch scales the whole window: dividing
/// by the window's level removes it, and leaves a spike in one run (which the median ignores)
/// to the outlier rule. On a steady machine every level is ~1 and nothing changes.
pub fn window_levels(windows: &[WindowRecord]) -> Vec<f64> {
    let kept: Vec<usize> = (0..windows.len())
        .filter(|&i| windows[i].status == WindowStatus::Kept)
        .collect();
    let n_series = kept.first().map_or(0, |&w| windows[w].runs.len());
    let mut levels = vec![1.0; windows.len()];
    if n_series < LEVEL_MIN_SERIES || kept.len() < 3 {
        return levels;
    }
    let medians: Vec<Option<f64>> = (0..n_series)
        .map(|s| {
            let xs: Vec<f64> = kept
                .iter()
                .filter_map(|&w| windows[w].runs.get(s).map(|r| r.wall_ms))
                .collect();
            crate::stats::median(&xs).filter(|m| *m > 0.0)
        })
        .collect();
    for &w in &kept {
        let ratios: Vec<f64> = windows[w]
            .runs
            .iter()
            .zip(&medians)
            .filter_map(|(r, m)| m.map(|m| r.wall_ms / m))
            .collect();
        if let Some(l) = crate::stats::median(&ratios).filter(|l| l.is_finite() && *l > 0.0) {
            levels[w] = l;
        }
    }
    levels
}

/// All windows of one group, kept and discarded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GroupRecord {
    /// What the group measures.
    pub what: String,
    /// The series, in entry order.
    pub series: Vec<SeriesSpec>,
    /// Every window in run order.
    pub windows: Vec<WindowRecord>,
    /// The retry budget ran out: figures come from fewer or noisier windows than asked.
    pub exhausted: bool,
}

impl GroupRecord {
    /// Kept windows.
    pub fn kept(&self) -> impl Iterator<Item = &WindowRecord> {
        self.windows
            .iter()
            .filter(|w| w.status == WindowStatus::Kept)
    }

    /// Kept runs of a series, their times divided by their window's level.
    pub fn runs(&self, series: usize) -> Vec<RunSample> {
        self.kept()
            .filter_map(|w| {
                let mut r = *w.runs.get(series)?;
                r.wall_ms /= w.level;
                r.in_node_ms = r.in_node_ms.map(|t| t / w.level);
                Some(r)
            })
            .collect()
    }

    /// Kept wall times of a series.
    pub fn samples_ms(&self, series: usize) -> Vec<f64> {
        self.runs(series).iter().map(|r| r.wall_ms).collect()
    }

    /// Statistics of a series' kept wall times.
    pub fn stats(&self, series: usize) -> Option<Stats> {
        Stats::of(&self.samples_ms(series))
    }

    /// Statistics of a series' time inside its observed nodes, over the kept windows whose run
    /// reported it (None when none did).
    pub fn in_node_stats(&self, series: usize) -> Option<Stats> {
        let v: Vec<f64> = self
            .runs(series)
            .iter()
            .filter_map(|r| r.in_node_ms)
            .collect();
        Stats::of(&v)
    }

    /// Paired differences `b - a` of two series over kept windows (adjacent runs, so drift
    /// cancels).
    pub fn paired_ms(&self, a: usize, b: usize) -> Vec<f64> {
        self.kept()
            .filter_map(|w| Some((w.runs.get(b)?.wall_ms - w.runs.get(a)?.wall_ms) / w.level))
            .collect()
    }

    /// The levels of the kept windows, in run order.
    pub fn levels(&self) -> Vec<f64> {
        self.kept().map(|w| w.level).collect()
    }

    /// Discarded windows.
    pub fn discards(&self) -> usize {
        self.windows
            .iter()
            .filter(|w| w.status == WindowStatus::Discarded)
            .count()
    }

    /// Distinct discard reasons, in first-seen order.
    pub fn discard_reasons(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for r in self.windows.iter().flat_map(|w| &w.reasons) {
            let s = r.to_string();
            if seen.insert(s.clone()) {
                out.push(s);
            }
        }
        out
    }

    /// Indices of the series of one subject (its position in the run).
    pub fn series_of(&self, subject: u32) -> Vec<usize> {
        (0..self.series.len())
            .filter(|&i| self.series[i].subject == subject)
            .collect()
    }

    /// The same record restricted to some series (one subject's view of a shared group);
    /// windows keep their status and reasons.
    pub fn select(&self, series: &[usize]) -> GroupRecord {
        GroupRecord {
            what: self.what.clone(),
            series: series
                .iter()
                .filter_map(|&i| self.series.get(i).cloned())
                .collect(),
            windows: self
                .windows
                .iter()
                .map(|w| WindowRecord {
                    runs: series
                        .iter()
                        .filter_map(|&i| w.runs.get(i).copied())
                        .collect(),
                    ..w.clone()
                })
                .collect(),
            exhausted: self.exhausted,
        }
    }
}

/// One call of `Subject::time_op` under the gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OpAttempt {
    /// Per-call samples.
    pub samples_ms: Vec<f64>,
    /// Machine load over the call.
    pub load: Option<crate::noise::WindowLoad>,
    /// Why it was discarded (empty when used).
    pub reasons: Vec<DiscardReason>,
}

/// Every attempt at timing one op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OpSampleRecord {
    /// Attempts in order.
    pub attempts: Vec<OpAttempt>,
    /// Index of the attempt whose samples are used (the first clean one, or the last when the
    /// retry budget ran out).
    pub used: usize,
    /// The retry budget ran out.
    pub exhausted: bool,
}

impl OpSampleRecord {
    /// The samples used for statistics.
    pub fn used_samples(&self) -> &[f64] {
        self.attempts
            .get(self.used)
            .map_or(&[], |a| a.samples_ms.as_slice())
    }

    /// Discarded attempts (an attempt used because the budget ran out is not one).
    pub fn discards(&self) -> usize {
        self.attempts
            .iter()
            .enumerate()
            .filter(|(i, a)| *i != self.used && !a.reasons.is_empty())
            .count()
    }
}

/// Runs windows under the noise gate's rules.
pub struct Gate {
    cfg: NoiseConfig,
    probe: Box<dyn MachineProbe>,
}

fn check_sample(engine: &str, what: &str, value_ms: f64) -> Result<(), LedgerError> {
    if value_ms.is_finite() && value_ms >= 0.0 {
        Ok(())
    } else {
        Err(LedgerError::BadSample {
            engine: engine.to_string(),
            what: what.to_string(),
            value_ms,
        })
    }
}

impl Gate {
    /// A gate with an explicit load probe (tests inject fakes here).
    pub fn new(cfg: NoiseConfig, probe: Box<dyn MachineProbe>) -> Result<Gate, LedgerError> {
        cfg.validate()?;
        Ok(Gate { cfg, probe })
    }

    /// A gate reading the machine as `cfg.probe` says.
    pub fn from_config(cfg: &NoiseConfig) -> Result<Gate, LedgerError> {
        let probe: Box<dyn MachineProbe> = match cfg.probe {
            ProbeChoice::Proc => Box::new(ProcProbe),
            ProbeChoice::Off => Box::new(NoProbe),
        };
        Gate::new(cfg.clone(), probe)
    }

    /// The rules in force.
    pub fn config(&self) -> &NoiseConfig {
        &self.cfg
    }

    fn busy(
        &mut self,
        subjects: &mut [&mut dyn Subject],
        involved: &[usize],
        engines: &[String],
    ) -> Vec<DiscardReason> {
        involved
            .iter()
            .filter_map(|&i| {
                let reason = subjects[i].busy_reason()?;
                Some(DiscardReason::SubjectBusy {
                    engine: engines[i].clone(),
                    reason,
                })
            })
            .collect()
    }

    /// Runs `entries` in interleaved windows until `cfg.windows` clean windows are kept (or the
    /// retry budget runs out), then drops windows holding an outlier of any series and
    /// re-measures them. `prompt` is the context and batch of every run.
    pub fn run_group(
        &mut self,
        subjects: &mut [&mut dyn Subject],
        prompt: Prompt<'_>,
        entries: &[GroupEntry],
        what: &str,
    ) -> Result<GroupRecord, LedgerError> {
        if entries.is_empty()
            || entries
                .iter()
                .any(|e| e.subject >= subjects.len() || e.spec.subject as usize != e.subject)
        {
            return Err(LedgerError::Config(format!(
                "{what}: a group needs at least one series, each naming one of the {} subjects",
                subjects.len()
            )));
        }
        let engines: Vec<String> = subjects.iter().map(|s| s.info().engine).collect();
        let involved: Vec<usize> = entries
            .iter()
            .map(|e| e.subject)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let threads = involved
            .iter()
            .map(|&i| subjects[i].info().threads.unwrap_or(1))
            .max()
            .unwrap_or(1);
        let mut record = GroupRecord {
            what: what.to_string(),
            series: entries.iter().map(|e| e.spec.clone()).collect(),
            windows: Vec::new(),
            exhausted: false,
        };
        let mut seq = 0u32;
        for _ in 0..self.cfg.warmup_windows {
            let runs = self.run_window(subjects, prompt, entries, seq as usize)?;
            record.windows.push(WindowRecord {
                seq,
                status: WindowStatus::Warmup,
                runs,
                load: None,
                reasons: Vec::new(),
                level: 1.0,
            });
            seq += 1;
        }
        let max_warm = self.cfg.max_warmup_windows.max(self.cfg.warmup_windows);
        let mut discards = 0usize;
        loop {
            let kept = record.kept().count();
            if kept >= self.cfg.windows {
                let flagged = self.outlier_windows(&record);
                if flagged.is_empty()
                    && orders_balanced(&record, self.cfg.windows, self.cfg.interleave)
                {
                    break;
                }
                if !flagged.is_empty() {
                    if discards + flagged.len() > self.cfg.max_retries {
                        record.exhausted = true;
                        break;
                    }
                    for (w, reasons) in flagged {
                        record.windows[w].status = WindowStatus::Discarded;
                        record.windows[w].reasons = reasons;
                        discards += 1;
                    }
                    continue;
                }
                // Enough clean windows, but not of both orders: measure another.
            }
            let before = self.probe.sample();
            let mut reasons = self.busy(subjects, &involved, &engines);
            let runs = self.run_window(subjects, prompt, entries, seq as usize)?;
            let after = self.probe.sample();
            reasons.extend(self.busy(subjects, &involved, &engines));
            let load = before.zip(after).map(|(b, a)| window_load(&b, &a, threads));
            if let Some(l) = &load {
                reasons.extend(load_reasons(l, &self.cfg));
            }
            let status = if reasons.is_empty() && self.still_settling(&record, &runs, max_warm) {
                WindowStatus::Warmup
            } else if reasons.is_empty() {
                WindowStatus::Kept
            } else {
                discards += 1;
                WindowStatus::Discarded
            };
            record.windows.push(WindowRecord {
                seq,
                status,
                runs,
                load,
                reasons,
                level: 1.0,
            });
            seq += 1;
            if discards > self.cfg.max_retries {
                record.exhausted = true;
                break;
            }
        }
        for (w, l) in window_levels(&record.windows).into_iter().enumerate() {
            record.windows[w].level = l;
        }
        if record.kept().count() == 0 {
            return Err(LedgerError::NoCleanWindow {
                what: what.to_string(),
                discards,
                reasons: record.discard_reasons().join("; "),
            });
        }
        Ok(record)
    }

    /// One window: every entry once in `window_order`, or with `best_of` > 1 the fastest of
    /// `best_of` runs of each. Those runs go in rounds over each subject's block of the order
    /// (its consecutive entries): round 1 runs the block's entries once each, round 2 again,
    /// and so on, before the next subject's block. So each series' runs are spread over its
    /// block's whole span instead of lying back to back, and a host that switches speed level
    /// inside the block (the 2-core VMs do, ~1.5x, every few seconds) still leaves every series
    /// of the block a run at the faster level when a whole round lies at it; back to back, the
    /// series before the switch kept fast runs and those after it slow ones, which the paired
    /// differences then carried. The first run after the other subject's block (slower: caches)
    /// is still only ever one of a series' runs.
    fn run_window(
        &mut self,
        subjects: &mut [&mut dyn Subject],
        prompt: Prompt<'_>,
        entries: &[GroupEntry],
        window: usize,
    ) -> Result<Vec<RunSample>, LedgerError> {
        let mut runs: Vec<Option<crate::subject::RunOutcome>> = vec![None; entries.len()];
        let order = window_order(entries.len(), window, self.cfg.interleave);
        for block in order.chunk_by(|&a, &b| entries[a].subject == entries[b].subject) {
            for _ in 0..self.cfg.best_of.max(1) {
                for &i in block {
                    let e = &entries[i];
                    let subject = &mut *subjects[e.subject];
                    let next = match &e.spec.action {
                        Action::Prefill { mode } => {
                            subject.prefill(prompt.context(), prompt.batch(), mode)?
                        }
                        Action::Decode { n_gen } => subject.decode(prompt.all, *n_gen as usize)?,
                    };
                    check_sample(&e.spec.engine, &e.spec.label, next.wall_ms)?;
                    runs[i] = Some(match runs[i].take() {
                        None => next,
                        Some(mut out) => {
                            // Outputs that differ between the runs of one sample must not hide
                            // behind the fastest: the sample then carries a digest no run had.
                            let digest = if next.output_digest == out.output_digest {
                                out.output_digest
                            } else {
                                !(out.output_digest ^ next.output_digest)
                            };
                            if next.wall_ms < out.wall_ms {
                                out = next;
                            }
                            out.output_digest = digest;
                            out
                        }
                    });
                }
            }
        }
        Ok(runs
            .into_iter()
            .flatten()
            .map(|out| RunSample {
                wall_ms: out.wall_ms,
                output_digest: out.output_digest,
                dispatches: out.dispatches,
                in_node_ms: out.in_node_ms,
            })
            .collect())
    }

    /// Kept windows (positions in `record.windows`) holding an outlier, with the reasons.
    /// A clean window that would be the first kept one, while warm-up windows are fewer than
    /// `max_warm`, is faster than the warm-up window before it on some series by more than
    /// `settle_ratio`: the machine is still settling (warming up), so it counts as warm-up too.
    /// A slower one is a spike, left to the outlier rule. Free on a steady machine (its first
    /// candidate agrees); without warm-up windows it never applies.
    fn still_settling(&self, record: &GroupRecord, runs: &[RunSample], max_warm: usize) -> bool {
        let Some(last) = record.windows.last() else {
            return false;
        };
        let warm = record
            .windows
            .iter()
            .filter(|w| w.status == WindowStatus::Warmup)
            .count();
        last.status == WindowStatus::Warmup
            && warm < max_warm
            && last
                .runs
                .iter()
                .zip(runs)
                .any(|(x, y)| x.wall_ms - y.wall_ms > self.cfg.settle_ratio * y.wall_ms)
    }

    fn outlier_windows(&self, record: &GroupRecord) -> Vec<(usize, Vec<DiscardReason>)> {
        let kept: Vec<usize> = (0..record.windows.len())
            .filter(|&i| record.windows[i].status == WindowStatus::Kept)
            .collect();
        // Below three windows a median and MAD say nothing about outliers.
        if kept.len() < 3 {
            return Vec::new();
        }
        // Outliers are judged on level-corrected times: a window the host ran uniformly slower
        // is not an outlier (its level says so); one slow run in it still is.
        let levels = window_levels(&record.windows);
        let mut flagged: Vec<(usize, Vec<DiscardReason>)> = Vec::new();
        for (s, spec) in record.series.iter().enumerate() {
            let xs: Vec<f64> = kept
                .iter()
                .map(|&w| record.windows[w].runs[s].wall_ms / levels[w])
                .collect();
            let Some((idx, threshold_ms)) =
                outliers(&xs, self.cfg.outlier_mads, self.cfg.outlier_floor_ratio)
            else {
                continue;
            };
            let median_ms = crate::stats::median(&xs).unwrap_or(0.0);
            for i in idx {
                let reason = DiscardReason::Outlier {
                    series: format!("{} {}", spec.engine, spec.label),
                    value_ms: xs[i],
                    median_ms,
                    threshold_ms,
                };
                match flagged.iter_mut().find(|(w, _)| *w == kept[i]) {
                    Some((_, r)) => r.push(reason),
                    None => flagged.push((kept[i], vec![reason])),
                }
            }
        }
        flagged.sort_by_key(|(w, _)| *w);
        flagged
    }

    /// Times one op standalone under the gate: a call made while the machine was busy, or
    /// whose samples are more than `max_outlier_ratio` outliers, is discarded and repeated.
    pub fn time_op(
        &mut self,
        subject: &mut dyn Subject,
        req: &OpTimingRequest<'_>,
    ) -> Result<OpSampleRecord, LedgerError> {
        let info = subject.info();
        let threads = info.threads.unwrap_or(1);
        let what = format!("time_op {}", req.node.name);
        let mut record = OpSampleRecord {
            attempts: Vec::new(),
            used: 0,
            exhausted: false,
        };
        loop {
            let before = self.probe.sample();
            let mut reasons: Vec<DiscardReason> = subject
                .busy_reason()
                .map(|reason| DiscardReason::SubjectBusy {
                    engine: info.engine.clone(),
                    reason,
                })
                .into_iter()
                .collect();
            let samples_ms = subject.time_op(req)?;
            let after = self.probe.sample();
            if let Some(reason) = subject.busy_reason() {
                reasons.push(DiscardReason::SubjectBusy {
                    engine: info.engine.clone(),
                    reason,
                });
            }
            if samples_ms.is_empty() {
                return Err(LedgerError::BadSample {
                    engine: info.engine,
                    what: format!("{what} (no samples)"),
                    value_ms: f64::NAN,
                });
            }
            for &s in &samples_ms {
                check_sample(&info.engine, &what, s)?;
            }
            let load = before.zip(after).map(|(b, a)| window_load(&b, &a, threads));
            if let Some(l) = &load {
                reasons.extend(load_reasons(l, &self.cfg));
            }
            if let Some((idx, _)) = outliers(
                &samples_ms,
                self.cfg.outlier_mads,
                self.cfg.outlier_floor_ratio,
            ) && idx.len() as f64 > self.cfg.max_outlier_ratio * samples_ms.len() as f64
            {
                reasons.push(DiscardReason::TooManyOutliers {
                    outliers: idx.len(),
                    samples: samples_ms.len(),
                    limit_ratio: self.cfg.max_outlier_ratio,
                });
            }
            let clean = reasons.is_empty();
            record.attempts.push(OpAttempt {
                samples_ms,
                load,
                reasons,
            });
            record.used = record.attempts.len() - 1;
            if clean {
                return Ok(record);
            }
            if record.attempts.len() > self.cfg.max_retries {
                record.exhausted = true;
                return Ok(record);
            }
        }
    }
}

#[cfg(test)]
mod tests;
