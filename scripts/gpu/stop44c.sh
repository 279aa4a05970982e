#!/usr/bin/env bash
# 2026-12-06, stop 44, call 3. Carry .carry/s44sbs.tar.xz: bin/tally (this tree with the dynamic-
# link llama.cpp peer, scripts/gpu/pack.sh --llama), llama-lib (llama.cpp's CUDA libraries built
# HERE, scripts/gpu/llama-build-local.sh), kcache. (The repository and the carry must fit 64 MiB
# together: llama-lib is 40 MB compressed, so one binary, and no base binary: the A/B below is
# of switches of one build.)
#   1. decode's add_rms_norm at two values a thread (2048 columns over 1,024 threads; it took
#      four): logits digests default == TALLY_ADD_NORM_LOADS=early == =late == TALLY_ADD_NORM=loop
#      (mid q4_k_m, the 4-layer file); tg128 default / default / early, alternated twice;
#   2. side by side with llama.cpp (issues 13, 14): pp512, pp8192, pp32768, tg128 at depth 0 and
#      8,192; then tally alone: speculative k = 3 at acceptance 0.8 (replayed drafts);
#   3. TALLY_EXPERT_F16=on (the Q6_K downs of prompts on an f16 copy, +10 GB) against the
#      default with today's tiles: pp512, pp8192, pp32768, alternated.
# Prediction (written before): (1) same digests; early +1.5-2.5% at tg128 (the combine's two
# dependent rounds of expert-row loads become one, without the spill NE = 4 had: 20 bytes, -3%
# in call 2). (2) on an H100 pp512
# ~15.3k, pp8192 ~38.3k, pp32768 ~30.5k, tg128 ~318; llama.cpp ~5.3k, ~5.2k, ~4.5k?, ~225.
# (3) pp8192 +2-3%, pp32768 +2%, pp512 +1% (stop 35: +1.3 / +3.3% at 512 / 8192).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s44c s44sbs
# One build: the A/B below is of switches, "base" and "new" both the default.
P=$N
B=$N
mid_l4_files
for f in $MID $L4; do
    run_json new "$f" "$N"; TALLY_ADD_NORM_LOADS=early run_json early "$f" "$N"
    TALLY_ADD_NORM_LOADS=late run_json late "$f" "$N"; TALLY_ADD_NORM=loop run_json loop "$f" "$N"
    row "digests $(basename $f)" "$(logits_same "$OUT" "$(basename "$f" .gguf)" new early late loop)"
done
synth_35b q4_k_m
pack
ARM3="TALLY_ADD_NORM_LOADS=early" AB_UNTIL=260 ab tg "$F" -p 1 -n 128
timeout 300 "$P" bench -m "$F" --backend cuda --peer llama.cpp -p 512,8192,32768 -n 128 -d 0,8192 -r 3 \
    -o md --out-dir "$OUT/sbs" > "$OUT/sbs.md" 2> "$OUT/sbs.err"
row "bench sbs" "rc=$? ($(el))"
pack
timeout 90 "$N" bench -m "$F" --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 --replay-acceptance 0.8 -o json > "$OUT/spec.json" 2> "$OUT/spec.err"
row "spec k=3 a=0.8" "rc=$? $(bench_row "$OUT/spec.json") ($(el))"
pack
for v in def f16 def f16; do
    [ "$(( $(date +%s) - t0 ))" -lt 430 ] || continue
    e=(); [ $v = f16 ] && e=(TALLY_EXPERT_F16=on)
    env "${e[@]}" timeout 100 "$N" bench -m "$F" --backend cuda -p 512,8192,32768 -n 0 -r 3 -o json > "$OUT/xf16-$v-$(date +%s).json" 2> "$OUT/xf16-$v.err"
    row "expert f16 $v" "rc=$? $(bench_row "$(ls -t "$OUT"/xf16-$v-*.json | head -1)") ($(el))"
    pack
done
printf '%s\n' "${summary[@]}"
cat "$OUT/sbs.md" | head -30
