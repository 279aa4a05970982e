#!/usr/bin/env bash
# 2026-12-07, stop 50: the side by side with llama.cpp (issues 13 and 14) on whatever GPU comes.
# Carry .carry/s50.tar.xz (bin/tally with the dynamic-link llama.cpp peer, bin/tally-base = the
# same, kcache, llama-lib: llama.cpp's CUDA libraries from scripts/gpu/llama-build-local.sh).
# nvidia-smi samples clocks and power every 100 ms (clocks.txt per stage).
#   1. 35B-A3B Q4_K_M (synth, pool fill, seed 1): pp512, pp8192, pp32768, tg128, both engines;
#   2. decode at depth (llama-bench -d style): tg64 after 8,192 (a pp512 first: bench needs one) and 32,768 tokens, both engines.
# Predictions (H100 numbers of stop 48/49 for tally): pp512 ~15.2k, pp8192 ~40.3k, pp32768
# ~34.1k, tg128 ~332 (an H200: +0-5% on each); llama.cpp pp512 ~5.6k, tg128 ~235.
set -u
LIMIT=${LIMIT:-565}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s50b s50
sbs_35b
# ncu sections of the decode kernels stop 50's A/B touched: the in-projection and gate/up
# GEMVs (gemv_multi_q4_k), the downs (mmv_multi_q4_k) and conv_silu.
ncu_sections 'gemv_multi_q4_k|conv_silu|mmv_multi_q4_k' 24 6
printf '%s\n' "${summary[@]}"
cat "$OUT/clocks.txt"
head -30 "$OUT/sbs.md"
head -20 "$OUT/depth.md"
