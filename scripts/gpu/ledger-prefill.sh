#!/usr/bin/env bash
# (Its ledger commands ran inline in scripts/gpu/stop35b.sh on 2026-12-05; this script itself has not
# run yet.)
# Issue 14's ledgers against the floor (every category: ms, floor ms, ratio) at pp512 and
# pp8192 on the 35B-A3B Q4_K_M synth file, tally's CUDA backend against itself (`--peer self`:
# the method's null check; the floor columns are tally's own bytes and FLOPs against the
# measured peaks). Without llama.cpp's libraries (their build takes ~5 of a call's 10 minutes);
# the llama.cpp side of the same table is scripts/gpu/ledger.sh.
#   LEDGER_ENV="TALLY_X=on ..." scripts/gpu/ledger-prefill.sh   (options for both sides)
# HERE first: as scripts/gpu/stop35.sh (carry .carry/new.tar.xz).
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job ledger
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
"$T" machine --backend cuda -o json > "$OUT/machine.json" 2>&1
for n in ${LEDGER_TOKENS:-512 8192}; do
    mkdir -p "$OUT/pp$n"
    env ${LEDGER_ENV:-TALLY_UNUSED=1} timeout ${LEDGER_TIMEOUT:-240} "$T" ledger --model $F --backend cuda --peer self \
        -p $n -r 3 --out-dir "$OUT/pp$n" > "$OUT/pp$n/ledger.txt" 2>&1
    row "ledger pp$n (self)" "rc=$? $(grep -m1 -iE 'verdict|headline' "$OUT/pp$n/ledger.txt" | cut -c1-100) ($(el))"
    pack
done
printf '%s\n' "${summary[@]}"
