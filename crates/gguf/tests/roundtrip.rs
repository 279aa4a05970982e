//! Writer → reader round trips: metadata of every type, chunked streaming, alignment, v2.

mod common;

use common::{Rng, temp_path};
use std::io::BufWriter;
use tally_gguf::{
    GgmlType, GgufFile, GgufWriter, MetaArray, MetaValue, TensorSpec, dequantize_row, quantize_row,
};

fn all_metadata() -> Vec<(String, MetaValue)> {
    let kv = |k: &str, v| (k.to_string(), v);
    vec![
        kv("general.architecture", MetaValue::String("qwen3moe".into())),
        kv("t.u8", MetaValue::U8(200)),
        kv("t.i8", MetaValue::I8(-100)),
        kv("t.u16", MetaValue::U16(60000)),
        kv("t.i16", MetaValue::I16(-30000)),
        kv("t.u32", MetaValue::U32(4_000_000_000)),
        kv("t.i32", MetaValue::I32(-2_000_000_000)),
        kv("t.f32", MetaValue::F32(-1.5e-3)),
        kv("t.bool", MetaValue::Bool(true)),
        kv(
            "t.string.unicode",
            MetaValue::String("héllo ▁wörld 🦀".into()),
        ),
        kv("t.string.empty", MetaValue::String(String::new())),
        kv("t.u64", MetaValue::U64(u64::MAX)),
        kv("t.i64", MetaValue::I64(i64::MIN)),
        kv("t.f64", MetaValue::F64(std::f64::consts::PI)),
        kv("t.arr.u8", MetaValue::Array(MetaArray::U8(vec![1, 2, 255]))),
        kv("t.arr.i8", MetaValue::Array(MetaArray::I8(vec![-1, 2]))),
        kv("t.arr.u16", MetaValue::Array(MetaArray::U16(vec![7]))),
        kv("t.arr.i16", MetaValue::Array(MetaArray::I16(vec![-7, 9]))),
        kv("t.arr.u32", MetaValue::Array(MetaArray::U32(vec![1, 2, 3]))),
        kv(
            "t.arr.i32",
            MetaValue::Array(MetaArray::I32(vec![-1, 0, 1])),
        ),
        kv(
            "t.arr.f32",
            MetaValue::Array(MetaArray::F32(vec![0.5, -2.25])),
        ),
        kv(
            "t.arr.bool",
            MetaValue::Array(MetaArray::Bool(vec![true, false, true])),
        ),
        kv(
            "t.arr.string",
            MetaValue::Array(MetaArray::String(vec![
                "a".into(),
                String::new(),
                "ç".into(),
            ])),
        ),
        kv(
            "t.arr.u64",
            MetaValue::Array(MetaArray::U64(vec![u64::MAX])),
        ),
        kv(
            "t.arr.i64",
            MetaValue::Array(MetaArray::I64(vec![i64::MIN, 5])),
        ),
        kv("t.arr.f64", MetaValue::Array(MetaArray::F64(vec![1e300]))),
        kv("t.arr.empty", MetaValue::Array(MetaArray::F32(vec![]))),
        kv(
            "t.arr.nested",
            MetaValue::Array(MetaArray::Array(vec![
                MetaArray::I32(vec![1, 2]),
                MetaArray::String(vec!["x".into()]),
                MetaArray::Array(vec![MetaArray::U8(vec![9])]),
                MetaArray::Array(vec![]),
            ])),
        ),
    ]
}

#[test]
fn round_trip_every_metadata_type_and_chunked_tensors() {
    let mut rng = Rng::fresh("round_trip");
    let mut meta = all_metadata();
    meta.push(("general.alignment".into(), MetaValue::U32(64)));
    let specs = vec![
        TensorSpec {
            name: "a.f32".into(),
            dims: vec![3, 5],
            ty: GgmlType::F32,
        },
        TensorSpec {
            name: "b.q8".into(),
            dims: vec![64, 3],
            ty: GgmlType::Q8_0,
        },
        TensorSpec {
            name: "c.f16".into(),
            dims: vec![7],
            ty: GgmlType::F16,
        },
        TensorSpec {
            name: "d.bf16".into(),
            dims: vec![2, 3, 4, 5],
            ty: GgmlType::BF16,
        },
        TensorSpec {
            name: "e.q4k".into(),
            dims: vec![256, 2],
            ty: GgmlType::Q4_K,
        },
    ];
    let data: Vec<Vec<u8>> = specs
        .iter()
        .map(|s| (0..s.n_bytes()).map(|_| rng.next_u64() as u8).collect())
        .collect();
    let path = temp_path("rt");
    {
        let f = BufWriter::new(std::fs::File::create(&path).unwrap());
        let mut w = GgufWriter::new(f, &meta, &specs).unwrap();
        assert_eq!(w.alignment(), 64);
        // All data as one stream cut at random points, so chunks straddle tensors.
        let all: Vec<u8> = data.concat();
        let mut at = 0;
        while at < all.len() {
            let k = (1 + rng.below(97) as usize).min(all.len() - at);
            w.write_data(&all[at..at + k]).unwrap();
            at += k;
        }
        w.finish().unwrap();
    }
    let g = GgufFile::open(&path).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.file_bytes(), std::fs::metadata(&path).unwrap().len());
    assert_eq!(g.metadata(), &meta[..]);
    assert_eq!(g.get("t.u32").and_then(|v| v.as_u64()), Some(4_000_000_000));
    assert_eq!(g.get("t.i8").and_then(|v| v.as_u64()), None);
    assert_eq!(
        g.get("t.f64").and_then(|v| v.as_f32()),
        Some(std::f32::consts::PI)
    );
    assert_eq!(g.tensors().len(), specs.len());
    for (s, d) in specs.iter().zip(&data) {
        let t = g.tensor(&s.name).unwrap();
        assert_eq!((&t.dims, t.ty), (&s.dims, s.ty));
        assert_eq!(t.offset % 64, 0);
        assert_eq!(t.n_bytes(), s.n_bytes());
        assert_eq!(g.tensor_data(t), &d[..], "{}", s.name);
        assert_eq!((g.data_start() + t.offset) % 64, 0);
    }
    // Writing what was read gives the same bytes.
    let specs2: Vec<TensorSpec> = g
        .tensors()
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty: t.ty,
        })
        .collect();
    let mut w = GgufWriter::new(Vec::new(), g.metadata(), &specs2).unwrap();
    for t in g.tensors() {
        w.write_data(g.tensor_data(t)).unwrap();
    }
    let again = w.finish().unwrap();
    assert_eq!(again, std::fs::read(&path).unwrap());
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn no_tensors_and_default_alignment() {
    let meta = vec![("k".to_string(), MetaValue::Bool(false))];
    let bytes = GgufWriter::new(Vec::new(), &meta, &[])
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(bytes.len() % 32, 0);
    let g = GgufFile::from_bytes(bytes, "mem").unwrap();
    assert_eq!(g.alignment(), 32);
    assert!(g.tensors().is_empty());
    assert_eq!(g.get("k"), Some(&MetaValue::Bool(false)));
    assert!(g.get("missing").is_none());
}

#[test]
fn reads_version_2() {
    let specs = [TensorSpec {
        name: "w".into(),
        dims: vec![4],
        ty: GgmlType::F32,
    }];
    let mut w = GgufWriter::new(Vec::new(), &all_metadata(), &specs).unwrap();
    w.write_data(&[1u8; 16]).unwrap();
    let mut bytes = w.finish().unwrap();
    bytes[4] = 2;
    let g = GgufFile::from_bytes(bytes, "v2").unwrap();
    assert_eq!(g.version(), 2);
    assert_eq!(g.metadata(), &all_metadata()[..]);
    assert_eq!(g.tensor_data(&g.tensors()[0]), &[1u8; 16]);
}

#[test]
fn big_vocab_is_cheap() {
    let vocab: Vec<String> = (0..248_320).map(|i| format!("tok{i}")).collect();
    let meta = vec![(
        "tokenizer.ggml.tokens".to_string(),
        MetaValue::Array(MetaArray::String(vocab.clone())),
    )];
    let bytes = GgufWriter::new(Vec::new(), &meta, &[])
        .unwrap()
        .finish()
        .unwrap();
    let t0 = std::time::Instant::now();
    let g = GgufFile::from_bytes(bytes, "vocab").unwrap();
    eprintln!("parsed 248,320-string vocab in {:?}", t0.elapsed());
    let got = g.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap();
    assert_eq!(got.as_strings().unwrap(), &vocab[..]);
}

/// Quantise → dequantise on fresh normal data; relative error norms ‖y − x‖/‖x‖ in f64.
/// Bounds sit ~1.4x above what the formats give on this Gaussian data (measured over five
/// seeds: F16 2.1e-4, BF16 1.7e-3, Q8_0 5.4e-3, Q6_K 1.8e-2, Q5_K 3.7e-2, Q4_K 7.2e-2; each
/// extra bit halves the error, as it should). Bit-exactness is checked in `vectors.rs`; this
/// guards the formats' accuracy on data the fixtures never saw.
#[test]
fn round_trip_error_per_type() {
    let mut rng = Rng::fresh("round_trip_error_per_type");
    let n = 256 * 64;
    // Rows of different scales, so the per-block scales vary.
    let x: Vec<f32> = (0..n)
        .map(|i| rng.normal() * (0.01 + (i / 256) as f32 * 0.05))
        .collect();
    for (ty, bound) in [
        (GgmlType::F32, 0.0),
        (GgmlType::F16, 3e-4),
        (GgmlType::BF16, 2.5e-3),
        (GgmlType::Q8_0, 7.5e-3),
        (GgmlType::Q6_K, 2.5e-2),
        (GgmlType::Q5_K, 5e-2),
        (GgmlType::Q4_K, 1e-1),
    ] {
        let mut q = vec![0xa5u8; ty.row_bytes(n as u64).unwrap() as usize];
        quantize_row(ty, &x, &mut q).unwrap();
        let mut y = vec![f32::NAN; n];
        dequantize_row(ty, &q, &mut y).unwrap();
        let e = common::rel_err(&y, &x);
        eprintln!("{ty}: relative error {e:.3e} (bound {bound:.1e})");
        assert!(e <= bound, "{ty}: relative error {e} > {bound}");
        // Quantising what was decoded is stable for the float formats.
        if matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            let mut q2 = vec![0u8; q.len()];
            quantize_row(ty, &y, &mut q2).unwrap();
            assert_eq!(q, q2, "{ty}");
        }
    }
}

#[test]
fn unsupported_tensor_type_is_named() {
    let specs = [
        TensorSpec {
            name: "blk.0.ffn_down.weight".into(),
            dims: vec![256, 2],
            ty: GgmlType::IQ2_XXS,
        },
        TensorSpec {
            name: "ok".into(),
            dims: vec![256],
            ty: GgmlType::Q6_K,
        },
    ];
    let mut w = GgufWriter::new(Vec::new(), &[], &specs).unwrap();
    w.write_data(&vec![0u8; 2 * 66 + 210]).unwrap();
    let g = GgufFile::from_bytes(w.finish().unwrap(), "mem").unwrap();
    let t = g.tensor("blk.0.ffn_down.weight").unwrap();
    assert_eq!(
        t.require_supported().unwrap_err().to_string(),
        "tensor 'blk.0.ffn_down.weight' has type IQ2_XXS (id 16), which is not supported; \
         supported types: F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K"
    );
    g.tensor("ok").unwrap().require_supported().unwrap();
}

#[test]
fn writer_rejects_bad_specs_and_wrong_data_sizes() {
    let err = |specs: &[TensorSpec]| {
        GgufWriter::new(Vec::new(), &[], specs)
            .unwrap_err()
            .to_string()
    };
    let spec = |name: &str, dims: Vec<u64>, ty| TensorSpec {
        name: name.into(),
        dims,
        ty,
    };
    assert_eq!(
        err(&[spec("a", vec![33], GgmlType::Q8_0)]),
        "GGUF writer: tensor 'a': row length 33 (dims[0] of [33]) is not a multiple of the Q8_0 block size 32"
    );
    assert_eq!(
        err(&[
            spec("a", vec![4], GgmlType::F32),
            spec("a", vec![4], GgmlType::F32)
        ]),
        "GGUF writer: tensor 'a': duplicate tensor name"
    );
    assert_eq!(
        err(&[spec("a", vec![1, 1, 1, 1, 1], GgmlType::F32)]),
        "GGUF writer: tensor 'a': has 5 dimensions; ggml tensors have 1 to 4"
    );
    assert_eq!(
        err(&[spec("a", vec![4, 0], GgmlType::F32)]),
        "GGUF writer: tensor 'a': dimension 1 is 0 (shape [4, 0])"
    );
    assert_eq!(
        err(&[spec("big", vec![1 << 62], GgmlType::F64)]),
        "GGUF writer: tensor 'big': the data section would exceed 2^64 bytes"
    );
    assert_eq!(
        err(&[
            spec("a", vec![1 << 60], GgmlType::F64),
            spec("b", vec![1 << 60], GgmlType::F64)
        ]),
        "GGUF writer: tensor 'b': the data section would exceed 2^64 bytes"
    );
    let long = "x".repeat(64);
    assert!(err(&[spec(&long, vec![4], GgmlType::F32)]).contains("llama.cpp accepts at most 63"));
    let bad_align = vec![("general.alignment".to_string(), MetaValue::U32(48))];
    assert!(
        GgufWriter::new(Vec::new(), &bad_align, &[])
            .unwrap_err()
            .to_string()
            .contains("'general.alignment' is U32(48); it must be a u32 power of two")
    );

    let specs = [
        spec("a", vec![4], GgmlType::F32),
        spec("b", vec![2], GgmlType::F16),
    ];
    let mut w = GgufWriter::new(Vec::new(), &[], &specs).unwrap();
    w.write_data(&[0; 10]).unwrap();
    assert_eq!(
        w.finish().unwrap_err().to_string(),
        "GGUF writer: tensor 'a' received 10 of its 16 data bytes (0 of 2 tensors complete)"
    );
    let mut w = GgufWriter::new(Vec::new(), &[], &specs).unwrap();
    assert_eq!(
        w.write_data(&[0; 21]).unwrap_err().to_string(),
        "GGUF writer: 1 bytes of data left over after all 2 tensors received their data"
    );
}

#[test]
fn conversions_reject_wrong_sizes_and_unsupported_types() {
    let mut out = [0f32; 32];
    assert_eq!(
        dequantize_row(GgmlType::Q8_0, &[0; 33], &mut out)
            .unwrap_err()
            .to_string(),
        "dequantize of Q8_0: 32 elements take 34 bytes, but the byte buffer has 33"
    );
    assert_eq!(
        dequantize_row(GgmlType::Q4_K, &[0; 144], &mut out)
            .unwrap_err()
            .to_string(),
        "32 elements of type Q4_K is not a whole number of 256-element blocks"
    );
    assert_eq!(
        dequantize_row(GgmlType::Q4_0, &[0; 18], &mut out)
            .unwrap_err()
            .to_string(),
        "dequantize is not implemented for type Q4_0; supported types: F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K"
    );
    let mut q = [0u8; 18];
    assert_eq!(
        quantize_row(GgmlType::IQ4_NL, &out, &mut q)
            .unwrap_err()
            .to_string(),
        "quantize is not implemented for type IQ4_NL; supported types: F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K"
    );
}

#[test]
fn shapes_compare_the_ggml_way_and_respell() {
    use tally_gguf::same_ggml_shape;
    assert!(same_ggml_shape(&[256, 1], &[256]));
    assert!(same_ggml_shape(&[64, 8, 1, 1], &[64, 8]));
    assert!(same_ggml_shape(&[1], &[]));
    assert!(!same_ggml_shape(&[1, 256], &[256]));
    assert!(!same_ggml_shape(&[256, 2], &[256]));
    assert!(!same_ggml_shape(&[8, 1, 4], &[8, 4]));

    let spec = TensorSpec {
        name: "v".into(),
        dims: vec![32, 1],
        ty: GgmlType::F32,
    };
    let mut w = GgufWriter::new(Vec::new(), &[], std::slice::from_ref(&spec)).unwrap();
    w.write_data(&[0u8; 32 * 4]).unwrap();
    let mut g = GgufFile::from_bytes(w.finish().unwrap(), "mem").unwrap();
    assert!(
        !g.respell_dims("v", &[32, 2]),
        "a different shape is refused"
    );
    assert!(!g.respell_dims("absent", &[32]));
    assert_eq!(g.tensor("v").unwrap().dims, vec![32, 1]);
    assert!(g.respell_dims("v", &[32]));
    let t = g.tensor("v").unwrap().clone();
    assert_eq!(t.dims, vec![32]);
    assert_eq!(g.tensor_data(&t).len(), 32 * 4);
}
