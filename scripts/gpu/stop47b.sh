#!/usr/bin/env bash
# 2026-12-06, stop 47, call 2. Carry .carry/s47a.tar.xz (as stop47a.sh).
#   1. per-kernel device time (ncu) of one decode step of the 4-layer 35B-shaped Q4_K_M file,
#      bin/tally as call 1 chose it (TALLY_WSX: WSX, default off): where the ~3 ms step is now;
#   2. per-kernel device time of an 8,192-token prefill of the same file, TALLY_WSX=off / on
#      (the downs on x128 / x96 against xs128), each in its own folder.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s47b s47a
mkdir -p "$OUT/p"
M=/tmp/l4.gguf
"$N" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --fill pool --out "$M" > /dev/null 2>&1
row "synth l4" "$(el)"
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
TALLY_WSX=${WSX:-off} timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/p/ncu-d0.csv" "$N" generate --model "$M" \
  --tokenizer crates/text/tests/data/tiny.gguf --backend cuda --prompt "The quick brown fox jumps over the lazy dog" \
  -n 4 --temp 0 --ignore-eos > "$OUT/p/ncu-d0.out" 2>&1
row "ncu decode step" "rc=$? ($(el))"
python3 tools/gpu/ncu_step.py "$OUT/p/ncu-d0.csv" > "$OUT/p/step-d0.txt" 2>&1
gzip -f "$OUT/p/ncu-d0.csv"
pack
for v in off on; do
    mkdir -p "$OUT/wsx-$v"
    (OUT=$OUT/wsx-$v; TALLY_WSX=$v ncu_prefill "$M" 8192 "$N")
    row "ncu pp8192 wsx=$v" "$(head -1 "$OUT/wsx-$v/kernels-pp8192.txt") ($(el))"
    pack
done
printf '%s\n' "${summary[@]}"
sed -n '1,40p' "$OUT/p/step-d0.txt"
for v in off on; do echo "== wsx=$v"; grep -E "gemm_q[46]_k_x|xs128|gs256" "$OUT/wsx-$v/kernels-pp8192.txt" | head -8; done
