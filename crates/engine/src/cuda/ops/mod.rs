//! Host side of the ops whose kernels are large, one file per op family beside its CPU twin
//! (`cpu/ops/<op>.rs`) and its kernels (`kernels/<op>.cu`, `kernels/gemm.cu` for both kinds of
//! projection).

pub mod attention;
pub mod matmul;
pub mod moe;
