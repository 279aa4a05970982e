#!/usr/bin/env bash
# Files tally did not write, through this session's CUDA paths: the converter-made fixtures with
# the model's real head dims (conv-c; conv-d-mtp, with its MTP block) in f32 and q8_0, `tally
# check --backend cuda` (node by node against the CPU, which CI holds to transformers) at 1,000
# tokens (warp-per-group norms, many-block routing, add_rms_norm_256) and at 7 + 3 decode steps;
# then speculative decoding on conv-d-mtp-f32 with its own MTP block (k = 3: rejections roll back
# to the per-token states) and with replayed drafts at acceptance 0.8, each held by the bench to
# plain greedy decoding's tokens (it stops with an error at the first difference).
# HERE first: scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a.
# Carry .carry/bin, .carry/kcache. Written at the end of stop 28 when the device time was spent:
# not yet run.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job cs
T=$TALLY_NOPEER
dir=crates/engine/tests/fixtures/converter
for n in conv-c-f32 conv-c-q8_0 conv-d-mtp-f32 conv-d-mtp-q8_0; do
    timeout 120 "$T" check --model $dir/$n.gguf --backend cuda --tokens 1000,7 -n 3 > "$OUT/check-$n.log" 2>&1
    row "check $n tokens=1000,7" "rc=$? ($(el))"
done
pack
for v in mtp replay; do
    e=(); [ $v = replay ] && e=(--replay-acceptance 0.8)
    timeout 120 "$T" bench -m $dir/conv-d-mtp-f32.gguf --backend cuda -p 1 -n 64 -r 3 --spec mtp --draft-max 3 "${e[@]}" \
        -o md > "$OUT/spec-$v.md" 2> "$OUT/spec-$v.err"
    row "spec conv-d-mtp-f32 k=3 $v" "rc=$? $(grep -ohE 'kept [0-9.]+ given.*rollbacks, [0-9]+ recomputes' "$OUT/spec-$v.md") $(grep -ihE 'diverged|error' "$OUT/spec-$v.err" | head -1) ($(el))"
done
pack
printf '%s\n' "${summary[@]}"
