#!/usr/bin/env bash
# 2026-12-07, stop 54, call 4: plain decode, base (e7551f9) / new (this stop), tg128 alternated
# twice (call 3's spec bench had the plain greedy windows ~1% slower on the new binary: the
# one-token delta step and router_fused took ~3-8 us more a step under ncu). Carry s54c.
set -u
LIMIT=${LIMIT:-200}
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
ab_start s54d s54c
SYNTH_MTP=1 synth_35b q4_k_m
ab tg "$F" -p 512 -n 128
pack
printf '%s\n' "${summary[@]}"
