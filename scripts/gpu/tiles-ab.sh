#!/usr/bin/env bash
# A kernel change against a base binary in one GPU call (stop 41's calls 3, 4, 7 and 9: the
# wrappers scripts/gpu/stop41{b,c,e,f}.sh hold each call's settings and prediction). Carry
# .carry/lab (the lab built here) and .carry/$TAR.tar.xz (tar cJf of .carry/bin and
# .carry/kcache: bin/tally = the change, bin/tally-base = the base, both without the peer;
# TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a for both). Settings (environment):
#   JOB    the output folder (/tmp/JOB, a tarball JOB.tgz comes back); TAR the carried tarball's name
#   LAB    lab runs separated by ';' (e.g. "--gated --only q4_k;--wg --only q4_k"), each into
#          lab-<first word>.txt
#   CHECK  the mid-preset file's quant (default q4_k_m): `tally check --backend cuda` at 1,000 and
#          64 tokens, logits digests base == new (q4_k_m: also the 4-layer 35B shapes)
#   MIX    the 35B-A3B file's quant; TESTS its `bench -p` list; base / new alternated twice
#   TG_MIX optional: a second 35B-A3B file, pp512 + tg128, base / new alternated twice while the
#          call is under 480 s
#   ARM3   optional: settings (e.g. TALLY_X32=off) for a third arm of the pp A/B, the new binary
#          with them (base / new / arm3, twice)
#   LLAMAQ 1: llama.cpp-quantised files through CUDA first (.carry/bin/quantize: the static
#          tally-peer-llama quantize example, stripped; scripts/gpu/llama-quantized.sh's check on
#          the ten mixes of the tiny bf16 synth source, made here on the device)
#   MIXES  optional: mid-preset files checked too, "QUANT TOKENS;..." (e.g. "iq4_xs 300,64")
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start "$JOB" "$TAR"
CHECK=${CHECK:-q4_k_m}
F=$D/mix-$MIX.gguf
"$N" synth --preset 35b-a3b --quant "$MIX" --seed 1 --fill pool --out "$F" > "$OUT/synth.log" 2>&1 &
SYNTH=$!
IFS=';' read -r -a runs <<< "$LAB"
for args in "${runs[@]}"; do
    set -- $args
    name=lab-${1#--}
    timeout 200 .carry/lab/gemm_bench "$@" > "$OUT/$name.txt" 2>&1
    row "lab $args" "rc=$? $(grep -E 'cases, |failing gated' "$OUT/$name.txt" | tr '\n' ' ') ($(el))"
done
pack
if [ "${LLAMAQ:-0}" = 1 ]; then
    mkdir -p .carry/llamaq
    "$N" synth --preset tiny --quant bf16 --seed 5 --out /tmp/llamaq-src.gguf > /dev/null 2>&1
    for mix in q4_k_m q5_k_m q6_k q8_0 iq4_xs iq4_nl mxfp4_moe q4_0 q3_k_m q2_k; do
        .carry/bin/quantize /tmp/llamaq-src.gguf ".carry/llamaq/tiny-$mix.gguf" $mix > "$OUT/quantize-$mix.log" 2>&1 ||
            row "llamaq $mix" "quantize FAILED"
    done
    TALLY=$N bash scripts/gpu/llama-quantized.sh > "$OUT/llamaq.txt" 2>&1
    row "llama.cpp-quantised files, CUDA vs CPU" "rc=$? $(grep -cE ' ok$' "$OUT/llamaq.txt") ok ($(el))"
    pack
fi
if [ -n "${MIXES:-}" ]; then
    IFS=';' read -r -a specs <<< "$MIXES"
    for spec in "${specs[@]}"; do
        set -- $spec
        TALLY_NOPEER=$N synth_checks "mid $1 4 $2" | while read -r line; do row "$line" ""; done
    done
    pack
fi
files=()
if [ "$CHECK" = q4_k_m ]; then
    TALLY_NOPEER=$N mid_l4_files
    files=("$MID" "$L4")
else
    MID=/tmp/mid-$CHECK.gguf
    "$N" synth --preset mid --quant "$CHECK" --seed 4 --out "$MID" > /dev/null 2>&1
    files=("$MID")
fi
for tok in 1000 64; do
    timeout 150 "$N" check --model "$MID" --backend cuda --tokens $tok -n 3 > "$OUT/check-mid-$CHECK-$tok.log" 2>&1
    row "check mid $CHECK tokens=$tok" "rc=$? ($(el))"
done
for f in "${files[@]}"; do
    run_json base "$f" $B
    run_json new "$f" $N
    row "digests $(basename "$f") base vs new" "$(logits_same "$OUT" "$(basename "$f" .gguf)" base new) ($(el))"
done
pack
wait $SYNTH
row "synth $MIX" "$(el)"
ab pp "$F" -p "$TESTS" -n 0
rm -f "$F"
if [ -n "${TG_MIX:-}" ]; then
    G=$D/mix-$TG_MIX.gguf
    "$N" synth --preset 35b-a3b --quant "$TG_MIX" --seed 1 --fill pool --out "$G" > "$OUT/synth-tg.log" 2>&1
    row "synth $TG_MIX" "$(el)"
    ab tg "$G" -p 512 -n 128
    rm -f "$G"
fi
pack
printf '%s\n' "${summary[@]}"
