//! ggml tensor types: numeric ids as stored in GGUF, names, and block geometry.

use crate::GgufError;

/// A ggml tensor element type. The discriminant-independent numeric id ([`GgmlType::id`]) is the
/// one stored in GGUF files; ids 4, 5 and 31..=33, 36..=38 were retired by ggml and are not types.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
    Q2_0,
}

/// The types tally computes with, as listed in error messages.
pub(crate) const SUPPORTED_NAMES: &str = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4";

/// (type, GGUF id, name, elements per block, bytes per block), from ggml's `ggml.h` and
/// `ggml-common.h` block structs.
const TABLE: [(GgmlType, u32, &str, usize, usize); 35] = [
    (GgmlType::F32, 0, "F32", 1, 4),
    (GgmlType::F16, 1, "F16", 1, 2),
    (GgmlType::Q4_0, 2, "Q4_0", 32, 18),
    (GgmlType::Q4_1, 3, "Q4_1", 32, 20),
    (GgmlType::Q5_0, 6, "Q5_0", 32, 22),
    (GgmlType::Q5_1, 7, "Q5_1", 32, 24),
    (GgmlType::Q8_0, 8, "Q8_0", 32, 34),
    // ggml's block_q8_1 is two halves + 32 bytes = 36 (the Python gguf package says 40).
    (GgmlType::Q8_1, 9, "Q8_1", 32, 36),
    (GgmlType::Q2_K, 10, "Q2_K", 256, 84),
    (GgmlType::Q3_K, 11, "Q3_K", 256, 110),
    (GgmlType::Q4_K, 12, "Q4_K", 256, 144),
    (GgmlType::Q5_K, 13, "Q5_K", 256, 176),
    (GgmlType::Q6_K, 14, "Q6_K", 256, 210),
    (GgmlType::Q8_K, 15, "Q8_K", 256, 292),
    (GgmlType::IQ2_XXS, 16, "IQ2_XXS", 256, 66),
    (GgmlType::IQ2_XS, 17, "IQ2_XS", 256, 74),
    (GgmlType::IQ3_XXS, 18, "IQ3_XXS", 256, 98),
    (GgmlType::IQ1_S, 19, "IQ1_S", 256, 50),
    (GgmlType::IQ4_NL, 20, "IQ4_NL", 32, 18),
    (GgmlType::IQ3_S, 21, "IQ3_S", 256, 110),
    (GgmlType::IQ2_S, 22, "IQ2_S", 256, 82),
    (GgmlType::IQ4_XS, 23, "IQ4_XS", 256, 136),
    (GgmlType::I8, 24, "I8", 1, 1),
    (GgmlType::I16, 25, "I16", 1, 2),
    (GgmlType::I32, 26, "I32", 1, 4),
    (GgmlType::I64, 27, "I64", 1, 8),
    (GgmlType::F64, 28, "F64", 1, 8),
    (GgmlType::IQ1_M, 29, "IQ1_M", 256, 56),
    (GgmlType::BF16, 30, "BF16", 1, 2),
    (GgmlType::TQ1_0, 34, "TQ1_0", 256, 54),
    (GgmlType::TQ2_0, 35, "TQ2_0", 256, 66),
    (GgmlType::MXFP4, 39, "MXFP4", 32, 17),
    (GgmlType::NVFP4, 40, "NVFP4", 64, 36),
    (GgmlType::Q1_0, 41, "Q1_0", 128, 18),
    (GgmlType::Q2_0, 42, "Q2_0", 64, 18),
];

impl GgmlType {
    /// Every type, in id order.
    pub const ALL: [GgmlType; 35] = {
        let mut all = [GgmlType::F32; 35];
        let mut i = 0;
        while i < TABLE.len() {
            all[i] = TABLE[i].0;
            i += 1;
        }
        all
    };

    fn row(self) -> &'static (GgmlType, u32, &'static str, usize, usize) {
        // The enum's declaration order is the table's order.
        &TABLE[self as usize]
    }

    /// The type for a GGUF type id, or `None` for an id ggml does not define (or retired).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TABLE.iter().find(|r| r.1 == id).map(|r| r.0)
    }

    /// The id stored in GGUF tensor infos.
    pub fn id(self) -> u32 {
        self.row().1
    }

    /// The upper-case name as llama.cpp's tools print it: `"Q4_K"`, `"BF16"`, `"IQ2_XXS"`.
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Elements per block: 1 for plain types, 32 for Q8_0, 256 for K-quants.
    pub fn block_elems(self) -> usize {
        self.row().3
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.row().4
    }

    /// Whether tally can dequantize (and quantize) this type: F32, F16, BF16, Q8_0, the legacy
    /// Q4_0/Q4_1/Q5_0/Q5_1, the K-quants Q2_K..Q6_K, IQ4_NL, IQ4_XS and MXFP4.
    pub fn is_supported(self) -> bool {
        matches!(
            self,
            GgmlType::F32
                | GgmlType::F16
                | GgmlType::BF16
                | GgmlType::Q8_0
                | GgmlType::Q4_0
                | GgmlType::Q4_1
                | GgmlType::Q5_0
                | GgmlType::Q5_1
                | GgmlType::Q2_K
                | GgmlType::Q3_K
                | GgmlType::Q4_K
                | GgmlType::Q5_K
                | GgmlType::Q6_K
                | GgmlType::IQ4_NL
                | GgmlType::IQ4_XS
                | GgmlType::MXFP4
        )
    }

    /// Bytes taken by `n_elems` elements. Errors if `n_elems` is not a whole number of blocks, or
    /// if the byte count does not fit in a `u64`.
    pub fn row_bytes(self, n_elems: u64) -> Result<u64, GgufError> {
        let be = self.block_elems() as u64;
        let partial = || GgufError::PartialBlock {
            ty: self.name(),
            n_elems,
            block_elems: self.block_elems(),
        };
        if n_elems % be != 0 {
            return Err(partial());
        }
        (n_elems / be)
            .checked_mul(self.block_bytes() as u64)
            .ok_or_else(partial)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_order_matches_enum_and_ids_round_trip() {
        for (i, row) in TABLE.iter().enumerate() {
            assert_eq!(row.0 as usize, i, "{}", row.2);
            assert_eq!(GgmlType::from_id(row.1), Some(row.0));
            assert_eq!(row.0.id(), row.1);
            assert_eq!(format!("{:?}", row.0), row.2);
        }
        for retired in [4, 5, 31, 32, 33, 36, 37, 38, 43, u32::MAX] {
            assert_eq!(GgmlType::from_id(retired), None);
        }
    }

    #[test]
    fn geometry() {
        assert_eq!(GgmlType::Q4_K.row_bytes(512).unwrap(), 288);
        assert_eq!(GgmlType::F32.row_bytes(3).unwrap(), 12);
        let e = GgmlType::Q8_0.row_bytes(33).unwrap_err().to_string();
        assert_eq!(
            e,
            "33 elements of type Q8_0 is not a whole number of 32-element blocks"
        );
    }
}
