#!/usr/bin/env bash
# The tests, as CI runs them: formatting, lints, and every test of the workspace (unit, golden vs
# transformers, bad input, fuzz properties, NVRTC compilation of every CUDA kernel, the llama.cpp
# peer on the CPU, end-to-end ledger on the tiny model, the tokenizer on llama.cpp's real Qwen
# vocabularies, the server with real clients), after the libFuzzer target for a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
eval "$(scripts/setup-cuda-local.sh --nvrtc-only)"
export TALLY_REQUIRE_NVRTC=1
# The real Qwen vocabularies the tokenizer tests check against (they skip, saying so, without).
eval "$(scripts/setup-llama-vocab.sh)"
# The server's end-to-end tests drive it with the openai Python client and curl.
TALLY_E2E_PYTHON="$(scripts/lib/serve-venv.sh)"
export TALLY_E2E_PYTHON
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --features tally/llama -- -D warnings
# Coverage-guided fuzzing of GGUF reading, config validation and plan building, bounded (the
# one-hour campaign's result is in docs/results/fuzz-model-file.md).
scripts/fuzz.sh 60
# The kernel-compile test leaves the CUBINs NVRTC built (exactly the backend's) in target/cubins.
rm -rf target/cubins
export TALLY_CUBIN_DIR="$PWD/target/cubins"
cargo test --workspace --features tally/llama
# Their machine code: no kernel reads or writes global memory before its griddepcontrol.wait, so
# none can see a previous kernel's half-written output under programmatic dependent launch
# (tools/cuda/pdl_audit.py; ~40 s).
tools/cuda/pdl_audit.sh --cubins target/cubins
# The chunked delta rule's CUDA kernels (prep on mma.sync, scan on wgmma) on the CPU emulator of
# lab/gemm/emu, against a float64 reference, the two-set scan (TALLY_DELTA_SCAN=ring) bit for bit
# against the one-set scan, and the prep with the fused prologue (TALLY_DELTA_PREP=prologue) bit for
# bit against norm_rows_w + delta_gates + the plain prep (lab/delta/emu_test.cpp; ~25 s).
c++ -O2 -std=c++17 -ffp-contract=off -pthread -I lab/gemm/emu -I crates/engine/src/cuda/kernels \
    lab/delta/emu_test.cpp -o target/delta_emu
# Every quantisation's CUDA front end (quant.cuh, quant_small.cuh) on the same emulator: dequant8
# bit-exact against the host reference, the f16 and GEMV decodes (incl. the codebook formats'
# interleaved bytes), dequant_rows and the cuBLAS operands (lab/gemm/emu/emu_test.cpp pieces;
# about a minute to build, seconds to run).
c++ -O2 -std=c++17 -ffp-contract=off -pthread -I lab/gemm/emu -I crates/engine/src/cuda/kernels \
    lab/gemm/emu/emu_test.cpp -o target/gemm_emu
target/gemm_emu pieces
# The warp-specialised MoE tiles of long prompts on the same emulator: gs256 (the gated gate/up
# over 256 x rows) bit for bit against the 128-row unfused launches, Q4_K (about a minute), and
# xs128 (the x-resident down tile) against float64, Q4_K and Q6_K (seconds).
target/gemm_emu ws256 q4_k
# gs256 with two A stages (TALLY_WS256=a2, opt-in) on the same cases (about a minute).
target/gemm_emu ws256a q4_k
target/gemm_emu xs128 q4_k,q6_k
# The persistent one-row GEMVs (gemvr_<t>, and gemvt_<t> fed by bulk copies) against gemv4_<t>,
# bit for bit, every integer format (~25 s).
target/gemm_emu gemvr | tail -n 1
# The one-row integer GEMVs on their own kernels (gemvi_<t>, and mmvi_<t>: mmv's geometry on the
# integer arithmetic) and their multi forms against gemv_<t>, bit for bit, every integer format,
# K 256 to 2,048 (~1 min).
target/gemm_emu int | tail -n 1
target/delta_emu
# The decode router in one launch (router.cu router_fused: the f32 GEMV and router_topk8's top-k
# in the last block) against float64 and router_topk8, bit for bit, its counter back at 0, and
# its logits alone the same bits (lab/router/emu_test.cpp; seconds).
c++ -O2 -std=c++17 -ffp-contract=off -pthread -I lab/gemm/emu -I crates/engine/src/cuda/kernels \
    lab/router/emu_test.cpp -o target/router_emu
target/router_emu | tail -n 1
# The norm kernels' forms the engine treats as one another bit for bit (norm_rows_w's register and
# loop forms against norm_rows at 128 threads; add_rms_norm's register form, its loads as the
# engine builds it by default and with TALLY_ADD_NORM_LOADS=prefill and =late, against its loop
# form; the _h kernels' f16 copy of the output, TALLY_NORM_CAST=on; lab/norm/emu_test.cpp; seconds
# to build and run).
for d in -DTALLY_ADD_NORM_DEFAULT -DTALLY_ADD_NORM_PREFILL_EARLY -DTALLY_ADD_NORM_LATE; do
    c++ -O2 -std=c++17 -ffp-contract=off -pthread "$d" -I lab/gemm/emu -I crates/engine/src/cuda/kernels \
        lab/norm/emu_test.cpp -o target/norm_emu
    target/norm_emu
done
# The wgmma prefill attention (attention_wg.cuh) on the same emulator against a float64
# reference (lab/attention/wg_emu_test.cpp; seconds), and attention.cu's kernels, the f16 copies
# with V transposed included, on their own SIMT emulator (lab/attention/emu; the quick set, ~30 s).
c++ -O2 -std=c++17 -ffp-contract=off -pthread -I lab/gemm/emu -I crates/engine/src/cuda/kernels \
    lab/attention/wg_emu_test.cpp -o target/attn_wg_emu
target/attn_wg_emu
TMPDIR=$PWD/target lab/attention/emu/run.sh --quick | tail -n 1
# The server's load tests (N concurrent streams for T seconds): what they measured.
for f in target/serve-e2e/*.json; do
    if [ -f "$f" ]; then echo "serve load test ($f): $(tr -d '\n ' < "$f")"; fi
done
