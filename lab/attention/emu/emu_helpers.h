// Emulated PTX helpers (included inside namespace attn by gen.py).
inline float ex2(float x) { return exp2f(x); }
inline u32 smem_u32(const void* p) { return (u32)((const unsigned char*)p - attn_smem); }
inline void ldsm_x4(u32 (&r)[4], u32 addr) { emu::ldmatrix(r, attn_smem + addr, false); }
inline void ldsm_x4_t(u32 (&r)[4], u32 addr) { emu::ldmatrix(r, attn_smem + addr, true); }
inline void mma16816(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) { emu::mma(c, a, b0, b1); }
inline void cp_async16(u32 saddr, const void* g, int src_bytes) { emu::cp_async(attn_smem + saddr, g, src_bytes); }
inline void cp_async_commit() {}
inline void cp_async_wait_all() { emu::cp_async_wait(); }
