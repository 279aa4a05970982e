//! GGUF reader: maps the file, validates the whole header before trusting any of it, and hands
//! out tensor data as slices of the map (zero-copy).
//!
//! Every count and length read from the file is bounded by the bytes that remain before anything
//! is allocated for it, so a corrupt or hostile header cannot make the reader allocate more than
//! a small multiple of the file's own size.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::meta::{MetaArray, MetaValue, tag};
use crate::{GgmlType, GgufError};

/// `GGUF` as the first four bytes.
pub(crate) const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section and of every tensor's data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The largest `general.alignment` accepted (1 GiB); real files use 32.
pub(crate) const MAX_ALIGNMENT: u64 = 1 << 30;
/// ggml tensors have at most this many dimensions.
pub const MAX_DIMS: usize = 4;
/// Arrays of arrays nest at most this deep (bounds recursion on hostile input).
pub(crate) const MAX_ARRAY_DEPTH: u32 = 8;
/// Smallest tensor info: name length (8), n_dims (4), one dim (8), type (4), offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;
/// Smallest metadata entry: key length (8), value type (4), a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Vectors sized from file counts reserve at most this many elements up front and grow as
/// elements actually parse: a count that fits in a 20 GB file's remaining bytes can still be
/// far too many to reserve at once.
const MAX_PREALLOC: usize = 1 << 16;

/// One tensor's description from the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Shape in ggml order: `dims[0]` is the row length (contiguous elements).
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Byte offset of the data from the start of the data section (of part `part`).
    pub offset: u64,
    /// The file that holds the data: 0 for a single file or a split model's first part, p for
    /// its part p + 1.
    pub part: usize,
}

/// Whether two ggml shapes describe the same tensor: ggml pads every shape to four dimensions
/// with 1s, so trailing dimensions of 1 do not count (`[256, 1]` is `[256]`; `[]` is `[1]`).
/// This is how llama.cpp's loader compares a file's shape with the one it expects.
pub fn same_ggml_shape(a: &[u64], b: &[u64]) -> bool {
    fn trim(d: &[u64]) -> &[u64] {
        let n = d.iter().rposition(|&x| x != 1).map_or(0, |i| i + 1);
        &d[..n]
    }
    trim(a) == trim(b)
}

impl TensorInfo {
    /// Number of elements (product of `dims`; saturates at `u64::MAX`, which cannot happen for
    /// infos read by [`GgufFile::open`], whose products are checked).
    pub fn n_elems(&self) -> u64 {
        self.dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// Number of data bytes (saturates like [`TensorInfo::n_elems`]; 0 if the row is not whole
    /// blocks, which cannot happen for infos read by [`GgufFile::open`]).
    pub fn n_bytes(&self) -> u64 {
        let be = self.ty.block_elems() as u64;
        (self.n_elems() / be).saturating_mul(self.ty.block_bytes() as u64)
    }

    /// Errors (naming the tensor, its type, and the supported types) unless tally can compute
    /// with this tensor's type.
    pub fn require_supported(&self) -> Result<(), GgufError> {
        if self.ty.is_supported() {
            Ok(())
        } else {
            Err(GgufError::UnsupportedTensorType {
                name: self.name.clone(),
                ty: self.ty.name(),
                id: self.ty.id(),
            })
        }
    }
}

enum Bytes {
    Map(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Map(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// An open, validated GGUF file: one file, or every part of a split model (llama.cpp's
/// `gguf-split` and gguf-py's writer: `PREFIX-00001-of-0000N.gguf`, `split.count` = N, the
/// metadata in the first part, the tensors spread over all of them), opened from the first part.
pub struct GgufFile {
    path: PathBuf,
    bytes: Bytes,
    version: u32,
    alignment: u64,
    data_start: u64,
    metadata: Vec<(String, MetaValue)>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    /// Parts 2..N of a split model, in order (empty for a single file).
    parts: Vec<Part>,
}

/// A later part of a split model: its map and the start of its data section.
struct Part {
    path: PathBuf,
    bytes: Bytes,
    data_start: u64,
}

/// The split keys (gguf-py's `Keys.Split`, llama.cpp's `LLM_KV_SPLIT_*`).
const SPLIT_NO: &str = "split.no";
const SPLIT_COUNT: &str = "split.count";
const SPLIT_TENSORS: &str = "split.tensors.count";

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("file_bytes", &self.file_bytes())
            .field("n_metadata", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .field("n_parts", &(1 + self.parts.len()))
            .finish()
    }
}

/// What a non-regular file is, for error messages.
fn describe(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "not a file"
    }
}

impl GgufFile {
    /// Maps and validates a GGUF (v2 or v3, little-endian) file. For the first part of a split
    /// model it opens and validates every part (named as llama.cpp names them, next to the first)
    /// and joins their tensors; any other part is refused with the first part's name.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        Self::open_one(path)?.join_parts()
    }

    fn open_one(path: &Path) -> Result<GgufFile, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Looked at before opening: opening a FIFO for reading blocks until a writer comes, and
        // a directory opens but fails to map with a misleading "No such device".
        let kind = std::fs::metadata(path).map_err(io)?.file_type();
        if !kind.is_file() {
            return Err(GgufError::NotAFile {
                path: path.to_path_buf(),
                what: describe(kind),
            });
        }
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let bytes = if len == 0 {
            // Mapping an empty file fails on some systems; the header check reports it properly.
            Bytes::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only and private to this process. If another process
            // truncates or rewrites the file while it is mapped, reads may fault or see new
            // bytes; model files are not modified while a run reads them, which callers accept.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
            Bytes::Map(map)
        };
        Self::parse(path.to_path_buf(), bytes)
    }

    /// Validates a GGUF image held in memory (tests, small synthetic models). `name` is used in
    /// error messages in place of a path. A part of a split model is refused (its other parts
    /// are files).
    pub fn from_bytes(bytes: Vec<u8>, name: &str) -> Result<GgufFile, GgufError> {
        let g = Self::parse(PathBuf::from(name), Bytes::Owned(bytes))?;
        match g.split_count()? {
            Some(n) if n > 1 => Err(g.split_err(format!(
                "part of a model split into {n} files; open its first part from disk"
            ))),
            _ => Ok(g),
        }
    }

    fn parse(path: PathBuf, bytes: Bytes) -> Result<GgufFile, GgufError> {
        let h = parse_header(&path, &bytes)?;
        Ok(GgufFile {
            path,
            bytes,
            version: h.version,
            alignment: h.alignment,
            data_start: h.data_start,
            metadata: h.metadata,
            meta_index: h.meta_index,
            tensors: h.tensors,
            tensor_index: h.tensor_index,
            parts: Vec::new(),
        })
    }

    fn split_err(&self, msg: String) -> GgufError {
        GgufError::Split {
            path: self.path.clone(),
            msg,
        }
    }

    /// An integer split key, if present (any integer type; gguf-py writes u16 and i32).
    fn split_key(&self, key: &str) -> Result<Option<u64>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                self.split_err(format!(
                    "`{key}` is a {}, not a non-negative integer",
                    v.type_name()
                ))
            }),
        }
    }

    fn split_count(&self) -> Result<Option<u64>, GgufError> {
        self.split_key(SPLIT_COUNT)
    }

    /// Opens parts 2..N when this file is part 1 of N, checks each, and joins their tensors.
    fn join_parts(mut self) -> Result<GgufFile, GgufError> {
        let count = self.split_count()?.unwrap_or(1);
        let no = self.split_key(SPLIT_NO)?.unwrap_or(0);
        if count == 0 || no >= count {
            return Err(self.split_err(format!("`{SPLIT_NO}` is {no} of `{SPLIT_COUNT}` {count}")));
        }
        if count == 1 {
            return Ok(self);
        }
        let name = self.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let Some((prefix, named_no, named_count)) = split_name(name) else {
            return Err(self.split_err(format!(
                "part {} of a model split into {count} files, but the file name does not follow \
                 llama.cpp's PREFIX-00001-of-{count:05}.gguf, so the other parts cannot be found",
                no + 1
            )));
        };
        if named_count != count || named_no != no + 1 {
            return Err(self.split_err(format!(
                "the name says part {named_no} of {named_count}, the metadata part {} of {count}",
                no + 1
            )));
        }
        let sibling = |i: u64| {
            self.path
                .with_file_name(format!("{prefix}-{i:05}-of-{count:05}.gguf"))
        };
        if no != 0 {
            return Err(self.split_err(format!(
                "part {} of a model split into {count} files; open the first part, {}",
                no + 1,
                sibling(1).display()
            )));
        }
        for i in 2..=count {
            let p = sibling(i);
            let part = match GgufFile::open_one(&p) {
                Ok(g) => g,
                Err(GgufError::Io { source, .. }) => {
                    return Err(self.split_err(format!(
                        "part {i} of {count}, {}, cannot be opened: {source}",
                        p.display()
                    )));
                }
                Err(e) => return Err(e),
            };
            let (pn, pc) = (part.split_key(SPLIT_NO)?, part.split_count()?);
            if pn != Some(i - 1) || pc != Some(count) {
                let show = |v: Option<u64>| v.map_or("absent".to_string(), |v| v.to_string());
                return Err(part.split_err(format!(
                    "expected part {i} of {count} (`{SPLIT_NO}` {}, `{SPLIT_COUNT}` {count}); it \
                     has `{SPLIT_NO}` {}, `{SPLIT_COUNT}` {}",
                    i - 1,
                    show(pn),
                    show(pc)
                )));
            }
            let index = self.parts.len() + 1;
            for mut t in part.tensors {
                if self.tensor_index.contains_key(&t.name) {
                    return Err(GgufError::Tensor {
                        path: p.clone(),
                        name: t.name,
                        msg: "is in an earlier part of this split model too".into(),
                    });
                }
                self.tensor_index.insert(t.name.clone(), self.tensors.len());
                t.part = index;
                self.tensors.push(t);
            }
            self.parts.push(Part {
                path: p,
                bytes: part.bytes,
                data_start: part.data_start,
            });
        }
        if let Some(n) = self.split_key(SPLIT_TENSORS)?
            && n != self.tensors.len() as u64
        {
            return Err(self.split_err(format!(
                "`{SPLIT_TENSORS}` is {n}, but the {count} parts hold {} tensors",
                self.tensors.len()
            )));
        }
        Ok(self)
    }

    /// The paths of the model's files: this one, then parts 2..N of a split model.
    pub fn part_paths(&self) -> Vec<&Path> {
        std::iter::once(self.path.as_path())
            .chain(self.parts.iter().map(|p| p.path.as_path()))
            .collect()
    }

    /// The path given to [`GgufFile::open`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// GGUF format version: 2 or 3.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment in bytes of the data section and of each tensor's data.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Size of the whole file in bytes (of every part, for a split model).
    pub fn file_bytes(&self) -> u64 {
        self.bytes.len() as u64 + self.parts.iter().map(|p| p.bytes.len() as u64).sum::<u64>()
    }

    /// Byte offset of the data section from the start of the file (of the first part, for a
    /// split model).
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// All metadata entries, in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// All tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Errors unless every tensor of the file has a type tally computes with; the error lists
    /// every offending tensor with its type, in file order. Costs no I/O beyond the header
    /// already read, so callers run it before allocating or uploading anything.
    pub fn require_supported_types(&self) -> Result<(), GgufError> {
        let bad: Vec<String> = self
            .tensors
            .iter()
            .filter(|t| !t.ty.is_supported())
            .map(|t| format!("{} {}", t.name, t.ty.name()))
            .collect();
        if bad.is_empty() {
            Ok(())
        } else {
            Err(GgufError::UnsupportedTensorTypes {
                count: bad.len(),
                list: bad.join(", "),
            })
        }
    }

    /// A tensor by name (hash lookup).
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// Rewrites a tensor's dims to `dims`, an equivalent spelling of the same shape (see
    /// [`same_ggml_shape`]): a loader that has checked a file against the shapes it expects calls
    /// this so that every later reader sees its own spelling (`[256]`, not the converter's
    /// `[256, 1]`). Element count, bytes and offset are unchanged. Returns false (and changes
    /// nothing) when the tensor is absent or the shapes differ.
    pub fn respell_dims(&mut self, name: &str, dims: &[u64]) -> bool {
        let Some(&i) = self.tensor_index.get(name) else {
            return false;
        };
        let t = &mut self.tensors[i];
        if dims.is_empty() || dims.len() > MAX_DIMS || !same_ggml_shape(&t.dims, dims) {
            return false;
        }
        t.dims = dims.to_vec();
        true
    }

    /// The tensor's data bytes: a slice of the map (of the part that holds it), `t.n_bytes()`
    /// long. `t` must be one of this file's [`GgufFile::tensors`], whose ranges were checked at
    /// open; for any other info whose range lies outside the file, the slice is empty.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let (bytes, data_start) = match t.part.checked_sub(1).and_then(|p| self.parts.get(p)) {
            Some(p) => (&p.bytes, p.data_start),
            None => (&self.bytes, self.data_start),
        };
        let start = data_start.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes()));
        match (start, end) {
            (Some(s), Some(e)) => usize::try_from(s)
                .ok()
                .zip(usize::try_from(e).ok())
                .and_then(|(s, e)| bytes.get(s..e))
                .unwrap_or(&[]),
            _ => &[],
        }
    }
}

/// `PREFIX-NNNNN-of-MMMMM.gguf` (llama.cpp's `llama_split_path`; gguf-py's `SHARD_NAME_FORMAT`)
/// as (PREFIX, NNNNN, MMMMM).
fn split_name(name: &str) -> Option<(&str, u64, u64)> {
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(no) || !digits(count) || prefix.is_empty() {
        return None;
    }
    Some((prefix, no.parse().ok()?, count.parse().ok()?))
}

struct Header {
    version: u32,
    alignment: u64,
    data_start: u64,
    metadata: Vec<(String, MetaValue)>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

/// A read position over the file's bytes that reports what it was reading when it runs out.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn header_err(&self, offset: usize, msg: String) -> GgufError {
        GgufError::Header {
            path: self.path.to_path_buf(),
            offset: offset as u64,
            msg,
        }
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                path: self.path.to_path_buf(),
                what: what(),
                offset: self.pos as u64,
                needed_bytes: n,
                file_bytes: self.buf.len() as u64,
            });
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len_at = self.pos;
        let len = self.u64(&|| format!("length of {}", what()))?;
        if len > self.remaining() {
            return Err(self.header_err(
                len_at,
                format!(
                    "{} has length {len} bytes, but only {} bytes remain in the file \
                     (truncated or corrupt header)",
                    what(),
                    self.remaining()
                ),
            ));
        }
        let at = self.pos;
        let raw = self.take(len, what)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(self.header_err(at, format!("{} is not valid UTF-8 ({e})", what()))),
        }
    }

    /// Checks that `count` values of at least `min_bytes` each can fit in what is left.
    fn check_count(
        &self,
        at: usize,
        count: u64,
        min_bytes: u64,
        what: &dyn Fn() -> String,
    ) -> Result<(), GgufError> {
        let fit = self.remaining() / min_bytes;
        if count > fit {
            return Err(self.header_err(
                at,
                format!(
                    "{} is {count}, but the {} bytes left in the file can hold at most {fit} \
                     (truncated or corrupt header)",
                    what(),
                    self.remaining()
                ),
            ));
        }
        Ok(())
    }

    fn value(&mut self, ty: u32, what: &dyn Fn() -> String) -> Result<MetaValue, GgufError> {
        let at = self.pos;
        Ok(match ty {
            tag::U8 => MetaValue::U8(u8::from_le_bytes(self.array(what)?)),
            tag::I8 => MetaValue::I8(i8::from_le_bytes(self.array(what)?)),
            tag::U16 => MetaValue::U16(u16::from_le_bytes(self.array(what)?)),
            tag::I16 => MetaValue::I16(i16::from_le_bytes(self.array(what)?)),
            tag::U32 => MetaValue::U32(u32::from_le_bytes(self.array(what)?)),
            tag::I32 => MetaValue::I32(i32::from_le_bytes(self.array(what)?)),
            tag::F32 => MetaValue::F32(f32::from_le_bytes(self.array(what)?)),
            tag::U64 => MetaValue::U64(u64::from_le_bytes(self.array(what)?)),
            tag::I64 => MetaValue::I64(i64::from_le_bytes(self.array(what)?)),
            tag::F64 => MetaValue::F64(f64::from_le_bytes(self.array(what)?)),
            tag::BOOL => {
                let [b] = self.array(what)?;
                MetaValue::Bool(self.bool_byte(at, b, what)?)
            }
            tag::STRING => MetaValue::String(self.string(what)?),
            tag::ARRAY => MetaValue::Array(self.meta_array(0, what)?),
            other => {
                return Err(self.header_err(
                    at.saturating_sub(4),
                    format!("{} has unknown value type id {other}", what()),
                ));
            }
        })
    }

    fn bool_byte(&self, at: usize, b: u8, what: &dyn Fn() -> String) -> Result<bool, GgufError> {
        match b {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.header_err(at, format!("{} is a bool byte {b}, not 0 or 1", what()))),
        }
    }

    fn meta_array(
        &mut self,
        depth: u32,
        what: &dyn Fn() -> String,
    ) -> Result<MetaArray, GgufError> {
        let at = self.pos;
        if depth >= MAX_ARRAY_DEPTH {
            return Err(self.header_err(
                at,
                format!(
                    "{} nests arrays deeper than {MAX_ARRAY_DEPTH} levels",
                    what()
                ),
            ));
        }
        let ety = self.u32(&|| format!("element type of array {}", what()))?;
        let Some(min) = tag::min_bytes(ety) else {
            return Err(self.header_err(
                at,
                format!("{} is an array of unknown value type id {ety}", what()),
            ));
        };
        let count_at = self.pos;
        let count = self.u64(&|| format!("length of array {}", what()))?;
        self.check_count(count_at, count, min, &|| {
            format!("the length of the {} array {}", tag::name(ety), what())
        })?;
        let n = count as usize;
        macro_rules! numeric {
            ($variant:ident, $t:ty) => {{
                let raw = self.take(count * min, what)?;
                MetaArray::$variant(
                    raw.chunks_exact(std::mem::size_of::<$t>())
                        .map(|c| {
                            let mut a = [0u8; std::mem::size_of::<$t>()];
                            a.copy_from_slice(c);
                            <$t>::from_le_bytes(a)
                        })
                        .collect(),
                )
            }};
        }
        Ok(match ety {
            tag::U8 => MetaArray::U8(self.take(count, what)?.to_vec()),
            tag::I8 => numeric!(I8, i8),
            tag::U16 => numeric!(U16, u16),
            tag::I16 => numeric!(I16, i16),
            tag::U32 => numeric!(U32, u32),
            tag::I32 => numeric!(I32, i32),
            tag::F32 => numeric!(F32, f32),
            tag::U64 => numeric!(U64, u64),
            tag::I64 => numeric!(I64, i64),
            tag::F64 => numeric!(F64, f64),
            tag::BOOL => {
                let start = self.pos;
                let raw = self.take(count, what)?;
                let mut v = Vec::with_capacity(n.min(MAX_PREALLOC));
                for (i, &b) in raw.iter().enumerate() {
                    v.push(self.bool_byte(start + i, b, &|| format!("element {i} of {}", what()))?);
                }
                MetaArray::Bool(v)
            }
            tag::STRING => {
                let mut v = Vec::with_capacity(n.min(MAX_PREALLOC));
                for i in 0..n {
                    v.push(self.string(&|| format!("string {i} of array {}", what()))?);
                }
                MetaArray::String(v)
            }
            _ => {
                // tag::ARRAY, the only one left after min_bytes accepted the id.
                let mut v = Vec::with_capacity(n.min(MAX_PREALLOC));
                for i in 0..n {
                    v.push(self.meta_array(depth + 1, &|| format!("element {i} of {}", what()))?);
                }
                MetaArray::Array(v)
            }
        })
    }
}

fn parse_header(path: &Path, buf: &[u8]) -> Result<Header, GgufError> {
    let mut c = Cursor { buf, pos: 0, path };
    let magic: [u8; 4] = c.array(&|| "the GGUF magic".to_string())?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic {
            path: path.to_path_buf(),
            found: magic,
        });
    }
    let version = c.u32(&|| "the version".to_string())?;
    let unsupported = |why| GgufError::UnsupportedVersion {
        path: path.to_path_buf(),
        version,
        why,
    };
    match version {
        2 | 3 => {}
        1 => {
            return Err(unsupported(
                "GGUF v1 (32-bit counts) is obsolete; only versions 2 and 3 are read",
            ));
        }
        v if v & 0xffff == 0 && matches!(v.swap_bytes(), 1..=3) => {
            return Err(unsupported(
                "this looks like a big-endian GGUF file (its version is byte-swapped); only little-endian files are read",
            ));
        }
        _ => return Err(unsupported("only versions 2 and 3 are read")),
    }

    let tensors_at = c.pos;
    let n_tensors = c.u64(&|| "the tensor count".to_string())?;
    let kv_at = c.pos;
    let n_kv = c.u64(&|| "the metadata entry count".to_string())?;
    c.check_count(kv_at, n_kv, MIN_KV_BYTES, &|| {
        "the metadata entry count".to_string()
    })?;
    c.check_count(tensors_at, n_tensors, MIN_TENSOR_INFO_BYTES, &|| {
        "the tensor count".to_string()
    })?;

    let mut metadata = Vec::with_capacity((n_kv as usize).min(MAX_PREALLOC));
    let mut meta_index = HashMap::with_capacity((n_kv as usize).min(MAX_PREALLOC));
    let mut alignment_at = 0;
    for i in 0..n_kv {
        let key_at = c.pos;
        let key = c.string(&|| format!("the key of metadata entry {i}"))?;
        let ty = c.u32(&|| format!("the value type of metadata key '{key}'"))?;
        if key == "general.alignment" {
            alignment_at = c.pos;
        }
        let value = c.value(ty, &|| format!("metadata key '{key}'"))?;
        if meta_index.insert(key.clone(), metadata.len()).is_some() {
            return Err(c.header_err(key_at, format!("duplicate metadata key '{key}'")));
        }
        metadata.push((key, value));
    }

    let alignment = match meta_index.get("general.alignment").map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u64() {
            Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => a,
            _ => {
                return Err(c.header_err(
                    alignment_at,
                    format!(
                        "metadata key 'general.alignment' is {v:?}; it must be a power of two \
                         from 1 to {MAX_ALIGNMENT}"
                    ),
                ));
            }
        },
    };

    let mut tensors = Vec::with_capacity((n_tensors as usize).min(MAX_PREALLOC));
    let mut tensor_index = HashMap::with_capacity((n_tensors as usize).min(MAX_PREALLOC));
    for i in 0..n_tensors {
        let info_at = c.pos;
        let name = c.string(&|| format!("the name of tensor info {i}"))?;
        let tensor_err = |msg: String| GgufError::Tensor {
            path: path.to_path_buf(),
            name: name.clone(),
            msg,
        };
        let what = || format!("tensor info of '{name}'");
        let n_dims = c.u32(&what)?;
        if n_dims == 0 || n_dims as usize > MAX_DIMS {
            return Err(tensor_err(format!(
                "has {n_dims} dimensions (header byte offset {}); ggml tensors have 1 to {MAX_DIMS}",
                c.pos - 4
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(c.u64(&what)?);
        }
        let ty_id = c.u32(&what)?;
        let offset = c.u64(&what)?;
        let Some(ty) = GgmlType::from_id(ty_id) else {
            return Err(tensor_err(format!("has unknown ggml type id {ty_id}")));
        };
        check_shape(&dims, ty).map_err(tensor_err)?;
        if let Some(&j) = tensor_index.get(&name) {
            return Err(tensor_err(format!(
                "duplicate tensor name (tensor infos {j} and {i}, header byte offset {info_at})"
            )));
        }
        tensor_index.insert(name.clone(), tensors.len());
        tensors.push(TensorInfo {
            name,
            dims,
            ty,
            offset,
            part: 0,
        });
    }

    let header_end = c.pos as u64;
    // header_end < 2^63 and alignment <= 2^30, so this cannot overflow.
    let data_start = header_end.div_ceil(alignment) * alignment;
    check_data_ranges(path, &tensors, data_start, alignment, buf.len() as u64)?;

    Ok(Header {
        version,
        alignment,
        data_start,
        metadata,
        meta_index,
        tensors,
        tensor_index,
    })
}

/// Checks dimensions against ggml's rules: every dim at least 1, the element count within
/// `i64` (ggml's `int64_t ne`), and the row a whole number of blocks.
pub(crate) fn check_shape(dims: &[u64], ty: GgmlType) -> Result<(), String> {
    let mut n: u64 = 1;
    for (k, &d) in dims.iter().enumerate() {
        if d == 0 {
            return Err(format!("dimension {k} is 0 (shape {dims:?})"));
        }
        n = match n.checked_mul(d) {
            Some(n) if n <= i64::MAX as u64 => n,
            _ => return Err(format!("shape {dims:?} has more than 2^63-1 elements")),
        };
    }
    if dims[0] % ty.block_elems() as u64 != 0 {
        return Err(format!(
            "row length {} (dims[0] of {dims:?}) is not a multiple of the {} block size {}",
            dims[0],
            ty.name(),
            ty.block_elems()
        ));
    }
    Ok(())
}

fn check_data_ranges(
    path: &Path,
    tensors: &[TensorInfo],
    data_start: u64,
    alignment: u64,
    file_bytes: u64,
) -> Result<(), GgufError> {
    let err = |t: &TensorInfo, msg: String| GgufError::Tensor {
        path: path.to_path_buf(),
        name: t.name.clone(),
        msg,
    };
    for t in tensors {
        if t.offset % alignment != 0 {
            return Err(err(
                t,
                format!(
                    "data offset {} is not a multiple of the alignment {alignment}",
                    t.offset
                ),
            ));
        }
        let end = data_start
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.n_bytes()));
        match end {
            Some(end) if end <= file_bytes => {}
            _ => {
                return Err(err(
                    t,
                    format!(
                        "{} data bytes at data offset {} (file byte offset {}) run past the end of \
                         the file ({file_bytes} bytes); the file is truncated or the offset is wrong",
                        t.n_bytes(),
                        t.offset,
                        data_start.saturating_add(t.offset)
                    ),
                ));
            }
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        // In range (checked above), so the sum cannot overflow.
        if a.offset + a.n_bytes() > b.offset {
            return Err(err(
                b,
                format!(
                    "data at offset {} overlaps tensor '{}' (data offsets {}..{})",
                    b.offset,
                    a.name,
                    a.offset,
                    a.offset + a.n_bytes()
                ),
            ));
        }
    }
    Ok(())
}
