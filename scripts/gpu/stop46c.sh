#!/usr/bin/env bash
# 2026-12-06, stop 46, call 3. Carry .carry/s46 (bin/tally of this tree, kcache, lab/gemm_bench).
#   1. logits digests of an 8,192-token prompt and six decode steps (35B shapes, 4 layers):
#      TALLY_WSX=on and off, TALLY_WS256=off (the same bits expected);
#   2. prefill A/B, 35B-A3B Q4_K_M, pp512, pp8192, pp32768, arms alternated (twice where time
#      allows): base (TALLY_WSX=off: x128 / x96 downs, gs256 with the consumers copying x), wsx
#      (TALLY_WSX=on: the downs on xs128), wsx-gs128 (TALLY_WSX=on TALLY_WS256=off);
#   3. the lab: `--gated --only q4_k` (checks; gs128 / gs256 at 512 .. 8,192 tokens), then in
#      what is left `--wg --only-time --only q4_k` (the MoE shapes, xs128 beside x128) and
#      `tally check` of the 4-layer file at 4,200 tokens with xs128.
# Prediction (written before): (1) the same bits; (2) xs128: pp8192 +5-7% (~39.9k -> ~42k),
# pp32768 +3%, pp512 even; gs256 with the consumers' x copies against gs128: pp8192 +3% (call 1:
# +1.8% with the decoders copying x); (3) gs256 at 8,192 tokens 0.948 -> ~0.80 ms; xs128 Q4_K
# down at 8,192 tokens 0.78 -> ~0.5 ms.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
[ -d .carry/s46/kcache ] && rm -rf .carry/kcache && cp -r .carry/s46/kcache .carry/kcache
ab_start s46c none
N=$PWD/.carry/s46/bin/tally
export TALLY=$N TALLY_NOPEER=$N
L=.carry/s46/lab/gemm_bench
mid_l4_files
for v in off on; do
    TALLY_WSX=$v RUN_TOKENS=8192 run_json $v "$L4" "$N"
done
TALLY_WS256=off RUN_TOKENS=8192 run_json gs128 "$L4" "$N"
row "digests l4 8192 wsx off/on, ws256 off" "$(logits_same "$OUT" l4 off on gs128) ($(el))"
pack
synth_35b q4_k_m
for v in base wsx wsx-gs128 base wsx wsx-gs128; do
    [ "$(( $(date +%s) - t0 ))" -lt 200 ] || continue
    case $v in
        base) e="TALLY_WSX=off" ;;
        wsx) e="TALLY_WSX=on" ;;
        wsx-gs128) e="TALLY_WSX=on TALLY_WS256=off" ;;
    esac
    env $e timeout 100 "$N" bench -m "$F" --backend cuda -p 512,8192,32768 -n 0 -r 3 -o json > "$OUT/pp-$v-$(date +%s).json" 2> "$OUT/pp-$v.err"
    row "pp $v" "rc=$? $(bench_row "$(ls -t "$OUT"/pp-$v-*.json | head -1)") ($(el))"
    pack
done
touch "$OUT/lab-table.txt"
if [ "$(( $(date +%s) - t0 ))" -lt 260 ]; then
    timeout 60 $L --gated --only q4_k > "$OUT/lab-gated-q4_k.txt" 2>&1
    row "lab gated q4_k" "rc=$? $(tail -1 "$OUT/lab-gated-q4_k.txt") ($(el))"
    grep -E "gs256 T=|FAIL" "$OUT/lab-gated-q4_k.txt" > "$OUT/lab-table.txt"
    pack
fi
left=$(( 290 - $(date +%s) + t0 ))
if [ "$left" -gt 40 ]; then
    timeout "$left" $L --wg --only-time --only q4_k > "$OUT/lab-wg-q4_k.txt" 2>&1
    row "lab wg q4_k (times)" "rc=$? ($(el))"
    grep -E "^moe |^shape" "$OUT/lab-wg-q4_k.txt" >> "$OUT/lab-table.txt"
fi
left=$(( 330 - $(date +%s) + t0 ))
if [ "$left" -gt 50 ]; then
    TALLY_WSX=on timeout "$left" "$N" check --model "$L4" --backend cuda --tokens 4200 -n 2 > "$OUT/check-l4-wsx-4200.log" 2>&1
    row "check l4 wsx 4200" "rc=$? $(tail -1 "$OUT/check-l4-wsx-4200.log") ($(el))"
fi
pack
printf '%s\n' "${summary[@]}"
cut -c1-220 "$OUT/lab-table.txt"
