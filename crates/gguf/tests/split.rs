//! Split models: a file cut into parts by llama.cpp's own gguf-py writer (`split_max_tensors`,
//! what `convert_hf_to_gguf.py --split-max-tensors` and `gguf-split` make; the fixture is
//! conv-a-mtp-q8_0, made by llama.cpp's converter, cut into three parts by
//! tools/convert/split_fixture.py), opened from its first part, reads as the whole file did; every
//! way the parts can fail to fit together is an error that says what to do.

use std::path::{Path, PathBuf};

use tally_gguf::{GgufError, GgufFile, MetaValue};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures/converter")
}

fn part(i: u32) -> PathBuf {
    fixtures().join(format!("split/conv-a-mtp-q8_0-{i:05}-of-00003.gguf"))
}

/// A fresh directory holding copies of the three parts under their own names.
fn copies(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tally-split-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for i in 1..=3 {
        std::fs::copy(part(i), dir.join(part(i).file_name().unwrap())).unwrap();
    }
    dir
}

fn split_msg(r: Result<GgufFile, GgufError>) -> String {
    match r {
        Err(e @ GgufError::Split { .. }) => e.to_string(),
        Err(e) => panic!("expected a split-model error, got: {e}"),
        Ok(_) => panic!("expected a split-model error, the file opened"),
    }
}

#[test]
fn a_split_model_reads_as_the_whole_file() {
    let whole = GgufFile::open(&fixtures().join("conv-a-mtp-q8_0.gguf")).unwrap();
    let split = GgufFile::open(&part(1)).unwrap();
    let paths = split.part_paths();
    assert_eq!(paths.len(), 3);
    for (i, p) in paths.iter().enumerate() {
        assert_eq!(p.file_name(), part(i as u32 + 1).file_name());
    }
    let sizes: u64 = (1..=3)
        .map(|i| std::fs::metadata(part(i)).unwrap().len())
        .sum();
    assert_eq!(split.file_bytes(), sizes);

    // Every metadata entry of the whole file, with the same value (the parts add split.*).
    for (k, v) in whole.metadata() {
        assert_eq!(split.get(k), Some(v), "metadata {k}");
    }
    assert_eq!(
        split.get("split.count").and_then(MetaValue::as_u64),
        Some(3)
    );

    // Every tensor, with the same shape, type and bytes (the data comes from the part holding
    // it; that later parts hold some is shown by the missing-part test below).
    assert_eq!(split.tensors().len(), whole.tensors().len());
    for t in whole.tensors() {
        let s = split
            .tensor(&t.name)
            .unwrap_or_else(|| panic!("no tensor {}", t.name));
        assert_eq!((&s.dims, s.ty), (&t.dims, t.ty), "{}", t.name);
        assert_eq!(
            split.tensor_data(s),
            whole.tensor_data(t),
            "{} bytes",
            t.name
        );
    }
}

#[test]
fn a_later_part_is_refused_with_the_first_parts_name() {
    let msg = split_msg(GgufFile::open(&part(2)));
    assert!(
        msg.contains("part 2 of a model split into 3 files; open the first part"),
        "{msg}"
    );
    assert!(msg.contains("conv-a-mtp-q8_0-00001-of-00003.gguf"), "{msg}");
}

#[test]
fn a_missing_part_is_named() {
    let dir = copies("missing");
    std::fs::remove_file(dir.join("conv-a-mtp-q8_0-00003-of-00003.gguf")).unwrap();
    let msg = split_msg(GgufFile::open(
        &dir.join("conv-a-mtp-q8_0-00001-of-00003.gguf"),
    ));
    assert!(msg.contains("part 3 of 3"), "{msg}");
    assert!(
        msg.contains("conv-a-mtp-q8_0-00003-of-00003.gguf, cannot be opened"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn parts_out_of_order_are_refused() {
    let dir = copies("order");
    std::fs::copy(
        dir.join("conv-a-mtp-q8_0-00003-of-00003.gguf"),
        dir.join("conv-a-mtp-q8_0-00002-of-00003.gguf"),
    )
    .unwrap();
    let msg = split_msg(GgufFile::open(
        &dir.join("conv-a-mtp-q8_0-00001-of-00003.gguf"),
    ));
    assert!(msg.contains("expected part 2 of 3"), "{msg}");
    assert!(
        msg.contains("it has `split.no` 2, `split.count` 3"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_renamed_first_part_says_why_the_others_cannot_be_found() {
    let dir = copies("renamed");
    let renamed = dir.join("model.gguf");
    std::fs::rename(dir.join("conv-a-mtp-q8_0-00001-of-00003.gguf"), &renamed).unwrap();
    let msg = split_msg(GgufFile::open(&renamed));
    assert!(
        msg.contains("does not follow llama.cpp's PREFIX-00001-of-00003.gguf"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_part_in_memory_is_refused() {
    let msg = split_msg(GgufFile::from_bytes(
        std::fs::read(part(1)).unwrap(),
        "part1",
    ));
    assert!(msg.contains("open its first part from disk"), "{msg}");
}

/// Writes `file` under `dir` with tally's writer: the metadata `keys`, one F32 tensor `name` of
/// 8 values (bytes 0x3f).
fn write_part(dir: &Path, file: &str, keys: &[(&str, MetaValue)], name: &str) -> PathBuf {
    use tally_gguf::{GgmlType, GgufWriter, TensorSpec};
    let path = dir.join(file);
    let meta: Vec<(String, MetaValue)> = keys
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let spec = TensorSpec {
        name: name.into(),
        dims: vec![8],
        ty: GgmlType::F32,
    };
    let f = std::fs::File::create(&path).unwrap();
    let mut w = GgufWriter::new(f, &meta, std::slice::from_ref(&spec)).unwrap();
    w.write_data(&[0x3f; 32]).unwrap();
    w.finish().unwrap();
    path
}

fn keys(no: u16, count: u16, tensors: i32) -> Vec<(&'static str, MetaValue)> {
    vec![
        ("split.no", MetaValue::U16(no)),
        ("split.count", MetaValue::U16(count)),
        ("split.tensors.count", MetaValue::I32(tensors)),
    ]
}

/// The remaining ways two parts can disagree, on parts written for the purpose.
#[test]
fn parts_that_disagree_are_refused() {
    let dir = std::env::temp_dir().join(format!("tally-split-written-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (p1, p2) = ("m-00001-of-00002.gguf", "m-00002-of-00002.gguf");

    // Fits: two parts, one tensor each.
    let first = write_part(&dir, p1, &keys(0, 2, 2), "a");
    write_part(&dir, p2, &keys(1, 2, 2), "b");
    let g = GgufFile::open(&first).unwrap();
    assert_eq!(g.tensors().len(), 2);
    let b = g.tensor("b").unwrap();
    assert_eq!(g.tensor_data(b), &[0x3f; 32]);

    // split.tensors.count disagrees with what the parts hold.
    write_part(&dir, p1, &keys(0, 2, 3), "a");
    let msg = split_msg(GgufFile::open(&first));
    assert!(
        msg.contains("`split.tensors.count` is 3, but the 2 parts hold 2 tensors"),
        "{msg}"
    );

    // The same tensor in two parts.
    write_part(&dir, p1, &keys(0, 2, 2), "a");
    write_part(&dir, p2, &keys(1, 2, 2), "a");
    match GgufFile::open(&first) {
        Err(e @ GgufError::Tensor { .. }) => {
            assert!(e.to_string().contains("is in an earlier part"), "{e}")
        }
        other => panic!("expected a duplicate-tensor error, got {:?}", other.err()),
    }

    // The name and the metadata disagree on the count.
    let three = write_part(&dir, "m-00001-of-00003.gguf", &keys(0, 2, 2), "a");
    let msg = split_msg(GgufFile::open(&three));
    assert!(
        msg.contains("the name says part 1 of 3, the metadata part 1 of 2"),
        "{msg}"
    );

    // A split key that is not an integer.
    let bad = write_part(
        &dir,
        p1,
        &[("split.count", MetaValue::String("2".into()))],
        "a",
    );
    let msg = split_msg(GgufFile::open(&bad));
    assert!(
        msg.contains("`split.count` is a string, not a non-negative integer"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 200, ..Default::default() })]

    /// Any split keys (u64 values, each key present or not) in a part named plainly, as a first
    /// part or as a second part, with a second part beside it: opening never panics, and what
    /// opens holds one tensor a part, each readable.
    #[test]
    fn any_split_keys_open_or_fail_cleanly(
        keys1 in proptest::collection::vec((0usize..3, 0u64..70_000), 0..4),
        keys2 in proptest::collection::vec((0usize..3, 0u64..70_000), 0..4),
        named in 0usize..3,
    ) {
        const KEYS: [&str; 3] = ["split.no", "split.count", "split.tensors.count"];
        let dir = std::env::temp_dir().join(format!(
            "tally-split-prop-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let meta = |ks: &[(usize, u64)]| -> Vec<(&'static str, MetaValue)> {
            let mut m: Vec<(&'static str, MetaValue)> = Vec::new();
            for &(k, v) in ks {
                if m.iter().all(|(n, _)| *n != KEYS[k]) {
                    m.push((KEYS[k], MetaValue::U64(v)));
                }
            }
            m
        };
        let names = ["m.gguf", "m-00001-of-00002.gguf", "m-00002-of-00002.gguf"];
        let first = write_part(&dir, names[named], &meta(&keys1), "a");
        write_part(&dir, "m-00002-of-00002.gguf", &meta(&keys2), "b");
        let got = GgufFile::open(&first);
        if let Ok(g) = &got {
            let count = g.get("split.count").and_then(MetaValue::as_u64).unwrap_or(1);
            proptest::prop_assert!(count <= 2);
            proptest::prop_assert_eq!(g.tensors().len() as u64, count);
            for t in g.tensors() {
                proptest::prop_assert_eq!(g.tensor_data(t).len(), 32);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
