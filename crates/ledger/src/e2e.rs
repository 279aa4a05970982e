//! End-to-end runs: plain prefill (and optionally decode), repeated in gated windows, several
//! subjects interleaved (A B A B) so both engines see the same machine state.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::LedgerError;
use crate::gate::{Action, Gate, GroupEntry, GroupRecord, SeriesSpec};
use crate::noise::NoiseConfig;
use crate::rng::prompt_tokens;
use crate::stats::Stats;
use crate::subject::{Prompt, RunMode, Subject, Workload};

fn on() -> bool {
    true
}

/// Settings of end-to-end runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct E2eConfig {
    /// Tokens of the timed batch (the prompt of a prefill).
    pub n_tokens: usize,
    /// Context tokens restored (untimed) before each timed batch: 0 for a prefill from a fresh
    /// state, D for a decode step at depth D. Files written before the field read as 0.
    #[serde(default)]
    pub n_past: usize,
    /// Decode tokens after the prompt (0: no decode runs).
    pub n_gen: usize,
    /// Time the prefill of the prompt as a series of its own. Off for a decode test at depth
    /// (llama-bench's `-d`): the prompt is then only the context the decode steps run after,
    /// prefilled untimed before each decode run. Files written before the field read as on.
    #[serde(default = "on")]
    pub time_prefill: bool,
    /// Prompt seed.
    pub seed: u64,
    /// Noise-gate rules.
    pub noise: NoiseConfig,
}

/// A gated series of runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunSeries {
    /// Series label.
    pub label: String,
    /// Wall-time statistics over kept windows.
    pub stats: Stats,
    /// Every window.
    pub group: GroupRecord,
}

/// Decode runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DecodeReport {
    /// Tokens generated per run.
    pub n_gen: u64,
    /// The runs (decode steps only).
    pub series: RunSeries,
    /// `n_gen / median seconds`.
    pub tok_s: Option<f64>,
}

/// Result of [`e2e`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct E2eReport {
    /// Engine measured.
    pub engine: String,
    /// Tokens of the timed batch (the prompt of a prefill).
    pub n_tokens: u64,
    /// Context tokens before the timed batch (0: a prefill from a fresh state).
    #[serde(default)]
    pub n_past: u64,
    /// Plain runs of the batch (the prefill; for a decode step at depth, the step).
    pub prefill: RunSeries,
    /// `n_tokens / median seconds` (llama-bench's `pp` figure; for a step, its tokens/s).
    pub prefill_tok_s: Option<f64>,
    /// Decode runs, when requested (llama-bench's `tg` figure).
    pub decode: Option<DecodeReport>,
}

/// Tokens per second from a count and a median in ms.
pub fn tokens_per_s(tokens: u64, median_ms: f64) -> Option<f64> {
    (median_ms > 0.0).then(|| tokens as f64 * 1000.0 / median_ms)
}

/// End-to-end runs of one subject.
pub fn e2e(subject: &mut dyn Subject, cfg: &E2eConfig) -> Result<E2eReport, LedgerError> {
    let mut v = e2e_many(&mut [subject], cfg)?;
    Ok(v.remove(0))
}

/// End-to-end runs of two subjects, interleaved window by window.
pub fn e2e_pair(
    a: &mut dyn Subject,
    b: &mut dyn Subject,
    cfg: &E2eConfig,
) -> Result<(E2eReport, E2eReport), LedgerError> {
    let mut v = e2e_many(&mut [a, b], cfg)?;
    let rb = v.remove(1);
    Ok((v.remove(0), rb))
}

/// The prompt every protocol of workload `w` runs on `subjects`: context and batch, random ids
/// below the smallest vocabulary among them, from `seed`.
pub(crate) fn measured_prompt(
    subjects: &[&mut dyn Subject],
    w: Workload,
    seed: u64,
) -> Result<Vec<u32>, LedgerError> {
    let vocab = subjects
        .iter()
        .map(|s| s.info().model.n_vocab)
        .min()
        .unwrap_or(0);
    prompt_tokens(w.total(), vocab, seed)
}

/// End-to-end runs of any number of subjects, interleaved.
pub fn e2e_many(
    subjects: &mut [&mut dyn Subject],
    cfg: &E2eConfig,
) -> Result<Vec<E2eReport>, LedgerError> {
    if cfg.n_tokens == 0 {
        return Err(LedgerError::Config(
            "e2e: n_tokens must be at least 1".into(),
        ));
    }
    let n_gen = u32::try_from(cfg.n_gen)
        .map_err(|_| LedgerError::Config("e2e: n_gen does not fit in 32 bits".into()))?;
    let engines: Vec<String> = subjects.iter().map(|s| s.info().engine).collect();
    let w = Workload {
        n_past: cfg.n_past,
        n_tokens: cfg.n_tokens,
    };
    let tokens = measured_prompt(subjects, w, cfg.seed)?;
    let prompt = Prompt::split(&tokens, w.n_past);
    let (what, label) = if w.is_prefill() {
        ("e2e: prefill".to_string(), "prefill".to_string())
    } else {
        (format!("e2e: {}", w.describe()), w.run_word().to_string())
    };
    let mut gate = Gate::from_config(&cfg.noise)?;
    let entries = |action: &Action, label: &str| -> Vec<GroupEntry> {
        engines
            .iter()
            .enumerate()
            .map(|(i, engine)| GroupEntry {
                subject: i,
                spec: SeriesSpec {
                    subject: i as u32,
                    engine: engine.clone(),
                    label: label.to_string(),
                    action: action.clone(),
                },
            })
            .collect()
    };
    let prefill_action = Action::Prefill {
        mode: RunMode::Plain,
    };
    if !cfg.time_prefill && n_gen == 0 {
        return Err(LedgerError::Config(
            "e2e: nothing to time (no prefill series and no decode tokens)".into(),
        ));
    }
    let prefill = if cfg.time_prefill {
        gate.run_group(subjects, prompt, &entries(&prefill_action, &label), &what)?
    } else {
        // No windows: an empty record with the series named, so every report keeps its shape.
        GroupRecord {
            what: "e2e: prefill (not timed: decode at depth)".into(),
            series: entries(&prefill_action, &label)
                .into_iter()
                .map(|e| e.spec)
                .collect(),
            windows: Vec::new(),
            exhausted: false,
        }
    };
    let decode = if n_gen > 0 {
        let action = Action::Decode { n_gen };
        Some(gate.run_group(subjects, prompt, &entries(&action, "decode"), "e2e: decode")?)
    } else {
        None
    };
    let series = |g: &GroupRecord, i: usize| {
        let own = g.select(&[i]);
        RunSeries {
            label: own.series[0].label.clone(),
            stats: own.stats(0).unwrap_or_else(Stats::zero),
            group: own,
        }
    };
    Ok(engines
        .iter()
        .enumerate()
        .map(|(i, engine)| {
            let p = series(&prefill, i);
            E2eReport {
                engine: engine.clone(),
                n_tokens: cfg.n_tokens as u64,
                n_past: cfg.n_past as u64,
                prefill_tok_s: tokens_per_s(cfg.n_tokens as u64, p.stats.median_ms),
                prefill: p,
                decode: decode.as_ref().map(|d| {
                    let s = series(d, i);
                    DecodeReport {
                        n_gen: cfg.n_gen as u64,
                        tok_s: tokens_per_s(cfg.n_gen as u64, s.stats.median_ms),
                        series: s,
                    }
                }),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::category::Category;
    use crate::fake::{FakeCall, FakeCosts, FakeSubject, ToyGraph, toy_graph};
    use crate::noise::ProbeChoice;

    fn cfg(n_gen: usize) -> E2eConfig {
        E2eConfig {
            n_tokens: 8,
            n_past: 0,
            n_gen,
            time_prefill: true,
            seed: 1,
            noise: NoiseConfig {
                probe: ProbeChoice::Off,
                ..NoiseConfig::default()
            },
        }
    }

    fn fake(engine: &str, dense_ms: f64) -> FakeSubject {
        let mut costs = FakeCosts::default();
        costs.node_ms.insert(Category::DenseProj, dense_ms);
        FakeSubject::new(
            toy_graph(&ToyGraph {
                engine: engine.into(),
                ..ToyGraph::default()
            }),
            costs,
        )
    }

    #[test]
    fn pair_is_interleaved_and_figures_are_exact() {
        let mut a = fake("same", 1.0);
        let mut b = fake("same", 0.5); // one engine at two commits: same name
        let (ra, rb) = e2e_pair(&mut a, &mut b, &cfg(4)).unwrap();
        assert_eq!(ra.prefill.stats.median_ms, 12.0);
        assert_eq!(rb.prefill.stats.median_ms, 6.0);
        assert_eq!(ra.prefill_tok_s, Some(8.0 * 1000.0 / 12.0));
        let d = ra.decode.as_ref().unwrap();
        assert_eq!(
            (d.n_gen, d.series.stats.median_ms, d.tok_s),
            (4, 4.0, Some(1000.0))
        );
        // 1 warm-up + 6 kept prefill windows (5 asked; as many of each run order), then the
        // same for decode; one run each per window.
        assert_eq!(a.calls.len(), 14);
        assert_eq!(b.calls.len(), 14);
        assert_eq!(ra.prefill.group.series.len(), 1);
        assert_eq!(rb.prefill.group.series[0].subject, 1);
        assert_eq!(a.calls[0], FakeCall::Prefill(RunMode::Plain));
        assert_eq!(a.calls[7], FakeCall::Decode(4));
    }

    #[test]
    fn decode_at_depth_times_no_prefill_series() {
        let mut a = fake("a", 1.0);
        let mut b = fake("b", 0.5);
        let c = E2eConfig {
            time_prefill: false,
            ..cfg(4)
        };
        let (ra, rb) = e2e_pair(&mut a, &mut b, &c).unwrap();
        // 1 warm-up + 6 kept decode windows (both orders evenly), and no prefill runs of their
        // own.
        assert_eq!(a.calls, vec![FakeCall::Decode(4); 7]);
        assert_eq!(b.calls.len(), 7);
        assert!(ra.prefill.group.windows.is_empty() && ra.prefill_tok_s.is_none());
        assert_eq!(rb.prefill.group.series[0].subject, 1);
        assert_eq!(ra.decode.as_ref().and_then(|d| d.tok_s), Some(1000.0));
        let none = E2eConfig {
            time_prefill: false,
            ..cfg(0)
        };
        assert_eq!(
            e2e(&mut a, &none).unwrap_err().to_string(),
            "invalid configuration: e2e: nothing to time (no prefill series and no decode tokens)"
        );
    }

    #[test]
    fn zero_tokens_is_an_error() {
        let mut a = fake("a", 1.0);
        let c = E2eConfig {
            n_tokens: 0,
            ..cfg(0)
        };
        assert_eq!(
            e2e(&mut a, &c).unwrap_err().to_string(),
            "invalid configuration: e2e: n_tokens must be at least 1"
        );
        let c = E2eConfig {
            n_gen: u32::MAX as usize + 1,
            ..cfg(0)
        };
        assert_eq!(
            e2e(&mut a, &c).unwrap_err().to_string(),
            "invalid configuration: e2e: n_gen does not fit in 32 bits"
        );
        assert!(
            a.calls.is_empty(),
            "nothing runs before the config is checked"
        );
    }
}
