#!/usr/bin/env bash
# Issue 14: prefill's small kernels. `norm_rows_w` (short norm groups, one warp each, bit for bit
# norm_rows at 128 threads) and `moe_route` over several blocks (`moe_route_count` first).
# Checks: the lab's moe_route cases (one block and several) and timings; `tally check --backend
# cuda` on mid q4_k_m at 1,000 tokens (8 routing blocks) and 64; logits digests on mid q4_k_m and
# the 4-layer 35B-shaped file: new default == TALLY_NORM=block == TALLY_NO_FUSE=delta (the fused
# decode prologue against norm_rows_w) == the binary before (.carry/bin/tally-old). Then the
# 35B-A3B Q4_K_M synth file: tally bench pp512/pp8192/pp32768, before and after, same call.
# HERE first: cp the previous .carry/bin/tally to .carry/bin/tally-old; scripts/gpu/pack.sh;
# TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a (both binaries' kernels in one cache);
# nvcc lab/gemm/bench.cu -> .carry/lab/gemm_bench. Carry .carry/bin, .carry/kcache, .carry/lab.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job rn
T=$TALLY_NOPEER
OLD=.carry/bin/tally-old
F=/tmp/q4km.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
timeout 120 .carry/lab/gemm_bench --route > "$OUT/lab-route.txt" 2>&1
row "lab route" "rc=$? $(tail -1 "$OUT/lab-route.txt") ($(el))"
grep "moe_route: T=" "$OUT/lab-route.txt" >> "$OUT/summary.txt"
mid_l4_files
for n in 1000 64; do
    timeout 150 "$T" check --model $MID --backend cuda --tokens $n -n 2 > "$OUT/check-mid-$n.log" 2>&1
    row "check mid q4_k_m tokens=$n" "rc=$? ($(el))"
done
for f in $MID $L4; do
    run_json new $f
    TALLY_NORM=block run_json block $f
    TALLY_NO_FUSE=delta run_json nofusedelta $f
    run_json old $f $OLD
    row "digests $(basename $f)" "$(logits_same "$OUT" "$(basename $f .gguf)" new block nofusedelta old) ($(el))"
done
wait $SYNTH
row synth "$(el)"
for v in old new old new; do
    b=$T; [ $v = old ] && b=$OLD
    timeout 150 "$b" bench -m $F --backend cuda -p 512,8192,32768 -n 0 -r 3 -o json > "$OUT/bench-$v.json" 2> "$OUT/bench-$v.err"
    row "bench $v" "rc=$? $(bench_row "$OUT/bench-$v.json") ($(el))"
    cp "$OUT/bench-$v.json" "$OUT/bench-$v-$(date +%s).json"
done
pack
printf '%s\n' "${summary[@]}"
