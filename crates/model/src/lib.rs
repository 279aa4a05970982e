//! tally-model: the one model tally runs (Qwen3.6-35B-A3B, GGUF architecture `qwen35moe`).
//!
//! - [`config`]: the validated configuration, read from GGUF metadata and checked against every
//!   tensor's shape and type;
//! - [`plan`] and [`build`]: the forward pass as an explicit plan of nodes over named buffers;
//! - [`export`]: the plan as a ledger graph export (bytes, FLOPs, rows, sources), with the counts
//!   the architecture implies;
//! - [`mtp`]: the multi-token-prediction blocks real files carry after the trunk (parsed, kept);
//! - [`synth`]: synthetic models of the real shape (or tiny ones) with random weights.

pub mod build;
pub mod config;
pub mod export;
pub mod limits;
pub mod mtp;
pub mod plan;
pub mod rng;
pub mod synth;

pub use build::{PlanOptions, build_plan};
pub use config::{Config, LayerKind};
pub use plan::{BufDesc, BufId, BufKind, DType, Node, Op, OutLayout, Plan, View};

/// Errors about the model file or the requested batch. Every message names the key, tensor or
/// value involved.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] tally_gguf::GgufError),
    #[error("unsupported architecture `{0}`: tally runs only `qwen35moe` (Qwen3.6-35B-A3B)")]
    UnsupportedArch(String),
    #[error("missing metadata key `{0}`")]
    MissingKey(String),
    #[error("metadata key `{key}` must be {expected}")]
    KeyType { key: String, expected: &'static str },
    #[error("missing tensor `{0}`")]
    MissingTensor(String),
    #[error(
        "tensor `{name}` has shape {found:?}, expected {expected:?} (ggml order, row length first)"
    )]
    TensorShape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("invalid model configuration: {0}")]
    Config(String),
    #[error("invalid batch: {0}")]
    Batch(String),
    #[error("synth: {0}")]
    Synth(String),
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// A model file opened for inference: the memory-mapped GGUF, its validated config and its MTP
/// blocks. Every tensor the config names has, in `file`, exactly the dims the config gives
/// (a converter's equivalent spelling such as `[d, 1]` for `[d]` is rewritten at open).
pub struct Model {
    pub path: std::path::PathBuf,
    pub file: tally_gguf::GgufFile,
    pub config: Config,
    /// The multi-token-prediction blocks (empty for a file without them); not run by prefill
    /// or decode.
    pub mtp: Vec<mtp::Mtp>,
}

impl Model {
    /// Opens and validates a `qwen35moe` GGUF file. A file with any tensor of a type tally
    /// cannot compute with is rejected here, naming every such tensor, before any backend
    /// allocates or uploads anything.
    pub fn open(path: &std::path::Path) -> Result<Model, ModelError> {
        let file = tally_gguf::GgufFile::open(path)?;
        Model::from_file(path, file)
    }

    /// Validates an opened GGUF file as a `qwen35moe` model.
    pub fn from_file(
        path: &std::path::Path,
        mut file: tally_gguf::GgufFile,
    ) -> Result<Model, ModelError> {
        file.require_supported_types()?;
        let config = Config::from_gguf(&file)?;
        for (name, dims, _) in config.file_tensor_shapes() {
            // Checked equivalent by from_gguf; absent optional tensors stay absent.
            file.respell_dims(&name, &dims);
        }
        let mtp = mtp::Mtp::from_file(&config, &file)?;
        Ok(Model {
            path: path.to_path_buf(),
            file,
            config,
            mtp,
        })
    }

    /// A weight tensor's info and bytes (validated at open).
    pub fn weight(&self, name: &str) -> Result<(&tally_gguf::TensorInfo, &[u8]), ModelError> {
        let t = self
            .file
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        Ok((t, self.file.tensor_data(t)))
    }
}
