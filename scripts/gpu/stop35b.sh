#!/usr/bin/env bash
# 2026-12-05, stop 35, call 2: TALLY_F32_GEMM=cublas (the prompt's routers through cuBLAS's f32
# GEMM, pedantic f32) checked node by node against the CPU and timed against the defaults and
# the expert-f16 opt-ins; pp32768 with the device peak; then issue 14's ledger at pp512 and
# pp8192 against the floor (tally against itself; scripts/gpu/ledger-prefill.sh) with what is left.
# Prediction (written before): the router 11.4 -> ~7 ms of pp8192 (+1.8%), 1.2 -> ~0.6 ms of
# pp512 (+1.5%); routing flips in `tally check` no more than with the SIMT GEMM.
# HERE first: scripts/gpu/pack.sh; mv .carry/bin/tally .carry/bin/tally-nopeer; kcache as for
# scripts/gpu/stop35.sh; carry .carry/new.tar.xz.
set -u
cd "$(dirname "$0")/../.."
[ -f .carry/new.tar.xz ] && tar xJf .carry/new.tar.xz -C .carry
. scripts/gpu/env.sh
gpu_job stop35b
env_of() {
    case $1 in
        C) echo TALLY_X32G=on TALLY_EXPERT_F16=on ;;
        G) echo TALLY_F32_GEMM=cublas ;;
        H) echo TALLY_F32_GEMM=cublas TALLY_X32G=on TALLY_EXPERT_F16=on ;;
        *) echo TALLY_UNUSED=1 ;;
    esac
}
T=$TALLY_NOPEER
F=/tmp/q4km.gguf
[ -f $F ] || "$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --fill pool --out $F > "$OUT/synth.log" 2>&1 &
MID=/tmp/mid-q4_k_m.gguf
"$T" synth --preset mid --quant q4_k_m --seed 4 --out $MID > /dev/null 2>&1
for v in A G; do
    env $(env_of $v) timeout 150 "$T" check --model $MID --backend cuda --tokens 1000 -n 3 > "$OUT/check-mid-1000-$v.log" 2>&1
    row "check mid 1000 $v" "rc=$? $(grep -A2 'worst node' "$OUT/check-mid-1000-$v.log" | tail -1 | tr -s ' ' | cut -c1-110) ($(el))"
done
wait
row synth "$(ls -la $F | awk '{print $5}') bytes ($(el))"
"$T" machine --backend cuda -o json > "$OUT/machine.json" 2>&1
pack
for round in 1 2; do
    for v in A G C H; do
        env $(env_of $v) timeout 90 "$T" bench -m $F --backend cuda -p 512,2048,8192 -n 0 -r 3 -o json \
            > "$OUT/pp-$v-$round.json" 2> "$OUT/pp-$v-$round.err"
        row "pp $v round $round" "rc=$? $(bench_row "$OUT/pp-$v-$round.json") ($(el))"
    done
    pack
done
timeout 60 "$T" bench -m $F --backend cuda -p 512 -n 128 -r 3 -o json > "$OUT/tg-A.json" 2> "$OUT/tg-A.err"
row "tg128 A" "rc=$? $(bench_row "$OUT/tg-A.json") ($(el))"
timeout 60 "$T" bench -m $F --backend cuda -p 1 -n 128 -r 3 --spec mtp --draft-max 3 --replay-acceptance 0.8 -o md \
    > "$OUT/spec-A.md" 2> "$OUT/spec-A.err"
row "spec k=3 a=0.8 A" "rc=$? $(grep -ohE '[0-9.]+ t/s vs [0-9.]+ t/s plain greedy in the same windows: [0-9.]+x; per window verify [0-9.]+ s' "$OUT/spec-A.md") ($(el))"
env $(env_of A) timeout 90 "$T" bench -m $F --backend cuda -p 32768 -n 0 -r 3 -o json \
    > "$OUT/pp32768-A.json" 2> "$OUT/pp32768-A.err"
row "pp32768 A" "rc=$? $(bench_row "$OUT/pp32768-A.json") $(grep -o '"tally_device_memory_peak_bytes[^,]*' "$OUT/pp32768-A.json" | head -1) ($(el))"
pack
for n in 512 8192; do
    left=$(( 560 - $(date +%s) + t0 ))
    [ $left -lt 40 ] && break
    mkdir -p "$OUT/ledger-pp$n"
    timeout $left "$T" ledger --model $F --backend cuda --peer self -p $n -r 3 --out-dir "$OUT/ledger-pp$n" \
        > "$OUT/ledger-pp$n/ledger.txt" 2>&1
    row "ledger pp$n (self)" "rc=$? ($(el))"
    pack
done
printf '%s\n' "${summary[@]}"
