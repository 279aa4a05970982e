//! Every way a file can be wrong, each with the error text it must give; absurd sizes in the
//! header must fail without large allocations (counted by a per-thread counting allocator).

mod common;

use common::{Raw, temp_path};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use tally_gguf::{GgmlType, GgufError, GgufFile, GgufWriter, MetaArray, MetaValue, TensorSpec};

struct Counting;

thread_local! {
    static ALLOCATED_BYTES: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts requested sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED_BYTES.with(|c| c.set(c.get().saturating_add(layout.size())));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED_BYTES.with(|c| c.set(c.get().saturating_add(new_size)));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Opens in-memory bytes; returns the error text and the bytes allocated while parsing.
fn open_err(bytes: Vec<u8>) -> (String, usize) {
    let before = ALLOCATED_BYTES.with(Cell::get);
    let r = GgufFile::from_bytes(bytes, "bad.gguf");
    let used = ALLOCATED_BYTES.with(Cell::get) - before;
    match r {
        Ok(_) => panic!("opened a bad file"),
        Err(e) => (e.to_string(), used),
    }
}

fn err(bytes: Vec<u8>) -> String {
    open_err(bytes).0
}

/// A small valid file: metadata of several kinds and three tensors.
fn valid_file() -> Vec<u8> {
    let meta = vec![
        (
            "general.architecture".to_string(),
            MetaValue::String("test".into()),
        ),
        ("n".to_string(), MetaValue::U32(7)),
        (
            "tokens".to_string(),
            MetaValue::Array(MetaArray::String(vec!["a".into(), "bc".into()])),
        ),
        (
            "scores".to_string(),
            MetaValue::Array(MetaArray::F32(vec![0.5, 1.5, 2.5])),
        ),
        (
            "nested".to_string(),
            MetaValue::Array(MetaArray::Array(vec![MetaArray::Bool(vec![true])])),
        ),
    ];
    let specs = [
        TensorSpec {
            name: "a".into(),
            dims: vec![4, 2],
            ty: GgmlType::F32,
        },
        TensorSpec {
            name: "b".into(),
            dims: vec![32],
            ty: GgmlType::Q8_0,
        },
        TensorSpec {
            name: "c".into(),
            dims: vec![3],
            ty: GgmlType::F16,
        },
    ];
    let mut w = GgufWriter::new(Vec::new(), &meta, &specs).unwrap();
    let n: u64 = specs.iter().map(|s| s.n_bytes()).sum();
    w.write_data(&(0..n).map(|i| (i * 7 + 1) as u8).collect::<Vec<_>>())
        .unwrap();
    w.finish().unwrap()
}

#[test]
fn valid_file_opens() {
    let g = GgufFile::from_bytes(valid_file(), "ok").unwrap();
    assert_eq!(g.tensors().len(), 3);
}

#[test]
fn wrong_magic() {
    assert_eq!(
        err(b"GGML\x03\0\0\0rest of it".to_vec()),
        "bad.gguf: not a GGUF file: magic bytes are [47, 47, 4d, 4c] (\"GGML\"), expected \"GGUF\""
    );
    assert_eq!(
        err(b"{\"json\": 1}".to_vec()),
        "bad.gguf: not a GGUF file: magic bytes are [7b, 22, 6a, 73] (\"{\\\"js\"), expected \"GGUF\""
    );
}

#[test]
fn empty_and_tiny_files() {
    assert_eq!(
        err(Vec::new()),
        "bad.gguf: truncated GGUF file: the GGUF magic at byte offset 0 needs 4 bytes, but the file \
         has 0 bytes"
    );
    assert_eq!(
        err(b"GGUF\x03\0".to_vec()),
        "bad.gguf: truncated GGUF file: the version at byte offset 4 needs 4 bytes, but the file \
         has 6 bytes"
    );
}

#[test]
fn empty_file_on_disk_and_missing_file() {
    let p = temp_path("empty");
    std::fs::write(&p, b"").unwrap();
    let e = GgufFile::open(&p).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "{}: truncated GGUF file: the GGUF magic",
            p.display()
        )),
        "{e}"
    );
    std::fs::remove_file(&p).unwrap();
    let e = GgufFile::open(&p).unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }));
    assert!(
        e.to_string().starts_with(&format!("{}: ", p.display())),
        "{e}"
    );
}

#[test]
fn directories_and_fifos_are_refused_before_opening() {
    let dir = std::env::temp_dir();
    let e = GgufFile::open(&dir).unwrap_err();
    assert!(matches!(e, GgufError::NotAFile { .. }), "{e:?}");
    assert!(
        e.to_string()
            .ends_with("is a directory, not a regular file (a GGUF model must be a regular file)"),
        "{e}"
    );
    let fifo = temp_path("fifo");
    let _ = std::fs::remove_file(&fifo);
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(ok.success());
    // Opening a FIFO for reading would block here until a writer came.
    let e = GgufFile::open(&fifo).unwrap_err().to_string();
    std::fs::remove_file(&fifo).unwrap();
    assert!(
        e.contains("is a FIFO (named pipe), not a regular file"),
        "{e}"
    );
}

#[test]
fn truncated_at_every_cut_point() {
    let full = valid_file();
    let g = GgufFile::from_bytes(full.clone(), "full").unwrap();
    let data_start = g.data_start() as usize;
    // Past the last tensor's data there is only padding, which a file may lack.
    let data_end = g
        .tensors()
        .iter()
        .map(|t| data_start + (t.offset + t.n_bytes()) as usize)
        .max()
        .unwrap();
    assert!(GgufFile::from_bytes(full[..data_end].to_vec(), "unpadded").is_ok());
    for cut in 0..data_end {
        let e = err(full[..cut].to_vec());
        assert!(e.contains("truncated"), "cut at {cut}: {e}");
        if cut > data_start {
            assert!(
                e.contains("run past the end of the file"),
                "cut at {cut}: {e}"
            );
        }
    }
    // Two cuts in full: early, the counts alone cannot fit; inside a tensor info, the read
    // that runs out names what it was reading.
    assert_eq!(
        err(full[..50].to_vec()),
        "bad.gguf: invalid GGUF header at byte offset 16: the metadata entry count is 5, but the 26 \
         bytes left in the file can hold at most 2 (truncated or corrupt header)"
    );
    let tensor_c_at = full
        .windows(9)
        .rposition(|w| w == b"\x01\0\0\0\0\0\0\0c")
        .unwrap();
    assert_eq!(
        err(full[..tensor_c_at + 12].to_vec()),
        format!(
            "bad.gguf: truncated GGUF file: tensor info of 'c' at byte offset {} needs 4 bytes, but \
             the file has {} bytes",
            tensor_c_at + 9,
            tensor_c_at + 12
        )
    );
}

#[test]
fn truncated_tensor_data() {
    let full = valid_file();
    let n = full.len();
    let g = GgufFile::from_bytes(full.clone(), "full").unwrap();
    let c = g.tensor("c").unwrap();
    let c_start = g.data_start() + c.offset;
    let e = err(full[..(c_start as usize + 3)].to_vec());
    assert_eq!(
        e,
        format!(
            "bad.gguf: tensor 'c': 6 data bytes at data offset {} (file byte offset {c_start}) run \
             past the end of the file ({} bytes); the file is truncated or the offset is wrong",
            c.offset,
            c_start + 3
        )
    );
    assert!(n > c_start as usize + 3);
}

#[test]
fn absurd_counts_fail_without_big_allocations() {
    const LIMIT_BYTES: usize = 64 * 1024;
    // Tensor count 2^60.
    let mut r = Raw::header(3, 1 << 60, 0);
    r.bytes(100, 0);
    let (e, used) = open_err(r.0);
    assert_eq!(
        e,
        "bad.gguf: invalid GGUF header at byte offset 8: the tensor count is 1152921504606846976, \
         but the 100 bytes left in the file can hold at most 3 (truncated or corrupt header)"
    );
    assert!(used < LIMIT_BYTES, "allocated {used} bytes");

    // Metadata count u64::MAX.
    let mut r = Raw::header(3, 0, u64::MAX);
    r.bytes(100, 0);
    let (e, used) = open_err(r.0);
    assert!(
        e.contains("the metadata entry count is 18446744073709551615, but the 100 bytes left"),
        "{e}"
    );
    assert!(used < LIMIT_BYTES, "allocated {used} bytes");

    // A key of length 2^62.
    let mut r = Raw::header(3, 0, 1);
    r.u64(1 << 62).bytes(64, b'k');
    let (e, used) = open_err(r.0);
    assert_eq!(
        e,
        "bad.gguf: invalid GGUF header at byte offset 24: the key of metadata entry 0 has length \
         4611686018427387904 bytes, but only 64 bytes remain in the file (truncated or corrupt header)"
    );
    assert!(used < LIMIT_BYTES, "allocated {used} bytes");

    // A string value of length 2^62.
    let mut r = Raw::header(3, 0, 1);
    r.str("general.name").u32(8).u64(1 << 62).bytes(64, b'x');
    let (e, used) = open_err(r.0);
    assert!(
        e.contains("metadata key 'general.name' has length 4611686018427387904 bytes, but only 64"),
        "{e}"
    );
    assert!(used < LIMIT_BYTES, "allocated {used} bytes");

    // Arrays: huge length of strings, of u64, of arrays.
    for (ety, name) in [(8u32, "string"), (10, "u64"), (9, "array"), (0, "u8")] {
        let mut r = Raw::header(3, 0, 1);
        r.str("tokenizer.ggml.tokens")
            .u32(9)
            .u32(ety)
            .u64(u64::MAX / 3)
            .bytes(1000, 0);
        let (e, used) = open_err(r.0);
        assert!(
            e.contains(&format!(
                "the length of the {name} array metadata key 'tokenizer.ggml.tokens' is \
                 6148914691236517205, but the 1000 bytes left in the file can hold at most"
            )),
            "{e}"
        );
        assert!(used < LIMIT_BYTES, "allocated {used} bytes for {name}");
    }

    // A count the bytes left could hold (as in a big file, where the tensor data follows the
    // header) is believed only entry by entry: 2^20 empty strings in an 8 MiB tail parse, then
    // the tensor info that should follow is missing.
    let mut r = Raw::header(3, 1, 1);
    r.str("k").u32(9).u32(8).u64(1 << 20).bytes(8 << 20, 0);
    let e = err(r.0);
    assert!(e.contains("truncated"), "{e}");
}

#[test]
fn unsupported_versions() {
    let mut v1 = Raw::header(1, 0, 0);
    v1.bytes(32, 0);
    assert_eq!(
        err(v1.0),
        "bad.gguf: unsupported GGUF version 1: GGUF v1 (32-bit counts) is obsolete; only versions 2 \
         and 3 are read"
    );
    let mut v4 = Raw::header(4, 0, 0);
    v4.bytes(32, 0);
    assert_eq!(
        err(v4.0),
        "bad.gguf: unsupported GGUF version 4: only versions 2 and 3 are read"
    );
    let mut be = Raw(b"GGUF".to_vec());
    be.0.extend_from_slice(&3u32.to_be_bytes());
    be.0.extend_from_slice(&0u64.to_be_bytes());
    be.0.extend_from_slice(&0u64.to_be_bytes());
    assert_eq!(
        err(be.0),
        "bad.gguf: unsupported GGUF version 50331648: this looks like a big-endian GGUF file (its \
         version is byte-swapped); only little-endian files are read"
    );
}

/// One F32 tensor `w` of 8 elements with the given type id and offset, data included.
fn one_tensor(name: &str, dims: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    let mut r = Raw::header(3, 1, 0);
    r.tensor(name, dims, ty, offset).pad(32).bytes(64, 1);
    r.0
}

#[test]
fn bad_tensor_infos() {
    assert_eq!(
        err(one_tensor("w", &[8], 99, 0)),
        "bad.gguf: tensor 'w': has unknown ggml type id 99"
    );
    assert_eq!(
        err(one_tensor("w", &[8], 4, 0)),
        "bad.gguf: tensor 'w': has unknown ggml type id 4"
    );
    assert_eq!(
        err(one_tensor("w", &[8], 0, 8)),
        "bad.gguf: tensor 'w': data offset 8 is not a multiple of the alignment 32"
    );
    assert_eq!(
        err(one_tensor("w", &[8], 0, 64)),
        "bad.gguf: tensor 'w': 32 data bytes at data offset 64 (file byte offset 128) run past the \
         end of the file (128 bytes); the file is truncated or the offset is wrong"
    );
    assert_eq!(
        err(one_tensor("w", &[8], 0, u64::MAX - 31)),
        "bad.gguf: tensor 'w': 32 data bytes at data offset 18446744073709551584 (file byte offset \
         18446744073709551615) run past the end of the file (128 bytes); the file is truncated or \
         the offset is wrong"
    );
    assert_eq!(
        err(one_tensor("w", &[8, 0], 0, 0)),
        "bad.gguf: tensor 'w': dimension 1 is 0 (shape [8, 0])"
    );
    assert_eq!(
        err(one_tensor("w", &[1 << 32, 1 << 32], 0, 0)),
        "bad.gguf: tensor 'w': shape [4294967296, 4294967296] has more than 2^63-1 elements"
    );
    assert_eq!(
        err(one_tensor("w", &[33], 8, 0)),
        "bad.gguf: tensor 'w': row length 33 (dims[0] of [33]) is not a multiple of the Q8_0 block \
         size 32"
    );
    assert_eq!(
        err(one_tensor("w", &[1, 1, 1, 1, 1], 0, 0)),
        "bad.gguf: tensor 'w': has 5 dimensions (header byte offset 33); ggml tensors have 1 to 4"
    );
    assert_eq!(
        err(one_tensor("w", &[], 0, 0)),
        "bad.gguf: tensor 'w': has 0 dimensions (header byte offset 33); ggml tensors have 1 to 4"
    );
}

#[test]
fn overlapping_and_duplicate_tensors() {
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[16], 0, 0)
        .tensor("b", &[8], 0, 32)
        .pad(32)
        .bytes(128, 0);
    assert_eq!(
        err(r.0),
        "bad.gguf: tensor 'b': data at offset 32 overlaps tensor 'a' (data offsets 0..64)"
    );
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[8], 0, 0)
        .tensor("a", &[8], 0, 32)
        .pad(32)
        .bytes(128, 0);
    assert_eq!(
        err(r.0),
        "bad.gguf: tensor 'a': duplicate tensor name (tensor infos 0 and 1, header byte offset 57)"
    );
}

#[test]
fn bad_metadata() {
    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("k", 1).kv_u32("k", 2);
    assert_eq!(
        err(r.0),
        "bad.gguf: invalid GGUF header at byte offset 41: duplicate metadata key 'k'"
    );

    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(13).u32(0);
    assert_eq!(
        err(r.0),
        "bad.gguf: invalid GGUF header at byte offset 33: metadata key 'k' has unknown value type id 13"
    );

    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(9).u32(77).u64(1);
    assert_eq!(
        err(r.0),
        "bad.gguf: invalid GGUF header at byte offset 37: metadata key 'k' is an array of unknown \
         value type id 77"
    );

    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(7).u8(2);
    assert_eq!(
        err(r.0),
        "bad.gguf: invalid GGUF header at byte offset 37: metadata key 'k' is a bool byte 2, not 0 or 1"
    );

    let mut r = Raw::header(3, 0, 1);
    r.u64(2).u8(0xff).u8(0xfe).u32(4).u32(0);
    assert!(err(r.0).starts_with(
        "bad.gguf: invalid GGUF header at byte offset 32: the key of metadata entry 0 is not \
             valid UTF-8"
    ));

    let mut r = Raw::header(3, 0, 1);
    r.str("deep");
    r.u32(9);
    for _ in 0..20 {
        r.u32(9).u64(1);
    }
    r.u32(0).u64(0);
    assert!(err(r.0).contains("metadata key 'deep' nests arrays deeper than 8 levels"));
}

#[test]
fn bad_alignment() {
    for (v, shown) in [(48u32, "U32(48)"), (0, "U32(0)")] {
        let mut r = Raw::header(3, 0, 1);
        r.kv_u32("general.alignment", v);
        assert_eq!(
            err(r.0),
            format!(
                "bad.gguf: invalid GGUF header at byte offset 53: metadata key 'general.alignment' \
                 is {shown}; it must be a power of two from 1 to 1073741824"
            )
        );
    }
    let mut r = Raw::header(3, 0, 1);
    r.str("general.alignment").u32(8).str("32");
    assert!(err(r.0).contains("'general.alignment' is String(\"32\"); it must be a power of two"));
    // A valid non-default alignment is honoured by the reader.
    let mut r = Raw::header(3, 1, 1);
    r.kv_u32("general.alignment", 64)
        .tensor("w", &[8], 0, 0)
        .pad(64)
        .bytes(32, 3);
    let g = GgufFile::from_bytes(r.0, "ok").unwrap();
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.data_start() % 64, 0);
    assert_eq!(g.tensor_data(&g.tensors()[0]), &[3u8; 32]);
}

#[test]
fn foreign_tensor_info_gives_empty_slice() {
    let g = GgufFile::from_bytes(valid_file(), "ok").unwrap();
    let mut t = g.tensors()[0].clone();
    t.offset = 1 << 40;
    assert!(g.tensor_data(&t).is_empty());
    t.offset = u64::MAX;
    assert!(g.tensor_data(&t).is_empty());
}
