#!/usr/bin/env bash
# 2026-12-06, stop 47, call 1. Carry .carry/s47a.tar.xz: bin/tally (b3314df plus
# docs/results/2026-12-06-stop46/gs256-consumer-x.patch, with the dynamic-link llama.cpp peer),
# bin/tally-base (b3314df as committed, no peer), llama-lib, kcache (both gemm entries).
#   1. prefill A/B/C on the 35B-A3B Q4_K_M file, pp512, pp8192, pp32768, alternated twice while
#      time allows: base (b3314df: gs256 with the decoders copying x), new (gs256 with the
#      consumers copying x), arm3 (new + TALLY_WSX=on: the downs on xs128);
#   2. side by side with llama.cpp (bin/tally, the faster of new / arm3): pp512, pp8192,
#      pp32768, tg128;
#   0. (first) logits digests of an 8,192-token prompt (35B shapes, 4 layers): base, new, arm3;
#   4. in what is left (stop47b.sh's work, for a call that ends early): ncu's per-kernel time of
#      one decode step of the 4-layer file, then of its 8,192-token prefill, TALLY_WSX=off / on.
# Prediction (written before): (1) new vs base pp8192 +3%, pp32768 +2%, pp512 even; arm3 vs new
# pp8192 +5-7%, pp32768 +3%, pp512 even; (2) on an H200 (more bandwidth, the H100's SMs):
# pp512 ~16k, pp8192 ~42k, pp32768 ~35k, tg128 ~330; llama.cpp pp512 ~5.6k; (3) the same bits.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s47a s47a
mid_l4_files
RUN_TOKENS=8192 run_json base "$L4" "$B"
TALLY_WSX=off RUN_TOKENS=8192 run_json new "$L4" "$N"
TALLY_WSX=on RUN_TOKENS=8192 run_json arm3 "$L4" "$N"
row "digests l4 8192 base/new/arm3" "$(logits_same "$OUT" l4 base new arm3) ($(el))"
pack
synth_35b q4_k_m
ARM3="TALLY_WSX=on" AB_UNTIL=260 ab p3 "$F" -p 512,8192,32768 -n 0
BEST=$(python3 - "$OUT" <<'PY'
import glob, json, sys
best = {}
for v in ("new", "arm3"):
    t = [sum(x["avg_ts"] for x in json.load(open(f)) if x["test"] in ("pp8192", "pp32768"))
         for f in glob.glob(f"{sys.argv[1]}/p3-{v}-*.json")]
    best[v] = sum(t) / len(t) if t else 0
print("on" if best["arm3"] > best["new"] else "off")
PY
)
row "faster: TALLY_WSX" "$BEST"
TALLY_WSX=$BEST timeout 200 "$N" bench -m "$F" --backend cuda --peer llama.cpp -p 512,8192,32768 -n 128 -r 3 \
    -o md --out-dir "$OUT/sbs" > "$OUT/sbs.md" 2> "$OUT/sbs.err"
row "bench sbs (TALLY_WSX=$BEST)" "rc=$? ($(el))"
pack
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
left=$(( 560 - $(date +%s) + t0 ))
if [ "$left" -gt 60 ] && [ -f "${L4:-}" ]; then
    mkdir -p "$OUT/p"
    TALLY_WSX=$BEST timeout $(( left < 150 ? left : 150 )) ncu --clock-control none --metrics gpu__time_duration.sum --csv \
        --log-file "$OUT/p/ncu-d0.csv" "$N" generate --model "$L4" --tokenizer crates/text/tests/data/tiny.gguf --backend cuda \
        --prompt "The quick brown fox jumps over the lazy dog" -n 4 --temp 0 --ignore-eos > "$OUT/p/ncu-d0.out" 2>&1
    row "ncu decode step" "rc=$? ($(el))"
    python3 tools/gpu/ncu_step.py "$OUT/p/ncu-d0.csv" > "$OUT/p/step-d0.txt" 2>&1
    gzip -f "$OUT/p/ncu-d0.csv"
    pack
fi
for v in off on; do
    left=$(( 570 - $(date +%s) + t0 ))
    [ "$left" -gt 50 ] && [ -f "${L4:-}" ] || continue
    mkdir -p "$OUT/wsx-$v"
    TALLY_WSX=$v timeout "$left" ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/wsx-$v/ncu.csv" \
        "$N" run --model "$L4" --backend cuda --tokens 8192 -n 0 > "$OUT/wsx-$v/ncu.out" 2>&1
    python3 tools/gpu/ncu_kernels.py "$OUT/wsx-$v/ncu.csv" > "$OUT/wsx-$v/kernels-pp8192.txt" 2>&1
    gzip -f "$OUT/wsx-$v/ncu.csv"
    row "ncu pp8192 wsx=$v" "$(head -1 "$OUT/wsx-$v/kernels-pp8192.txt") ($(el))"
    pack
done
printf '%s\n' "${summary[@]}"
head -30 "$OUT/sbs.md"
[ -f "$OUT/p/step-d0.txt" ] && sed -n '1,40p' "$OUT/p/step-d0.txt"
for v in off on; do [ -f "$OUT/wsx-$v/kernels-pp8192.txt" ] && grep -E "gemm_q[46]_k_(x|gs)" "$OUT/wsx-$v/kernels-pp8192.txt" | head -6; done
