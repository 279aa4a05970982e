// Stand-in for <cuda_bf16.h> in the CPU emulator: the kernels need nothing from it (see cuda_fp16.h).
#pragma once
