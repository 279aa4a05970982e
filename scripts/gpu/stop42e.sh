#!/usr/bin/env bash
# 2026-12-06, stop 42, call 5: after x32 and the shorter walks (this tree): the pp512 ledger of
# the 35B-A3B Q4_K_M file (tally against itself: every category's time, bytes and floor, for
# the next step's choice), pp32768 with tally's device peak (issue 14's memory row), and Q8_0
# pp512 / pp2048 base (b2296eb) / new, twice (its downs move from s32 / m32 to x32 / x96).
# Carry .carry/s42d.tar.xz (as call 4).
# Prediction (written before): the MoE gate/up the largest category (~9-11 ms), the downs
# ~7-8 ms; pp32768 ~30k tok/s with the peak ~26 GiB as at stop 41 (the tiles' shared memory is
# not device memory); Q8_0 pp512 +5-10%, pp2048 +10-20% (lab: its down 0.331 -> 0.256 ms at
# 512 tokens, 0.711 -> 0.330 at 2,048).
# (Since the review: the preamble is env.sh's ab_start and the Q8_0 rounds its ab; as run: git
# show 6058c25:scripts/gpu/stop42e.sh.)
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s42e s42d
F=$D/q4km.gguf
G=$D/q8_0.gguf
"$N" synth --preset 35b-a3b --quant q8_0 --seed 1 --fill pool --out $G > "$OUT/synth-q8.log" 2>&1 &
SYNTH=$!
"$N" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1
row "synth q4_k_m" "$(el)"
timeout 200 "$N" ledger --model $F --backend cuda --peer self -p 512 -r 3 --out-dir "$OUT/ledger-pp512" > "$OUT/ledger-pp512.log" 2>&1
row "ledger pp512" "rc=$? ($(el))"
pack
timeout 120 "$N" bench -m $F --backend cuda -p 32768 -n 0 -r 3 > "$OUT/pp32768.md" 2> "$OUT/pp32768.err"
row "pp32768" "rc=$? ($(el))"
pack
rm -f $F
wait $SYNTH
row "synth q8_0" "$(el)"
AB_UNTIL=330 ab q8 $G -p 512,2048 -n 0
rm -f $G
grep -E "^\||peak|GiB" "$OUT/pp32768.md" | head -6
grep -E "^(MoE|Dense|Shared|Element|Norms|Delta|Router|Causal|Total|End-to-end)" "$OUT/ledger-pp512/ledger.txt" | cut -c1-110 | head -20
printf '%s\n' "${summary[@]}"
