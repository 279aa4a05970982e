#!/usr/bin/env bash
# GPU call (2026-12-02, last of the session): the two changes after round 5, on the 4-layer
# 35B-shaped Q4_K_M file (scripts/gpu/profile-decode.sh's) and the small synth files:
#   - router_topk8 (8 values a lane for <= 256 experts; the same result as router_topk);
#   - gemv4_<t> (4 rows per warp sharing x) for the dense decode GEMVs with N >= 2048.
# Checks: `tally check --backend cuda` (poisoned, node by node: gemv4 and topk8 are on that path)
# on tiny and mid q4_k_m; logits digests equal with TALLY_GEMV_RW=2 and the default, and with
# TALLY_NO_FUSE=1. Speed: tg128 on the 4-layer file, TALLY_GEMV_RW=2 against the default in one
# call; the per-kernel ncu table of one step (cache control none).
# Everything under /tmp/o6 comes back as $OUT/r6.tgz.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
REAL_OUT=$OUT
export OUT=/tmp/o6; mkdir -p $OUT
T=$TALLY_NOPEER
V=crates/text/tests/data/tiny.gguf
t0=$(date +%s)
summary=()
row() { summary+=("$(printf '%-44s %s' "$1" "$2")"); }
M=/tmp/l4.gguf
"$T" synth --preset 35b-a3b --quant q4_k_m --seed 1 --set n_layers=4 --out "$M" > /dev/null 2>&1 &
syn=$!
for spec in "tiny q4_k_m 3 1,37,100" "mid q4_k_m 4 1,100,700"; do
  set -- $spec
  f="/tmp/$1-$2.gguf"
  "$T" synth --preset "$1" --quant "$2" --seed "$3" --out "$f" > /dev/null 2>&1
  timeout 150 "$T" check --model "$f" --backend cuda --tokens "$4" -n 4 > "$OUT/check-$1-$2.txt" 2>&1; rc=$?
  row "check $1 $2 (poisoned)" "$([ $rc = 0 ] && echo ok || echo "FAILED rc=$rc")"
done
wait $syn
digest() { timeout 120 env "$@" "$T" run --model "$f" --backend cuda --tokens 37 -n 6 -o json 2>/dev/null \
  | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["logits_digests"]))' 2>/dev/null || echo "ERROR"; }
for f in /tmp/mid-q4_k_m.gguf "$M"; do
  n=$(basename "$f" .gguf)
  a=$(digest X=1); b=$(digest TALLY_GEMV_RW=2); c=$(digest TALLY_NO_FUSE=1 TALLY_GEMV_RW=2)
  echo "$n default $a" >> "$OUT/digests.txt"; echo "$n rw2 $b" >> "$OUT/digests.txt"; echo "$n unfused-rw2 $c" >> "$OUT/digests.txt"
  row "digests default == rw2 == unfused, $n" "$([ "$a" = "$b" ] && [ "$b" = "$c" ] && [ "$a" != ERROR ] && echo same || echo DIFFER)"
done
for rep in 1 2; do
  for rw in 2 auto; do
    env $([ $rw = 2 ] && echo TALLY_GEMV_RW=2 || echo X=1) "$T" bench -m "$M" --backend cuda -p 512 -n 128 -r 5 -o md \
      --busy-limit 64 --out-dir "$OUT/b-$rw-$rep" > "$OUT/bench-$rw-$rep.md" 2>&1
    row "l4 tg128 gemv_rw=$rw #$rep" "$(grep -E '\| *tg128' "$OUT/bench-$rw-$rep.md" | awk -F'|' '{print $(NF-1)}')"
  done
done
command -v ncu > /dev/null || PATH="$PATH:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu-d0-none.csv" \
  "$T" generate --model "$M" --tokenizer $V --backend cuda --prompt "The quick brown fox jumps over the lazy dog" \
  -n 4 --temp 0 --ignore-eos > "$OUT/ncu.out" 2>&1
python3 tools/gpu/ncu_step.py "$OUT/ncu-d0-none.csv" > "$OUT/step-d0-none.txt" 2>&1
row "ncu l4 decode step, cache none" "$(grep '^last full' "$OUT/step-d0-none.txt")"
echo "== summary ($(( $(date +%s) - t0 )) s)"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
sed -n 7,30p "$OUT/step-d0-none.txt"
tar czf "$REAL_OUT/r6.tgz" -C /tmp o6
