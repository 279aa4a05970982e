#!/usr/bin/env bash
# 2026-12-06, stop 45, call 2. Carry .carry/s45b.tar.xz: bin/tally (this tree with the dynamic-
# link llama.cpp peer), llama-lib, kcache (default and TALLY_ATTN=wg-serial), lab/attn_bench.
#   1. the lab: flash_attn_wg_d256 (the serial form, now the engine's default) against its
#      pipelined form (flash_attn_wg_pipe_d256: one barrier a tile with three V slots, and its
#      MMA steps peeled: call 1's pipelined form had two barriers a tile and, ptxas said only
#      afterwards (C7520), every wgmma serialised by its waits on divergent paths) and
#      flash_attn_h_w4_d256;
#   2. prefill A/B on the 35B-A3B Q4_K_M file: TALLY_ATTN=wg / wg-pipe / f16, alternated
#      twice, pp512, pp8192, pp32768; the faster wgmma form (pp8192 + pp32768) is BEST;
#   3. side by side with llama.cpp with TALLY_ATTN=BEST: pp512, pp8192, tg128 (SBS_P, SBS_D:
#      other lengths and depths), in what is left of 285 s.
# Prediction (written before): (1) pipelined >= serial by 10-15% at pp8192 and longer (call 1:
# serial 401 / 444 TFLOP/s at pp8192 / pp32768, the serialised two-barrier pipelined form 356 /
# 394); (2) pp32768 ~34.5k with the pipelined form (call 1: f16 30.7k, serial 33.8k), pp8192 ~39.7k;
# (3) H100: pp512 ~15.0k (2.7x), pp8192 ~39.5k (7x), pp32768 ~34k, tg128 ~320 (1.39x).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s45b s45b
timeout 120 .carry/lab/attn_bench --quick > "$OUT/attn_bench.txt" 2>&1
row "lab attn_bench --quick" "rc=$? $(tail -1 "$OUT/attn_bench.txt") ($(el))"
grep -E "^(pp|shape)" "$OUT/attn_bench.txt" | grep -E "shape|w4 \+cvt|wg" > "$OUT/attn_table.txt"
pack
synth_35b q4_k_m
for v in wg wg-pipe f16 wg wg-pipe f16; do
    [ "$(( $(date +%s) - t0 ))" -lt 110 ] || continue
    TALLY_ATTN=$v timeout 100 "$N" bench -m "$F" --backend cuda -p 512,8192,32768 -n 0 -r 3 -o json > "$OUT/pp-$v-$(date +%s).json" 2> "$OUT/pp-$v.err"
    row "pp $v" "rc=$? $(bench_row "$(ls -t "$OUT"/pp-$v-*.json | head -1)") ($(el))"
    pack
done
BEST=$(python3 - "$OUT" <<'PY'
import glob, json, sys
best = {}
for v in ("wg", "wg-pipe"):
    t = [sum(x["avg_ts"] for x in json.load(open(f)) if x["test"] in ("pp8192", "pp32768"))
         for f in glob.glob(f"{sys.argv[1]}/pp-{v}-*.json")]
    best[v] = sum(t) / len(t) if t else 0
print(max(best, key=best.get))
PY
)
row "best wgmma form" "$BEST"
left=$(( 285 - $(date +%s) + t0 ))
[ "$left" -gt 60 ] && TALLY_ATTN=$BEST timeout "$left" "$N" bench -m "$F" --backend cuda --peer llama.cpp -p "${SBS_P:-512,8192}" -n 128 -d "${SBS_D:-0}" -r 3 \
    -o md --out-dir "$OUT/sbs" > "$OUT/sbs.md" 2> "$OUT/sbs.err"
row "bench sbs ($BEST)" "rc=$? ($(el))"
pack
printf '%s\n' "${summary[@]}"
cat "$OUT/attn_table.txt"
cat "$OUT/sbs.md" | head -30
