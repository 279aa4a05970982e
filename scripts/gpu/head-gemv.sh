#!/usr/bin/env bash
# The output head's GEMV (issue 13): gemvr_<t> against its bulk-fed form gemvt_<t> (default since
# 2026-12-07, docs/results/2026-12-07-stop48/). HERE first: scripts/gpu/pack.sh (.carry/bin),
# TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a, and nvcc lab/gemm/bench.cu ->
# .carry/lab/gemm_bench (lab/gemm/README.md; add -L <cuda lib> for the PyPI wheels' static
# runtime). Carry .carry/bin, .carry/kcache, .carry/lab.
#   1. lab: the head (Q6_K, 248,320 x 2,048) at 1-4 x rows on gemv4 / gemvr / gemvt / gemvt2 /
#      gemvt4, each checked against the CPU;
#   2. logits digests (prefill 37 + 6 steps) of the 4-layer 35B-shaped file with TALLY_GEMVT=off,
#      4 and 2 and TALLY_GEMVR=off: the same bits;
#   3. greedy token ids of the 4-layer file with its MTP block, plain and speculative (k = 3: the
#      verification's head on gemvt4), TALLY_GEMVT=off and 4: all four the same;
#   4. tg128 of the 35B-A3B Q4_K_M file, TALLY_GEMVT=off / 4 alternated twice.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job head
T=$TALLY_NOPEER
timeout 120 .carry/lab/gemm_bench --decode --head > "$OUT/lab-head.txt" 2>&1
row "lab head" "rc=$? ($(el))"
grep -E "time output head|FAIL" "$OUT/lab-head.txt" >> "$OUT/summary.txt"
mid_l4_files
for v in off 4 2; do TALLY_GEMVT=$v run_json "$v" "$L4"; done
TALLY_GEMVR=off run_json gemv4 "$L4"
row "digests l4 gemvt off/4/2, gemvr off" "$(logits_same "$OUT" l4 off 4 2 gemv4) ($(el))"
L=/tmp/l4mtp.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --fill pool --mtp --out $L > /dev/null 2>&1
for v in off 4; do
    for s in plain mtp; do
        a=(); [ $s = mtp ] && a=(--spec mtp --draft-max 3)
        TALLY_GEMVT=$v timeout 60 "$T" generate --model $L --tokenizer crates/text/tests/data/tiny.gguf --backend cuda \
            --prompt "The quick brown fox jumps over the lazy dog" -n 40 --temp 0 --ignore-eos -o json "${a[@]}" \
            > "$OUT/gen-$v-$s.json" 2> "$OUT/gen-$v-$s.err"
    done
done
row "greedy ids plain/spec x gemvt off/4" "$(python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
ids = {f"{v}-{s}": json.load(open(f"{o}/gen-{v}-{s}.json"))["tokens"] for v in ("off", "4") for s in ("plain", "mtp")}
print("same" if len({str(x) for x in ids.values()}) == 1 else "DIFFER " + " ".join(f"{k}:{v[:6]}" for k, v in ids.items()))
PY
) ($(el))"
pack
F=/tmp/q4_k_m.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > /dev/null 2>&1
for round in 1 2; do
    for v in off 4; do
        TALLY_GEMVT=$v timeout 100 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$v-$round.json" 2> "$OUT/tg-$v-$round.err"
        row "tg128 gemvt=$v $round" "rc=$? $(bench_row "$OUT/tg-$v-$round.json") ($(el))"
    done
done
pack
printf '%s\n' "${summary[@]}"
