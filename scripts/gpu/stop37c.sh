#!/usr/bin/env bash
# RAN 2026-12-05 (results: docs/results/2026-12-05-h100-stop37/call3).
# 2026-12-05, stop 37, call 3: the chunked delta rule's scan on wgmma (issue 14). Call 2's ncu:
# the mma.sync scan's tensor-core phases wait on ldmatrix (every warp loads all of S hi/lo for
# its 16 rows; shared-memory wavefronts 0.61 a cycle). Now two warpgroups, every product a
# wgmma m64n32k16 with both operands from shared memory (W S / Q S, K^T X, P vnew): operands
# read once per warpgroup, issued without waiting on loads; the prep writes k transposed (K^T,
# the state update's A operand). The CPU emulator (lab/delta/emu_test.cpp) passes it (o ~1e-4,
# state ~2e-4 against float64) and fails 4 mutants (wrong S^T swizzle, barrier #2 removed, no
# K^T written, a warp-local max).
# (1) lab/delta: df08482 (mma.sync scan) and the new one: checks + timing. (2) ncu of the new
# scan at T = 8,192. (3) engine: tally check mid 1000 (new); digests new twice (stable), base vs
# new (not expected equal: wgmma sums in its own order); pp512/2048/8192 base/new x2.
# Prediction (written before): lab scan at T=8192 0.486 -> ~0.25 ms, T=512 0.040 -> ~0.02;
# the prep a little slower (the K^T stores); engine pp8192 +3%, pp512 +1.5%.
# HERE first: nvcc lab/delta/bench.cu (df08482 tree, this tree) -> .carry/lab/delta_{old,new};
# cargo build --release; .carry/bin/tally-nopeer = call 1's tally-new (df08482), .carry/bin/tally-new
# = this build; kernels --arch sm_90a into .carry/kcache; tar cJf .carry/new.tar.xz -C .carry
# bin/tally-nopeer bin/tally-new kcache lab/delta_old lab/delta_new.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop37c
B=$TALLY_NOPEER
N=$PWD/.carry/bin/tally-new
F=/tmp/q4km.gguf
[ -f $F ] || "$N" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
for v in old new; do
    timeout 150 .carry/lab/delta_$v > "$OUT/lab-delta-$v.txt" 2>&1
    row "lab delta $v" "rc=$? $(grep -E 'SUMMARY' "$OUT/lab-delta-$v.txt") ($(el))"
    grep -E "^  chunked T=" "$OUT/lab-delta-$v.txt" | awk -v v=$v '{print v, $2, "total", $3, "prep", $4, "scan", $5}' >> "$OUT/lab-times.txt"
done
grep -E "FAIL|FATAL" "$OUT/lab-delta-new.txt" | head -5 > "$OUT/lab-fails.txt"
pack
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
timeout 120 ncu --clock-control none -k regex:delta_rule_chunk_scan --launch-count 1 --set full \
    --import-source no -o "$OUT/ncu-scan" .carry/lab/delta_new --profile 8192 > "$OUT/ncu-scan.log" 2>&1
ncu -i "$OUT/ncu-scan.ncu-rep" --page details > "$OUT/ncu-scan-details.txt" 2>&1
ncu -i "$OUT/ncu-scan.ncu-rep" --page source --print-source sass --csv 2>/dev/null | gzip > "$OUT/ncu-scan-sass.csv.gz"
rm -f "$OUT/ncu-scan.ncu-rep"
row "ncu scan new 8192" "$(grep -E ' Duration' "$OUT/ncu-scan-details.txt" | head -1 | tr -s ' ') ($(el))"
pack
MID=/tmp/mid-q4_k_m.gguf
"$N" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
timeout 90 "$N" check --model $MID --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000.log" 2>&1
row "check mid 1000 (new)" "rc=$? $(grep -A2 'worst node' "$OUT/check-mid-1000.log" | tail -1 | tr -s ' ' | cut -c1-100) ($(el))"
for v in B N N2; do
    bin=$N; [ $v = B ] && bin=$B
    timeout 60 "$bin" run --model $MID --backend cuda --tokens 1000 -n 6 -o json > "$OUT/run-mid1000-$v.json" 2> "$OUT/run-mid1000-$v.err"
done
row "digests mid 1000 new == new" "$(logits_same "$OUT" mid1000 N N2) ($(el))"
row "digests mid 1000 base == new" "$(logits_same "$OUT" mid1000 B N) ($(el))"
pack
wait
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
for round in 1 2; do
    for v in B N; do
        bin=$B; [ $v = N ] && bin=$N
        timeout 120 "$bin" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
cat "$OUT/lab-times.txt" "$OUT/lab-fails.txt"
printf '%s\n' "${summary[@]}"
