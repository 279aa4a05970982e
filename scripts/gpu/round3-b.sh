#!/usr/bin/env bash
# GPU call 2 of 2 (third session), within 30 s of round3-a.sh: scripts/gpu/round2-b.sh (side by
# side with llama.cpp, the ubatch sweep, speculative decoding with replayed drafts, the server,
# pp131072), its files packed into one archive ($OUT/r3b.tgz) so none is lost to the 8-file limit.
set -u
cd "$(dirname "$0")/../.."
REAL_OUT=$OUT
export OUT=/tmp/o2; mkdir -p $OUT
timeout 560 scripts/gpu/round2-b.sh 2>&1 | tee "$OUT/round2b.txt"
cp /tmp/o/*.txt "$OUT/" 2>/dev/null
tar czf "$REAL_OUT/r3b.tgz" -C /tmp o2
