#!/usr/bin/env bash
# RAN 2026-12-05 (results: docs/results/2026-12-05-h100-stop37/call1).
# 2026-12-05, stop 37, call 1: the chunked delta rule's prep with its global loads batched
# (issue 14: at pp8192 the delta rule is 34.6 ms, prep 19.6 + scan 15.0, against FlashQLA's
# published ~8 ms on an H200; the SASS of the prep showed one load latency per loop iteration:
# 16 dependent loads in step 2, 33 in step 4). Same arithmetic, so the same bits.
# (1) lab/delta: the old kernels (HEAD 2c721c2) and the new ones, checks + timing.
# (2) ncu of one chunked T=8192 prep and scan (new): sections + per-instruction stall samples,
#     for the next step (the scan).
# (3) engine, 35B q4_k_m: tally check mid 1000 tokens (new); logits digests base == new;
#     pp512 and pp8192, base/new alternated twice. Base = the 16:26 binary (c04a8f6-era code:
#     the same tiles as HEAD at 512 and 8,192 tokens; only the delta prep differs).
# Prediction (written before): lab prep T=8192 0.65 -> ~0.30 ms, T=512 0.043 -> ~0.02 ms;
# scan unchanged. Engine pp8192 +5% (-10 ms of ~242), pp512 +1.5%.
# HERE first: nvcc lab/delta/bench.cu (old tree, new tree) -> .carry/lab/delta_{old,new};
# cargo build --release; .carry/bin/tally-new; kernels --arch sm_90a into .carry/kcache;
# tar cJf .carry/new.tar.xz -C .carry bin/tally-nopeer bin/tally-new kcache lab/delta_old lab/delta_new.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop37
B=$TALLY_NOPEER
N=$PWD/.carry/bin/tally-new
F=/tmp/q4km.gguf
[ -f $F ] || "$N" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
for v in old new; do
    timeout 150 .carry/lab/delta_$v > "$OUT/lab-delta-$v.txt" 2>&1
    row "lab delta $v" "rc=$? $(grep -E 'SUMMARY' "$OUT/lab-delta-$v.txt") ($(el))"
    grep -E "^  chunked T=" "$OUT/lab-delta-$v.txt" | awk -v v=$v '{print v, $2, "total", $3, "prep", $4, "scan", $5}' >> "$OUT/lab-times.txt"
done
pack
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
for k in prep scan; do
    timeout 120 ncu --clock-control none -k regex:delta_rule_chunk_$k --launch-count 1 --set full \
        --import-source no -o "$OUT/ncu-$k" .carry/lab/delta_new --profile 8192 > "$OUT/ncu-$k.log" 2>&1
    ncu -i "$OUT/ncu-$k.ncu-rep" --page details > "$OUT/ncu-$k-details.txt" 2>&1
    ncu -i "$OUT/ncu-$k.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu-$k-sass.csv" 2>&1
    gzip -f "$OUT/ncu-$k-sass.csv"
    row "ncu $k 8192" "$(grep -E ' Duration|Registers Per|Achieved Occupancy' "$OUT/ncu-$k-details.txt" | head -3 | tr -s ' ' | tr '\n' ';') ($(el))"
done
rm -f "$OUT"/*.ncu-rep
pack
MID=/tmp/mid-q4_k_m.gguf
"$N" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
timeout 60 "$N" check --model $MID --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000.log" 2>&1
row "check mid 1000 (new)" "rc=$? $(grep -A2 'worst node' "$OUT/check-mid-1000.log" | tail -1 | tr -s ' ' | cut -c1-100) ($(el))"
for v in B N; do
    bin=$B; [ $v = N ] && bin=$N
    timeout 60 "$bin" run --model $MID --backend cuda --tokens 1000 -n 6 -o json > "$OUT/run-mid1000-$v.json" 2> "$OUT/run-mid1000-$v.err"
done
row "digests mid 1000 base == new" "$(logits_same "$OUT" mid1000 B N) ($(el))"
pack
wait
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
for round in 1 2; do
    for v in B N; do
        bin=$B; [ $v = N ] && bin=$N
        timeout 120 "$bin" bench -m $F --backend cuda -p 512,8192 -n 0 -r 3 -o json > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
cat "$OUT/lab-times.txt"
printf '%s\n' "${summary[@]}"
