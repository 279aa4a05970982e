// GGUF weight formats on the device: exact f32 dequantisation (`dequant8`, `dequant_rows`) and
// the 32-element "pieces" the GEMM / GEMV kernels in gemm.cu decode (to f16 for the tensor cores,
// or to bytes plus per-segment scales for the GEMVs).
//
// Formats (type ids as ggml numbers them; layouts read from ggml's block structs and the Rust
// reference in crates/gguf/src/quants):
//   F32 = 0   4 bytes / element
//   F16 = 1   2 bytes / element
//   Q8_0 = 8  34-byte blocks of 32: f16 d, 32 x i8 q;                x = q * d
//   Q4_K = 12 144-byte superblocks of 256: f16 d, f16 dmin, 12 bytes of packed 6-bit
//             (scale, min) for 8 sub-blocks of 32, 128 bytes of nibbles. Chunk c (0..3) covers
//             elements 64c..64c+63: the low nibbles of qs[32c..32c+32] are its first 32 elements
//             (sub-block 2c), the high nibbles the next 32 (sub-block 2c+1).
//             x = (d*sc) * q - (dmin*m), each product rounded to f32 first (no FMA).
//   Q5_K = 13 176-byte superblocks: as Q4_K plus qh[32] (at byte 16, before qs at 48) holding
//             the fifth bit: element 64c + l (+32) takes bit 2c (2c+1) of qh[l].
//   Q6_K = 14 210-byte superblocks: ql[128], qh[64], i8 scales[16], f16 d (last). Half h (0..1)
//             covers elements 128h..128h+127 from ql[64h..], qh[32h..], scales[8h..]; quarter s
//             (0..3), l in 0..31: element 128h + 32s + l = ((ql[l + 32(s&1)] >> 4(s>>1)) & 15 |
//             ((qh[l] >> 2s) & 3) << 4) - 32, times d * scales[8h + 2s + l/16].
//   BF16 = 30 2 bytes / element.
// Alignment: superblock/row starts of Q6_K and Q8_0 are only 2-byte aligned (210, 34 bytes), so
// their loads go through 4-byte words and funnel shifts; Q4_K/Q5_K/F16/BF16/F32 rows are
// 16-byte aligned whenever the weight base is and K is a multiple of the block (K % 8 for floats).
//
// The CPU emulator in lab/gemm/emu supplies its own versions of the few hardware primitives
// (quant_load.cuh; it defines TALLY_EMU); everything else is plain CUDA C++.
#pragma once
#include "common.cuh"

constexpr int QT_F32 = 0;
constexpr int QT_F16 = 1;
constexpr int QT_Q8_0 = 8;
constexpr int QT_Q4_K = 12;
constexpr int QT_Q5_K = 13;
constexpr int QT_Q6_K = 14;
constexpr int QT_BF16 = 30;
// The legacy, low-bit K and codebook formats (layouts at their pieces below).
constexpr int QT_Q4_0 = 2;
constexpr int QT_Q4_1 = 3;
constexpr int QT_Q5_0 = 6;
constexpr int QT_Q5_1 = 7;
constexpr int QT_Q2_K = 10;
constexpr int QT_Q3_K = 11;
constexpr int QT_IQ4_NL = 20;
constexpr int QT_IQ4_XS = 23;
constexpr int QT_MXFP4 = 39;

// Elements per block (1 for the float types).
__host__ __device__ constexpr int qt_block_elems(int t) {
    return (t == QT_Q4_K || t == QT_Q5_K || t == QT_Q6_K || t == QT_Q2_K || t == QT_Q3_K || t == QT_IQ4_XS) ? 256
           : (t == QT_Q8_0 || t == QT_Q4_0 || t == QT_Q4_1 || t == QT_Q5_0 || t == QT_Q5_1 || t == QT_IQ4_NL ||
              t == QT_MXFP4)
               ? 32
               : 1;
}
// Bytes per block; 0 for an unsupported type.
__host__ __device__ constexpr int qt_block_bytes(int t) {
    return t == QT_F32    ? 4
           : t == QT_F16  ? 2
           : t == QT_BF16 ? 2
           : t == QT_Q8_0 ? 34
           : t == QT_Q4_K ? 144
           : t == QT_Q5_K ? 176
           : t == QT_Q6_K ? 210
           : t == QT_Q4_0 ? 18
           : t == QT_Q4_1 ? 20
           : t == QT_Q5_0 ? 22
           : t == QT_Q5_1 ? 24
           : t == QT_Q2_K ? 84
           : t == QT_Q3_K ? 110
           : t == QT_IQ4_NL ? 18
           : t == QT_IQ4_XS ? 136
           : t == QT_MXFP4 ? 17
                          : 0;
}
__host__ __device__ constexpr bool qt_is_kquant(int t) {
    return t == QT_Q4_K || t == QT_Q5_K || t == QT_Q6_K;
}

#include "quant_load.cuh"

// ---------------------------------------------------------------------------------------------
// Exact f32 dequantisation of 8 consecutive elements k..k+7 (k a multiple of 8) of one row,
// bit-identical to the CPU reference (products rounded separately; no FMA contraction).

template <int T>
__device__ __forceinline__ void dequant8(const u8* row, int k, float out[8]);

template <>
__device__ __forceinline__ void dequant8<QT_Q4_K>(const u8* row, int k, float out[8]) {
    const u8* b = row + (k >> 8) * 144;
    const int e = k & 255, c = e >> 6, hi = (e >> 5) & 1, l0 = e & 31;
    const u32 dd = ldg_u32(b);
    const float d = f16_to_f32(dd), dmin = f16_to_f32(dd >> 16);
    u32 sc, m;
    kq_scale_min(ldg_u32(b + 4), ldg_u32(b + 8), ldg_u32(b + 12), 2 * c + hi, sc, m);
    const float d1 = __fmul_rn(d, static_cast<float>(sc)), m1 = __fmul_rn(dmin, static_cast<float>(m));
    const u32 q0 = ldg_u32(b + 16 + 32 * c + l0), q1 = ldg_u32(b + 20 + 32 * c + l0);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const u32 q = (byte_of(i < 4 ? q0 : q1, i & 3) >> (4 * hi)) & 15u;
        out[i] = __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
    }
}

template <>
__device__ __forceinline__ void dequant8<QT_Q5_K>(const u8* row, int k, float out[8]) {
    const u8* b = row + (k >> 8) * 176;
    const int e = k & 255, c = e >> 6, hi = (e >> 5) & 1, l0 = e & 31;
    const u32 dd = ldg_u32(b);
    const float d = f16_to_f32(dd), dmin = f16_to_f32(dd >> 16);
    u32 sc, m;
    kq_scale_min(ldg_u32(b + 4), ldg_u32(b + 8), ldg_u32(b + 12), 2 * c + hi, sc, m);
    const float d1 = __fmul_rn(d, static_cast<float>(sc)), m1 = __fmul_rn(dmin, static_cast<float>(m));
    const u32 q0 = ldg_u32(b + 48 + 32 * c + l0), q1 = ldg_u32(b + 52 + 32 * c + l0);
    const u32 h0 = ldg_u32(b + 16 + l0), h1 = ldg_u32(b + 20 + l0);
    const int bit = 2 * c + hi;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const u32 q = ((byte_of(i < 4 ? q0 : q1, i & 3) >> (4 * hi)) & 15u) |
                      (((byte_of(i < 4 ? h0 : h1, i & 3) >> bit) & 1u) << 4);
        out[i] = __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
    }
}

template <>
__device__ __forceinline__ void dequant8<QT_Q6_K>(const u8* row, int k, float out[8]) {
    const u8* b = row + (k >> 8) * 210;
    const int e = k & 255, h = e >> 7, s = (e >> 5) & 3, l0 = e & 31;
    const uint2 ql = ld8_a2(b + 64 * h + 32 * (s & 1) + l0);
    const uint2 qh = ld8_a2(b + 128 + 32 * h + l0);
    const int sc = static_cast<int>(static_cast<i8>(ldg_u8(b + 192 + 8 * h + 2 * s + (l0 >> 4))));
    const float ds = __fmul_rn(f16_to_f32(ldg_u16(b + 208)), static_cast<float>(sc));
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const u32 lo = (byte_of(i < 4 ? ql.x : ql.y, i & 3) >> (4 * (s >> 1))) & 15u;
        const u32 up = (byte_of(i < 4 ? qh.x : qh.y, i & 3) >> (2 * s)) & 3u;
        const int q = static_cast<int>(lo | (up << 4)) - 32;
        out[i] = __fmul_rn(ds, static_cast<float>(q));
    }
}

template <>
__device__ __forceinline__ void dequant8<QT_Q8_0>(const u8* row, int k, float out[8]) {
    const u8* b = row + (k >> 5) * 34;
    const float d = f16_to_f32(ldg_u16(b));
    const uint2 q = ld8_a2(b + 2 + (k & 31));
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int v = static_cast<int>(static_cast<i8>(byte_of(i < 4 ? q.x : q.y, i & 3)));
        out[i] = __fmul_rn(static_cast<float>(v), d);
    }
}

template <>
__device__ __forceinline__ void dequant8<QT_F16>(const u8* row, int k, float out[8]) {
    const u8* b = row + 2 * static_cast<i64>(k);
#pragma unroll
    for (int i = 0; i < 8; i++) out[i] = f16_to_f32(ldg_u16(b + 2 * i));
}

template <>
__device__ __forceinline__ void dequant8<QT_BF16>(const u8* row, int k, float out[8]) {
    const u8* b = row + 2 * static_cast<i64>(k);
#pragma unroll
    for (int i = 0; i < 8; i++) out[i] = bf16_to_f32(ldg_u16(b + 2 * i));
}

template <>
__device__ __forceinline__ void dequant8<QT_F32>(const u8* row, int k, float out[8]) {
    const u8* b = row + 4 * static_cast<i64>(k);
#pragma unroll
    for (int i = 0; i < 8; i++) out[i] = __uint_as_float(ldg_u32(b + 4 * i));
}

// ---------------------------------------------------------------------------------------------
// Pieces: 32 elements of one row, the unit of work of the GEMM loaders and the GEMV lanes.
// Piece p of a row has two segments of 16 consecutive elements each, starting at
//   K-quants: seg0 = 64*(p/2) + 16*(p%2), seg1 = seg0 + 32 (same bytes: low / high nibbles)
//   others:   seg0 = 32*p,                seg1 = seg0 + 16
// `issue(row, p)` only issues the global loads into the struct's registers; alternatively
// `issue_async(slot, row, p)` copies the same bytes into a shared-memory slot of SLOT_WORDS words
// with cp.async and, once they have landed, `from_slot(slot, row, p)` fills the struct from it.
// `to_f16(p, o)` decodes (o[0..1] = seg0 as f16, o[2..3] = seg1). The integer formats give their
// values as bytes, `to_bytes(p, b, sc, off)`: b[0..3] segment 0 (element 4i + j in byte j of b[i]),
// b[4..7] segment 1, unsigned, with element = sc[s] * (byte - ZO) + off[s] for the piece's
// constant ZO (the zero point folded into the integers: 8 for Q4_0, 128 for Q8_0 and the
// codebook formats' biased values, 0 where a min makes off[s] non-zero). The float formats
// (F16, BF16, F32) have `to_parts(p, v, sc, off)` instead; `piece_parts` gives both kinds as
// floats v[i] with element = sc[s] * v[i] + off[s] for segment s = i / 16.

template <int T>
__device__ __forceinline__ int piece_seg0(int p) {
    return qt_is_kquant(T) ? 64 * (p >> 1) + 16 * (p & 1) : 32 * p;
}
template <int T>
__device__ __forceinline__ int piece_seg1(int p) {
    return piece_seg0<T>(p) + (qt_is_kquant(T) ? 32 : 16);
}

// f16x2 {1024 + b0, 1024 + b1} from bytes b0 = byte 2j, b1 = byte 2j+1 of w (j = 0 or 1): one
// prmt puts each byte under an 0x64 byte (taken from the second operand), i.e. 0x64bb = 1024 + b.
__device__ __forceinline__ u32 bytes_to_f16x2_biased(u32 w, int j) {
    return __byte_perm(w, 0x64646464u, j ? 0x4342u : 0x4140u);
}
// Four bytes u (values < 256) as the floats u - ZO, exact, via the 2^23 trick: one prmt each
// (2^23 + u as the float's bits), one subtract of 2^23 + ZO.
template <int ZO = 0>
__device__ __forceinline__ void bytes_to_f32(u32 w, float* v) {
    constexpr float bias = 8388608.0f + static_cast<float>(ZO);
    v[0] = __fsub_rn(__uint_as_float(__byte_perm(w, 0x4B000000u, 0x7650u)), bias);
    v[1] = __fsub_rn(__uint_as_float(__byte_perm(w, 0x4B000000u, 0x7651u)), bias);
    v[2] = __fsub_rn(__uint_as_float(__byte_perm(w, 0x4B000000u, 0x7652u)), bias);
    v[3] = __fsub_rn(__uint_as_float(__byte_perm(w, 0x4B000000u, 0x7653u)), bias);
}
// The byte words of a piece's two segments, as `to_bytes` hands them out.
__device__ __forceinline__ void set_bytes(u32 b[8], uint4 s0, uint4 s1) {
    b[0] = s0.x;
    b[1] = s0.y;
    b[2] = s0.z;
    b[3] = s0.w;
    b[4] = s1.x;
    b[5] = s1.y;
    b[6] = s1.z;
    b[7] = s1.w;
}

// Decodes 16 bytes of small unsigned values (each < 1024 - bias) to 16 f16 as
// (v - bias16) * scale + offset, where bias16 = f16x2 of 1024 + bias, scale/offset are f16x2.
__device__ __forceinline__ void bytes16_to_f16(uint4 q, u32 bias16, u32 scale, u32 offset, uint4& o0,
                                               uint4& o1) {
    u32 w[4] = {q.x, q.y, q.z, q.w};
    u32 r[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            r[2 * i + j] = f16x2_fma(f16x2_sub(bytes_to_f16x2_biased(w[i], j), bias16), scale, offset);
        }
    }
    o0 = make_uint4(r[0], r[1], r[2], r[3]);
    o1 = make_uint4(r[4], r[5], r[6], r[7]);
}

__device__ __forceinline__ u32 f16_bcast(u32 h) { return (h & 0xffffu) * 0x10001u; }

template <int T>
struct Piece;

// Piece<T>::SHARES: the piece has issue_async_shared / from_slot_shared (else false).
template <class P, class = void>
struct PieceShares {
    static constexpr bool value = false;
};
template <class P>
struct PieceShares<P, decltype(void(P::SHARES))> {
    static constexpr bool value = P::SHARES;
};

template <>
struct Piece<QT_Q4_K> {
    uint4 hdr, q;
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* row, int p) {
        const u8* b = row + (p >> 3) * 144;
        hdr = L::ld128(b);
        q = L::ld128(b + 16 + 32 * ((p >> 1) & 3) + 16 * (p & 1));
    }
    static constexpr int SLOT_WORDS = 8;
    __device__ __forceinline__ void issue_async(const Slot& s, const u8* row, int p) const {
        const u8* b = row + (p >> 3) * 144;
        cp_async16(s.w(0), b);
        cp_async16(s.w(4), b + 16 + 32 * ((p >> 1) & 3) + 16 * (p & 1));
    }
    __device__ __forceinline__ void from_slot(const Slot& s, const u8*, int) {
        hdr = s.v(0);
        q = s.v(1);
    }
    // Lane group sharing (gemm.cu swap_issue / swap_decode: lane t = 0..3 takes piece 4j + t of
    // the row, all four in one block): the 16-byte header is copied by lane 0 only and read
    // from its slot (lane_slot) by all four.
    static constexpr bool SHARES = true;
    __device__ __forceinline__ void issue_async_shared(const Slot& s, const u8* row, int p, int t) const {
        const u8* b = row + (p >> 3) * 144;
        if (t == 0) cp_async16(s.w(0), b);
        cp_async16(s.w(4), b + 16 + 32 * ((p >> 1) & 3) + 16 * (p & 1));
    }
    __device__ __forceinline__ void from_slot_shared(const Slot& s, const u8*, int, int t) {
        hdr = lane_slot(s, 0, t).v(0);
        q = s.v(1);
    }
    // f32 scale and min of the two sub-blocks (low nibbles: 2c, high: 2c+1).
    __device__ __forceinline__ void scales(int p, float& d1, float& m1, float& d2, float& m2) const {
        const float d = f16_to_f32(hdr.x), dmin = f16_to_f32(hdr.x >> 16);
        const int c = (p >> 1) & 3;
        u32 sc, m;
        kq_scale_min(hdr.y, hdr.z, hdr.w, 2 * c, sc, m);
        d1 = __fmul_rn(d, static_cast<float>(sc));
        m1 = __fmul_rn(dmin, static_cast<float>(m));
        kq_scale_min(hdr.y, hdr.z, hdr.w, 2 * c + 1, sc, m);
        d2 = __fmul_rn(d, static_cast<float>(sc));
        m2 = __fmul_rn(dmin, static_cast<float>(m));
    }
    __device__ __forceinline__ void to_f16(int p, uint4 o[4]) const {
        float d1, m1, d2, m2;
        scales(p, d1, m1, d2, m2);
        const uint4 lo = make_uint4(q.x & 0x0F0F0F0Fu, q.y & 0x0F0F0F0Fu, q.z & 0x0F0F0F0Fu, q.w & 0x0F0F0F0Fu);
        const uint4 hi = make_uint4((q.x >> 4) & 0x0F0F0F0Fu, (q.y >> 4) & 0x0F0F0F0Fu,
                                    (q.z >> 4) & 0x0F0F0F0Fu, (q.w >> 4) & 0x0F0F0F0Fu);
        bytes16_to_f16(lo, 0x64006400u, f16_bcast(f32_to_f16(d1)), f16_bcast(f32_to_f16(m1) ^ 0x8000u), o[0], o[1]);
        bytes16_to_f16(hi, 0x64006400u, f16_bcast(f32_to_f16(d2)), f16_bcast(f32_to_f16(m2) ^ 0x8000u), o[2], o[3]);
    }
    static constexpr int ZO = 0;
    __device__ __forceinline__ void to_bytes(int p, u32 b[8], float sc[2], float off[2]) const {
        float d1, m1, d2, m2;
        scales(p, d1, m1, d2, m2);
        sc[0] = d1;
        off[0] = -m1;
        sc[1] = d2;
        off[1] = -m2;
        const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            b[i] = w[i] & 0x0F0F0F0Fu;
            b[4 + i] = (w[i] >> 4) & 0x0F0F0F0Fu;
        }
    }
};

template <>
struct Piece<QT_Q5_K> {
    uint4 hdr, qh, q;
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* row, int p) {
        const u8* b = row + (p >> 3) * 176;
        hdr = L::ld128(b);
        qh = L::ld128(b + 16 + 16 * (p & 1));
        q = L::ld128(b + 48 + 32 * ((p >> 1) & 3) + 16 * (p & 1));
    }
    static constexpr int SLOT_WORDS = 12;
    __device__ __forceinline__ void issue_async(const Slot& s, const u8* row, int p) const {
        const u8* b = row + (p >> 3) * 176;
        cp_async16(s.w(0), b);
        cp_async16(s.w(4), b + 16 + 16 * (p & 1));
        cp_async16(s.w(8), b + 48 + 32 * ((p >> 1) & 3) + 16 * (p & 1));
    }
    __device__ __forceinline__ void from_slot(const Slot& s, const u8*, int) {
        hdr = s.v(0);
        qh = s.v(1);
        q = s.v(2);
    }
    // Lane group sharing (as Q4_K's): the header by lane 0 for all four, the qh vector (chosen by
    // p & 1 = t & 1) by lanes 0 and 1 for lanes t and t + 2.
    static constexpr bool SHARES = true;
    __device__ __forceinline__ void issue_async_shared(const Slot& s, const u8* row, int p, int t) const {
        const u8* b = row + (p >> 3) * 176;
        if (t == 0) cp_async16(s.w(0), b);
        if (t < 2) cp_async16(s.w(4), b + 16 + 16 * (p & 1));
        cp_async16(s.w(8), b + 48 + 32 * ((p >> 1) & 3) + 16 * (p & 1));
    }
    __device__ __forceinline__ void from_slot_shared(const Slot& s, const u8*, int, int t) {
        hdr = lane_slot(s, 0, t).v(0);
        qh = lane_slot(s, t & 1, t).v(1);
        q = s.v(2);
    }
    __device__ __forceinline__ void scales(int p, float& d1, float& m1, float& d2, float& m2) const {
        const float d = f16_to_f32(hdr.x), dmin = f16_to_f32(hdr.x >> 16);
        const int c = (p >> 1) & 3;
        u32 sc, m;
        kq_scale_min(hdr.y, hdr.z, hdr.w, 2 * c, sc, m);
        d1 = __fmul_rn(d, static_cast<float>(sc));
        m1 = __fmul_rn(dmin, static_cast<float>(m));
        kq_scale_min(hdr.y, hdr.z, hdr.w, 2 * c + 1, sc, m);
        d2 = __fmul_rn(d, static_cast<float>(sc));
        m2 = __fmul_rn(dmin, static_cast<float>(m));
    }
    // 5-bit values of the 16 low-nibble elements (lo) and 16 high-nibble elements (hi).
    __device__ __forceinline__ void values(int p, uint4& lo, uint4& hi) const {
        const int c = (p >> 1) & 3;
        const u32 w[4] = {q.x, q.y, q.z, q.w};
        const u32 h[4] = {qh.x, qh.y, qh.z, qh.w};
        u32 l[4], u[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const u32 hs = h[i] >> (2 * c);  // bit 0 of each byte: bit 2c; bit 1: bit 2c+1
            l[i] = (w[i] & 0x0F0F0F0Fu) | ((hs & 0x01010101u) << 4);
            u[i] = ((w[i] >> 4) & 0x0F0F0F0Fu) | ((hs & 0x02020202u) << 3);
        }
        lo = make_uint4(l[0], l[1], l[2], l[3]);
        hi = make_uint4(u[0], u[1], u[2], u[3]);
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
    __device__ __forceinline__ void to_bytes(int p, u32 b[8], float sc[2], float off[2]) const {
        float d1, m1, d2, m2;
        scales(p, d1, m1, d2, m2);
        sc[0] = d1;
        off[0] = -m1;
        sc[1] = d2;
        off[1] = -m2;
        uint4 lo, hi;
        values(p, lo, hi);
        set_bytes(b, lo, hi);
    }
};

// Q6_K piece p: superblock p/8, chunk c = (p/2)%4 -> half h = c/2 and quarters s = 2(c%2) (seg0)
// and 2(c%2)+1 (seg1); l in [16(p%2), 16(p%2)+16). Both segments share the qh bytes and read
// ql at l and l + 32 with the nibble chosen by c%2.
template <>
struct Piece<QT_Q6_K> {
    Ld16A2 ql0, ql1, qh;
    u32 sc0, sc1, d;
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* row, int p) {
        const u8* b = row + (p >> 3) * 210;
        const int c = (p >> 1) & 3, h = c >> 1, sp = c & 1, ph = p & 1;
        ql0.template issue<L>(b + 64 * h + 16 * ph);
        ql1.template issue<L>(b + 64 * h + 32 + 16 * ph);
        qh.template issue<L>(b + 128 + 32 * h + 16 * ph);
        sc0 = L::ld8(b + 192 + 8 * h + 4 * sp + ph);
        sc1 = L::ld8(b + 192 + 8 * h + 4 * sp + 2 + ph);
        d = L::ld16(b + 208);
    }
    // Words 0..15: the window of ql0 and ql1 (48 bytes from ql0, Win16), 16..23: qh's; 24, 25:
    // the words holding the two scales; 26: d.
    using WinL = Win16<48, 2>;
    using WinH = Win16<16, 2>;
    static constexpr int SLOT_WORDS = 28;
    static_assert(WinL::SLOT_WORDS == 16 && WinH::SLOT_WORDS == 8, "slot");
    __device__ __forceinline__ void issue_async(const Slot& s, const u8* row, int p) const {
        const u8* b = row + (p >> 3) * 210;
        const int c = (p >> 1) & 3, h = c >> 1, sp = c & 1, ph = p & 1;
        WinL::issue_async(s, 0, b + 64 * h + 16 * ph);
        WinH::issue_async(s, 16, b + 128 + 32 * h + 16 * ph);
        byte_word_async(s, 24, b + 192 + 8 * h + 4 * sp + ph);
        byte_word_async(s, 25, b + 192 + 8 * h + 4 * sp + 2 + ph);
        half_word_async(s, 26, b + 208);
    }
    // Lane group sharing (gemm.cu swap_issue / swap_decode: lane t = 0..3 takes piece 4j + t of
    // the row, all four in one block): lanes t and t + 2 read the same ql and qh bytes (the
    // nibble differs) and the same d, so lanes 0 and 1 copy them for lanes 2 and 3; every lane
    // copies its two scales.
    static constexpr bool SHARES = true;
    __device__ __forceinline__ void issue_async_shared(const Slot& s, const u8* row, int p, int t) const {
        const u8* b = row + (p >> 3) * 210;
        const int c = (p >> 1) & 3, h = c >> 1, sp = c & 1, ph = p & 1;
        if (t < 2) {
            WinL::issue_async(s, 0, b + 64 * h + 16 * ph);
            WinH::issue_async(s, 16, b + 128 + 32 * h + 16 * ph);
            half_word_async(s, 26, b + 208);
        }
        byte_word_async(s, 24, b + 192 + 8 * h + 4 * sp + ph);
        byte_word_async(s, 25, b + 192 + 8 * h + 4 * sp + 2 + ph);
    }
    __device__ __forceinline__ void from_slot_shared(const Slot& s, const u8* row, int p, int t) {
        from_slots(lane_slot(s, t & 1, t), s, row, p);
    }
    __device__ __forceinline__ void from_slot(const Slot& s, const u8* row, int p) { from_slots(s, s, row, p); }
    __device__ __forceinline__ void from_slots(const Slot& hs, const Slot& s, const u8* row, int p) {
        const u8* b = row + (p >> 3) * 210;
        const int c = (p >> 1) & 3, h = c >> 1, sp = c & 1, ph = p & 1;
        WinL wl;
        wl.from_slot(hs, 0, b + 64 * h + 16 * ph);
        u32 u[13];
        wl.template words<13, 3>(wl.r >> 2, u);
        const u32 sh = (wl.r & 2u) << 3;  // ql0, ql1 and qh share the alignment mod 4
        ql0 = Ld16A2{u[0], u[1], u[2], u[3], u[4], sh};
        ql1 = Ld16A2{u[8], u[9], u[10], u[11], u[12], sh};
        WinH wh;
        wh.from_slot(hs, 16, b + 128 + 32 * h + 16 * ph);
        u32 v[5];
        wh.template words<5, 3>(wh.r >> 2, v);
        qh = Ld16A2{v[0], v[1], v[2], v[3], v[4], sh};
        sc0 = byte_from_slot(s, 24, b + 192 + 8 * h + 4 * sp + ph);
        sc1 = byte_from_slot(s, 25, b + 192 + 8 * h + 4 * sp + 2 + ph);
        d = half_from_slot(hs, 26, b + 208);
    }
    // 6-bit unsigned values (0..63) of seg0 (a) and seg1 (b).
    __device__ __forceinline__ void values(int p, uint4& a, uint4& b) const {
        const int sp = (p >> 1) & 1;
        const uint4 l0 = ql0.get(), l1 = ql1.get(), hh = qh.get();
        const u32 x0[4] = {l0.x, l0.y, l0.z, l0.w}, x1[4] = {l1.x, l1.y, l1.z, l1.w};
        const u32 h[4] = {hh.x, hh.y, hh.z, hh.w};
        u32 ra[4], rb[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            ra[i] = ((x0[i] >> (4 * sp)) & 0x0F0F0F0Fu) | (((h[i] >> (4 * sp)) & 0x03030303u) << 4);
            rb[i] = ((x1[i] >> (4 * sp)) & 0x0F0F0F0Fu) | (((h[i] >> (4 * sp + 2)) & 0x03030303u) << 4);
        }
        a = make_uint4(ra[0], ra[1], ra[2], ra[3]);
        b = make_uint4(rb[0], rb[1], rb[2], rb[3]);
    }
    __device__ __forceinline__ float scale(u32 s) const {
        return __fmul_rn(f16_to_f32(d), static_cast<float>(static_cast<int>(static_cast<i8>(s))));
    }
    __device__ __forceinline__ void to_f16(int p, uint4 o[4]) const {
        uint4 a, b;
        values(p, a, b);
        // (1024 + u) - 1056 = u - 32 exactly; times f16(d * sc).
        const u32 bias = 0x64206420u;
        bytes16_to_f16(a, bias, f16_bcast(f32_to_f16(scale(sc0))), 0u, o[0], o[1]);
        bytes16_to_f16(b, bias, f16_bcast(f32_to_f16(scale(sc1))), 0u, o[2], o[3]);
    }
    static constexpr int ZO = 32;
    __device__ __forceinline__ void to_bytes(int p, u32 o[8], float sc[2], float off[2]) const {
        uint4 a, b;
        values(p, a, b);
        sc[0] = scale(sc0);
        sc[1] = scale(sc1);
        off[0] = off[1] = 0.0f;
        set_bytes(o, a, b);
    }
};

// Q8_0 piece p = block p (34 bytes at 34p: 2-byte aligned). Words are loaded so that no byte
// outside the block is read.
template <>
struct Piece<QT_Q8_0> {
    u32 w[9];  // the block's words (see issue), first holds d when aligned
    u32 dsep;  // d when the block starts at 2 mod 4
    u32 odd;   // 1 when the block starts at 2 mod 4
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* row, int p) {
        const u8* b = row + static_cast<i64>(p) * 34;
        odd = static_cast<u32>(reinterpret_cast<u64>(b) & 2u) >> 1;
        if (odd) {
            // d at b (2 bytes), q at b+2 .. b+34: eight aligned words.
            dsep = L::ld16(b);
#pragma unroll
            for (int i = 0; i < 8; i++) w[i] = L::ld32(b + 2 + 4 * i);
            w[8] = 0u;
        } else {
            // Words at b .. b+32, then the last two q bytes alone.
            dsep = 0u;
#pragma unroll
            for (int i = 0; i < 8; i++) w[i] = L::ld32(b + 4 * i);
            w[8] = L::ld16(b + 32);
        }
    }
    // The 16-byte window of the block (three vectors, Win16).
    using Win = Win16<34, 2>;
    static constexpr int SLOT_WORDS = Win::SLOT_WORDS;
    __device__ __forceinline__ void issue_async(const Slot& s, const u8* row, int p) const {
        Win::issue_async(s, 0, row + static_cast<i64>(p) * 34);
    }
    __device__ __forceinline__ void from_slot(const Slot& s, const u8* row, int p) {
        Win win;
        win.from_slot(s, 0, row + static_cast<i64>(p) * 34);
        from_win(win);
    }
    // Lane group sharing (gemm.cu swap_issue / swap_decode): the four lanes' blocks are one span,
    // copied once (Win16::issue_async_group).
    static constexpr bool SHARES = true;
    __device__ __forceinline__ void issue_async_shared(const Slot& s, const u8* row, int p, int t) const {
        Win::issue_async_group(s, row + static_cast<i64>(p - t) * 34, t);
    }
    __device__ __forceinline__ void from_slot_shared(const Slot& s, const u8* row, int p, int t) {
        Win win;
        win.from_slot_group(s, row + static_cast<i64>(p - t) * 34, t);
        from_win(win);
    }
    __device__ __forceinline__ void from_win(const Win& win) {
        odd = (win.r >> 1) & 1u;
        // Aligned words from the one holding byte 2 of the block: d | q0 q1 ... when the block
        // is 4-byte aligned, q0..q3 ... when it starts at 2 mod 4 (then d is the high half of
        // the word before).
        win.template words<9, 4>((win.r + 2) >> 2, w);
        u32 dw[1];
        win.template words<1, 3>(win.r >> 2, dw);
        dsep = odd ? dw[0] >> 16 : 0u;
    }
    // The 32 quants as 8 words (byte i = q[i] as stored, two's complement) and d's f16 bits.
    __device__ __forceinline__ void raw(uint4& q0, uint4& q1, u32& dbits) const {
        u32 r[8];
        if (odd) {
#pragma unroll
            for (int i = 0; i < 8; i++) r[i] = w[i];
            dbits = dsep;
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) r[i] = __funnelshift_r(w[i], w[i + 1], 16);
            dbits = w[0] & 0xffffu;
        }
        q0 = make_uint4(r[0], r[1], r[2], r[3]);
        q1 = make_uint4(r[4], r[5], r[6], r[7]);
    }
    __device__ __forceinline__ void to_f16(int, uint4 o[4]) const {
        uint4 q0, q1;
        u32 dbits;
        raw(q0, q1, dbits);
        // q ^ 0x80 = q + 128 as an unsigned byte; (1024 + u) - 1152 = q exactly; times d
        // (exact f16 product rounding, the same value as f16(f32(q * d))).
        const u32 f = 0x80808080u;
        const uint4 u0 = make_uint4(q0.x ^ f, q0.y ^ f, q0.z ^ f, q0.w ^ f);
        const uint4 u1 = make_uint4(q1.x ^ f, q1.y ^ f, q1.z ^ f, q1.w ^ f);
        const u32 bias = 0x64806480u, ds = f16_bcast(dbits);
        bytes16_to_f16(u0, bias, ds, 0x80008000u, o[0], o[1]);
        bytes16_to_f16(u1, bias, ds, 0x80008000u, o[2], o[3]);
    }
    // Bytes q + 128 (q ^ 0x80), ZO = 128.
    static constexpr int ZO = 128;
    __device__ __forceinline__ void to_bytes(int, u32 b[8], float sc[2], float off[2]) const {
        uint4 q0, q1;
        u32 dbits;
        raw(q0, q1, dbits);
        sc[0] = sc[1] = f16_to_f32(dbits);
        off[0] = off[1] = 0.0f;
        const u32 f = 0x80808080u;
        set_bytes(b, make_uint4(q0.x ^ f, q0.y ^ f, q0.z ^ f, q0.w ^ f), make_uint4(q1.x ^ f, q1.y ^ f, q1.z ^ f, q1.w ^ f));
    }
};

// The 16-bit float rows (F16, BF16): a piece is 64 raw bytes, 32 values of 16 bits.
template <bool BF16>
struct Piece16 {
    uint4 r[4];
    static __device__ __forceinline__ float value(u32 bits) { return BF16 ? bf16_to_f32(bits) : f16_to_f32(bits); }
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* row, int p) {
        const u8* b = row + static_cast<i64>(p) * 64;
#pragma unroll
        for (int i = 0; i < 4; i++) r[i] = L::ld128(b + 16 * i);
    }
    static constexpr int SLOT_WORDS = 16;
    __device__ __forceinline__ void issue_async(const Slot& s, const u8* row, int p) const {
        const u8* b = row + static_cast<i64>(p) * 64;
#pragma unroll
        for (int i = 0; i < 4; i++) cp_async16(s.w(4 * i), b + 16 * i);
    }
    __device__ __forceinline__ void from_slot(const Slot& s, const u8*, int) {
#pragma unroll
        for (int i = 0; i < 4; i++) r[i] = s.v(i);
    }
    __device__ __forceinline__ void to_f16(int, uint4 o[4]) const {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (!BF16) {
                o[i] = r[i];
                continue;
            }
            const u32 w[4] = {r[i].x, r[i].y, r[i].z, r[i].w};
            u32 h[4];
#pragma unroll
            for (int j = 0; j < 4; j++) h[j] = pack_f16x2(value(w[j]), value(w[j] >> 16));
            o[i] = make_uint4(h[0], h[1], h[2], h[3]);
        }
    }
    __device__ __forceinline__ void to_parts(int, float v[32], float sc[2], float off[2]) const {
        sc[0] = sc[1] = 1.0f;
        off[0] = off[1] = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const u32 w[4] = {r[i].x, r[i].y, r[i].z, r[i].w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                v[8 * i + 2 * j] = value(w[j]);
                v[8 * i + 2 * j + 1] = value(w[j] >> 16);
            }
        }
    }
};

template <>
struct Piece<QT_F16> : Piece16<false> {};
template <>
struct Piece<QT_BF16> : Piece16<true> {};

template <>
struct Piece<QT_F32> {
    uint4 r[8];
    template <class L = LdG>
    __device__ __forceinline__ void issue(const u8* row, int p) {
        const u8* b = row + static_cast<i64>(p) * 128;
#pragma unroll
        for (int i = 0; i < 8; i++) r[i] = L::ld128(b + 16 * i);
    }
    static constexpr int SLOT_WORDS = 32;
    __device__ __forceinline__ void issue_async(const Slot& s, const u8* row, int p) const {
        const u8* b = row + static_cast<i64>(p) * 128;
#pragma unroll
        for (int i = 0; i < 8; i++) cp_async16(s.w(4 * i), b + 16 * i);
    }
    __device__ __forceinline__ void from_slot(const Slot& s, const u8*, int) {
#pragma unroll
        for (int i = 0; i < 8; i++) r[i] = s.v(i);
    }
    __device__ __forceinline__ void to_f16(int, uint4 o[4]) const {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 a = r[2 * i], b = r[2 * i + 1];
            o[i] = make_uint4(pack_f16x2(__uint_as_float(a.x), __uint_as_float(a.y)),
                              pack_f16x2(__uint_as_float(a.z), __uint_as_float(a.w)),
                              pack_f16x2(__uint_as_float(b.x), __uint_as_float(b.y)),
                              pack_f16x2(__uint_as_float(b.z), __uint_as_float(b.w)));
        }
    }
    __device__ __forceinline__ void to_parts(int, float v[32], float sc[2], float off[2]) const {
        sc[0] = sc[1] = 1.0f;
        off[0] = off[1] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            v[4 * i] = __uint_as_float(r[i].x);
            v[4 * i + 1] = __uint_as_float(r[i].y);
            v[4 * i + 2] = __uint_as_float(r[i].z);
            v[4 * i + 3] = __uint_as_float(r[i].w);
        }
    }
};

#include "quant_small.cuh"

// The integer formats (every supported type but the floats): their pieces have to_bytes and ZO.
__host__ __device__ constexpr bool qt_has_bytes(int t) {
    return t != QT_F32 && t != QT_F16 && t != QT_BF16;
}
// A piece as floats: v[i] = byte - ZO exactly (integer formats), or the float values themselves;
// element i = sc[s] * v[i] + off[s], s = i / 16.
template <int T>
__device__ __forceinline__ void piece_parts(const Piece<T>& pc, int p, float v[32], float sc[2], float off[2]) {
    if constexpr (qt_has_bytes(T)) {
        u32 b[8];
        pc.to_bytes(p, b, sc, off);
#pragma unroll
        for (int i = 0; i < 8; i++) bytes_to_f32<Piece<T>::ZO>(b[i], v + 4 * i);
    } else {
        pc.to_parts(p, v, sc, off);
    }
}

// ---------------------------------------------------------------------------------------------
// Row dequantisation: out[i, :] = dequant(W row ids[i] (or row0 + i)), all K elements.

struct DequantRowsArgs {
    const u8* w;          // first row of the tensor
    i64 row_bytes;        // bytes per row
    i32 type;             // QT_* id
    i32 K;                // elements per row; a multiple of the block size and of 8
    i32 n_rows_w;         // rows in the tensor (row ids are checked against it)
    const i32* row_ids;   // [n_rows] row ids, or null for the contiguous rows row0 ..
    i32 row0;
    i32 n_rows;           // output rows
    float* out;           // [n_rows, ldo]
    i64 ldo;
    i32* err;             // optional: number of out-of-range row ids (those rows are set to NaN)
};

// dequant8 for a type known only at run time; false (nothing written) for other types.
__device__ __forceinline__ bool dequant8_any(int type, const u8* row, int k, float v[8]) {
    switch (type) {
        case QT_F32: dequant8<QT_F32>(row, k, v); return true;
        case QT_F16: dequant8<QT_F16>(row, k, v); return true;
        case QT_BF16: dequant8<QT_BF16>(row, k, v); return true;
        case QT_Q8_0: dequant8<QT_Q8_0>(row, k, v); return true;
        case QT_Q4_K: dequant8<QT_Q4_K>(row, k, v); return true;
        case QT_Q5_K: dequant8<QT_Q5_K>(row, k, v); return true;
        case QT_Q6_K: dequant8<QT_Q6_K>(row, k, v); return true;
        case QT_Q4_0: dequant8<QT_Q4_0>(row, k, v); return true;
        case QT_Q4_1: dequant8<QT_Q4_1>(row, k, v); return true;
        case QT_Q5_0: dequant8<QT_Q5_0>(row, k, v); return true;
        case QT_Q5_1: dequant8<QT_Q5_1>(row, k, v); return true;
        case QT_IQ4_NL: dequant8<QT_IQ4_NL>(row, k, v); return true;
        case QT_IQ4_XS: dequant8<QT_IQ4_XS>(row, k, v); return true;
        case QT_MXFP4: dequant8<QT_MXFP4>(row, k, v); return true;
        case QT_Q2_K: dequant8<QT_Q2_K>(row, k, v); return true;
        case QT_Q3_K: dequant8<QT_Q3_K>(row, k, v); return true;
        default: return false;
    }
}

// Whether a thread's 8 elements from k lie in a row of K elements of `type` that dequant8 can
// decode (K a multiple of 8 and of the type's block).
__device__ __forceinline__ bool dequant8_in_row(int type, int K, int k) {
    const int be = qt_block_elems(type);
    return be > 0 && qt_block_bytes(type) > 0 && k < K && K % 8 == 0 && K % be == 0;
}

// Grid (ceil(K / 2048), n_rows), 256 threads: each thread writes 8 elements. The launch may be
// larger than that; surplus threads return. Types other than QT_* write nothing.
extern "C" __global__ void __launch_bounds__(256) dequant_rows(DequantRowsArgs a) {
    pdl_enter();
    const int r = blockIdx.y;
    const int k = (blockIdx.x * 256 + threadIdx.x) * 8;
    if (r >= a.n_rows || !dequant8_in_row(a.type, a.K, k)) return;
    float* o = a.out + static_cast<i64>(r) * a.ldo;
    const i64 id = a.row_ids ? static_cast<i64>(a.row_ids[r]) : static_cast<i64>(a.row0) + r;
    if (id < 0 || id >= a.n_rows_w) {
#pragma unroll
        for (int i = 0; i < 8; i++) o[k + i] = __uint_as_float(0x7fc00000u);
        if (a.err && k == 0) atomicAdd(a.err, 1);
        return;
    }
    float v[8];
    if (!dequant8_any(a.type, a.w + id * a.row_bytes, k, v)) return;
#pragma unroll
    for (int i = 0; i < 8; i++) o[k + i] = v[i];
}
