#!/usr/bin/env bash
# The MoE tiles of 2026-12-04 on the other mixes' types: `tally check --backend cuda` (poisoned,
# node by node against the CPU) on mid q5_k_m, mxfp4_moe, iq4_xs and q8_0 at 300 tokens (38
# rows per expert: w32 for the Q5_K and MXFP4 gate/up) and 64, + 3 decode steps. HERE first:
# scripts/gpu/pack.sh; TALLY_CACHE=.carry/kcache tally kernels --arch sm_90a. Carry .carry/bin,
# .carry/kcache.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
gpu_job m
synth_checks "mid q5_k_m 4 300,64" "mid mxfp4_moe 4 300,64" "mid iq4_xs 4 300,64" "mid q8_0 4 300,64" \
    | while read -r line; do row "$line" ""; echo "$line"; done
pack
