#!/usr/bin/env bash
# 2026-12-07, stop 51: the one-row integer GEMVs on gemvi_<t> / gemvi_multi_<t> and the MoE
# downs on mmvi_<t> / mmvi_multi_<t> (issue 13). Carry .carry/bin (tally-nopeer: this commit)
# and .carry/kcache. TALLY_GEMVI=off TALLY_MMVI=off is the base (gemv_<t> / gemv4_<t> /
# gemv_multi_<t> / mmv_<t>, as before), the same binary with both on the change; arm3 is
# TALLY_MMVI=off (gemvi alone). (Both were off by default until this call measured them; on
# since: docs/results/2026-12-07-stop51/.)
# Why (stop 50's ncu sections): the decode GEMVs run 2 blocks a multiprocessor (109-117
# registers: gemv_multi inlines the f32 and multi-row bodies beside the integer one) and issue
# an instruction every ~7 cycles per warp. The integer body alone fits 64 registers without
# spills (nvcc -Xptxas -v): 4 blocks, twice the warps to hide latency with.
# mmvi: the downs (K = 512) in integer arithmetic (about a third of mmv's f32 instructions per
# weight byte), 3 blocks a multiprocessor for Q4_K, 4 for Q6_K (mmv: 117 registers, 2).
# Prediction (written before): in-projections and gate/up 25-35% faster under ncu (16.5 ->
# ~11.5 us, 14.3 -> ~10 us), the downs 12.9 -> ~8 us; tg128 +5-8% from gemvi, +3-5% more from
# mmvi on Q4_K_M; the same bits (digests same: mmvi writes gemv_<t>'s sums, and the CPU
# emulator's `int` mode has every integer format bit for bit, but mmv's f32 sums differ in the
# last bits, so digests off/on may differ where the downs run mmv: checked against the CPU).
#   1. digests of the 4-layer file, off / on; tally check (CUDA vs CPU) of the mid file in
#      q4_k_m, q8_0, iq4_xs, mxfp4_moe;
#   2. ncu of one decode step of the 4-layer file, off / on;
#   3. 35B-A3B: tg128 (pp512 beside) off / on alternated twice, Q4_K_M, Q8_0, IQ4_XS (MIXES).
set -u
LIMIT=${LIMIT:-565}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
N=$PWD/.carry/bin/tally-nopeer
B=/tmp/tally-gemvi-off
printf '#!/bin/sh\nTALLY_GEMVI=off TALLY_MMVI=off exec %s "$@"\n' "$N" > $B
chmod +x $B
export TALLY=$N TALLY_NOPEER=$N TALLY_GEMVI=on TALLY_MMVI=on
gpu_job s51a
gpu_and_dir
mid_l4_files
run_json base "$L4" "$B"
TALLY_MMVI=off run_json gemvi "$L4" "$N"
run_json new "$L4" "$N"
row "digests l4 off/gemvi" "$(logits_same "$OUT" l4 base gemvi) ($(el))"
row "digests l4 off/gemvi+mmvi" "$(logits_same "$OUT" l4 base new) ($(el))"
while read -r l; do row "$l" ""; done < <(T0=$t0 synth_checks "mid q4_k_m 4 300" "mid q8_0 4 300" "mid iq4_xs 4 300" "mid mxfp4_moe 4 300")
for f in "$OUT"/check_*.log; do row "$(basename "$f")" "$(tail -1 "$f" | cut -c1-90)"; done
ncu_step off "$L4" "$B"
ncu_step on "$L4" "$N"
pack
for mix in ${MIXES:-q4_k_m q8_0 iq4_xs}; do
    [ "$(( $(date +%s) - t0 ))" -lt "${LIMIT}" ] || break
    synth_35b "$mix"
    ARM3="TALLY_MMVI=off" AB_UNTIL=$LIMIT ab "tg-$mix" "$F" -p 512 -n 128
    rm -f "$F"
done
pack
printf '%s\n' "${summary[@]}"
for v in off on; do sed -n '/^kernel/,/^$/p' "$OUT/step-$v.txt" | head -12; done
