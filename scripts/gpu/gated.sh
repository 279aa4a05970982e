#!/usr/bin/env bash
# Issue 14: the routed experts' gate, up and SwiGlu of a prompt in one gated wgmma launch
# (gemm_<t>_g32 / _g128, ops/fused.rs expert_gated; opt-in TALLY_GATED=on, else two launches and
# the binary map), and add_rms_norm leaving unstored the intermediate outputs no later node reads
# (the combine's, the gated shared expert's, the FFN sum's; opt-in TALLY_ADD_NORM=skip). Written
# 2026-12-04 without a GPU (checked on the CPU emulator only): run this first, then make both
# the default if the digests agree and the times say so. Checks: logits digests (prefill + 6
# decode steps) on mid q4_k_m (300 and 1,000 tokens) and the 4-layer 35B-shaped file (300
# tokens: w32, 4,000: w128): default == both on == TALLY_NO_FUSE=1. Then the 35B-A3B Q4_K_M
# synth file: pp512, pp2048, pp8192 ABAB (A default, B both on); tg128 A and B. HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache
# tally kernels --arch sm_90a. Carry .carry/bin, .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job g
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
mid_l4_files
for spec in "$MID 300" "$MID 1000" "$L4 300" "$L4 4000"; do
    set -- $spec
    n=$(basename $1 .gguf)
    for v in on off nofuse; do
        case $v in
            on) e=(TALLY_GATED=on TALLY_ADD_NORM=skip) ;;
            off) e=() ;;
            nofuse) e=(TALLY_NO_FUSE=1) ;;
        esac
        env "${e[@]}" timeout 120 "$T" run --model $1 --backend cuda --tokens $2 -n 6 -o json \
            > "$OUT/run-$n-$2-$v.json" 2> "$OUT/run-$n-$2-$v.err"
    done
    row "digests $n tokens=$2" "$(logits_same "$OUT" "$n-$2" on off nofuse) ($(el))"
done
pack
wait $SYNTH
row synth "$(el)"
for round in 1 2; do
    for v in A B; do
        e=(); [ $v = B ] && e=(TALLY_GATED=on TALLY_ADD_NORM=skip)
        env "${e[@]}" timeout 150 "$T" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
for v in A B; do
    e=(); [ $v = B ] && e=(TALLY_GATED=on TALLY_ADD_NORM=skip)
    env "${e[@]}" timeout 150 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 -o json > "$OUT/tg-$v.json" 2> "$OUT/tg-$v.err"
    row "tg128 $v" "rc=$? $(bench_row "$OUT/tg-$v.json") ($(el))"
done
pack
printf '%s\n' "${summary[@]}"
