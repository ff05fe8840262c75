/* ah_convert.h - F16 / BF16 <-> F32 conversion (round to nearest even) and the CPU feature level
 * the vectorised kernels dispatch on.
 *
 * The scalar conversions are bit-exact with the x86 hardware ones (F16C vcvtps2ph / vcvtph2ps):
 * a NaN keeps its sign and the top of its payload and comes out quiet. So a result never depends
 * on which code path (scalar, AVX2, AVX-512) converted it.
 */
#ifndef AH_CONVERT_H
#define AH_CONVERT_H

#include <stdint.h>
#include <string.h>

static inline uint32_t ah_f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static inline float ah_bits_f32(uint32_t x) {
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static inline uint16_t ah_f32_to_f16(float f) {
    uint32_t x = ah_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, payload truncated */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity (65520 is a tie to the odd 65504) */
        return (uint16_t)(sign | 0x7c00u);
    uint32_t exp = ax >> 23;
    if (exp >= 113) { /* normal half */
        uint32_t h = ((exp - 112) << 10) | ((ax >> 13) & 0x3ffu);
        uint32_t rem = ax & 0x1fffu;
        h += (rem > 0x1000u) || (rem == 0x1000u && (h & 1u));
        return (uint16_t)(sign | h);
    }
    if (exp < 102) /* below half the smallest subnormal: zero */
        return sign;
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp; /* 14..24 */
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    h += (rem > half) || (rem == half && (h & 1u));
    return (uint16_t)(sign | h);
}

static inline float ah_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN made quiet */
        return ah_bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
    if (exp == 0) /* zero or subnormal: mant * 2^-24 is exact in float */
        return ah_bits_f32(sign | ah_f32_bits((float)mant * 0x1p-24f));
    return ah_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

static inline uint16_t ah_f32_to_bf16(float f) {
    uint32_t x = ah_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static inline float ah_bf16_to_f32(uint16_t b) { return ah_bits_f32((uint32_t)b << 16); }

/* Instruction-set level of the vectorised kernels: the best the CPU has, or lower if the
 * environment variable CANN_LLM_HOST_ISA (scalar | avx2 | avx512) asks for it. */
typedef enum ah_isa_level { AH_ISA_SCALAR = 0, AH_ISA_AVX2 = 1, AH_ISA_AVX512 = 2 } ah_isa_level;
ah_isa_level ah_isa(void);

/* Contiguous row conversions, vectorised; same bits as the scalar functions above. */
void ah_f16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void ah_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n);
void ah_bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void ah_f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n);
/* ah_f32_to_f16_row over `rows` rows of n (src rows lds floats apart, dst rows ldd apart): one
 * dispatch for a tile's rows. */
void ah_f32_to_f16_rows(const float *src, int64_t lds, uint16_t *dst, int64_t ldd, int64_t rows, int64_t n);

#endif /* AH_CONVERT_H */
