#!/usr/bin/env bash
# 2026-12-06, stop 41, call 5: with the shared copies of calls 3-4, the lab's x-resident 32-row
# tile beat the engine's m32 for the Q4_K down at 512 tokens (call 3, lab --wg: x32g 0.152 ms
# against m32 0.204). x32g is an opt-in (TALLY_X32G=on; it was "no gain" in 2026-12-05-h100-stop35).
# Carry .carry/s41c.tar.xz (stop41c.sh's binaries). The 35B-A3B Q4_K_M file: pp512, pp2048,
# pp8192 for A = defaults and B = TALLY_X32G=on, ABAB; tally check mid q4_k_m at 64 tokens with
# B (x32g's rows); then pp32768 with the defaults in Markdown (the device peak, issue 14).
# Prediction (written before): B pp512 +2.5-3% over A (20 Q4_K downs of ~0.2 ms each, a quarter
# faster), pp2048 and pp8192 within 1% (x32g is taken up to 32 rows per expert only).
set -u
cd "$(dirname "$0")/../.."
tar xJf .carry/s41c.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job s41d
N=.carry/bin/tally
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
D=/tmp; [ "$(df -B1G --output=avail /dev/shm 2> /dev/null | tail -1)" -ge 45 ] 2> /dev/null && D=/dev/shm
F=$D/q4km.gguf
"$N" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
TALLY_NOPEER=$N mid_l4_files
TALLY_X32G=on timeout 150 "$N" check --model $MID --backend cuda --tokens 64 -n 3 > "$OUT/check-mid-64-x32g.log" 2>&1
row "check mid q4_k_m tokens=64 x32g" "rc=$? ($(el))"
wait $SYNTH
row synth "$(el)"
for round in 1 2; do
    for v in A B; do
        e=(); [ $v = B ] && e=(TALLY_X32G=on)
        env "${e[@]}" timeout 120 "$N" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
        pack
    done
done
timeout 200 "$N" bench -m $F --backend cuda -p 32768 -n 0 -r 3 > "$OUT/pp32768.md" 2> "$OUT/pp32768.err"
row "pp32768 defaults" "rc=$? ($(el))"
rm -f $F
pack
grep -E "^\||peak|GiB" "$OUT/pp32768.md" | head -8
printf '%s\n' "${summary[@]}"
