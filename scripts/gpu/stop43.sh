#!/usr/bin/env bash
# 2026-12-06, stop 43, call 1: the model's routing in the lab and the ledger, and where the time
# goes now. Carry .carry/s43a.tar.xz (bin/tally = this tree: the ledger's `--routing model`
# default and `tally run --routing-table`; kcache; lab/gemm_bench with LAB_ROUTING).
#   1. the 35B-A3B Q4_K_M synth file; `tally run --routing --routing-table` of a 512-token prompt
#      on CUDA: the median MoE layer's recorded table;
#   2. lab, Q4_K: the gated gate/up tiles (--gated) and the wgmma/x-resident tiles (--wg) at 512
#      tokens, on the uniform table and on the recorded one (LAB_ROUTING);
#   3. the pp512 ledger, tally against itself on CUDA, routing model (the new default);
#   4. ncu: one pp8192 prefill per kernel; pp512, tg128 and tg128 after 8,192 tokens.
# Prediction (written before): with the recorded table the lab's g32 gate/up at 512 tokens goes
# from ~0.23 ms to 0.26-0.29 ms (the engine's 292 us a launch under ncu) and x32's down gains
# less than on the uniform table (more tiles than the 264 resident blocks); the ledger's
# standalone MoE gate/up + down move toward their in-graph figures (12.8 + 8.8 ms standalone on
# uniform routing at stop 42). pp8192 ~200-210 ms serialised: gate/up ~20%, downs ~17%, dense
# ~18%, delta rule ~11%, attention ~8%, norms + element-wise ~13%.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s43 s43a
synth_35b q4_k_m
R=$OUT/routing-512.txt
"$N" run --model "$F" --backend cuda --tokens 512 --routing --routing-table "$R" -o json > "$OUT/run-routing-512.json" 2> "$OUT/run-routing-512.err"
row "run --routing-table 512" "rc=$? $(sed -n 1p "$R" | cut -c1-150) ($(el))"
L=.carry/lab/gemm_bench
for mode in "--gated --only q4_k" "--wg --only q4_k --only-time"; do
    tag=$(echo "$mode" | tr -d ' -' | cut -c1-16)
    timeout 150 "$L" $mode > "$OUT/lab-$tag-uniform.txt" 2>&1
    row "lab $mode uniform" "rc=$? ($(el))"
    LAB_ROUTING=$R timeout 150 "$L" $mode > "$OUT/lab-$tag-model.txt" 2>&1
    row "lab $mode model" "rc=$? ($(el))"
done
pack
timeout 300 "$N" ledger --model "$F" --backend cuda --peer self -p 512 -r 3 \
    --out-dir "$OUT/ledger-pp512" > "$OUT/ledger-pp512.log" 2>&1
row "ledger pp512 self, routing model" "rc=$? ($(el))"
pack
ncu_prefill "$F" 8192 "$N"
pack
"$N" bench -m "$F" --backend cuda -p 512 -n 128 -d 0,8192 -r 3 -o json --out-dir "$OUT/tg" > "$OUT/tg.json" 2> "$OUT/tg.err"
row "bench pp512/tg128 d0,8192" "rc=$? $(bench_row "$OUT/tg.json") ($(el))"
pack
printf '%s\n' "${summary[@]}"
for f in "$OUT"/lab-*.txt; do echo "== $f"; grep -A12 SUMMARY "$f" | grep -iE "512|gated|g32|x32|m32|s32" | head -8; done
grep -E "Standalone|MoE|Routing|Verdict" "$OUT/ledger-pp512.log" | head -12
head -16 "$OUT/kernels-pp8192.txt"
