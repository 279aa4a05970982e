#!/usr/bin/env bash
# The PDL audit: checks, in the machine code of every CUDA kernel, that nothing touches global
# memory before the kernel's griddepcontrol.wait (tools/cuda/pdl_audit.py says why). No GPU needed.
#   tools/cuda/pdl_audit.sh --cubins DIR   audit DIR/*.cubin: the CUBINs NVRTC built exactly as
#                                          the backend builds them (crates/engine/tests/
#                                          cuda_kernels_compile.rs writes them with TALLY_CUBIN_DIR
#                                          set; scripts/test.sh does this in CI);
#   tools/cuda/pdl_audit.sh [KERNEL.cu...] compile the sources (default: all of
#                                          crates/engine/src/cuda/kernels/*.cu) for sm_90a with
#                                          nvcc from the CUDA 13.0 wheels, then audit (host_consts.cuh's
#                                          constants, no option defines; gemm.cu takes ptxas minutes).
# nvdisasm comes from the PyPI wheel nvidia-cuda-nvdisasm, installed on first use next to the
# CUDA wheels (scripts/setup-cuda-local.sh's folder, or $TALLY_NVDISASM_DIR).
# Exit codes: 0 clean, 1 a finding, 2 bad usage or a missing tool.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The CUDA wheels' folder as setup-cuda-local.sh chose it (it prints its include path).
eval "$(scripts/setup-cuda-local.sh --nvrtc-only)"
ndir=${TALLY_NVDISASM_DIR:-${TALLY_CUDA_INCLUDE%/nvidia/cu13/include}-nvdisasm}
nvdisasm="$ndir/nvidia/cu13/bin/nvdisasm"
if [ ! -x "$nvdisasm" ]; then
    echo "pdl audit: installing nvdisasm (nvidia-cuda-nvdisasm 13.2.78) into $ndir" >&2
    python3 -m pip install -q --target "$ndir" nvidia-cuda-nvdisasm==13.2.78 >&2
fi
[ -x "$nvdisasm" ] || { echo "pdl audit: no nvdisasm at $nvdisasm" >&2; exit 2; }
if [ "${1:-}" = "--cubins" ]; then
    [ -n "${2:-}" ] && compgen -G "$2/*.cubin" > /dev/null || { echo "pdl audit: no .cubin files in '${2:-}'" >&2; exit 2; }
    exec python3 tools/cuda/pdl_audit.py "$nvdisasm" "$2"/*.cubin
fi
eval "$(scripts/setup-cuda-local.sh)"
command -v nvcc > /dev/null || { echo "pdl audit: nvcc not found after setup-cuda-local.sh" >&2; exit 2; }
k=crates/engine/src/cuda/kernels
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
srcs=("$@")
[ ${#srcs[@]} -gt 0 ] || srcs=("$k"/*.cu)
for f in "${srcs[@]}"; do
    b=$(basename "$f" .cu)
    echo "pdl audit: compiling $b.cu" >&2
    nvcc -std=c++17 -arch=sm_90a -DNDEBUG -cubin -I "$k" "$f" -o "$out/$b.cubin"
done
python3 tools/cuda/pdl_audit.py "$nvdisasm" "$out"/*.cubin
