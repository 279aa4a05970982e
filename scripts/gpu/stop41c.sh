#!/usr/bin/env bash
# 2026-12-06, stop 41, call 4: as call 3 (stop41b.sh), with the swapped / wgmma tiles' Q6_K
# copies shared too (lanes t and t + 2 read the same ql and qh windows and d: lanes 0 and 1 copy
# them; gemm.cu swap_issue). Carry .carry/lab and .carry/s41c.tar.xz (tar cJf of .carry/bin and
# .carry/kcache: tally = this tree, tally-base = 8719937, both without the peer).
#   1. lab --wg --only q6_k (every type's wgmma-tile checks, then the Q6_K prefill shapes) and
#      lab --gated --only q6_k (the gated tiles' bit-equality checks, every type);
#   2. tally check --backend cuda, mid q4_k_m (its downs are Q6_K and Q4_K) at 1,000 and 64
#      tokens; logits digests base == new on mid q4_k_m and the 4-layer 35B shapes;
#   3. 35B-A3B Q4_K_M: pp512, pp2048, pp8192, base / new alternated twice.
# Prediction (written before): the Q6_K downs (x64 at 16 rows per expert, about half the 40
# layers) ~25% faster at 512 tokens; engine against 8719937: pp512 +9-11% (call 3: +6.7%),
# pp2048 +4%, pp8192 +2.5%; digests the same.
# The steps are scripts/gpu/tiles-ab.sh's (since 2026-12-06's review; what ran, written out:
# git show 0aeeb3f:scripts/gpu/stop41c.sh; the check logs are now named check-mid-<quant>-<tokens>.log).
JOB=s41c TAR=s41c LAB="--wg --only q6_k;--gated --only q6_k" MIX=q4_k_m TESTS=512,2048,8192 \
    exec "$(dirname "$0")/tiles-ab.sh"
