#!/usr/bin/env bash
# 2026-12-06, stop 42, call 1 (carry .carry/s42a.tar.xz: .carry/bin, .carry/kcache, .carry/lab;
# the binary of b2296eb, where TALLY_X32G still existed: x32 replaced it in 4a599cd):
# the MoE down of short prompts (issue 14). At pp512 on the H100 the downs take about as long
# as the gated gate/up (Q6_K on x64 0.336 ms, Q4_K on m32 0.204, against g32's 0.229 for more
# bytes): x64 holds 2 ring stages for Q6_K's 112-byte slots, so each K step's copies are issued
# and waited for in the same step, and one block of 8 warps an SM.
#   1. lab --wg --only q4_k / q6_k (timings at 512, 2,048, 8,192 tokens), the new lab tile x32
#      (32 x rows of K <= 512: Q4_K 4 stages and 2 blocks an SM, Q6_K 3 stages), then the same
#      with LAB_WGX_WALK=8 and 4 (each x-resident block walks 8 or 4 of the 16 weight blocks:
#      more, shorter blocks against the tail of the last wave); Q5_K, Q8_0, IQ4_XS, MXFP4 once
#      (their downs stay on s32/m32 today);
#   2. lab --wg --no-time: the correctness matrix of every wgmma tile, x32 included (every type);
#   3. ncu time per kernel of one pp512 of the 35B Q4_K_M file (pool fill), default and with
#      TALLY_X32G=on (x32g for the Q4_K down: 0.152 against m32's 0.204 in the lab, no gain in
#      the engine at stop 41: do the downs in the engine take what the lab says?).
# (As run, the summary loop below lacked the ';' after 'continue': its printout failed, the files
# came back whole.)
# Prediction (written before): x32 Q4_K down at 512 tokens 0.12-0.14 ms (x32g 0.152, m32 0.204);
# x32 Q6_K down 0.24-0.27 (x64 0.336). WALK=8 within 5% of the default for both. In the engine,
# the m32 Q4_K down takes within 10% of the lab's 0.204 and x32g more than the lab's 0.152.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/s42a.tar.xz ] && tar xJf .carry/s42a.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job s42
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
F=/tmp/q4km.gguf
"$TALLY_NOPEER" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
L=.carry/lab/gemm_bench
for t in q4_k q6_k; do
    for w in 0 8 4; do
        if [ $w = 0 ]; then env -u LAB_WGX_WALK timeout 200 $L --wg --only $t --only-time > "$OUT/lab-$t-walk$w.txt" 2>&1
        else LAB_WGX_WALK=$w timeout 200 $L --wg --only $t --only-time > "$OUT/lab-$t-walk$w.txt" 2>&1; fi
        row "lab --wg $t walk=$w" "rc=$? ($(el))"
    done
    pack
done
for t in q5_k q8_0 iq4_xs mxfp4; do
    timeout 200 $L --wg --only $t --only-time > "$OUT/lab-$t-walk0.txt" 2>&1
    row "lab --wg $t" "rc=$? ($(el))"
done
pack
timeout 300 $L --wg --no-time > "$OUT/lab-wg-check.txt" 2>&1
row "lab --wg --no-time" "rc=$? $(grep -E 'cases, ' "$OUT/lab-wg-check.txt") ($(el))"
pack
wait $SYNTH
row synth "$(el)"
ncu_prefill $F 512
pack
mv "$OUT/kernels-pp512.txt" "$OUT/kernels-pp512-default.txt"
TALLY_X32G=on ncu_prefill $F 512
mv "$OUT/kernels-pp512.txt" "$OUT/kernels-pp512-x32g.txt"
pack
for t in q4_k q6_k q5_k q8_0 iq4_xs mxfp4; do
    echo "== $t"
    for w in 0 8 4; do [ -f "$OUT/lab-$t-walk$w.txt" ] || continue; grep -E "time moe down .* M=4096 " "$OUT/lab-$t-walk$w.txt" | awk -v w=$w '{printf "walk%s %s %s  ", w, $5, $9}'; echo; done
done
for f in default x32g; do echo "== engine $f"; grep -E "q4_k_(m32|x32g)|q6_k_x64|g32" "$OUT/kernels-pp512-$f.txt" | head -8; done
printf '%s\n' "${summary[@]}"
