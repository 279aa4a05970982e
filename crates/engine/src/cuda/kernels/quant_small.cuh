// Device dequantisation front ends of the legacy, codebook and low-bit K formats: exact f32
// `dequant8<T>` and the 32-element `Piece<T>` the GEMM / GEMV kernels of gemm.cu decode, in the
// same shape as the Q4_K..Q8_0 ones in quant.cuh (included from there; not a separate unit).
// Layouts, as in crates/gguf/src/quants/{legacy,codebook,k_low}.rs:
//   Q4_0 = 2    18 B / 32: f16 d, qs[16]                        x = (q - 8) * d
//   Q4_1 = 3    20 B / 32: f16 d, f16 m, qs[16]                 x = q * d + m
//   Q5_0 = 6    22 B / 32: f16 d, u32 qh, qs[16]                x = (q - 16) * d
//   Q5_1 = 7    24 B / 32: f16 d, f16 m, u32 qh, qs[16]         x = q * d + m
//   IQ4_NL = 20 18 B / 32: f16 d, qs[16]                        x = d * IQ4[q]
//   MXFP4 = 39  17 B / 32: u8 e, qs[16]                         x = MX[q] * 2^(e - 128)
//     byte j of qs holds element j (low nibble) and j + 16 (high); bit j of qh is element j's
//     fifth bit.
//   IQ4_XS = 23 136 B / 256: f16 d, u16 scales_h, scales_l[4], qs[128] as eight IQ4_NL-style
//     sub-blocks; ls = (scales_l[ib/2] >> 4(ib%2)) & 15 | ((scales_h >> 2ib) & 3) << 4;
//     x = (d * (ls - 32)) * IQ4[q]
//   Q2_K = 10   84 B / 256: scales[16] (low nibble sc, high m), qs[64], f16 d, f16 dmin. Element
//     128n + 32j + l = (qs[32n + l] >> 2j) & 3, group 8n + 2j + l/16; x = (d*sc)*q - (dmin*m)
//   Q3_K = 11   110 B / 256: hmask[32], qs[64], scales[12], f16 d. Low 2 bits as Q2_K; q = low
//     when bit 4n + j of hmask[l] is set, else low - 4; 6-bit sc of group g: low 4 bits in
//     scales[g] (g < 8) or the high nibble of scales[g - 8], top 2 at bit 2(g/4) of
//     scales[8 + g%4]; x = (d * (sc - 32)) * q
// A piece is 32 consecutive elements (seg1 = seg0 + 16): one block of the 32-element formats,
// one (n, j) plane slice of Q2_K/Q3_K, one sub-block of IQ4_XS. Blocks of 17, 18, 22 and 110
// bytes start at odd or 2-mod-4 addresses, so their bytes are read as aligned words (RawBytes).
// Products are rounded as the CPU reference rounds them (no FMA) in dequant8; the f16 decode
// rounds once per element (twice where a scale product is formed first, as the K-quants do).
#pragma once

// NB bytes from any address p as aligned 4-byte words: the first word starts at p & ~3 (the
// bytes before p are of the same row, or the row before), the last is read only up to p + NB,
// so no byte past the range is touched. `word<K>()` is bytes p+K .. p+K+3 (zero past NB + 3).
template <int NB>
struct RawBytes {
    static constexpr int W = (NB + 6) / 4;  // words covering [p & ~3, p + NB) for any p & 3
    u32 w[W + 2];
    u32 off;  // p & 3
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* p) {
        off = static_cast<u32>(reinterpret_cast<u64>(p) & 3u);
        const u8* a = p - off;
#pragma unroll
        for (int i = 0; i < W; i++) {
            const int lim = static_cast<int>(off) + NB - 4 * i;
            if (lim >= 4) {
                w[i] = L::ld32(a + 4 * i);
            } else {
                u32 v = 0u;
                for (int b = 0; b < lim; b++) v |= L::ld8(a + 4 * i + b) << (8 * b);
                w[i] = v;
            }
        }
        w[W] = w[W + 1] = 0u;
    }
    static constexpr int SLOT_WORDS = W;
    __device__ __forceinline__ static void issue_async(const Slot& s, int j0, const u8* p) {
        const u32 o = static_cast<u32>(reinterpret_cast<u64>(p) & 3u);
        const u8* a = p - o;
#pragma unroll
        for (int i = 0; i < W; i++) {
            const int lim = static_cast<int>(o) + NB - 4 * i;
            cp_async4(s.w(j0 + i), lim > 0 ? a + 4 * i : a, static_cast<u32>(lim >= 4 ? 4 : lim > 0 ? lim : 0));
        }
    }
    __device__ __forceinline__ void from_slot(const Slot& s, int j0, const u8* p) {
        off = static_cast<u32>(reinterpret_cast<u64>(p) & 3u);
#pragma unroll
        for (int i = 0; i < W; i++) w[i] = *s.w(j0 + i);
        w[W] = w[W + 1] = 0u;
    }
    template <int K>
    __device__ __forceinline__ u32 word() const {
        constexpr int base = K / 4;
        const u32 t = off + (K & 3);
        const bool c = t >= 4;
        return __funnelshift_r(c ? w[base + 1] : w[base], c ? w[base + 2] : w[base + 1], 8 * (t & 3));
    }
};

// The IQ4_NL and MXFP4 codebooks: 16 signed bytes each, four per word, in entry order;
// BIASED gives them + 128 (q ^ 0x80, for the f16 decode's 1152-bias trick).
// IQ4: -127 -104 -83 -65 | -49 -35 -22 -10 | 1 13 25 38 | 53 69 89 113
// MXFP4 (twice E2M1): 0 1 2 3 | 4 6 8 12 | 0 -1 -2 -3 | -4 -6 -8 -12
template <int T, bool BIASED>
struct Codebook {
    static_assert(T == QT_IQ4_NL || T == QT_MXFP4, "codebook formats only");
    static constexpr u32 F = BIASED ? 0x80808080u : 0u;
    static constexpr u32 t0 = (T == QT_MXFP4 ? 0x03020100u : 0xBFAD9881u) ^ F;
    static constexpr u32 t1 = (T == QT_MXFP4 ? 0x0C080604u : 0xF6EADDCFu) ^ F;
    static constexpr u32 t2 = (T == QT_MXFP4 ? 0xFDFEFF00u : 0x26190D01u) ^ F;
    static constexpr u32 t3 = (T == QT_MXFP4 ? 0xF4F8FAFCu : 0x71594535u) ^ F;
    // The four 4-bit indices in bits 0..15 of s (nibble i -> byte i): one byte permute per
    // half of the table looks all four up (bit 3 of each selector nibble is masked off: prmt
    // reads it as its sign-replicate mode), a third picks each byte's half by that bit 3.
    __device__ __forceinline__ static u32 nibbles4(u32 s) {
        const u32 i = s & 0x7777u;
        return __byte_perm(__byte_perm(t0, t1, i), __byte_perm(t2, t3, i), 0x3210u | ((s >> 1) & 0x4444u));
    }
    // A quant word of the 32-element layout (byte j: element j in the low nibble, j + 16 in
    // the high): lo = the values of elements 0..3 of its bytes, hi = those of 16..19.
    __device__ __forceinline__ static void word(u32 w, u32& lo, u32& hi) {
        const u32 a = nibbles4(w);        // elements 0, 16, 1, 17
        const u32 b = nibbles4(w >> 16);  // 2, 18, 3, 19
        lo = __byte_perm(a, b, 0x6420u);
        hi = __byte_perm(a, b, 0x7531u);
    }
    __device__ __forceinline__ static int value(u32 q) { return static_cast<int>(static_cast<i8>(nibbles4(q) & 0xffu)); }
    // The integer GEMV's order (gemv_bytes): a quant word as the values of its nibbles in place,
    // a = elements 0, 16, 1, 17 of its bytes, b = 2, 18, 3, 19 (word's bits 0..15, 16..31), as
    // unsigned bytes value + IL_ZO; gemv_quantize_x stores x in the same order, so `word`'s two
    // reordering permutes go. IQ4_NL: word's lookups, the masks and half-selectors made once
    // for both halves (11 instructions a word, against word's 15). MXFP4 (0..7 = +E2M1, 8..15
    // the same magnitudes negated) takes two lookups of 4 nibbles, not three, by prmt's
    // sign-replicate mode (prmt_sx): p looks up 12 + m where bit 3 is clear and gives 0x00 where
    // it is set (every entry's msb is 0); n, with bit 3 flipped, looks up 12 - m where it was set
    // and gives 0x00 elsewhere; p | n is 12 + the signed value (9 instructions a word).
    // (Loading the four table words once per kernel from a global instead of as immediates took
    // 13 SASS instructions a piece out of gemv_mxfp4's loop and no time: lab and tg128 within
    // noise on an H100, docs/results/2026-12-06-stop40; so the immediates stay.)
    static constexpr int IL_ZO = T == QT_MXFP4 ? 12 : 128;
    static constexpr u32 IL0 = T == QT_MXFP4 ? 0x0F0E0D0Cu : t0 ^ F ^ 0x80808080u;  // MXFP4: 12 + {0, 1, 2, 3
    static constexpr u32 IL1 = T == QT_MXFP4 ? 0x18141210u : t1 ^ F ^ 0x80808080u;  //   | 4, 6, 8, 12}
    static constexpr u32 IL2 = T == QT_MXFP4 ? 0x090A0B0Cu : t2 ^ F ^ 0x80808080u;  // MXFP4: 12 - the same
    static constexpr u32 IL3 = T == QT_MXFP4 ? 0x00040608u : t3 ^ F ^ 0x80808080u;
    __device__ __forceinline__ static void word_il(u32 w, u32& a, u32& b) {
        if constexpr (T == QT_MXFP4) {
            const u32 f = w ^ 0x88888888u;
            a = prmt_sx(IL0, IL1, w) | prmt_sx(IL2, IL3, f);
            b = prmt_sx(IL0, IL1, w >> 16) | prmt_sx(IL2, IL3, f >> 16);
        } else {
            const u32 i = w & 0x77777777u, h = ((w >> 1) & 0x44444444u) | 0x32103210u;
            a = __byte_perm(__byte_perm(IL0, IL1, i), __byte_perm(IL2, IL3, i), h);
            b = __byte_perm(__byte_perm(IL0, IL1, i >> 16), __byte_perm(IL2, IL3, i >> 16), h >> 16);
        }
    }
};
__device__ __forceinline__ int iq4_value(u32 q) { return Codebook<QT_IQ4_NL, false>::value(q); }
__device__ __forceinline__ int mxfp4_value(u32 q) { return Codebook<QT_MXFP4, false>::value(q); }
// ggml's GGML_E8M0_TO_FP32_HALF: 2^(e - 128), subnormal for e < 2.
__device__ __forceinline__ float e8m0_half(u32 e) {
    return __uint_as_float(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
}
// Bits 0..3 of x to bit 0 of bytes 0..3.
__device__ __forceinline__ u32 spread4(u32 x) {
    return (x & 1u) | ((x & 2u) << 7) | ((x & 4u) << 14) | ((x & 8u) << 21);
}

// ---- dequant8 -------------------------------------------------------------------------------
// The 32-element formats: block k/32; elements e..e+7 (e = k%32) are nibbles (e/16) of bytes
// qs[e%16 ..].
template <int T>
__device__ __forceinline__ void dequant8_small(const u8* row, int k, float out[8]) {
    constexpr int BB = qt_block_bytes(T);
    const u8* b = row + static_cast<i64>(k >> 5) * BB;
    const int e = k & 31, hi = e >> 4, l0 = e & 15;
    constexpr int QS = T == QT_Q4_0 || T == QT_IQ4_NL ? 2 : T == QT_MXFP4 ? 1 : T == QT_Q4_1 ? 4 : T == QT_Q5_0 ? 6 : 8;
    u32 qh = 0u;
    if (T == QT_Q5_0 || T == QT_Q5_1) {
        const int o = T == QT_Q5_0 ? 2 : 4;
        qh = ldg_u8(b + o) | (ldg_u8(b + o + 1) << 8) | (ldg_u8(b + o + 2) << 16) | (ldg_u8(b + o + 3) << 24);
    }
    const float d = T == QT_MXFP4 ? e8m0_half(ldg_u8(b)) : f16_to_f32(ldg_u8(b) | (ldg_u8(b + 1) << 8));
    const float m = (T == QT_Q4_1 || T == QT_Q5_1) ? f16_to_f32(ldg_u8(b + 2) | (ldg_u8(b + 3) << 8)) : 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const u32 q = (ldg_u8(b + QS + l0 + i) >> (4 * hi)) & 15u;
        const u32 q5 = q | (((qh >> (e + i)) & 1u) << 4);
        if (T == QT_Q4_0) out[i] = __fmul_rn(static_cast<float>(static_cast<int>(q) - 8), d);
        if (T == QT_Q5_0) out[i] = __fmul_rn(static_cast<float>(static_cast<int>(q5) - 16), d);
        if (T == QT_Q4_1) out[i] = __fadd_rn(__fmul_rn(static_cast<float>(q), d), m);
        if (T == QT_Q5_1) out[i] = __fadd_rn(__fmul_rn(static_cast<float>(q5), d), m);
        if (T == QT_IQ4_NL) out[i] = __fmul_rn(d, static_cast<float>(iq4_value(q)));
        if (T == QT_MXFP4) out[i] = __fmul_rn(static_cast<float>(mxfp4_value(q)), d);
    }
}
template <>
__device__ __forceinline__ void dequant8<QT_Q4_0>(const u8* row, int k, float out[8]) { dequant8_small<QT_Q4_0>(row, k, out); }
template <>
__device__ __forceinline__ void dequant8<QT_Q4_1>(const u8* row, int k, float out[8]) { dequant8_small<QT_Q4_1>(row, k, out); }
template <>
__device__ __forceinline__ void dequant8<QT_Q5_0>(const u8* row, int k, float out[8]) { dequant8_small<QT_Q5_0>(row, k, out); }
template <>
__device__ __forceinline__ void dequant8<QT_Q5_1>(const u8* row, int k, float out[8]) { dequant8_small<QT_Q5_1>(row, k, out); }
template <>
__device__ __forceinline__ void dequant8<QT_IQ4_NL>(const u8* row, int k, float out[8]) { dequant8_small<QT_IQ4_NL>(row, k, out); }
template <>
__device__ __forceinline__ void dequant8<QT_MXFP4>(const u8* row, int k, float out[8]) { dequant8_small<QT_MXFP4>(row, k, out); }

template <>
__device__ __forceinline__ void dequant8<QT_IQ4_XS>(const u8* row, int k, float out[8]) {
    const u8* b = row + static_cast<i64>(k >> 8) * 136;
    const int ib = (k & 255) >> 5, e = k & 31, hi = e >> 4, l0 = e & 15;
    const u32 sh = ldg_u8(b + 2) | (ldg_u8(b + 3) << 8);
    const int ls = static_cast<int>(((ldg_u8(b + 4 + ib / 2) >> (4 * (ib & 1))) & 15u) | (((sh >> (2 * ib)) & 3u) << 4));
    const float dl = __fmul_rn(f16_to_f32(ldg_u8(b) | (ldg_u8(b + 1) << 8)), static_cast<float>(ls - 32));
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const u32 q = (ldg_u8(b + 8 + 16 * ib + l0 + i) >> (4 * hi)) & 15u;
        out[i] = __fmul_rn(dl, static_cast<float>(iq4_value(q)));
    }
}

template <>
__device__ __forceinline__ void dequant8<QT_Q2_K>(const u8* row, int k, float out[8]) {
    const u8* b = row + static_cast<i64>(k >> 8) * 84;
    const int e = k & 255, n = e >> 7, j = (e >> 5) & 3, l0 = e & 31;
    const u32 sc = ldg_u8(b + 8 * n + 2 * j + (l0 >> 4));
    const float d = f16_to_f32(ldg_u8(b + 80) | (ldg_u8(b + 81) << 8));
    const float dmin = f16_to_f32(ldg_u8(b + 82) | (ldg_u8(b + 83) << 8));
    const float dl = __fmul_rn(d, static_cast<float>(sc & 15u)), ml = __fmul_rn(dmin, static_cast<float>(sc >> 4));
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const u32 q = (ldg_u8(b + 16 + 32 * n + l0 + i) >> (2 * j)) & 3u;
        out[i] = __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
    }
}

// 6-bit scale (before the -32) of Q3_K group g from the 12 scale bytes at s.
__device__ __forceinline__ int q3k_scale(const u8* s, int g) {
    const u32 lo = g < 8 ? (ldg_u8(s + g) & 15u) : (ldg_u8(s + g - 8) >> 4);
    const u32 hi = (ldg_u8(s + 8 + (g & 3)) >> (2 * (g >> 2))) & 3u;
    return static_cast<int>(lo | (hi << 4));
}

template <>
__device__ __forceinline__ void dequant8<QT_Q3_K>(const u8* row, int k, float out[8]) {
    const u8* b = row + static_cast<i64>(k >> 8) * 110;
    const int e = k & 255, n = e >> 7, j = (e >> 5) & 3, l0 = e & 31;
    const int g = 8 * n + 2 * j + (l0 >> 4);
    const float d = f16_to_f32(ldg_u8(b + 108) | (ldg_u8(b + 109) << 8));
    const float dl = __fmul_rn(d, static_cast<float>(q3k_scale(b + 96, g) - 32));
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int low = static_cast<int>((ldg_u8(b + 32 + 32 * n + l0 + i) >> (2 * j)) & 3u);
        const int high = (ldg_u8(b + l0 + i) >> (4 * n + j)) & 1u ? 0 : 4;
        out[i] = __fmul_rn(dl, static_cast<float>(low - high));
    }
}

// ---- pieces ---------------------------------------------------------------------------------

// The 32-element formats: piece p = block p. Values: the 32 quants as bytes (unsigned for the
// linear formats, signed codebook values for IQ4_NL / MXFP4), then one scale and offset for
// both segments.
template <int T>
struct PieceSmall {
    static constexpr int BB = qt_block_bytes(T);
    static constexpr bool FIVE = T == QT_Q5_0 || T == QT_Q5_1;
    static constexpr bool HAS_MIN = T == QT_Q4_1 || T == QT_Q5_1;
    static constexpr bool CODEBOOK = T == QT_IQ4_NL || T == QT_MXFP4;
    static constexpr int QS = T == QT_Q4_0 || T == QT_IQ4_NL ? 2 : T == QT_MXFP4 ? 1 : T == QT_Q4_1 ? 4 : T == QT_Q5_0 ? 6 : 8;
    RawBytes<BB> r;
    // Blocks start at multiples of the largest power of two dividing BB (rows hold whole
    // blocks; tensors start 16-byte aligned); staged as their 16-byte window (Win16): two
    // vectors, three for Q5_0.
    using Win = Win16<BB, (BB & -BB) < 16 ? (BB & -BB) : 16>;
    static constexpr int SLOT_WORDS = Win::SLOT_WORDS;
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* row, int p) {
        Win win;
        win.template issue<L>(row + static_cast<i64>(p) * BB);
        win.to_raw(r);
    }
    __device__ __forceinline__ void issue_async(const Slot& s, const u8* row, int p) const {
        Win::issue_async(s, 0, row + static_cast<i64>(p) * BB);
    }
    __device__ __forceinline__ void from_slot(const Slot& s, const u8* row, int p) {
        Win win;
        win.from_slot(s, 0, row + static_cast<i64>(p) * BB);
        win.to_raw(r);
    }
    // Lane group sharing (gemm.cu swap_issue / swap_decode): the four lanes' blocks are one span,
    // copied once (Win16::issue_async_group).
    static constexpr bool SHARES = true;
    __device__ __forceinline__ void issue_async_shared(const Slot& s, const u8* row, int p, int t) const {
        Win::issue_async_group(s, row + static_cast<i64>(p - t) * BB, t);
    }
    __device__ __forceinline__ void from_slot_shared(const Slot& s, const u8* row, int p, int t) {
        Win win;
        win.from_slot_group(s, row + static_cast<i64>(p - t) * BB, t);
        win.to_raw(r);
    }
    // lo: elements 0..15, hi: 16..31, one byte each (see the struct comment); BIASED: the
    // codebook values + 128.
    template <bool BIASED = false>
    __device__ __forceinline__ void values(uint4& lo, uint4& hi) const {
        const u32 q[4] = {r.template word<QS>(), r.template word<QS + 4>(), r.template word<QS + 8>(),
                          r.template word<QS + 12>()};
        u32 qh = 0u;
        if (FIVE) qh = r.template word<T == QT_Q5_0 ? 2 : 4>();
        u32 l[4], u[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if constexpr (CODEBOOK) {
                Codebook<T, BIASED>::word(q[i], l[i], u[i]);
            } else {
                l[i] = q[i] & 0x0F0F0F0Fu;
                u[i] = (q[i] >> 4) & 0x0F0F0F0Fu;
                if (FIVE) {
                    l[i] |= spread4((qh >> (4 * i)) & 15u) << 4;
                    u[i] |= spread4((qh >> (16 + 4 * i)) & 15u) << 4;
                }
            }
        }
        lo = make_uint4(l[0], l[1], l[2], l[3]);
        hi = make_uint4(u[0], u[1], u[2], u[3]);
    }
    __device__ __forceinline__ float scale() const {
        return T == QT_MXFP4 ? e8m0_half(r.template word<0>() & 0xffu) : f16_to_f32(r.template word<0>());
    }
    __device__ __forceinline__ void to_f16(int, uint4 o[4]) const {
        uint4 lo, hi;
        values<CODEBOOK>(lo, hi);
        const u32 w0 = r.template word<0>();
        const u32 ds = f16_bcast(T == QT_MXFP4 ? f32_to_f16(scale()) : w0);
        if (CODEBOOK) {
            // Biased values u = q + 128: (1024 + u) - 1152 = q exactly, times d.
            bytes16_to_f16(lo, 0x64806480u, ds, 0x80008000u, o[0], o[1]);
            bytes16_to_f16(hi, 0x64806480u, ds, 0x80008000u, o[2], o[3]);
        } else if (HAS_MIN) {
            const u32 m = f16_bcast(w0 >> 16);
            bytes16_to_f16(lo, 0x64006400u, ds, m, o[0], o[1]);
            bytes16_to_f16(hi, 0x64006400u, ds, m, o[2], o[3]);
        } else {
            // (1024 + q) - (1024 + bias) = q - bias exactly, times d.
            const u32 bias = FIVE ? 0x64106410u : 0x64086408u;
            bytes16_to_f16(lo, bias, ds, 0x80008000u, o[0], o[1]);
            bytes16_to_f16(hi, bias, ds, 0x80008000u, o[2], o[3]);
        }
    }
    // Codebook values biased by 128; the legacy formats' stored values with their zero point.
    static constexpr int ZO = CODEBOOK ? 128 : HAS_MIN ? 0 : FIVE ? 16 : 8;
    // The codebook formats' bytes in the integer GEMV's order (Codebook::word_il): b[2i], b[2i+1]
    // from quant word i, so segment 0 (b[0..3]) holds elements 0..7 and 16..23, segment 1 the
    // rest; values + ZO_IL.
    static constexpr int ZO_IL = Codebook<CODEBOOK ? T : QT_IQ4_NL, false>::IL_ZO;  // codebook formats
    __device__ __forceinline__ void to_bytes_il(int, u32 b[8], float sc[2], float off[2]) const {
        static_assert(CODEBOOK, "the codebook formats only");
        const u32 q[4] = {r.template word<QS>(), r.template word<QS + 4>(), r.template word<QS + 8>(),
                          r.template word<QS + 12>()};
#pragma unroll
        for (int i = 0; i < 4; i++) Codebook<T, false>::word_il(q[i], b[2 * i], b[2 * i + 1]);
        sc[0] = sc[1] = scale();
        off[0] = off[1] = 0.0f;
    }
    __device__ __forceinline__ void to_bytes(int, u32 b[8], float sc[2], float off[2]) const {
        uint4 lo, hi;
        values<CODEBOOK>(lo, hi);
        set_bytes(b, lo, hi);
        sc[0] = sc[1] = scale();
        off[0] = off[1] = HAS_MIN ? f16_to_f32(r.template word<0>() >> 16) : 0.0f;
    }
};
template <>
struct Piece<QT_Q4_0> : PieceSmall<QT_Q4_0> {};
template <>
struct Piece<QT_Q4_1> : PieceSmall<QT_Q4_1> {};
template <>
struct Piece<QT_Q5_0> : PieceSmall<QT_Q5_0> {};
template <>
struct Piece<QT_Q5_1> : PieceSmall<QT_Q5_1> {};
template <>
struct Piece<QT_IQ4_NL> : PieceSmall<QT_IQ4_NL> {};
template <>
struct Piece<QT_MXFP4> : PieceSmall<QT_MXFP4> {};

// IQ4_XS piece p: super-block p/8 (8-byte aligned: 136-byte blocks in rows of whole blocks),
// sub-block ib = p%8: header words 0, 1 (d, scales_h, scales_l) and the 16 quant bytes at
// 8 + 16 ib.
template <>
struct Piece<QT_IQ4_XS> {
    u32 h0, h1, q[4];
    // Six 4-byte loads (three 8-byte loads measured slower in gemv4_iq4_xs at 8192 x 2048:
    // 774 -> 726 GB/s, docs/results/2026-12-03-h200-codebook).
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* row, int p) {
        const u8* b = row + static_cast<i64>(p >> 3) * 136;
        h0 = L::ld32(b);
        h1 = L::ld32(b + 4);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = L::ld32(b + 8 + 16 * (p & 7) + 4 * i);
    }
    // Six words used (the 16 quant bytes, the 8 header bytes), in two 16-byte slot vectors.
    static constexpr int SLOT_WORDS = 8;
    __device__ __forceinline__ void issue_async(const Slot& s, const u8* row, int p) const {
        const u8* b = row + static_cast<i64>(p >> 3) * 136;  // 8-byte aligned
        cp_async8(s.w(0), b + 8 + 16 * (p & 7));
        cp_async8(s.w(2), b + 16 + 16 * (p & 7));
        cp_async8(s.w(4), b);
    }
    __device__ __forceinline__ void from_slot(const Slot& s, const u8*, int) {
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = *s.w(i);
        h0 = *s.w(4);
        h1 = *s.w(5);
    }
    // Lane group sharing (gemm.cu swap_issue / swap_decode: lane t = 0..3 takes piece 4j + t of
    // the row, all four in one super-block): the 8-byte header by lane 0 for all four.
    static constexpr bool SHARES = true;
    __device__ __forceinline__ void issue_async_shared(const Slot& s, const u8* row, int p, int t) const {
        const u8* b = row + static_cast<i64>(p >> 3) * 136;
        cp_async8(s.w(0), b + 8 + 16 * (p & 7));
        cp_async8(s.w(2), b + 16 + 16 * (p & 7));
        if (t == 0) cp_async8(s.w(4), b);
    }
    __device__ __forceinline__ void from_slot_shared(const Slot& s, const u8*, int, int t) {
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = *s.w(i);
        const Slot h = lane_slot(s, 0, t);
        h0 = *h.w(4);
        h1 = *h.w(5);
    }
    __device__ __forceinline__ float scale(int p) const {
        const int ib = p & 7;
        const u32 ls = ((byte_of(h1, ib >> 1) >> (4 * (ib & 1))) & 15u) | (((h0 >> (16 + 2 * ib)) & 3u) << 4);
        return __fmul_rn(f16_to_f32(h0), static_cast<float>(static_cast<int>(ls) - 32));
    }
    template <bool BIASED = false>
    __device__ __forceinline__ void values(uint4& lo, uint4& hi) const {
        u32 l[4], u[4];
#pragma unroll
        for (int i = 0; i < 4; i++) Codebook<QT_IQ4_NL, BIASED>::word(q[i], l[i], u[i]);
        lo = make_uint4(l[0], l[1], l[2], l[3]);
        hi = make_uint4(u[0], u[1], u[2], u[3]);
    }
    __device__ __forceinline__ void to_f16(int p, uint4 o[4]) const {
        uint4 lo, hi;
        values<true>(lo, hi);
        const u32 ds = f16_bcast(f32_to_f16(scale(p)));
        bytes16_to_f16(lo, 0x64806480u, ds, 0x80008000u, o[0], o[1]);
        bytes16_to_f16(hi, 0x64806480u, ds, 0x80008000u, o[2], o[3]);
    }
    static constexpr int ZO = 128;  // biased codebook values
    __device__ __forceinline__ void to_bytes(int p, u32 b[8], float sc[2], float off[2]) const {
        uint4 lo, hi;
        values<true>(lo, hi);
        set_bytes(b, lo, hi);
        sc[0] = sc[1] = scale(p);
        off[0] = off[1] = 0.0f;
    }
    // PieceSmall<QT_IQ4_NL>::to_bytes_il's order and values.
    static constexpr int ZO_IL = Codebook<QT_IQ4_NL, false>::IL_ZO;
    __device__ __forceinline__ void to_bytes_il(int p, u32 b[8], float sc[2], float off[2]) const {
#pragma unroll
        for (int i = 0; i < 4; i++) Codebook<QT_IQ4_NL, false>::word_il(q[i], b[2 * i], b[2 * i + 1]);
        sc[0] = sc[1] = scale(p);
        off[0] = off[1] = 0.0f;
    }
};

// Q2_K piece p: super-block p/8 (84-byte blocks: 4-byte aligned), plane slice n = (p%8)/4,
// j = p%4: the 32 quant bytes at 16 + 32n (shifted by 2j), the word holding scales[8n + 2j]
// and [8n + 2j + 1], and the word d | dmin << 16.
template <>
struct Piece<QT_Q2_K> {
    u32 q[8], sc, dd;
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* row, int p) {
        const u8* b = row + static_cast<i64>(p >> 3) * 84;
        const int n = (p >> 2) & 1, j = p & 3;
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = L::ld32(b + 16 + 32 * n + 4 * i);
        sc = L::ld32(b + ((8 * n + 2 * j) & ~3));
        dd = L::ld32(b + 80);
    }
    static constexpr int SLOT_WORDS = 12;  // ten words used
    __device__ __forceinline__ void issue_async(const Slot& s, const u8* row, int p) const {
        const u8* b = row + static_cast<i64>(p >> 3) * 84;
        const int n = (p >> 2) & 1, j = p & 3;
#pragma unroll
        for (int i = 0; i < 8; i++) cp_async4(s.w(i), b + 16 + 32 * n + 4 * i, 4u);
        cp_async4(s.w(8), b + ((8 * n + 2 * j) & ~3), 4u);
        cp_async4(s.w(9), b + 80, 4u);
    }
    __device__ __forceinline__ void from_slot(const Slot& s, const u8*, int) {
#pragma unroll
        for (int i = 0; i < 8; i++) q[i] = *s.w(i);
        sc = *s.w(8);
        dd = *s.w(9);
    }
    // Scale and min of the piece's two groups (segment 0: 8n + 2j, segment 1: + 1).
    __device__ __forceinline__ void scales(int p, float& d1, float& m1, float& d2, float& m2) const {
        const int sh = 8 * ((2 * (p & 3)) & 3);
        const u32 s0 = (sc >> sh) & 0xffu, s1 = (sc >> (sh + 8)) & 0xffu;
        const float d = f16_to_f32(dd), dmin = f16_to_f32(dd >> 16);
        d1 = __fmul_rn(d, static_cast<float>(s0 & 15u));
        m1 = __fmul_rn(dmin, static_cast<float>(s0 >> 4));
        d2 = __fmul_rn(d, static_cast<float>(s1 & 15u));
        m2 = __fmul_rn(dmin, static_cast<float>(s1 >> 4));
    }
    __device__ __forceinline__ void values(int p, uint4& lo, uint4& hi) const {
        const int sh = 2 * (p & 3);
        lo = make_uint4((q[0] >> sh) & 0x03030303u, (q[1] >> sh) & 0x03030303u, (q[2] >> sh) & 0x03030303u,
                        (q[3] >> sh) & 0x03030303u);
        hi = make_uint4((q[4] >> sh) & 0x03030303u, (q[5] >> sh) & 0x03030303u, (q[6] >> sh) & 0x03030303u,
                        (q[7] >> sh) & 0x03030303u);
    }
    __device__ __forceinline__ void to_f16(int p, uint4 o[4]) const {
        float d1, m1, d2, m2;
        scales(p, d1, m1, d2, m2);
        uint4 lo, hi;
        values(p, lo, hi);
        bytes16_to_f16(lo, 0x64006400u, f16_bcast(f32_to_f16(d1)), f16_bcast(f32_to_f16(m1) ^ 0x8000u), o[0], o[1]);
        bytes16_to_f16(hi, 0x64006400u, f16_bcast(f32_to_f16(d2)), f16_bcast(f32_to_f16(m2) ^ 0x8000u), o[2], o[3]);
    }
    static constexpr int ZO = 0;
    __device__ __forceinline__ void to_bytes(int p, u32 b[8], float sc_[2], float off[2]) const {
        float d1, m1, d2, m2;
        scales(p, d1, m1, d2, m2);
        sc_[0] = d1;
        off[0] = -m1;
        sc_[1] = d2;
        off[1] = -m2;
        uint4 lo, hi;
        values(p, lo, hi);
        set_bytes(b, lo, hi);
    }
};

// Q3_K piece p: super-block p/8 (110-byte blocks: 2-byte aligned), n = (p%8)/4, j = p%4: all
// 32 hmask bytes (bit 4n + j), the 32 quant bytes at 32 + 32n (shifted by 2j), and the 14
// bytes of scales and d at 96. Values are u = q + 4 in 0..7.
template <>
struct Piece<QT_Q3_K> {
    RawBytes<32> hm, qs;
    RawBytes<14> tail;
    static constexpr int SLOT_WORDS = 24;
    static_assert(2 * RawBytes<32>::SLOT_WORDS + RawBytes<14>::SLOT_WORDS <= SLOT_WORDS, "slot");
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* row, int p) {
        const u8* b = row + static_cast<i64>(p >> 3) * 110;
        hm.template issue<L>(b);
        qs.template issue<L>(b + 32 + 32 * ((p >> 2) & 1));
        tail.template issue<L>(b + 96);
    }
    __device__ __forceinline__ void issue_async(const Slot& s, const u8* row, int p) const {
        const u8* b = row + static_cast<i64>(p >> 3) * 110;
        RawBytes<32>::issue_async(s, 0, b);
        RawBytes<32>::issue_async(s, RawBytes<32>::W, b + 32 + 32 * ((p >> 2) & 1));
        RawBytes<14>::issue_async(s, 2 * RawBytes<32>::W, b + 96);
    }
    __device__ __forceinline__ void from_slot(const Slot& s, const u8* row, int p) {
        const u8* b = row + static_cast<i64>(p >> 3) * 110;
        hm.from_slot(s, 0, b);
        qs.from_slot(s, RawBytes<32>::W, b + 32 + 32 * ((p >> 2) & 1));
        tail.from_slot(s, 2 * RawBytes<32>::W, b + 96);
    }
    // Scales of the piece's two groups g = 8n + 2j (+1), times d.
    __device__ __forceinline__ void scales(int p, float& d1, float& d2) const {
        const int n = (p >> 2) & 1, j = p & 3;
        const u32 s0 = tail.template word<0>(), s1 = tail.template word<4>(), s2 = tail.template word<8>();
        const float d = f16_to_f32(tail.template word<12>());
        // Low nibbles: bytes 2j, 2j+1 (nibble n); top bits: bytes 8 + 2(j&1), +1, at bit 2(2n + j/2).
        const u32 lw = j < 2 ? s0 : s1;
        const int lb = 2 * (j & 1);
        const int hs = 2 * (2 * n + (j >> 1));
        const u32 a = (byte_of(lw, lb) >> (4 * n)) & 15u, c = (byte_of(lw, lb + 1) >> (4 * n)) & 15u;
        const u32 ha = (byte_of(s2, lb) >> hs) & 3u, hc = (byte_of(s2, lb + 1) >> hs) & 3u;
        d1 = __fmul_rn(d, static_cast<float>(static_cast<int>(a | (ha << 4)) - 32));
        d2 = __fmul_rn(d, static_cast<float>(static_cast<int>(c | (hc << 4)) - 32));
    }
    template <int I>
    __device__ __forceinline__ u32 value_word(int p) const {
        const int n = (p >> 2) & 1, j = p & 3;
        const u32 low = (qs.template word<4 * I>() >> (2 * j)) & 0x03030303u;
        const u32 high = (hm.template word<4 * I>() >> (4 * n + j)) & 0x01010101u;
        return low | (high << 2);
    }
    __device__ __forceinline__ void values(int p, uint4& lo, uint4& hi) const {
        lo = make_uint4(value_word<0>(p), value_word<1>(p), value_word<2>(p), value_word<3>(p));
        hi = make_uint4(value_word<4>(p), value_word<5>(p), value_word<6>(p), value_word<7>(p));
    }
    __device__ __forceinline__ void to_f16(int p, uint4 o[4]) const {
        float d1, d2;
        scales(p, d1, d2);
        uint4 lo, hi;
        values(p, lo, hi);
        // (1024 + u) - 1028 = q exactly, times f16(d * (sc - 32)).
        bytes16_to_f16(lo, 0x64046404u, f16_bcast(f32_to_f16(d1)), 0x80008000u, o[0], o[1]);
        bytes16_to_f16(hi, 0x64046404u, f16_bcast(f32_to_f16(d2)), 0x80008000u, o[2], o[3]);
    }
    static constexpr int ZO = 4;  // u = q + 4
    __device__ __forceinline__ void to_bytes(int p, u32 b[8], float sc[2], float off[2]) const {
        float d1, d2;
        scales(p, d1, d2);
        sc[0] = d1;
        sc[1] = d2;
        off[0] = off[1] = 0.0f;
        uint4 lo, hi;
        values(p, lo, hi);
        set_bytes(b, lo, hi);
    }
};
