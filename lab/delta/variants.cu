// Conv variants the engine does not load, kept for the lab (moved verbatim out of
// crates/engine/src/cuda/kernels/conv.cu, which every cold start compiles): conv + SiLU fused with
// the per-head L2 norm of q and k (the `L2` instantiation of conv.cu's conv_body). Include after
// conv.cu (lab/delta/bench.cu).

// Fused variant: after SiLU, channels [0, norm_cols) are L2-normalised in groups of `group`
// consecutive channels (y / sqrt(sum y^2 + eps)), and channels [0, scale_cols) then also
// multiplied by `scale` (q: 1/sqrt(dk)). group divides 128 and is a multiple of 4; norm_cols and
// scale_cols are multiples of group.
struct ConvSiluL2Args {
    ConvSiluArgs conv;
    i32 norm_cols, group, scale_cols;
    float eps, scale;
};

extern "C" __global__ void __launch_bounds__(CONV_THREADS) conv_silu_l2norm(ConvSiluL2Args a) {
    conv_dispatch<true>(a.conv, ConvNorm{a.norm_cols, a.group, a.scale_cols, a.eps, a.scale});
}
