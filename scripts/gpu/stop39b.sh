#!/usr/bin/env bash
# NOT RUN (2026-12-06: device time ran out after failed starts; stop39a.sh measured mxfp4_moe and
# q8_0). Kept for iq4_xs and q5_k_m: MIXES="iq4_xs q5_k_m" with the carry of stop39a.sh.
# 2026-12-06, stop 39, call 2: issue 10 item 5, speed on every mix, side by side with
# llama.cpp (the carry of scripts/gpu/stop39a.sh, which has q4_k_m). For each mix of MIXES: the
# 35B-A3B pool file (`tally synth --quant MIX --seed 1 --fill pool`), `tally bench --peer
# llama.cpp -p 512,8192 -n 128 -r 3` (q4_k_m, if named: also pp2048, pp32768 and tg128 at depth
# 8,192 and 32,768), then the file is deleted (disk).
# Prediction (written before): the last per-mix run (2026-12-02, H200) had tally slower at pp512
# on q8_0 (0.69x) and mxfp4_moe (0.95x). Since then pp512 on q4_k_m went 7.9k -> ~13.7k (tiles
# for every type share the design) and tg128 213 -> ~327: tally faster than llama.cpp at pp512,
# pp8192 and tg128 on every mix: q8_0 pp512 ~1.2x (its tile reads twice the bytes of q4_k),
# iq4_xs/mxfp4_moe pp512 ~1.8-2.0x. Per byte against Q4_K: iq4_xs and mxfp4 still 10-25% slower.
set -u
cd "$(dirname "$0")/../.."
tar xJf .carry/s39b.tar.xz -C .carry
export TALLY="$PWD/.carry/bin/tally" TALLY_NOPEER="$PWD/.carry/bin/tally"
. scripts/gpu/env.sh
export LD_LIBRARY_PATH="$PWD/.carry/llama-lib:$LD_LIBRARY_PATH"
gpu_job stop39b
T=$TALLY
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
row gpu "$(cat "$OUT/gpu.txt")"
# The files in RAM when /dev/shm has room for q8_0's 37 GB, else on disk (see stop39a.sh).
D=/tmp; [ "$(df -B1G --output=avail /dev/shm 2> /dev/null | tail -1)" -ge 45 ] 2> /dev/null && D=/dev/shm
row "files in" "$D ($(df -h --output=avail $D | tail -1 | tr -d ' ') free)"
for mix in ${MIXES:-q8_0 iq4_xs mxfp4_moe q5_k_m}; do
    [ "$(( $(date +%s) - t0 ))" -lt 420 ] || { row "$mix" "skipped (time)"; continue; }
    args=(-p 512,8192 -n 128)
    [ $mix = q4_k_m ] && args=(-p 512,2048,8192,32768 -n 128 -d 0,8192,32768)
    f=$D/mix-$mix.gguf
    "$T" synth --preset 35b-a3b --quant $mix --seed 1 --fill pool --out $f -o json > "$OUT/synth-$mix.json" 2>&1
    row "$mix synth" "rc=$? $(stat -c %s $f) bytes ($(el))"
    timeout 250 "$T" bench -m $f --backend cuda --peer llama.cpp "${args[@]}" -r 3 \
        --out-dir "$OUT/sbs-$mix" > "$OUT/bench-$mix.md" 2> "$OUT/bench-$mix.err"
    row "$mix bench" "rc=$? ($(el))"
    rm -f $f
    pack
done
grep -E '^\|' "$OUT"/bench-*.md | cut -d'|' -f1,7- | cut -c1-150
printf '%s\n' "${summary[@]}"
