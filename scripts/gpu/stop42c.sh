#!/usr/bin/env bash
# 2026-12-06, stop 42, call 3: why x32 (the routed downs of short prompts, lab -40% for Q4_K,
# -20% for Q6_K) gave nothing in the engine (call 2: pp512 base 14,174 / 14,296, x32 14,097 /
# 14,201). Hypothesis: the tiles are not a whole number of waves. x32 runs one block a tile
# (walking all 16 weight blocks), two an SM for Q4_K (264 at once on the H100): the lab's
# uniform routing makes ~258 tiles (one wave), the model's routing is skewed (more experts over
# 32 rows: more tiles), so past 264 a second wave of a few blocks costs a whole block's time.
# TALLY_WGX_WALK=n (new, an experiment switch) makes each block walk n weight blocks: n = 4,
# four times the blocks, a quarter of the tail. Carry .carry/s42c.tar.xz (bin/tally = this
# tree, bin/tally-base = b2296eb, kcache).
#   1. 35B-A3B Q4_K_M pp512, pp2048: base / new (walk 16) / new walk 8 / 4 / 2, twice;
#   2. ncu time per kernel of one pp512, new with walk 16 and 4;
#   3. mid mxfp4_moe check at 300 and 64 tokens (call 2's decode step 2 failed on top-1 alone at
#      logits error 1.03e-4: a near-tie? the new check prints the gap);
#   4. 35B IQ4_XS and MXFP4_MOE: pp512, pp2048, base / new walk 4, twice, while time is left.
# Prediction (written before): walk 4 pp512 +4-6% over the base (the Q4_K down 206 -> ~145 us,
# Q6_K 324 -> ~300 in the engine), walk 16 within 1% of the base; in ncu the Q4_K x32 takes
# >= 180 us at walk 16 and <= 150 at walk 4. pp2048 unchanged by the walk of x96 +-2%. mxfp4:
# the gap under 1e-3 (a tie). IQ4_XS / MXFP4_MOE: pp512 +4-8%, pp2048 +8-15% (their downs move
# from s32 / m64 to x32 / x96).
# (Since the review: the preamble is env.sh's ab_start; as run: git show 6058c25:scripts/gpu/stop42c.sh.)
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s42c s42c
F=$D/q4km.gguf
"$N" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
M=/tmp/mid-mxfp4_moe.gguf
"$N" synth --preset mid --quant mxfp4_moe --seed 4 --out $M > /dev/null 2>&1
timeout 200 "$N" check --model $M --backend cuda --tokens 300,64 -n 3 > "$OUT/check-mid-mxfp4_moe.log" 2>&1
row "check mid mxfp4_moe 300,64" "rc=$? $(grep -E 'decode step 2' "$OUT/check-mid-mxfp4_moe.log" | cut -d'|' -f6) ($(el))"
pack
wait $SYNTH
row synth "$(el)"
# arm NAME BIN WALK FILE TESTS ROUND
arm() {
    local e=(); [ "$3" != - ] && e=(TALLY_WGX_WALK=$3)
    env "${e[@]}" timeout 120 "$2" bench -m "$4" --backend cuda -p "$5" -n 0 -r 3 -o json > "$OUT/pp-$1-$6.json" 2> "$OUT/pp-$1-$6.err"
    row "pp $1 $6" "rc=$? $(bench_row "$OUT/pp-$1-$6.json") ($(el))"
}
for r in 1 2; do
    arm base $B - $F 512,2048 $r
    for w in - 8 4 2; do arm "q4km-walk$w" $N $w $F 512,2048 $r; done
    pack
done
ncu_prefill $F 512 $N
mv "$OUT/kernels-pp512.txt" "$OUT/kernels-pp512-walk-.txt"
TALLY_WGX_WALK=4 ncu_prefill $F 512 $N
mv "$OUT/kernels-pp512.txt" "$OUT/kernels-pp512-walk4.txt"
pack
rm -f $F
for mix in iq4_xs mxfp4_moe; do
    [ "$(( $(date +%s) - t0 ))" -lt 430 ] || break
    G=$D/$mix.gguf
    "$N" synth --preset 35b-a3b --quant $mix --seed 1 --fill pool --out $G > /dev/null 2>&1
    for r in 1 2; do
        [ "$(( $(date +%s) - t0 ))" -lt 520 ] || break
        arm "$mix-base" $B - $G 512,2048 $r
        arm "$mix-walk4" $N 4 $G 512,2048 $r
        pack
    done
    rm -f $G
done
for w in - 4; do echo "== ncu walk$w"; grep -E "_(x32|x64|m32|x96|s32|g32) " "$OUT/kernels-pp512-walk$w.txt" | head -4; done
printf '%s\n' "${summary[@]}"
