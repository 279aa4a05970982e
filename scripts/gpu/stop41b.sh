#!/usr/bin/env bash
# 2026-12-06, stop 41, call 3: the Q4_K block header copied once per lane group in the swapped /
# wgmma tiles (gemm.cu swap_issue / swap_decode). Carry .carry/lab (the lab built here),
# .carry/s41b.tar.xz (tar cJf of .carry/bin and .carry/kcache: tally = this tree, tally-base =
# 8719937, both without the peer; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a for both).
#   1. lab --gated --only q4_k (bit-equality of the gated tiles with the unfused launches, then
#      g32 / g128 / gs128 timings and g32's ablations) and lab --wg --only q4_k;
#   2. tally check --backend cuda, mid q4_k_m at 1,000 and 64 tokens (every Q4_K tile);
#      logits digests base == new on mid q4_k_m and the 4-layer 35B shapes (the same bits);
#   3. 35B-A3B Q4_K_M: pp512, pp2048, pp8192, base / new alternated twice.
# Prediction (written before): g32 at 512 tokens 0.284 -> ~0.24 ms (the copies move 18 KB a
# block step instead of 24); engine pp512 +4-6%, pp2048 +3%, pp8192 +1-2% (there the
# warp-specialised gs128 is bound by its decoders, not its copies); digests the same.
# The steps are scripts/gpu/tiles-ab.sh's (since 2026-12-06's review; what ran, written out:
# git show 0aeeb3f:scripts/gpu/stop41b.sh; the check logs are now named check-mid-<quant>-<tokens>.log).
JOB=s41b TAR=s41b LAB="--gated --only q4_k;--wg --only q4_k" MIX=q4_k_m TESTS=512,2048,8192 \
    exec "$(dirname "$0")/tiles-ab.sh"
