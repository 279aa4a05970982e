//! The one error type of the crate. Every message names what it is about: the file and byte
//! offset for header problems, the tensor for tensor problems, the key for metadata problems.

use std::path::PathBuf;

/// Everything that can go wrong reading, writing or converting GGUF data.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened, inspected or mapped.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The path names a directory, a FIFO, a device or a socket: a model is a regular file (a FIFO
    /// would block the open, and none of them can be mapped).
    #[error("{path}: is {what}, not a regular file (a GGUF model must be a regular file)")]
    NotAFile { path: PathBuf, what: &'static str },

    /// The first four bytes are not `GGUF`.
    #[error(
        "{path}: not a GGUF file: magic bytes are {found:02x?} (\"{}\"), expected \"GGUF\"",
        String::from_utf8_lossy(found).escape_debug()
    )]
    BadMagic { path: PathBuf, found: [u8; 4] },

    /// The version field is one this reader does not read.
    #[error("{path}: unsupported GGUF version {version}: {why}")]
    UnsupportedVersion {
        path: PathBuf,
        version: u32,
        why: &'static str,
    },

    /// The file needs more bytes than it has.
    #[error(
        "{path}: truncated GGUF file: {what} at byte offset {offset} needs {needed_bytes} bytes, \
         but the file has {file_bytes} bytes"
    )]
    Truncated {
        path: PathBuf,
        what: String,
        offset: u64,
        needed_bytes: u64,
        file_bytes: u64,
    },

    /// A header field holds a value that cannot be right.
    #[error("{path}: invalid GGUF header at byte offset {offset}: {msg}")]
    Header {
        path: PathBuf,
        offset: u64,
        msg: String,
    },

    /// A split model's parts do not fit together (a part missing, misnamed or out of order, a
    /// later part opened instead of the first, tensor counts that disagree).
    #[error("{path}: split model: {msg}")]
    Split { path: PathBuf, msg: String },

    /// A tensor's description is inconsistent (shape, type, offset, overlap, name).
    #[error("{path}: tensor '{name}': {msg}")]
    Tensor {
        path: PathBuf,
        name: String,
        msg: String,
    },

    /// The tensor's type is one tally cannot compute with.
    #[error(
        "tensor '{name}' has type {ty} (id {id}), which is not supported; supported types: {}",
        crate::types::SUPPORTED_NAMES
    )]
    UnsupportedTensorType {
        name: String,
        ty: &'static str,
        id: u32,
    },

    /// Tensors of the file have types tally cannot compute with (every one is listed, as
    /// `name TYPE`, comma-separated).
    #[error(
        "unsupported tensor types: {list} ({count} tensor(s)); supported types: {}",
        crate::types::SUPPORTED_NAMES
    )]
    UnsupportedTensorTypes { list: String, count: usize },

    /// A conversion (quantize/dequantize) was asked of a type that has none.
    #[error(
        "{op} is not implemented for type {ty}; supported types: {}",
        crate::types::SUPPORTED_NAMES
    )]
    UnsupportedType { ty: &'static str, op: &'static str },

    /// A row length is not a whole number of blocks.
    #[error(
        "{n_elems} elements of type {ty} is not a whole number of {block_elems}-element blocks"
    )]
    PartialBlock {
        ty: &'static str,
        n_elems: u64,
        block_elems: usize,
    },

    /// Source and destination buffers of a conversion do not agree in size.
    #[error("{op} of {ty}: {what}")]
    BufferSize {
        op: &'static str,
        ty: &'static str,
        what: String,
    },

    /// Bad input to the writer (tensor specs, metadata, data sizes).
    #[error("GGUF writer: {msg}")]
    Write { msg: String },

    /// The writer's output failed.
    #[error("GGUF writer: I/O error at output byte offset {offset}: {source}")]
    WriteIo {
        offset: u64,
        #[source]
        source: std::io::Error,
    },
}
