//! `tally measure`, `tally opbench`, `tally replay`: one engine measured by the ledger's method.

use std::path::PathBuf;

use anyhow::Result;
use tally_ledger::report::{render_measurement, render_measurement_md};
use tally_ledger::schema::Routing;
use tally_ledger::subject::Workload;
use tally_ledger::{MeasureConfig, measure};

use super::Format;
use super::common::{machine, open_model, tally_subject, write_file};

// Options shared by the measuring commands. (A `//` comment: a doc comment here would become the
// description of every command that flattens this struct.)
#[derive(clap::Args, Clone)]
pub struct Common {
    /// The qwen35moe GGUF file (of a split model, the first part: NAME-00001-of-0000N.gguf).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Prompt length (a prefill from a fresh state).
    #[arg(short = 'p', long, default_value_t = 512)]
    pub tokens: usize,
    /// Measure one decode step (a one-token batch) after a context of D tokens instead of a
    /// prefill: the context is prefilled again, untimed, before every timed run. Not with -p.
    #[arg(long, value_name = "D", conflicts_with = "tokens")]
    pub step_at: Option<usize>,
    /// Decode tokens measured after the prompt (0: none).
    #[arg(short = 'n', long, default_value_t = 0)]
    pub decode: usize,
    /// tally's backend: cpu or cuda.
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// CPU threads (0: one per core).
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
    /// Clean windows per timing group (the noise gate's repeats).
    #[arg(short = 'r', long, default_value_t = 5)]
    pub repeats: usize,
    /// Windows the noise gate may discard and re-measure per timing group before it gives up
    /// (the ledger then says "no verdict", exit 3). A host that switches speed levels often
    /// (shared or frequency-scaled cores) needs more; each costs one window's time.
    #[arg(long, default_value_t = 6, value_name = "N")]
    pub max_retries: usize,
    /// The noise gate's outlier floor, as a fraction of a series' median: a window is discarded
    /// when one of its runs lies further than max(5 MADs, this) from its series' median. 0.02
    /// holds a quiet machine to 2%; a VM whose single runs scatter by 2-3% needs more (the
    /// demo's 2-core VM uses 0.05; spikes of 10-30% are still discarded).
    #[arg(long, default_value_t = 0.02, value_name = "F")]
    pub outlier_floor: f64,
    /// Runs per timing sample: each series runs N times and the sample is the fastest. The
    /// runs go in rounds over each engine's series of a window (every series once, then again),
    /// so a host that changes speed inside a window still leaves each series a run at the fast
    /// level. For hosts whose slowdowns come and go (shared cores: the demo's 2-core VM uses
    /// 3); 1 keeps every run.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub best_of: usize,
    /// Timed calls per op in standalone timing.
    #[arg(long, default_value_t = 10)]
    pub op_reps: usize,
    /// Routing of MoE ops in standalone timing. `model` (default): the routing the model
    /// itself chooses for the measured prompt, recorded once by tally and fed to both engines
    /// (each op key timed with its median layer's table); `realistic`: each token's experts
    /// drawn uniformly; `first-k`: every token on experts 0..k-1 (the naive benchmark, shown
    /// beside the others in every report).
    #[arg(long, default_value = "model")]
    pub routing: String,
    /// Cores other processes may keep busy during a timing window before the noise gate
    /// discards and re-measures it.
    #[arg(long, default_value_t = 0.5)]
    pub busy_limit: f64,
    /// Directory for the JSON (and Markdown/SVG) outputs.
    #[arg(long, default_value = "tally-out")]
    pub out_dir: PathBuf,
    /// Report format: text, json or md.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Format,
}

impl Common {
    /// The model path (required by every measuring command).
    pub fn model(&self) -> Result<&PathBuf> {
        self.model
            .as_ref()
            .ok_or_else(|| super::InputError("--model FILE is required".into()).into())
    }

    pub fn routing(&self) -> Result<Routing> {
        match self.routing.as_str() {
            "realistic" => Ok(Routing::Realistic),
            "first-k" => Ok(Routing::FirstK),
            "model" => Ok(Routing::Model),
            other => Err(super::InputError(format!(
                "unknown routing `{other}` (realistic, first-k, model)"
            ))
            .into()),
        }
    }

    /// What is measured: a prefill of `-p` tokens, or one step at `--step-at` D.
    pub fn workload(&self) -> Workload {
        match self.step_at {
            Some(d) => Workload::step_at(d),
            None => Workload::prefill(self.tokens),
        }
    }

    /// Positions the measured subjects need: context, batch and decoded tokens.
    pub fn positions(&self) -> usize {
        self.workload().total().saturating_add(self.decode)
    }

    /// Checks every value before anything is sized from it (`context`: the model's positions).
    pub fn check(&self, context: usize) -> Result<()> {
        super::checks::backend(&self.backend)?;
        super::checks::threads(self.threads)?;
        super::checks::repeats(self.repeats)?;
        super::checks::max_retries(self.max_retries)?;
        super::checks::best_of(self.best_of)?;
        super::checks::outlier_floor(self.outlier_floor)?;
        match self.step_at {
            Some(d) => super::checks::step_depth(d, context)?,
            None => super::checks::prompt_len("-p", self.tokens, context)?,
        };
        super::checks::total_len(self.workload().total(), self.decode, context)?;
        Ok(())
    }

    /// The measuring configuration for these options.
    pub fn config(&self, opbench: bool, replay: bool) -> Result<MeasureConfig> {
        let mut cfg = MeasureConfig::for_workload(self.workload(), machine(&self.backend));
        cfg.n_gen = self.decode;
        cfg.noise.windows = self.repeats.max(3);
        cfg.noise.max_other_busy_cores = self.busy_limit;
        cfg.noise.max_retries = self.max_retries;
        cfg.noise.best_of = self.best_of;
        cfg.noise.outlier_floor_ratio = self.outlier_floor;
        if self.backend == "cuda" {
            // llama.cpp's CUDA backend captures a graph on the third identical call: two
            // untimed windows let both engines reach their steady state.
            cfg.noise.warmup_windows = cfg.noise.warmup_windows.max(2);
        }
        let routing = self.routing()?;
        if let Some(o) = cfg.opbench.as_mut() {
            o.routing = routing;
            // Show how much a naive (first-k) MoE benchmark undercounts, every time.
            o.first_k = routing != Routing::FirstK;
            o.reps = self.op_reps;
        }
        if !opbench {
            cfg.opbench = None;
        }
        if !replay {
            cfg.replay = None;
        }
        Ok(cfg)
    }
}

/// Which protocols a measuring command runs.
#[derive(Clone, Copy)]
pub enum Protocols {
    All,
    Opbench,
    Replay,
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub common: Common,
}

pub fn main(a: Args, which: Protocols) -> Result<()> {
    let c = &a.common;
    let model = open_model(c.model()?)?;
    c.check(model.config.context_length)?;
    let (ob, rp) = match which {
        Protocols::All => (true, true),
        Protocols::Opbench => (true, false),
        Protocols::Replay => (false, true),
    };
    let cfg = c.config(ob, rp)?;
    let mut subject = tally_subject(&model, &c.backend, c.threads, c.positions(), true)?;
    let w = c.workload();
    let pb = super::common::spinner(&format!(
        "measuring tally ({}), {}: graph, end to end, standalone ops, in-graph replay",
        c.backend,
        w.describe()
    ));
    let m = measure(&mut subject, &cfg);
    pb.finish_and_clear();
    let m = m?;
    let name = format!("tally-{}-{}.measurement.json", c.backend, w.label());
    let path = write_file(&c.out_dir, &name, &serde_json::to_string_pretty(&m)?)?;
    match c.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&m)?),
        Format::Text => {
            println!("{}", render_measurement(&m));
            println!("measurement written to {}", path.display());
        }
        Format::Md => {
            println!("# Measurement\n\n{}", render_measurement_md(&m));
            println!("Measurement written to `{}`.", path.display());
        }
    }
    Ok(())
}
