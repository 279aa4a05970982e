#!/usr/bin/env bash
# Stop 53's opt-ins on whatever GPU comes (written 2026-12-07 in a session that got none; run it
# in the next one). Carry .carry/s53b.tar.xz (bin/tally: no peer, the commit named in
# .carry/s53b.commit; kcache for it). Both opt-ins are bit for bit on the CPU emulator and leave
# the default kernels' machine code as it was; here they meet the GPU:
#   TALLY_DELTA_PREP=prologue  the delta gates and q/k L2 norms inside the chunked prep
#                              (delta_rule_chunk_prep_pro): two launches and a q/k pass fewer
#                              per linear-attention layer;
#   TALLY_NORM_CAST=on         the fused norms store their output as f16 for the cuBLAS
#                              projections after them (add_rms_norm_256_h, norm_rows_w_h): ~110
#                              cast_f16_rows launches fewer at 8,192 tokens;
#   TALLY_WS256=a2             gs256 with two A stages (gemm_q4_k_gs256a): the decoders store a
#                              step's A while the previous step's MMAs run.
#   1. logits digests (an 8,192-token prompt and 6 decode steps) of the 4-layer 35B-shaped file
#      and the mid file, with each opt-in and all three: the same as without (they must be);
#   2. pp512 / pp8192 / pp32768 of the 35B-A3B Q4_K_M synth file, five arms (plain, prep, cast,
#      a2, all) alternated twice;
#   3. ncu's device time per kernel of the 8,192-token prefill with all three on (the new
#      kernels' own times against a plain run's table: stop53a.sh's H200 one if it ran, else
#      stop 48's H100 one).
# Prediction (written before): (1) the same digests everywhere; (2) on an H200 pp8192 +1.0-1.5%
# from prep (the q/k norm pass ~2-3 ms of ~193), +0.8-1.2% from cast, +3-8% from a2 (gs256 is
# ~38 ms; its consumers waited at FULL 27-35% of the time, and at most that goes: the decoders'
# own stream may then bound it); pp512 +1-2% from prep and cast, a2 not taken there (under 192
# rows per expert); pp32768 smaller gains.
set -u
LIMIT=${LIMIT:-570}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s53b s53b
mid_l4_files
synth_35b q4_k_m
pack
export RUN_TOKENS=8192
for f in "$L4" "$MID"; do
    n=$(basename "$f" .gguf)
    run_json plain "$f"
    TALLY_DELTA_PREP=prologue run_json prep "$f"
    TALLY_NORM_CAST=on run_json cast "$f"
    TALLY_WS256=a2 run_json a2 "$f"
    TALLY_DELTA_PREP=prologue TALLY_NORM_CAST=on TALLY_WS256=a2 run_json all "$f"
    row "digests $n 8192+6" "$(logits_same "$OUT" "$n" plain prep cast a2 all) ($(el))"
done
unset RUN_TOKENS
pack
for round in 1 2; do
    for arm in plain prep cast a2 all; do
        [ "$(( $(date +%s) - t0 ))" -lt $(( LIMIT - 120 )) ] || continue
        e=()
        case $arm in
            prep) e=(TALLY_DELTA_PREP=prologue) ;;
            cast) e=(TALLY_NORM_CAST=on) ;;
            a2) e=(TALLY_WS256=a2) ;;
            all) e=(TALLY_DELTA_PREP=prologue TALLY_NORM_CAST=on TALLY_WS256=a2) ;;
        esac
        env "${e[@]}" timeout 120 "$N" bench -m "$F" --backend cuda -p 512,8192,32768 -n 0 -r 3 -o json \
            > "$OUT/pp-$arm-$round.json" 2> "$OUT/pp-$arm-$round.err"
        row "pp $arm $round" "rc=$? $(bench_row "$OUT/pp-$arm-$round.json") ($(el))"
        pack
    done
done
if [ "$(( $(date +%s) - t0 ))" -lt $(( LIMIT - 60 )) ]; then
    TALLY_DELTA_PREP=prologue TALLY_NORM_CAST=on TALLY_WS256=a2 ncu_prefill "$F" 8192 "$N"
    pack
fi
printf '%s\n' "${summary[@]}"
head -30 "$OUT/kernels-pp8192.txt" 2> /dev/null
