#!/usr/bin/env bash
# Run HERE (where cargo is) before scripts/gpu/llama-quantized.sh: files whose every block was
# chosen by llama.cpp's own quantiser (llama_model_quantize, what llama-quantize runs; no
# importance matrix), for the CUDA kernels. tally's own quantiser wrote every quantised file the
# GPU checks have run so far; llama.cpp's picks other scales (its searches), as downloaded files
# carry them. On the CPU the same kind of files are checked in CI against ggml's to_float and
# llama.cpp's logits (crates/peer-llama/tests/quantize.rs); the GPU script checks CUDA against
# the CPU on them.
# Source: `tally synth --preset tiny --quant bf16` (hidden 256: every K-quant row fits; 4 layers,
# 8 experts top-2, dims the CUDA kernels take); one file per mix into .carry/llamaq/: nine mixes,
# about 46 MiB (q8_0 is left out for room: its blocks leave llama.cpp the least to choose). With
# the 10 MB binary that fits the 64 MiB a call carries: carry `.carry/llamaq`, `.carry/bin/tally`.
#   scripts/gpu/pack.sh && scripts/gpu/make-llama-quantized.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p tally -p tally-peer-llama --example quantize
mkdir -p .carry/llamaq
src=target/llamaq-src-bf16.gguf
target/release/tally synth --preset tiny --quant bf16 --seed 5 --out "$src"
for mix in q4_k_m q5_k_m q6_k iq4_xs iq4_nl mxfp4_moe q4_0 q3_k_m q2_k; do
    target/release/examples/quantize "$src" ".carry/llamaq/tiny-$mix.gguf" "$mix"
done
rm -f "$src"
ls -la .carry/llamaq/
