#!/usr/bin/env bash
# Short GPU call: the CUDA backend against the CPU reference on every node (tiny, tiny-odd, mid),
# and in-graph replay with its validations on the CUDA backend (tiny). Logs to $OUT.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
for spec in "tiny q8_0 1 1,37,100" "tiny-odd bf16 2 1,37,100" "mid q4_k_m 4 1,100,600"; do
  set -- $spec
  f="/tmp/$1-$2.gguf"
  "$TALLY_NOPEER" synth --preset "$1" --quant "$2" --seed "$3" --out "$f" > /dev/null 2>&1
  timeout 120 "$TALLY_NOPEER" check --model "$f" --backend cuda --tokens "$4" -n 2 > "$OUT/check_$1.log" 2>&1
  echo "check $1 $2 rc=$?"; tail -9 "$OUT/check_$1.log"
done
timeout 90 "$TALLY_NOPEER" replay --model /tmp/mid-q4_k_m.gguf --backend cuda -p 512 -r 3 --out-dir "$OUT" > "$OUT/replay_mid.txt" 2>&1
echo "replay rc=$?"; grep -iE "replay|trusted|coverage|probe" "$OUT/replay_mid.txt" | head -20
