//! Streaming GGUF writer: the header goes out at construction, tensor data is streamed through
//! in the declared order, and nothing but the header is ever held in memory.

use std::io::Write;

use crate::meta::{MetaArray, MetaValue};
use crate::reader::{
    DEFAULT_ALIGNMENT, MAGIC, MAX_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS, check_shape,
};
use crate::{GgmlType, GgufError};

/// The GGUF version written.
pub const WRITE_VERSION: u32 = 3;
/// llama.cpp (ggml's `GGML_MAX_NAME`) rejects tensor names of 64 bytes or more.
pub const MAX_TENSOR_NAME_BYTES: usize = 63;

/// A tensor to be written: its data must arrive as `ty.row_bytes(product of dims)` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    /// Shape in ggml order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
}

impl TensorSpec {
    /// Number of data bytes (saturating at `u64::MAX`; exact for specs [`GgufWriter::new`]
    /// accepts).
    pub fn n_bytes(&self) -> u64 {
        let n = self
            .dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .unwrap_or(u64::MAX);
        (n / self.ty.block_elems() as u64).saturating_mul(self.ty.block_bytes() as u64)
    }
}

/// Writes a GGUF v3 file to `W` in one pass. Wrap files in a `BufWriter`: data chunks are
/// passed through as given.
pub struct GgufWriter<W: Write> {
    out: W,
    /// Bytes written so far (for padding and error messages).
    pos_bytes: u64,
    alignment: u64,
    names: Vec<String>,
    sizes_bytes: Vec<u64>,
    /// Index of the tensor receiving data, and how many of its bytes have arrived.
    current: usize,
    current_bytes: u64,
}

impl<W: Write> std::fmt::Debug for GgufWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufWriter")
            .field("pos_bytes", &self.pos_bytes)
            .field("current", &self.current)
            .field("n_tensors", &self.names.len())
            .finish()
    }
}

fn write_err(msg: String) -> GgufError {
    GgufError::Write { msg }
}

impl<W: Write> GgufWriter<W> {
    /// Writes the header (metadata, then tensor infos with aligned offsets computed from the
    /// specs' sizes) immediately. Alignment is `general.alignment` if present (a power of two),
    /// else 32.
    pub fn new(
        out: W,
        metadata: &[(String, MetaValue)],
        tensors: &[TensorSpec],
    ) -> Result<Self, GgufError> {
        let mut alignment = DEFAULT_ALIGNMENT;
        let mut seen = std::collections::HashSet::new();
        for (k, v) in metadata {
            if !seen.insert(k.as_str()) {
                return Err(write_err(format!("duplicate metadata key '{k}'")));
            }
            if let MetaValue::Array(a) = v {
                if array_depth(a) > MAX_ARRAY_DEPTH {
                    return Err(write_err(format!(
                        "metadata key '{k}' nests arrays deeper than {MAX_ARRAY_DEPTH} levels"
                    )));
                }
            }
            if k == "general.alignment" {
                alignment = match v {
                    MetaValue::U32(a) if a.is_power_of_two() && u64::from(*a) <= MAX_ALIGNMENT => {
                        u64::from(*a)
                    }
                    _ => {
                        return Err(write_err(format!(
                            "metadata key 'general.alignment' is {v:?}; it must be a u32 power \
                             of two up to {MAX_ALIGNMENT}"
                        )));
                    }
                };
            }
        }

        let mut names = Vec::with_capacity(tensors.len());
        let mut sizes_bytes = Vec::with_capacity(tensors.len());
        let mut seen = std::collections::HashSet::new();
        let mut header = Vec::new();
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&WRITE_VERSION.to_le_bytes());
        header.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (k, v) in metadata {
            put_str(&mut header, k);
            header.extend_from_slice(&v.tag().to_le_bytes());
            put_value(&mut header, v);
        }
        let mut offset: u64 = 0;
        for t in tensors {
            let bad = |msg: String| write_err(format!("tensor '{}': {msg}", t.name));
            if t.name.len() > MAX_TENSOR_NAME_BYTES {
                return Err(bad(format!(
                    "name is {} bytes; llama.cpp accepts at most {MAX_TENSOR_NAME_BYTES}",
                    t.name.len()
                )));
            }
            if !seen.insert(t.name.as_str()) {
                return Err(bad("duplicate tensor name".to_string()));
            }
            if t.dims.is_empty() || t.dims.len() > MAX_DIMS {
                return Err(bad(format!(
                    "has {} dimensions; ggml tensors have 1 to {MAX_DIMS}",
                    t.dims.len()
                )));
            }
            check_shape(&t.dims, t.ty).map_err(bad)?;
            let n_bytes = t.n_bytes();
            let too_big = || bad("the data section would exceed 2^64 bytes".to_string());
            if n_bytes == u64::MAX {
                return Err(too_big());
            }
            put_str(&mut header, &t.name);
            header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                header.extend_from_slice(&d.to_le_bytes());
            }
            header.extend_from_slice(&t.ty.id().to_le_bytes());
            header.extend_from_slice(&offset.to_le_bytes());
            offset = offset
                .checked_add(n_bytes)
                .and_then(|o| o.div_ceil(alignment).checked_mul(alignment))
                .ok_or_else(too_big)?;
            names.push(t.name.clone());
            sizes_bytes.push(n_bytes);
        }
        let mut w = GgufWriter {
            out,
            pos_bytes: 0,
            alignment,
            names,
            sizes_bytes,
            current: 0,
            current_bytes: 0,
        };
        w.put(&header)?;
        w.pad()?;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), GgufError> {
        self.out
            .write_all(bytes)
            .map_err(|source| GgufError::WriteIo {
                offset: self.pos_bytes,
                source,
            })?;
        self.pos_bytes += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> Result<(), GgufError> {
        const ZEROS: [u8; 64] = [0; 64];
        let mut n =
            (self.pos_bytes.div_ceil(self.alignment) * self.alignment - self.pos_bytes) as usize;
        while n > 0 {
            let k = n.min(ZEROS.len());
            self.put(&ZEROS[..k])?;
            n -= k;
        }
        Ok(())
    }

    /// Alignment in bytes used for the data section.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Bytes written so far (header, padding and data).
    pub fn bytes_written(&self) -> u64 {
        self.pos_bytes
    }

    /// Streams tensor data, in the order the tensors were given to [`GgufWriter::new`]. A call
    /// may carry part of a tensor, or run on from one tensor into the next; padding between
    /// tensors is inserted when each tensor's last byte arrives.
    pub fn write_data(&mut self, mut bytes: &[u8]) -> Result<(), GgufError> {
        while !bytes.is_empty() {
            let Some(&size) = self.sizes_bytes.get(self.current) else {
                return Err(write_err(format!(
                    "{} bytes of data left over after all {} tensors received their data",
                    bytes.len(),
                    self.names.len()
                )));
            };
            let want = size - self.current_bytes;
            let k = want.min(bytes.len() as u64) as usize;
            self.put(&bytes[..k])?;
            bytes = &bytes[k..];
            self.current_bytes += k as u64;
            if self.current_bytes == size {
                self.pad()?;
                self.current += 1;
                self.current_bytes = 0;
            }
        }
        Ok(())
    }

    /// Checks that every tensor received exactly its bytes, flushes, and returns the output.
    pub fn finish(mut self) -> Result<W, GgufError> {
        if let Some(name) = self.names.get(self.current) {
            return Err(write_err(format!(
                "tensor '{name}' received {} of its {} data bytes ({} of {} tensors complete)",
                self.current_bytes,
                self.sizes_bytes[self.current],
                self.current,
                self.names.len()
            )));
        }
        self.out.flush().map_err(|source| GgufError::WriteIo {
            offset: self.pos_bytes,
            source,
        })?;
        Ok(self.out)
    }
}

fn put_str(h: &mut Vec<u8>, s: &str) {
    h.extend_from_slice(&(s.len() as u64).to_le_bytes());
    h.extend_from_slice(s.as_bytes());
}

fn put_value(h: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => h.push(*x),
        MetaValue::I8(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U16(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => h.push(u8::from(*x)),
        MetaValue::String(s) => put_str(h, s),
        MetaValue::Array(a) => put_array(h, a),
        MetaValue::U64(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => h.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => h.extend_from_slice(&x.to_le_bytes()),
    }
}

fn put_array(h: &mut Vec<u8>, a: &MetaArray) {
    h.extend_from_slice(&a.elem_tag().to_le_bytes());
    h.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                h.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        MetaArray::U8(v) => h.extend_from_slice(v),
        MetaArray::I8(v) => each!(v),
        MetaArray::U16(v) => each!(v),
        MetaArray::I16(v) => each!(v),
        MetaArray::U32(v) => each!(v),
        MetaArray::I32(v) => each!(v),
        MetaArray::F32(v) => each!(v),
        MetaArray::U64(v) => each!(v),
        MetaArray::I64(v) => each!(v),
        MetaArray::F64(v) => each!(v),
        MetaArray::Bool(v) => h.extend(v.iter().map(|&b| u8::from(b))),
        MetaArray::String(v) => v.iter().for_each(|s| put_str(h, s)),
        MetaArray::Array(v) => v.iter().for_each(|x| put_array(h, x)),
    }
}

/// Levels of array nesting: 1 for an array of scalars.
fn array_depth(a: &MetaArray) -> u32 {
    match a {
        MetaArray::Array(v) => 1 + v.iter().map(array_depth).max().unwrap_or(0),
        _ => 1,
    }
}
