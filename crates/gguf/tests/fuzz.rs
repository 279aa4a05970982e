//! Property: no mutation or truncation of a valid file makes the reader panic; it either opens
//! (and then every tensor's data slice is in bounds and the right size) or returns an error.

use proptest::prelude::*;
use tally_gguf::{GgmlType, GgufFile, GgufWriter, MetaArray, MetaValue, TensorSpec};

fn valid_file() -> Vec<u8> {
    let meta = vec![
        (
            "general.architecture".to_string(),
            MetaValue::String("fuzz".into()),
        ),
        ("general.alignment".to_string(), MetaValue::U32(32)),
        ("n".to_string(), MetaValue::U64(3)),
        (
            "tok".to_string(),
            MetaValue::Array(MetaArray::String(vec!["a".into(), "".into(), "xyz".into()])),
        ),
        (
            "f".to_string(),
            MetaValue::Array(MetaArray::F32(vec![1.0, 2.0])),
        ),
        (
            "nest".to_string(),
            MetaValue::Array(MetaArray::Array(vec![
                MetaArray::I8(vec![-1]),
                MetaArray::Bool(vec![true, false]),
            ])),
        ),
        ("b".to_string(), MetaValue::Bool(true)),
    ];
    let specs = [
        TensorSpec {
            name: "a".into(),
            dims: vec![8, 2],
            ty: GgmlType::F32,
        },
        TensorSpec {
            name: "q".into(),
            dims: vec![256],
            ty: GgmlType::Q4_K,
        },
        TensorSpec {
            name: "h".into(),
            dims: vec![5],
            ty: GgmlType::BF16,
        },
    ];
    let mut w = GgufWriter::new(Vec::new(), &meta, &specs).unwrap();
    let n: u64 = specs.iter().map(|s| s.n_bytes()).sum();
    w.write_data(&vec![0x3c; n as usize]).unwrap();
    w.finish().unwrap()
}

fn check(bytes: Vec<u8>) {
    if let Ok(g) = GgufFile::from_bytes(bytes, "fuzz.gguf") {
        for t in g.tensors() {
            assert_eq!(g.tensor_data(t).len() as u64, t.n_bytes());
            assert!(g.tensor(&t.name).is_some());
        }
        for (k, _) in g.metadata() {
            assert!(g.get(k).is_some());
        }
    }
}

#[derive(Debug, Clone)]
enum Edit {
    /// Set byte at (index mod len) to value.
    Set(usize, u8),
    /// Overwrite 8 bytes at (index mod len) with a little-endian u64 (counts, lengths, offsets).
    Word(usize, u64),
    /// Truncate to (index mod len) bytes.
    Cut(usize),
    /// Insert a byte at (index mod len).
    Insert(usize, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    let word = prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(1 << 62),
        Just(1 << 32),
        any::<u64>(),
        0u64..64,
    ];
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, v)| Edit::Set(i, v)),
        2 => (any::<usize>(), word).prop_map(|(i, v)| Edit::Word(i, v)),
        1 => any::<usize>().prop_map(Edit::Cut),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(i, v)| Edit::Insert(i, v)),
    ]
}

fn apply(mut b: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        if b.is_empty() {
            break;
        }
        let n = b.len();
        match *e {
            Edit::Set(i, v) => b[i % n] = v,
            Edit::Word(i, v) => {
                let at = i % n;
                let end = (at + 8).min(n);
                b[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
            }
            Edit::Cut(i) => b.truncate(i % n),
            Edit::Insert(i, v) => b.insert(i % n, v),
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_files_never_panic(edits in prop::collection::vec(edit(), 1..6)) {
        check(apply(valid_file(), &edits));
    }

    /// Mutations confined to the header, where they matter most.
    #[test]
    fn header_mutations_never_panic(pos in 0usize..200, v in any::<u64>(), width in 1usize..9) {
        let mut b = valid_file();
        let end = (pos + width).min(b.len());
        b[pos..end].copy_from_slice(&v.to_le_bytes()[..end - pos]);
        check(b);
    }

    #[test]
    fn arbitrary_bytes_after_magic_never_panic(tail in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut b = b"GGUF\x03\0\0\0".to_vec();
        b.extend_from_slice(&tail);
        check(b);
    }
}

#[test]
fn the_unmutated_file_opens() {
    let g = GgufFile::from_bytes(valid_file(), "ok").unwrap();
    assert_eq!(g.tensors().len(), 3);
}
