/* quant_layout.c - the Q8_0 / Q4_0 / Q4_1 repacking between ggml blocks and the device regions
 * (quant_layout.h, docs/quant_layouts.md). Everything works on whole 32-element blocks, so any
 * block-aligned chunk of a tensor converts on its own. */
#include "cann/quant_layout.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define CANN_QL_X86 1
#include <immintrin.h>
#endif

#include "cann_llm.h"
#include "core/clm_impl.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "quant_layout.c reads blocks as little-endian words"
#endif

static const cann_qlayout layouts[] = {
    {CLM_TYPE_Q8_0, "q8_0", 2, 34, {32, 2}, 34},
    {CLM_TYPE_Q4_0, "q4_0", 2, 18, {16, 2}, 18},
    {CLM_TYPE_Q4_1, "q4_1", 4, 20, {16, 2, 2, 2}, 22},
};

const cann_qlayout *cann_qlayout_get(int32_t type) {
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
        if (layouts[i].type == type) return &layouts[i];
    }
    return NULL;
}

size_t cann_qlayout_region_offset(const cann_qlayout *layout, size_t n_blocks, int r) {
    size_t offset = 0;
    for (int i = 0; i < r; i++) offset += n_blocks * layout->region_bytes[i];
    return offset;
}

/* ---- fp16 ----------------------------------------------------------------------------------- */
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float cann_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {  /* zero or subnormal: man * 2^-24 */
        float f = (float)man * 0x1p-24f;
        return bits_f32(f32_bits(f) | sign);
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | man << 13);
    return bits_f32(sign | (exp + 112) << 23 | man << 13);
}

uint16_t cann_f32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return sign | 0x7e00 | (uint16_t)((x >> 13) & 0x1ff);  /* NaN stays quiet NaN */
    if (x >= 0x477ff000u) return sign | 0x7c00;                                 /* >= 65520: inf */
    if (x < 0x38800000u) {  /* below 2^-14: subnormal; adding 0.5 rounds to a multiple of 2^-24 */
        return sign | (uint16_t)(f32_bits(bits_f32(x) + 0.5f) - 0x3f000000u);
    }
    x += 0xc8000fffu + ((x >> 13) & 1);  /* rebias the exponent by -112, round to nearest even */
    return sign | (uint16_t)(x >> 13);
}

static inline uint16_t load16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static inline void store16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* ---- nibbles -------------------------------------------------------------------------------- */
/* The low bytes of the four 16-bit lanes of x, packed into 32 bits. */
static inline uint32_t compress_lanes(uint64_t x) {
    x = (x | x >> 8) & 0x0000ffff0000ffffull;
    return (uint32_t)(x | x >> 16);
}

/* Four bytes spread to the low bytes of four 16-bit lanes. */
static inline uint64_t spread_lanes(uint32_t v) {
    uint64_t x = v;
    x = (x | x << 16) & 0x0000ffff0000ffffull;
    return (x | x << 8) & 0x00ff00ff00ff00ffull;
}

#define LO_NIB 0x000f000f000f000full
#define HI_NIB 0x00f000f000f000f0ull

/* ggml qs (element j low nibble of byte j, element j+16 high nibble) -> natural order (element 2k
 * low, 2k+1 high nibble of byte k), XOR 0x88: two's-complement int4 (q - 8). */
static inline void pack_nibbles(const uint8_t *qs, uint8_t *out) {
    uint64_t a, b;
    memcpy(&a, qs, 8);
    memcpy(&b, qs + 8, 8);
    /* Per lane (qs[2i], qs[2i+1]): low nibbles -> elements 2i, 2i+1; high -> 16+2i, 17+2i. */
    uint32_t w[4] = {
        compress_lanes((a & LO_NIB) | ((a >> 4) & HI_NIB)),
        compress_lanes((b & LO_NIB) | ((b >> 4) & HI_NIB)),
        compress_lanes(((a >> 4) & LO_NIB) | ((a >> 8) & HI_NIB)),
        compress_lanes(((b >> 4) & LO_NIB) | ((b >> 8) & HI_NIB)),
    };
    for (int i = 0; i < 4; i++) w[i] ^= 0x88888888u;
    memcpy(out, w, 16);
}

static inline void unpack_nibbles(const uint8_t *in, uint8_t *qs) {
    uint32_t w[4];
    memcpy(w, in, 16);
    for (int h = 0; h < 2; h++) {  /* qs[8h .. 8h+8) from device bytes 4h.. (low) and 8+4h.. (high) */
        uint64_t p = spread_lanes(w[h] ^ 0x88888888u), q = spread_lanes(w[2 + h] ^ 0x88888888u);
        uint64_t x = (p & LO_NIB) | ((q & LO_NIB) << 4) | ((p & HI_NIB) << 4) | ((q & HI_NIB) << 8);
        memcpy(qs + 8 * h, &x, 8);
    }
}

/* ---- Q4_1 scale / offset -------------------------------------------------------------------- */
#define FP16_NINE 0x4880  /* 9.0 */

/* (d, m) -> (scale, offset, kept) with (w + offset) * scale ~= q*d + m for w = q - 8. A block with
 * d = +-0 stores scale = m, offset = 9 and keeps d's bits; otherwise scale = d, kept = m. */
static inline void q4_1_encode(uint16_t d, uint16_t m, uint16_t *scale, uint16_t *offset, uint16_t *kept) {
    if ((d & 0x7fff) == 0) {
        *scale = m, *offset = FP16_NINE, *kept = d;
    } else {
        *scale = d, *kept = m;
        *offset = cann_f32_to_fp16(8.0f + cann_fp16_to_f32(m) / cann_fp16_to_f32(d));
    }
}

/* Unambiguous: with d != 0 and kept = m = +-0 the offset is 8 (or NaN), never 9. */
static inline void q4_1_decode(uint16_t scale, uint16_t offset, uint16_t kept, uint16_t *d, uint16_t *m) {
    if (offset == FP16_NINE && (kept & 0x7fff) == 0) {
        *d = kept, *m = scale;
    } else {
        *d = scale, *m = kept;
    }
}

/* ---- Q4_1 scale / offset, 16 blocks at a time ---------------------------------------------------
 * q4_1_encode on 16 blocks: the fp16 conversions in hardware (exact both ways, round to nearest
 * even; NaNs come out quiet with the same payload as the software path's) and the same f32
 * division and addition, so the same bits; the regions are plain uint16 arrays. */
#ifdef CANN_QL_X86
#define CANN_QL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

CANN_QL_AVX512 static size_t q4_1_encode_x16(const uint8_t *s, size_t n, uint8_t *r1, uint8_t *r2, uint8_t *r3) {
    const __m512i at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(20));
    size_t b = 0;
    for (; b + 16 <= n; b += 16) {
        __m512i dm = _mm512_i32gather_epi32(at, s + 20 * b, 1);   /* d | m << 16 of each block */
        __m256i d = _mm512_cvtepi32_epi16(dm), m = _mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16));
        __m512 q = _mm512_div_ps(_mm512_cvtph_ps(m), _mm512_cvtph_ps(d));
        __m256i offset = _mm512_cvtps_ph(_mm512_add_ps(_mm512_set1_ps(8.0f), q),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __mmask16 zero = _mm256_testn_epi16_mask(d, _mm256_set1_epi16(0x7fff));   /* d = +-0 */
        _mm256_storeu_si256((__m256i *)(r1 + 2 * b), _mm256_mask_blend_epi16(zero, d, m));
        _mm256_storeu_si256((__m256i *)(r2 + 2 * b),
                            _mm256_mask_blend_epi16(zero, offset, _mm256_set1_epi16(FP16_NINE)));
        _mm256_storeu_si256((__m256i *)(r3 + 2 * b), _mm256_mask_blend_epi16(zero, m, d));
    }
    return b;
}

#endif

/* ---- whole blocks --------------------------------------------------------------------------- */
static void pack_blocks(const cann_qlayout *layout, const void *src, size_t n, void *const dst[], bool vector) {
    (void)vector;   /* only x86 has a vector form */
    const uint8_t *s = src;
    uint8_t *r0 = dst[0], *r1 = dst[1];
    switch (layout->type) {
    case CLM_TYPE_Q8_0:  /* block: d[2] qs[32] */
        for (size_t b = 0; b < n; b++, s += 34) {
            memcpy(r0 + 32 * b, s + 2, 32);
            memcpy(r1 + 2 * b, s, 2);
        }
        break;
    case CLM_TYPE_Q4_0:  /* block: d[2] qs[16] */
        for (size_t b = 0; b < n; b++, s += 18) {
            pack_nibbles(s + 2, r0 + 16 * b);
            memcpy(r1 + 2 * b, s, 2);
        }
        break;
    case CLM_TYPE_Q4_1: {  /* block: d[2] m[2] qs[16] */
        uint8_t *r2 = dst[2], *r3 = dst[3];
        size_t encoded = 0;
#ifdef CANN_QL_X86
        if (vector) encoded = q4_1_encode_x16(s, n, r1, r2, r3);
#endif
        for (size_t b = 0; b < n; b++, s += 20) {
            pack_nibbles(s + 4, r0 + 16 * b);
            if (b < encoded) continue;
            uint16_t scale, offset, kept;
            q4_1_encode(load16(s), load16(s + 2), &scale, &offset, &kept);
            store16(r1 + 2 * b, scale);
            store16(r2 + 2 * b, offset);
            store16(r3 + 2 * b, kept);
        }
        break;
    }
    default:
        break;
    }
}

void cann_qlayout_pack(const cann_qlayout *layout, const void *src, size_t n, void *const dst[]) {
    pack_blocks(layout, src, n, dst, clm_host_avx512());
}

void cann_qlayout_pack_portable(const cann_qlayout *layout, const void *src, size_t n, void *const dst[]) {
    pack_blocks(layout, src, n, dst, false);
}

void cann_qlayout_unpack(const cann_qlayout *layout, const void *const src[], size_t n, void *dst) {
    uint8_t *d = dst;
    const uint8_t *r0 = src[0], *r1 = src[1];
    switch (layout->type) {
    case CLM_TYPE_Q8_0:
        for (size_t b = 0; b < n; b++, d += 34) {
            memcpy(d, r1 + 2 * b, 2);
            memcpy(d + 2, r0 + 32 * b, 32);
        }
        break;
    case CLM_TYPE_Q4_0:
        for (size_t b = 0; b < n; b++, d += 18) {
            memcpy(d, r1 + 2 * b, 2);
            unpack_nibbles(r0 + 16 * b, d + 2);
        }
        break;
    case CLM_TYPE_Q4_1: {
        const uint8_t *r2 = src[2], *r3 = src[3];
        for (size_t b = 0; b < n; b++, d += 20) {
            uint16_t dd, m;
            q4_1_decode(load16(r1 + 2 * b), load16(r2 + 2 * b), load16(r3 + 2 * b), &dd, &m);
            store16(d, dd);
            store16(d + 2, m);
            unpack_nibbles(r0 + 16 * b, d + 4);
        }
        break;
    }
    default:
        break;
    }
}
