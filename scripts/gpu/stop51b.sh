#!/usr/bin/env bash
# 2026-12-07, stop 51: the side by side with llama.cpp (issues 13 and 14) on whatever GPU comes.
# Carry .carry/s51.tar.xz (bin/tally with the dynamic-link llama.cpp peer, llama-lib: llama.cpp's
# CUDA libraries from scripts/gpu/llama-build-local.sh) right after stop51a.sh's call (its kcache).
# nvidia-smi samples clocks and power every 100 ms (clocks.txt per stage).
#   1. 35B-A3B Q4_K_M (synth, pool fill, seed 1): pp512, pp8192, pp32768, tg128, both engines;
#   2. decode at depth (llama-bench -d style): tg64 after 8,192 (a pp512 first: bench needs one) and 32,768 tokens, both engines.
# Predictions: on an H100, stop 50's prefill (pp512 ~15.1k, pp8192 ~40.5k, pp32768 ~34.6k)
# and tg128 stop 51a's gemvi + mmvi figure; on an H200 +0-5% prefill, decode +10-20% (4.8 vs
# 3.35 TB/s where the GEMVs read DRAM); llama.cpp pp512 ~5.6k, tg128 ~235 (H100).
# The ncu sections at the end: the new decode GEMVs (gemvi_multi, mmvi_multi) for the next work.
set -u
LIMIT=${LIMIT:-565}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
# The kernel cache comes from the call before on the same warm machine (the tarball and the tree
# together fill the carry limit): without it the first run would compile gemm.cu here for minutes.
[ -d .carry/kcache ] || { echo "stop51b: no .carry/kcache on this machine (cold start): not running"; exit 3; }
ab_start s51b s51
sbs_35b
# ncu sections of the new decode kernels (gemvi, mmvi) and the router's gemv_f32.
ncu_sections 'gemvi_multi_q4_k|mmvi_multi_q4_k|gemvi_q4_k|gemv_f32' 30 8
printf '%s\n' "${summary[@]}"
cat "$OUT/clocks.txt"
head -30 "$OUT/sbs.md"
head -20 "$OUT/depth.md"
