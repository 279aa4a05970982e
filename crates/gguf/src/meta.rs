//! GGUF metadata values. Arrays are stored typed (one `Vec` of the element type), so a vocabulary
//! of a quarter-million strings is one `Vec<String>`, not a quarter-million boxed enum values.

/// GGUF value type ids (`gguf_type` in ggml).
pub(crate) mod tag {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;

    /// A readable name for a value type id (for error messages).
    pub fn name(t: u32) -> &'static str {
        match t {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            BOOL => "bool",
            STRING => "string",
            ARRAY => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
            _ => "unknown",
        }
    }

    /// The smallest number of bytes one value of this type takes in a file: used to bound
    /// counts against the bytes left before anything is allocated.
    pub fn min_bytes(t: u32) -> Option<u64> {
        Some(match t {
            U8 | I8 | BOOL => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 => 8,
            STRING => 8,      // the length prefix of an empty string
            ARRAY => 4 + 8,   // element type and count of an empty array
            _ => return None, // unknown type id
        })
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A typed metadata array. Arrays of arrays hold one `MetaArray` per element, each typed on
/// its own (GGUF allows the inner arrays to differ in element type).
#[derive(Debug, Clone, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<MetaArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl MetaValue {
    /// The GGUF value type id.
    pub(crate) fn tag(&self) -> u32 {
        match self {
            MetaValue::U8(_) => tag::U8,
            MetaValue::I8(_) => tag::I8,
            MetaValue::U16(_) => tag::U16,
            MetaValue::I16(_) => tag::I16,
            MetaValue::U32(_) => tag::U32,
            MetaValue::I32(_) => tag::I32,
            MetaValue::F32(_) => tag::F32,
            MetaValue::Bool(_) => tag::BOOL,
            MetaValue::String(_) => tag::STRING,
            MetaValue::Array(_) => tag::ARRAY,
            MetaValue::U64(_) => tag::U64,
            MetaValue::I64(_) => tag::I64,
            MetaValue::F64(_) => tag::F64,
        }
    }

    /// The GGUF name of this value's type (`"u32"`, `"string"`, `"array"`...).
    pub fn type_name(&self) -> &'static str {
        tag::name(self.tag())
    }

    /// Any integer value that is non-negative, as `u64`. Floats and bools give `None`.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer value that fits in a `u32`.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_u64().and_then(|v| u32::try_from(v).ok())
    }

    /// Any integer value that fits in an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            MetaValue::I8(v) => Some(v.into()),
            MetaValue::I16(v) => Some(v.into()),
            MetaValue::I32(v) => Some(v.into()),
            MetaValue::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// An `f32` value, or an `f64` value narrowed to `f32`.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            MetaValue::F32(v) => Some(v),
            MetaValue::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    /// An `f64` or `f32` value as `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl MetaArray {
    /// The GGUF value type id of the elements.
    pub(crate) fn elem_tag(&self) -> u32 {
        match self {
            MetaArray::U8(_) => tag::U8,
            MetaArray::I8(_) => tag::I8,
            MetaArray::U16(_) => tag::U16,
            MetaArray::I16(_) => tag::I16,
            MetaArray::U32(_) => tag::U32,
            MetaArray::I32(_) => tag::I32,
            MetaArray::F32(_) => tag::F32,
            MetaArray::Bool(_) => tag::BOOL,
            MetaArray::String(_) => tag::STRING,
            MetaArray::Array(_) => tag::ARRAY,
            MetaArray::U64(_) => tag::U64,
            MetaArray::I64(_) => tag::I64,
            MetaArray::F64(_) => tag::F64,
        }
    }

    /// The GGUF name of the element type (`"string"`, `"i32"`...).
    pub fn elem_type_name(&self) -> &'static str {
        tag::name(self.elem_tag())
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::String(v) => v.len(),
            MetaArray::Array(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            MetaArray::String(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_f32s(&self) -> Option<&[f32]> {
        match self {
            MetaArray::F32(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_i32s(&self) -> Option<&[i32]> {
        match self {
            MetaArray::I32(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_u32s(&self) -> Option<&[u32]> {
        match self {
            MetaArray::U32(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_bools(&self) -> Option<&[bool]> {
        match self {
            MetaArray::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_arrays(&self) -> Option<&[MetaArray]> {
        match self {
            MetaArray::Array(v) => Some(v),
            _ => None,
        }
    }

    /// Element `i` of an integer array as `u64`, if it exists and is a non-negative integer.
    /// Lets callers read per-layer integer arrays without caring about the stored width.
    pub fn get_u64(&self, i: usize) -> Option<u64> {
        match self {
            MetaArray::U8(v) => v.get(i).map(|&x| x.into()),
            MetaArray::U16(v) => v.get(i).map(|&x| x.into()),
            MetaArray::U32(v) => v.get(i).map(|&x| x.into()),
            MetaArray::U64(v) => v.get(i).copied(),
            MetaArray::I8(v) => v.get(i).and_then(|&x| u64::try_from(x).ok()),
            MetaArray::I16(v) => v.get(i).and_then(|&x| u64::try_from(x).ok()),
            MetaArray::I32(v) => v.get(i).and_then(|&x| u64::try_from(x).ok()),
            MetaArray::I64(v) => v.get(i).and_then(|&x| u64::try_from(x).ok()),
            _ => None,
        }
    }
}
