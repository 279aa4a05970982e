#!/usr/bin/env bash
# 2026-12-06, stop 41, call 9: IQ4_XS's 8-byte super-block header copied once per lane group in
# the swapped / wgmma tiles (quant_small.cuh Piece<QT_IQ4_XS>::issue_async_shared; 96 -> 72 bytes
# a row and K step). Carry .carry/lab and .carry/s41f.tar.xz (tar cJf of .carry/bin and
# .carry/kcache: tally = this tree, tally-base = 8719937, both without the peer).
#   1. lab --wg --only iq4_xs and lab --gated --only iq4_xs (checks, then IQ4_XS timings);
#   2. mid-preset IQ4_XS file: tally check --backend cuda at 1,000 and 64 tokens; logits digests
#      base == new;
#   3. 35B-A3B IQ4_XS: pp512, pp8192, base / new alternated twice.
# Prediction (written before): iq4_xs g32 at 512 tokens 8-12% faster than stop 40's; engine
# pp512 +3-5%, pp8192 +1-2% against 8719937; digests the same.
# The steps are scripts/gpu/tiles-ab.sh's (since 2026-12-06's review; what ran, written out:
# git show 0aeeb3f:scripts/gpu/stop41f.sh; the check logs are now named check-mid-<quant>-<tokens>.log).
JOB=s41f TAR=s41f LAB="--wg --only iq4_xs;--gated --only iq4_xs" CHECK=iq4_xs MIX=iq4_xs TESTS=512,8192 \
    exec "$(dirname "$0")/tiles-ab.sh"
