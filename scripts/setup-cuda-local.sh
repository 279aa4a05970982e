#!/usr/bin/env bash
# Installs CUDA 13.0's compiler pieces from PyPI wheels into /opt/cu13 (idempotent), pinned to the
# GPU host's version, so kernels can be compile-checked (nvcc -Xptxas -v) and NVRTC-compiled on a
# machine without a GPU. Usage: scripts/setup-cuda-local.sh [--nvrtc-only]
set -euo pipefail
DIR=${TALLY_CU13:-/opt/cu13}
# Not root and /opt not writable: keep them in the user's cache instead.
if [ -z "${TALLY_CU13:-}" ] && ! { mkdir -p "$DIR" 2>/dev/null && [ -w "$DIR" ]; }; then
  DIR="${XDG_CACHE_HOME:-$HOME/.cache}/tally/cu13"
fi
pkgs=(nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88)
if [ "${1:-}" != "--nvrtc-only" ]; then
  pkgs+=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 "nvidia-cuda-cccl==13.0.*")
fi
if [ -f "$DIR/nvidia/cu13/lib/libnvrtc.so.13" ] && { [ "${1:-}" = "--nvrtc-only" ] || [ -x "$DIR/nvidia/cu13/bin/nvcc" ]; }; then
  echo "CUDA 13.0 wheels already in $DIR" >&2
else
  # --upgrade: pip --target otherwise skips a top-level folder that exists (nvidia/, from an
  # earlier --nvrtc-only install), and nvcc would silently never land.
  python3 -m pip install -q --upgrade --target "$DIR" "${pkgs[@]}" >&2
fi
echo "export LD_LIBRARY_PATH=$DIR/nvidia/cu13/lib:\${LD_LIBRARY_PATH:-}"
echo "export TALLY_CUDA_INCLUDE=$DIR/nvidia/cu13/include"
[ -x "$DIR/nvidia/cu13/bin/nvcc" ] && echo "export PATH=$DIR/nvidia/cu13/bin:\$PATH"
exit 0
