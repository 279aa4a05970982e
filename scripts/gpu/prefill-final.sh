#!/usr/bin/env bash
# Issue 14, the session's after-measurement (docs/results/2026-12-04-h200-wgmma): checks, then
# the 35B-A3B Q4_K_M synth file (pool fill, MTP block): tally bench per prompt length (512,
# 8192, 32768, 131072: one invocation each, so each row has its own device peak), the engine's
# own kernels for the dense projections (TALLY_GEMM=kernels) at 512 and 8192, `tally measure`
# at pp512 and pp8192 (graph, standalone, replay: the ledger's after), the per-kernel ncu table
# of one pp8192 prefill, and one speculative row (k = 3, replayed acceptance 0.8).
# HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a.
# Carry .carry/bin and .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job pf2
T=$TALLY_NOPEER
F=/tmp/q4km-mtp.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --mtp --out $F > "$OUT/synth.log" 2>&1 &
SYNTH=$!
"$T" synth --preset mid --quant q4_k_m --seed 4 --out /tmp/mid.gguf > /dev/null 2>&1
for n in 1000 64; do
    timeout 150 "$T" check --model /tmp/mid.gguf --backend cuda --tokens $n -n 2 > "$OUT/check-mid-$n.log" 2>&1
    row "check mid q4_k_m tokens=$n" "rc=$? ($(el))"
done
for f in crates/engine/tests/fixtures/converter/conv-c*.gguf crates/engine/tests/fixtures/converter/conv-d*.gguf; do
    case $f in *.ref.gguf) continue ;; esac
    [ -f "$f" ] || continue
    timeout 60 "$T" check --model "$f" --backend cuda --tokens 24 -n 2 > "$OUT/check-$(basename "$f" .gguf).log" 2>&1
    row "check $(basename "$f")" "rc=$?"
done
wait $SYNTH
row synth "$(el)"
for p in 512 8192 32768 131072; do
    timeout 150 "$T" bench -m $F --backend cuda -p $p -n 0 -r 3 -o md > "$OUT/bench-p$p.md" 2> "$OUT/bench-p$p.err"
    row "bench pp$p" "rc=$? $(grep -E "pp$p " "$OUT/bench-p$p.md" | awk -F'|' '{print $9}') $(grep -oE 'allocations peak [0-9.]+ GiB' "$OUT/bench-p$p.md") ($(el))"
done
pack
TALLY_GEMM=kernels timeout 120 "$T" bench -m $F --backend cuda -p 512,8192 -n 0 -r 3 -o md > "$OUT/bench-kernels.md" 2>&1
row "bench TALLY_GEMM=kernels" "rc=$? $(grep -E 'pp(512|8192) ' "$OUT/bench-kernels.md" | awk -F'|' '{printf "%s=%s ", $8, $9}') ($(el))"
ncu_prefill $F 8192 "$T"
pack
timeout 90 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 --replay-acceptance 0.8 -o md > "$OUT/spec-k3-a0.8.md" 2>&1
row "spec k=3 A=0.8" "rc=$? $(grep '^speculative' "$OUT/spec-k3-a0.8.md" | head -1 | cut -c1-200) ($(el))"
pack
for p in 512 8192; do
    timeout 200 "$T" measure --model $F --backend cuda -p $p -r 3 --out-dir "$OUT/m$p" -o md > "$OUT/measure-$p.md" 2> "$OUT/measure-$p.err"
    row "measure pp$p" "rc=$? ($(el))"
    pack
done
printf '%s\n' "${summary[@]}"
head -28 "$OUT/kernels-pp8192.txt"
