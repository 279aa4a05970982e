#!/usr/bin/env python3
"""Generate the bit-exact quantisation test vectors for crates/gguf.

Run by hand (not in CI):

    python3 -m venv /tmp/qv && /tmp/qv/bin/pip install gguf==0.19.0 numpy
    (or any numpy venv with PYTHONPATH=<llama.cpp>/gguf-py, e.g. the llama-cpp-python 0.3.36
    sdist's vendor/llama.cpp/gguf-py, which is gguf 0.19.0)
    (cd /work/main && cargo fetch)      # puts llama-cpp-sys-2's vendored ggml in ~/.cargo/registry
    /tmp/qv/bin/python tools/quant-vectors/make_vectors.py

Output: crates/gguf/tests/fixtures/quant_vectors.gguf (about 400 KB), written with the gguf
package's own GGUFWriter, so the Rust reader is also checked against a foreign writer.

Where the expected bytes come from:
  * F16, BF16, Q8_0 quantisation and every dequantisation: the gguf Python package
    (numpy), AND ggml's C reference; the script refuses to write vectors unless both agree.
  * Q4_K, Q5_K, Q6_K quantisation: the gguf package has no K-quant quantiser, so the bytes come
    from ggml's reference quantisers (quantize_row_q{4,5,6}_K_ref in ggml-quants.c), compiled
    here from the sources vendored in the cargo registry with a tiny C driver. Nothing from
    llama.cpp is committed; only the output vectors.

The C build uses `-O2 -ffp-contract=off -DNDEBUG` for the host's baseline ISA (x86-64 has no
FMA without -march flags, and -ffp-contract=off forbids contraction on any ISA): the reference
maths is then plain IEEE f32, one rounding per operation, which is what the Rust code mirrors.

Tensors in the fixture (ggml order, dims[0] = 256 = one super-block row):
  input                 F32   [256, n_cases]   rows named by metadata quant_vectors.cases
  <T>.quant             T     [256, n_cases]   reference quantisation of `input`, T in
                                               Q8_0 Q4_K Q5_K Q6_K
  <T>.dequant           F32   [256, n_cases]   reference dequantisation of <T>.quant
  <T>.quant / .dequant  also for T in Q4_0 Q4_1 Q5_0 Q5_1 MXFP4 (ggml's quantiser, which gguf-py
                                               must reproduce: tally's test requires equal bytes) and
                                               IQ4_NL IQ4_XS Q2_K Q3_K (ggml's quantiser, dequantised;
                                               tally's quantiser for these is its own, not compared)
  <T>.random            T     [256, 4]         random block bytes (f16 scales kept finite), every
                                               type above
  <T>.random.dequant    F32   [256, 4]         reference dequantisation of <T>.random
  floats.input          F32   [256, 2]         specials for the float formats: zeros, signed
                                               zeros, subnormals, overflow, inf, NaN, exact ties
  F16.quant / BF16.quant, F16.dequant / BF16.dequant   the same for F16 and BF16, from both
                                               `input` rows and `floats.input` rows
"""

from __future__ import annotations

import argparse
import glob
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

QK_K = 256
REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "crates" / "gguf" / "tests" / "fixtures" / "quant_vectors.gguf"

DRIVER_C = r"""
// Tiny driver around ggml's reference (de)quantisers: reads raw little-endian input on stdin,
// writes raw output on stdout. Usage: drv quant|dequant TYPE N_ELEMS
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml-quants.h"
#include "ggml-impl.h"

// ggml-quants.c references these; the paths used here never call them.
void ggml_abort(const char * file, int line, const char * fmt, ...) { (void)file; (void)line; (void)fmt; abort(); }
size_t ggml_row_size(enum ggml_type t, int64_t n) { (void)t; (void)n; abort(); }
const char * ggml_type_name(enum ggml_type t) { (void)t; abort(); }
size_t ggml_type_size(enum ggml_type t) { (void)t; abort(); }

static size_t row_bytes(const char * ty, long n) {
    if (!strcmp(ty, "f16") || !strcmp(ty, "bf16")) return 2 * n;
    if (!strcmp(ty, "q8_0")) return n / 32 * sizeof(block_q8_0);
    if (!strcmp(ty, "q4_K")) return n / 256 * sizeof(block_q4_K);
    if (!strcmp(ty, "q5_K")) return n / 256 * sizeof(block_q5_K);
    if (!strcmp(ty, "q6_K")) return n / 256 * sizeof(block_q6_K);
#define ROW(name, blk, qk) if (!strcmp(ty, #name)) return n / qk * sizeof(blk);
    ROW(q4_0, block_q4_0, 32) ROW(q4_1, block_q4_1, 32) ROW(q5_0, block_q5_0, 32) ROW(q5_1, block_q5_1, 32)
    ROW(iq4_nl, block_iq4_nl, 32) ROW(mxfp4, block_mxfp4, 32) ROW(iq4_xs, block_iq4_xs, 256)
    ROW(q2_K, block_q2_K, 256) ROW(q3_K, block_q3_K, 256)
    fprintf(stderr, "unknown type %s\n", ty); exit(2);
}

int main(int argc, char ** argv) {
    if (argc != 4) { fprintf(stderr, "usage: drv quant|dequant TYPE N\n"); return 2; }
    const char * ty = argv[2];
    long n = atol(argv[3]);
    size_t nb = row_bytes(ty, n);
    float * f = malloc(n * sizeof(float));
    unsigned char * q = malloc(nb);
    int quant = !strcmp(argv[1], "quant");
    if (quant) { if (fread(f, sizeof(float), n, stdin) != (size_t)n) return 3; }
    else       { if (fread(q, 1, nb, stdin) != nb) return 3; }
    if (!strcmp(ty, "f16")) {
        ggml_fp16_t * h = (ggml_fp16_t *)q;
        for (long i = 0; i < n; i++) { if (quant) h[i] = ggml_compute_fp32_to_fp16(f[i]); else f[i] = ggml_compute_fp16_to_fp32(h[i]); }
    } else if (!strcmp(ty, "bf16")) {
        ggml_bf16_t * h = (ggml_bf16_t *)q;
        for (long i = 0; i < n; i++) { if (quant) h[i] = ggml_compute_fp32_to_bf16(f[i]); else f[i] = ggml_compute_bf16_to_fp32(h[i]); }
    } else if (!strcmp(ty, "q8_0")) {
        if (quant) quantize_row_q8_0_ref(f, (block_q8_0 *)q, n); else dequantize_row_q8_0((block_q8_0 *)q, f, n);
    } else if (!strcmp(ty, "q4_K")) {
        if (quant) quantize_row_q4_K_ref(f, (block_q4_K *)q, n); else dequantize_row_q4_K((block_q4_K *)q, f, n);
    } else if (!strcmp(ty, "q5_K")) {
        if (quant) quantize_row_q5_K_ref(f, (block_q5_K *)q, n); else dequantize_row_q5_K((block_q5_K *)q, f, n);
    } else if (!strcmp(ty, "q6_K")) {
        if (quant) quantize_row_q6_K_ref(f, (block_q6_K *)q, n); else dequantize_row_q6_K((block_q6_K *)q, f, n);
    }
#define QD(name, blk) else if (!strcmp(ty, #name)) { \
        if (quant) quantize_row_##name##_ref(f, (blk *)q, n); else dequantize_row_##name((blk *)q, f, n); }
    QD(q4_0, block_q4_0) QD(q4_1, block_q4_1) QD(q5_0, block_q5_0) QD(q5_1, block_q5_1)
    QD(iq4_nl, block_iq4_nl) QD(iq4_xs, block_iq4_xs) QD(mxfp4, block_mxfp4)
    QD(q2_K, block_q2_K) QD(q3_K, block_q3_K)
    if (quant) fwrite(q, 1, nb, stdout); else fwrite(f, sizeof(float), n, stdout);
    return 0;
}
"""

C_NAME = {T.F16: "f16", T.BF16: "bf16", T.Q8_0: "q8_0", T.Q4_K: "q4_K", T.Q5_K: "q5_K", T.Q6_K: "q6_K",
          T.Q4_0: "q4_0", T.Q4_1: "q4_1", T.Q5_0: "q5_0", T.Q5_1: "q5_1", T.IQ4_NL: "iq4_nl",
          T.IQ4_XS: "iq4_xs", T.MXFP4: "mxfp4", T.Q2_K: "q2_K", T.Q3_K: "q3_K"}
# Types whose quantiser tally reproduces byte for byte (ggml's `_ref`, which gguf-py mirrors):
# the fixture holds <T>.quant for `input` and the test requires equal bytes.
EXACT_QUANT = (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.MXFP4)
# Types with dequantisation vectors only (tally's quantiser is its own): <T>.quant is ggml's
# reference quantisation of `input`, used as realistic blocks to dequantise.
DEQUANT_ONLY = (T.IQ4_NL, T.IQ4_XS, T.Q2_K, T.Q3_K)
# Byte ranges of f16 scales per block, kept finite in random blocks.
F16_SCALES = {T.Q4_K: [(0, 4)], T.Q5_K: [(0, 4)], T.Q6_K: [(208, 210)], T.Q8_0: [(0, 2)],
              T.Q4_0: [(0, 2)], T.Q4_1: [(0, 4)], T.Q5_0: [(0, 2)], T.Q5_1: [(0, 4)],
              T.IQ4_NL: [(0, 2)], T.IQ4_XS: [(0, 2)], T.Q2_K: [(80, 84)], T.Q3_K: [(108, 110)],
              T.MXFP4: []}
CFLAGS = ["-O2", "-ffp-contract=off", "-DNDEBUG", "-std=gnu11"]


def find_ggml(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    pattern = os.path.expanduser("~/.cargo/registry/src/*/llama-cpp-sys-2-*/llama.cpp/ggml")
    found = sorted(glob.glob(pattern))
    if not found:
        sys.exit(f"no vendored ggml under {pattern}: run `cargo fetch` in the workspace, or pass --ggml")
    return Path(found[-1])


class CRef:
    """ggml's reference code, compiled for this run."""

    def __init__(self, ggml: Path, tmp: Path):
        self.exe = tmp / "drv"
        (tmp / "drv.c").write_text(DRIVER_C)
        inc = ["-I", str(ggml / "include"), "-I", str(ggml / "src")]
        obj = tmp / "ggml-quants.o"
        subprocess.run(["gcc", *CFLAGS, *inc, "-c", str(ggml / "src" / "ggml-quants.c"), "-o", str(obj)], check=True)
        subprocess.run(["gcc", *CFLAGS, *inc, str(tmp / "drv.c"), str(obj), "-o", str(self.exe), "-lm"], check=True)

    def quant(self, ty: T, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype="<f4").reshape(-1)
        out = subprocess.run([str(self.exe), "quant", C_NAME[ty], str(x.size)], input=x.tobytes(),
                             capture_output=True, check=True).stdout
        return np.frombuffer(out, dtype=np.uint8).copy()

    def dequant(self, ty: T, q: np.ndarray, n: int) -> np.ndarray:
        q = np.ascontiguousarray(q, dtype=np.uint8).reshape(-1)
        out = subprocess.run([str(self.exe), "dequant", C_NAME[ty], str(n)], input=q.tobytes(),
                             capture_output=True, check=True).stdout
        return np.frombuffer(out, dtype="<f4").copy()


def stress_cases(rng: np.random.Generator, count: int) -> list[tuple[str, np.ndarray]]:
    """Many random blocks of mixed shapes: scales over 12 decades, offsets, heavy tails, zeros."""
    out = []
    for i in range(count):
        kind = i % 5
        scale = float(10 ** rng.uniform(-6, 4))
        if kind == 0:
            x = rng.standard_normal(QK_K) * scale
        elif kind == 1:
            x = rng.uniform(-1, 1, QK_K) * scale + rng.uniform(-2, 2) * scale
        elif kind == 2:
            x = rng.standard_normal(QK_K) / np.maximum(rng.uniform(0, 1, QK_K), 0.01) * scale
        elif kind == 3:
            x = rng.standard_normal(QK_K) * scale
            x[rng.uniform(0, 1, QK_K) < 0.5] = 0.0
        else:
            x = np.exp(rng.standard_normal(QK_K)) * scale * rng.choice([-1.0, 1.0])
        out.append((f"stress_{i}", x.astype(np.float32)))
    return out


def cases(rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    n = QK_K
    normal = lambda s=1.0: (rng.standard_normal(n) * s).astype(np.float32)  # noqa: E731
    out: list[tuple[str, np.ndarray]] = []
    out.append(("normal", normal()))
    out.append(("normal_weights_0.02", normal(0.02)))
    for i in range(4):
        out.append((f"normal_{i}", normal(float(10 ** rng.uniform(-3, 1)))))
    out.append(("all_equal_positive", np.full(n, 0.7, np.float32)))
    out.append(("all_equal_negative", np.full(n, -1.3, np.float32)))
    out.append(("all_zero", np.zeros(n, np.float32)))
    out.append(("tiny_1e-20", normal(1e-20)))
    out.append(("small_1e-5", normal(1e-5)))
    out.append(("huge_1e4", normal(1e4)))
    # Degenerate on purpose: scales that underflow (1/d overflows to inf in Q8_0) or overflow
    # f16 (d becomes inf in the K-quants). The bytes are still pinned to ggml's.
    out.append(("subnormal_1e-40", normal(1e-40)))
    out.append(("beyond_f16_1e8", normal(1e8)))
    out.append(("negative_only", -np.abs(normal())))
    out.append(("positive_only", rng.uniform(0.5, 2.0, n).astype(np.float32)))
    x = normal(0.01)
    x[37] = 25.0
    out.append(("one_outlier", x))
    x = normal()
    for j in range(0, n, 64):  # every other 32-element sub-block (and 16-element group) is zero
        x[j : j + 32] = 0.0
    out.append(("zero_sub_blocks", x))
    # Q8_0 ties: amax 127 gives d = 1, so x*id lands exactly on .5 (roundf goes away from zero).
    x = (rng.integers(-126, 126, n) + 0.5).astype(np.float32)
    x[::32] = 127.0
    out.append(("half_ties", x))
    out.append(("heavy_tail", (rng.standard_normal(n) / np.maximum(rng.uniform(0, 1, n), 0.02)).astype(np.float32)))
    out.append(("ramp", np.linspace(-1.0, 1.0, n, dtype=np.float32)))
    x = np.zeros(n, np.float32)
    x[rng.choice(n, 5, replace=False)] = normal()[:5] * 3
    out.append(("sparse", x))
    return out


def float_specials(rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    sp = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 65520.0, -65520.0, 1e5, 3.0e38, np.inf, -np.inf, np.nan,
          6.0e-8, 5.9604645e-8, 2.9802322e-8, 1e-8, -3e-8, 6.1035156e-5, 1e-38, 1e-45, -1e-40]
    a = np.zeros(QK_K, np.float32)
    a[: len(sp)] = np.array(sp, dtype=np.float32)
    a[len(sp):] = (rng.standard_normal(QK_K - len(sp)) * 100).astype(np.float32)
    # Exact ties and near-ties for bf16 (low 16 bits 0x8000 / 0x7fff / 0x8001), odd and even.
    b = rng.standard_normal(QK_K).astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    b[0::4] |= np.uint32(0x8000)
    b[1::4] |= np.uint32(0x7FFF)
    b[2::4] |= np.uint32(0x8001)
    # ... and for f16 (low 13 bits 0x1000 in the normal f16 range), overwriting the tail.
    h = (rng.uniform(1.0, 1000.0, 64).astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)) | np.uint32(0x1000)
    b[192:] = h
    return [("float_specials", a), ("float_ties", b.view(np.float32))]


def same_bits(a: np.ndarray, b: np.ndarray, what: str) -> None:
    a = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
    b = np.ascontiguousarray(b).view(np.uint8).reshape(-1)
    if a.shape != b.shape or not np.array_equal(a, b):
        bad = np.flatnonzero(a != b) if a.shape == b.shape else []
        sys.exit(f"{what}: python and C references disagree (first differing byte {bad[:5]})")


def random_blocks(rng: np.random.Generator, ty: T, n_blocks: int) -> np.ndarray:
    """Random block bytes with every f16 scale finite (NaN payloads would not compare)."""
    size = gguf.GGML_QUANT_SIZES[ty][1]
    b = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    finite = lambda k: rng.uniform(-2.0, 2.0, (n_blocks, k)).astype(np.float16).view(np.uint8)  # noqa: E731
    for lo, hi in F16_SCALES[ty]:
        b[:, lo:hi] = finite((hi - lo) // 2)
    return b.reshape(-1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ggml", help="path to a ggml source tree (default: the one in the cargo registry)")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--seed", type=int, default=20240611)
    ap.add_argument("--stress-blocks", type=int, default=0,
                    help="add this many random blocks (for a one-off large check: write to /tmp with --out "
                         "and run `TALLY_QUANT_VECTORS=/tmp/x.gguf cargo test -p tally-gguf --test vectors`)")
    args = ap.parse_args()

    ggml = find_ggml(args.ggml)
    rng = np.random.default_rng(args.seed)
    named = cases(rng) + stress_cases(rng, args.stress_blocks)
    names = [n for n, _ in named]
    inp = np.stack([x for _, x in named])  # (n_cases, 256)
    fnamed = float_specials(rng)
    finp = np.stack([x for _, x in fnamed])

    w = gguf.GGUFWriter(args.out, arch="quant-vectors")
    w.add_string("quant_vectors.generator", "tools/quant-vectors/make_vectors.py")
    w.add_string("quant_vectors.ggml_source", str(ggml).split("/registry/src/")[-1].split("/", 1)[-1])
    w.add_string("quant_vectors.gguf_py_version", _pkg_version("gguf"))
    w.add_string("quant_vectors.cflags", " ".join(CFLAGS))
    w.add_uint32("quant_vectors.seed", args.seed)
    w.add_array("quant_vectors.cases", names)
    w.add_array("quant_vectors.float_cases", [n for n, _ in fnamed])
    w.add_tensor("input", inp)
    w.add_tensor("floats.input", finp)

    # The degenerate cases overflow on purpose; numpy would warn about each.
    with tempfile.TemporaryDirectory() as tmp, np.errstate(over="ignore", invalid="ignore"):
        c = CRef(ggml, Path(tmp))

        for ty in (T.F16, T.BF16):
            for tag, x in (("", inp), ("floats.", finp)):
                q_c = c.quant(ty, x)
                q_py = (x.astype(np.float16) if ty == T.F16 else quants.quantize(x, ty)).view(np.uint8).reshape(-1)
                same_bits(q_py, q_c, f"{ty.name} quantize {tag}")
                d_c = c.dequant(ty, q_c, x.size)
                d_py = quants.dequantize(q_c.reshape(x.shape[0], -1), ty)
                same_bits(d_py, d_c, f"{ty.name} dequantize {tag}")
                w.add_tensor(f"{tag}{ty.name}.quant", q_c.reshape(x.shape[0], -1), raw_dtype=ty)
                w.add_tensor(f"{tag}{ty.name}.dequant", d_c.reshape(x.shape))

        for ty in (T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K):
            q_c = c.quant(ty, inp)
            if ty == T.Q8_0:
                same_bits(quants.quantize(inp, ty), q_c, "Q8_0 quantize")
            d_c = c.dequant(ty, q_c, inp.size)
            same_bits(quants.dequantize(q_c.reshape(inp.shape[0], -1), ty), d_c, f"{ty.name} dequantize")
            w.add_tensor(f"{ty.name}.quant", q_c.reshape(inp.shape[0], -1), raw_dtype=ty)
            w.add_tensor(f"{ty.name}.dequant", d_c.reshape(inp.shape))

            n_rand = 4
            rb = random_blocks(rng, ty, n_rand * QK_K // gguf.GGML_QUANT_SIZES[ty][0])
            d_c = c.dequant(ty, rb, n_rand * QK_K)
            same_bits(quants.dequantize(rb.reshape(n_rand, -1), ty), d_c, f"{ty.name} dequantize random")
            w.add_tensor(f"{ty.name}.random", rb.reshape(n_rand, -1), raw_dtype=ty)
            w.add_tensor(f"{ty.name}.random.dequant", d_c.reshape(n_rand, QK_K))

        for ty in EXACT_QUANT + DEQUANT_ONLY:
            q_c = c.quant(ty, inp)
            if ty in EXACT_QUANT:
                same_bits(quants.quantize(inp, ty), q_c, f"{ty.name} quantize")
            d_c = c.dequant(ty, q_c, inp.size)
            same_bits(quants.dequantize(q_c.reshape(inp.shape[0], -1), ty), d_c, f"{ty.name} dequantize")
            w.add_tensor(f"{ty.name}.quant", q_c.reshape(inp.shape[0], -1), raw_dtype=ty)
            w.add_tensor(f"{ty.name}.dequant", d_c.reshape(inp.shape))

            n_rand = 4
            rb = random_blocks(rng, ty, n_rand * QK_K // gguf.GGML_QUANT_SIZES[ty][0])
            d_c = c.dequant(ty, rb, n_rand * QK_K)
            same_bits(quants.dequantize(rb.reshape(n_rand, -1), ty), d_c, f"{ty.name} dequantize random")
            w.add_tensor(f"{ty.name}.random", rb.reshape(n_rand, -1), raw_dtype=ty)
            w.add_tensor(f"{ty.name}.random.dequant", d_c.reshape(n_rand, QK_K))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes, {len(names)} cases)")


def _pkg_version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return "unknown"


if __name__ == "__main__":
    main()
