#!/usr/bin/env bash
# 2026-12-06, stop 42, call 2: the routed downs of short prompts on gemm_<t>_x32 (every block
# format, up to 32 rows per expert; x96 / x128 above for every format, not only Q4_K and Q6_K).
# Carry .carry/s42b.tar.xz (tar cJf of .carry/bin and .carry/kcache: tally = this tree, tally-base
# = b2296eb, both without the peer; bin/quantize = the static tally-peer-llama quantize example).
#   1. llama.cpp-quantised tiny files (ten mixes) through CUDA against the CPU at 1, 7, 37 and
#      1,000 tokens (37 tokens: 9 rows per expert, x32; 1,000: x128);
#   2. mid-preset checks: q4_k_m at 1,000 and 64 tokens (64: 8 rows per expert, x32 for the Q4_K
#      and Q6_K downs), digests base vs new; q5_k_m, iq4_xs, mxfp4_moe, q8_0 at 300 (x96) and 64;
#   3. 35B-A3B Q4_K_M pp512, pp2048, pp8192: base / new / new with TALLY_X32=off, twice.
# Prediction (written before): every check passes; digests may differ on mid (m32 -> x32 sums
# the Q4_K down in another order) and are the same on the 4-layer 35B file (37 tokens: GEMV).
# pp512 +6-8% (14.0k -> 14.9-15.1k: the Q4_K down 206 -> ~140 us, Q6_K 324 -> ~265 us in the
# engine, 20 layers each); pp2048 and pp8192 within 1% (their Q4_K / Q6_K downs were on x96 /
# x128 already); TALLY_X32=off within 1% of the base.
JOB=s42b TAR=s42b LAB="" LLAMAQ=1 MIXES="q5_k_m 300,64;iq4_xs 300,64;mxfp4_moe 300,64;q8_0 300,64" \
    CHECK=q4_k_m MIX=q4_k_m TESTS=512,2048,8192 ARM3="TALLY_X32=off" \
    exec "$(dirname "$0")/tiles-ab.sh"
