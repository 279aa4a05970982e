#!/usr/bin/env bash
# 2026-12-06, stop 42, call 6: the 32-element block formats (MXFP4, IQ4_NL, Q4_0, Q4_1, Q5_0,
# Q5_1) and Q8_0 copy a lane group's four contiguous blocks once, as the span's 16-byte vectors
# (quant_load.cuh Win16::issue_async_group; MXFP4 80-96 bytes a row and K step instead of 128,
# Q8_0 144-160 instead of 192), in every swapped, wgmma and x-resident tile. Carry
# .carry/s42f.tar.xz (bin/tally = this tree, bin/tally-base = 6058c25 with stop 42's x32 and
# walks, bin/quantize, kcache) and .carry/lab.
#   1. lab: the wgmma correctness matrix (every type), the gated cases and timings of MXFP4;
#   2. the ten llama.cpp-quantised tiny files through CUDA (1, 7, 37, 1,000 tokens); mid q8_0 at
#      300 and 64 tokens; mid mxfp4_moe at 1,000 and 64, logits digests base vs new;
#   3. 35B-A3B MXFP4_MOE pp512, pp2048 base / new twice; then Q8_0 pp512 + tg128 while time is left.
# Prediction (written before): every check passes, digests the same bits (the same bytes reach
# the decode); MXFP4_MOE pp512 +3-5%, pp2048 +2-3%; Q8_0 pp512 +3-6% (its gate/up on s32 and its
# down on x32 both copy a fifth less), tg128 unchanged (the GEMVs load directly).
JOB=s42f TAR=s42f LAB="--wg --no-time;--gated --only mxfp4" LLAMAQ=1 MIXES="q8_0 300,64" \
    CHECK=mxfp4_moe MIX=mxfp4_moe TESTS=512,2048 TG_MIX=q8_0 \
    exec "$(dirname "$0")/tiles-ab.sh"
