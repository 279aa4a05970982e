#!/usr/bin/env bash
# 2026-12-06, stop 41, call 7: (a) the lane-group sharing of the swapped / wgmma tiles' copies
# extended to Q5_K (header and qh vectors; quant.cuh Piece<QT_Q5_K>::issue_async_shared);
# (b) the codebook GEMVs' table words back to immediates (stop 40's global-table hoist removed:
# no measured gain). Carry .carry/lab and .carry/s41e.tar.xz (tar cJf of .carry/bin and
# .carry/kcache: tally = this tree, tally-base = 8719937, both without the peer).
#   1. lab --decode (every GEMV / MMV case against float64, then the decode shapes' GB/s),
#      lab --wg --only q5_k, lab --gated --only q5_k;
#   2. tally check mid q4_k_m at 1,000 tokens; digests base == new (mid q4_k_m, 4-layer 35B);
#   3. 35B-A3B Q5_K_M: pp512, pp8192, base / new alternated twice; then MXFP4_MOE tg128, base /
#      new alternated twice (the GEMV change), while time is left.
# Prediction (written before): Q5_K g32 at 512 tokens 15-20% faster than its stop 40 figure;
# q5_k_m pp512 +8-10% over 8719937 (Q5_K gate/up and Q6_K downs both share now), pp8192 +3%;
# MXFP4_MOE tg128 within 1.5% of base (stop 40: the hoist changed nothing); digests the same.
# (As run, the tg rows asked for -p 0, which the bench refuses; fixed here to -p 512 after the
# call, and those rows ran by hand on the warm machine: call8/command.txt.)
# The steps are scripts/gpu/tiles-ab.sh's (since 2026-12-06's review; what ran, written out:
# git show 0aeeb3f:scripts/gpu/stop41e.sh; the check logs are now named check-mid-<quant>-<tokens>.log).
# As run, the mid check was at 1,000 tokens only and the tg rows asked for `-p 0`.
JOB=s41e TAR=s41e LAB="--decode;--wg --only q5_k;--gated --only q5_k" MIX=q5_k_m TESTS=512,8192 TG_MIX=mxfp4_moe \
    exec "$(dirname "$0")/tiles-ab.sh"
