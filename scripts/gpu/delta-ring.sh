#!/usr/bin/env bash
# The chunked delta rule's scan with two operand sets (delta_rule_chunk_scan2,
# TALLY_DELTA_SCAN=ring; written 2026-12-07 without a GPU, opt-in until this script has run).
# HERE first: scripts/gpu/pack.sh (.carry/bin), TALLY_CACHE=.carry/kcache tally kernels --arch
# sm_90a, and nvcc lab/delta/bench.cu -> .carry/lab/delta_bench (lab/delta/run.sh's flags, plus
# -L <cuda lib> for the PyPI wheels' static runtime). Carry .carry/bin, .carry/kcache, .carry/lab.
#   1. lab: delta_rule_chunk_scan against _scan2 at 512 / 2,048 / 8,192 tokens (the 35B heads),
#      their times and whether o and the state are the same bits (prediction: scan 0.35 -> ~0.25
#      ms at 8,192 on an H100, the same bits);
#   2. logits digests (prefill of 600 tokens, chunked, + 6 steps) of the 4-layer 35B-shaped
#      file with TALLY_DELTA_SCAN=single and ring: the same bits;
#   3. tally check (node by node against the CPU) of the mid file at 300 tokens, ring;
#   4. pp8192 and pp32768 of the 35B-A3B Q4_K_M file, single / ring alternated twice
#      (prediction: pp8192 +1-1.5%, 30 layers x ~0.1 ms of 203 ms).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job delta-ring
T=$TALLY_NOPEER
timeout 180 .carry/lab/delta_bench > "$OUT/lab-delta.txt" 2>&1
row "lab delta" "rc=$? ($(el))"
grep -E "chunk_scan|chunked T=|FAIL|SUMMARY" "$OUT/lab-delta.txt" >> "$OUT/summary.txt"
mid_l4_files
for v in single ring; do TALLY_DELTA_SCAN=$v RUN_TOKENS=600 run_json "$v" "$L4"; done
row "digests l4 600 tokens single/ring" "$(logits_same "$OUT" l4 single ring) ($(el))"
TALLY_DELTA_SCAN=ring timeout 200 "$T" check --model "$MID" --backend cuda --tokens 300 -n 3 > "$OUT/check-mid-ring.log" 2>&1
row "check mid 300 tokens, ring" "rc=$? ($(el))"
pack
F=/tmp/q4_k_m.gguf
[ -f /dev/shm/q4_k_m.gguf ] && F=/dev/shm/q4_k_m.gguf
[ -f "$F" ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > /dev/null 2>&1
for round in 1 2; do
    for v in single ring; do
        TALLY_DELTA_SCAN=$v timeout 150 "$T" bench -m $F --backend cuda -p 8192,32768 -n 0 -r 3 -o json \
            > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp delta_scan=$v $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
done
pack
printf '%s\n' "${summary[@]}"
