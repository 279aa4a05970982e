//! GGUF file I/O and ggml block formats for tally.
//!
//! - [`GgufFile`]: memory-mapped, fully validated reader (GGUF v2/v3, little-endian); tensor
//!   data is handed out as slices of the map.
//! - [`GgufWriter`]: one-pass streaming writer (GGUF v3); only the header is held in memory.
//! - [`GgmlType`]: every ggml type id with its block geometry.
//! - [`dequantize_row`] / [`quantize_row`]: F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K, bit-exact
//!   with ggml's reference code.

mod error;
mod meta;
pub mod quants;
mod reader;
mod types;
mod writer;

pub use error::GgufError;
pub use meta::{MetaArray, MetaValue};
pub use quants::{dequantize_row, quantize_row};
pub use reader::{DEFAULT_ALIGNMENT, GgufFile, MAX_DIMS, TensorInfo, same_ggml_shape};
pub use types::GgmlType;
pub use writer::{GgufWriter, MAX_TENSOR_NAME_BYTES, TensorSpec, WRITE_VERSION};
