#!/usr/bin/env bash
# Issue 13: where a speculative verification step's device time goes. The 35B-A3B shapes with 4
# layers and the MTP block (Q4_K_M, pool fill), `tally bench --spec mtp --draft-max 3
# --replay-acceptance 0.8` under ncu (clock control none, kernels serialised): every step's
# kernel count and device time (a step starts at the embedding lookup), then the kernel
# tables of one plain decode step and of one 4-token verification step.
# HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a.
# Carry .carry/bin and .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job sp
T=$TALLY_NOPEER
M=/tmp/l4-mtp.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --fill pool --mtp --out $M > "$OUT/synth.log" 2>&1
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu-spec.csv" \
    "$T" bench -m $M --backend cuda -p 1 -n 16 -r 3 --spec mtp --draft-max 3 --replay-acceptance 0.8 -o md \
    > "$OUT/spec.md" 2> "$OUT/spec.err"
echo "ncu rc=$?"
python3 tools/gpu/ncu_spec.py "$OUT/ncu-spec.csv" > "$OUT/steps.txt" 2>&1
gzip -f "$OUT/ncu-spec.csv"
tar -C /tmp -czf "$REAL_OUT/sp.tgz" sp
head -90 "$OUT/steps.txt"
