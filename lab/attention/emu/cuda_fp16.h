// Emulator stand-in for cuda_fp16.h: just what attention.cu uses.
#pragma once
struct __half { _Float16 v; };
struct __half2 { _Float16 x, y; };
inline __half2 __floats2half2_rn(float a, float b) { return {(_Float16)a, (_Float16)b}; }
