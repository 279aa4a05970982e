#!/usr/bin/env bash
# Issues 13 and 14: add_rms_norm's register form (every input loaded before any output is
# written; 4 values a thread at 1,024 threads for decode, 8 at 256 for prefill in
# add_rms_norm_256), and norm_rows_w only where the groups are many (at least 4 blocks a
# multiprocessor). Checks: logits digests (prefills of 37 and 300 tokens: the 1,024- and
# 256-thread forms, + 6 decode steps) on mid q4_k_m and the 4-layer 35B-shaped file: default ==
# TALLY_ADD_NORM=loop == TALLY_NORM=block + loop; `tally check --backend cuda` on mid q4_k_m
# at 1,000 tokens. Then the 35B-A3B Q4_K_M synth file: tg128 ABAB (loop, default) and
# pp512/pp8192/pp32768 (block + loop, default, twice). HERE first: scripts/gpu/pack.sh;
# TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a. Carry .carry/bin, .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job a
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
mid_l4_files
timeout 150 "$T" check --model $MID --backend cuda --tokens 1000 -n 2 > "$OUT/check-mid-1000.log" 2>&1
row "check mid q4_k_m tokens=1000" "rc=$? ($(el))"
for f in $MID $L4; do
    n=$(basename $f .gguf)
    for tok in 37 300; do
        for v in regs loop blockloop; do
            case $v in
                regs) e=() ;;
                loop) e=(TALLY_ADD_NORM=loop) ;;
                blockloop) e=(TALLY_ADD_NORM=loop TALLY_NORM=block) ;;
            esac
            env "${e[@]}" timeout 120 "$T" run --model $f --backend cuda --tokens $tok -n 6 -o json \
                > "$OUT/run-$n-$tok-$v.json" 2> "$OUT/run-$n-$tok-$v.err"
        done
        row "digests $n tokens=$tok" "$(logits_same "$OUT" "$n-$tok" regs loop blockloop) ($(el))"
    done
done
pack
wait $SYNTH
row synth "$(el)"
for v in loop regs loop regs; do
    TALLY_ADD_NORM=$v timeout 150 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-$v-$(date +%s).json" 2> "$OUT/tg-$v.err"
    row "tg128 add_norm=$v" "rc=$? $(bench_row "$(ls -t "$OUT"/tg-$v-*.json | head -1)") ($(el))"
done
pack
for v in old new old new; do
    e=(); [ $v = old ] && e=(TALLY_ADD_NORM=loop TALLY_NORM=block)
    env "${e[@]}" timeout 150 "$T" bench -m $F --backend cuda -p 512,8192,32768 -n 0 -r 3 -o json > "$OUT/pp-$v-$(date +%s).json" 2> "$OUT/pp-$v.err"
    row "pp $v" "rc=$? $(bench_row "$(ls -t "$OUT"/pp-$v-*.json | head -1)") ($(el))"
done
pack
printf '%s\n' "${summary[@]}"
