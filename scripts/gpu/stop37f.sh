#!/usr/bin/env bash
# RAN 2026-12-05 (results: docs/results/2026-12-05-h100-stop37/call6; the code it ran was reverted after it: slower).
# 2026-12-05, stop 37, call 6: the scan as one warpgroup a block, 16 columns (grid Hv x dv/16,
# 128 threads, 87 KB smem: two blocks an SM, independent). Call 5's ncu: 32% of the scan's
# samples were barrier waits, warpgroup 1 waiting for warpgroup 0's longer chain; every product
# splits by columns, so each block now does all of them (X = W S and Y = Q S issued together,
# then K^T X' and P vnew together) for its 16 columns, and two such blocks share an SM instead of
# two warpgroups of one block waiting on each other. 96 registers. Emulator: passes (the same
# errors), 3 more mutants fail (stmatrix block order, #3 removed, U slice of 32 columns).
# (1) lab/delta: 308b97f (call 5's scan) and this. (2) ncu scan + prep at T = 8,192. (3) engine:
# check mid 1000; digests new twice; pp512/2048/8192 base (308b97f) / new x2; pp32768 -r 3
# each.
# Prediction (written before): lab scan at T=8192 0.340 -> ~0.22 ms; engine pp8192 +1.5% over
# 308b97f.
# HERE first: as stop37c.sh, with .carry/bin/tally-nopeer = 308b97f's build.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop37f
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
for k in scan prep; do
    timeout 120 ncu --clock-control none -k regex:delta_rule_chunk_$k --launch-count 1 --set full \
        --import-source no -o "$OUT/ncu-$k" .carry/lab/delta_new --profile 8192 > "$OUT/ncu-$k.log" 2>&1
    ncu -i "$OUT/ncu-$k.ncu-rep" --page details > "$OUT/ncu-$k-details.txt" 2>&1
    ncu -i "$OUT/ncu-$k.ncu-rep" --page source --print-source sass --csv 2>/dev/null | gzip > "$OUT/ncu-$k-sass.csv.gz"
    rm -f "$OUT/ncu-$k.ncu-rep"
    row "ncu $k new 8192" "$(grep -E ' Duration' "$OUT/ncu-$k-details.txt" | head -1 | tr -s ' ') ($(el))"
done
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
for v in B N; do
    bin=$B; [ $v = N ] && bin=$N
    timeout 120 "$bin" bench -m $F --backend cuda -p 32768 -n 0 -r 3 -o json > "$OUT/pp32k-$v.json" 2> "$OUT/pp32k-$v.err"
    row "pp32768 $v" "rc=$? $(bench_row "$OUT/pp32k-$v.json") ($(el))"
done
pack
cat "$OUT/lab-times.txt" "$OUT/lab-fails.txt"
printf '%s\n' "${summary[@]}"
