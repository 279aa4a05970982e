#!/usr/bin/env bash
# 2026-12-06, stop 42, call 4: the x-resident tiles' new defaults, x32 for the downs of up to 32
# rows per expert (every block format; x96 / x128 above for every format) and shorter walks (4
# weight blocks a block for x32, 8 for x64 / x96 / x128: ops/matmul.rs WgTile::walk), against
# b2296eb. Carry .carry/s42d.tar.xz (bin/tally = this tree, bin/tally-base = b2296eb, kcache).
#   1. mid q4_k_m: tally check --backend cuda at 1,000 and 64 tokens; digests base vs new;
#   2. 35B-A3B Q4_K_M pp512, pp2048, pp8192, base / new twice;
#   3. 35B-A3B Q5_K_M pp512 + tg128, base / new twice.
# Prediction (written before): checks pass; Q4_K_M pp512 +5% (call 3's walk 4: +5.4%), pp2048
# +2% (x96 walking 8: call 3 +2.5% at walk 8), pp8192 within 1.5% (Q6_K's x96 now walks 8,
# Q4_K's x128 did already); Q5_K_M pp512 +8-12% (its Q5_K down moves from m32, 0.268 ms in the
# lab, to x32, 0.131), tg128 within 1% (decode runs the GEMVs).
JOB=s42d TAR=s42d LAB="" CHECK=q4_k_m MIX=q4_k_m TESTS=512,2048,8192 TG_MIX=q5_k_m \
    exec "$(dirname "$0")/tiles-ab.sh"
