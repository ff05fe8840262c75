/* f16.c - F16 / BF16 <-> F32 row conversions with runtime ISA dispatch (AVX-512, AVX2 + F16C,
 * portable C), the CPU feature probe, and acl_base.h's aclFloat16ToFloat, aclFloatToFloat16 and
 * aclDataTypeSize.
 */
#include <stdlib.h>
#include <string.h>

#include "ah.h"
#include "ah_convert.h"

#if defined(__x86_64__) || defined(__i386__)
#define AH_X86 1
#include <immintrin.h>
#endif

ah_isa_level ah_isa(void) {
    static int cached = -1;
    int level = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (level >= 0)
        return (ah_isa_level)level;
    level = AH_ISA_SCALAR;
#ifdef AH_X86
    __builtin_cpu_init();
    /* the AVX2 kernels use FMA too (every AVX2 CPU of note has it; one without runs scalar code) */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma"))
        level = AH_ISA_AVX2;
    if (level == AH_ISA_AVX2 && __builtin_cpu_supports("avx512f"))
        level = AH_ISA_AVX512;
#endif
    const char *cap = getenv("CANN_LLM_HOST_ISA");
    if (cap && strcmp(cap, "scalar") == 0)
        level = AH_ISA_SCALAR;
    else if (cap && strcmp(cap, "avx2") == 0 && level > AH_ISA_AVX2)
        level = AH_ISA_AVX2;
    __atomic_store_n(&cached, level, __ATOMIC_RELAXED);
    return (ah_isa_level)level;
}

/* ---- portable ------------------------------------------------------------------------------ */
static void f16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = ah_f16_to_f32(src[i]);
}
static void f32_to_f16_scalar(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = ah_f32_to_f16(src[i]);
}
static void bf16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = ah_bf16_to_f32(src[i]);
}
static void f32_to_bf16_scalar(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = ah_f32_to_bf16(src[i]);
}

#ifdef AH_X86
/* ---- AVX2 + F16C ------------------------------------------------------------------------------ */
__attribute__((target("avx2,f16c"))) static void f16_to_f32_avx2(const uint16_t *src, float *dst,
                                                                  int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    f16_to_f32_scalar(src + i, dst + i, n - i);
}

__attribute__((target("avx2,f16c"))) static void f32_to_f16_avx2(const float *src, uint16_t *dst,
                                                                  int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    f32_to_f16_scalar(src + i, dst + i, n - i);
}

__attribute__((target("avx2"))) static void bf16_to_f32_avx2(const uint16_t *src, float *dst,
                                                             int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(w, 16));
    }
    bf16_to_f32_scalar(src + i, dst + i, n - i);
}

/* 8 floats -> 8 bf16 in the low 16 bits of each 32-bit lane, same rule as ah_f32_to_bf16. */
__attribute__((target("avx2"))) static inline __m256i bf16_round_avx2(__m256i x) {
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, bias), lsb), 16);
    __m256i magnitude = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

__attribute__((target("avx2"))) static void f32_to_bf16_avx2(const float *src, uint16_t *dst,
                                                             int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i lo = bf16_round_avx2(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m256i hi = bf16_round_avx2(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), packed);
    }
    f32_to_bf16_scalar(src + i, dst + i, n - i);
}

/* ---- AVX-512F ----------------------------------------------------------------------------------- */
__attribute__((target("avx512f"))) static void f16_to_f32_avx512(const uint16_t *src, float *dst,
                                                                 int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    f16_to_f32_avx2(src + i, dst + i, n - i);
}

__attribute__((target("avx512f"))) static void f32_to_f16_avx512(const float *src, uint16_t *dst,
                                                                 int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    f32_to_f16_avx2(src + i, dst + i, n - i);
}

__attribute__((target("avx512f"))) static void bf16_to_f32_avx512(const uint16_t *src, float *dst,
                                                                  int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(w, 16));
    }
    bf16_to_f32_avx2(src + i, dst + i, n - i);
}

__attribute__((target("avx512f"))) static void f32_to_bf16_avx512(const float *src, uint16_t *dst,
                                                                  int64_t n) {
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet_bit = _mm512_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_loadu_si512(src + i);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
        __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, bias), lsb), 16);
        __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, abs_mask), inf);
        __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), quiet_bit);
        __m512i r = _mm512_mask_mov_epi32(rounded, is_nan, quiet);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
    }
    f32_to_bf16_avx2(src + i, dst + i, n - i);
}
#endif /* AH_X86 */

void ah_f16_to_f32_row(const uint16_t *src, float *dst, int64_t n) {
#ifdef AH_X86
    switch (ah_isa()) {
    case AH_ISA_AVX512: f16_to_f32_avx512(src, dst, n); return;
    case AH_ISA_AVX2: f16_to_f32_avx2(src, dst, n); return;
    default: break;
    }
#endif
    f16_to_f32_scalar(src, dst, n);
}

void ah_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n) {
#ifdef AH_X86
    switch (ah_isa()) {
    case AH_ISA_AVX512: f32_to_f16_avx512(src, dst, n); return;
    case AH_ISA_AVX2: f32_to_f16_avx2(src, dst, n); return;
    default: break;
    }
#endif
    f32_to_f16_scalar(src, dst, n);
}

void ah_f32_to_f16_rows(const float *src, int64_t lds, uint16_t *dst, int64_t ldd, int64_t rows, int64_t n) {
    void (*row)(const float *, uint16_t *, int64_t) = f32_to_f16_scalar;
#ifdef AH_X86
    switch (ah_isa()) {
    case AH_ISA_AVX512: row = f32_to_f16_avx512; break;
    case AH_ISA_AVX2: row = f32_to_f16_avx2; break;
    default: break;
    }
#endif
    for (int64_t i = 0; i < rows; i++)
        row(src + i * lds, dst + i * ldd, n);
}

void ah_bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n) {
#ifdef AH_X86
    switch (ah_isa()) {
    case AH_ISA_AVX512: bf16_to_f32_avx512(src, dst, n); return;
    case AH_ISA_AVX2: bf16_to_f32_avx2(src, dst, n); return;
    default: break;
    }
#endif
    bf16_to_f32_scalar(src, dst, n);
}

void ah_f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n) {
#ifdef AH_X86
    switch (ah_isa()) {
    case AH_ISA_AVX512: f32_to_bf16_avx512(src, dst, n); return;
    case AH_ISA_AVX2: f32_to_bf16_avx2(src, dst, n); return;
    default: break;
    }
#endif
    f32_to_bf16_scalar(src, dst, n);
}

/* ---- acl_base.h helpers ------------------------------------------------------------------------ */
AH_API float aclFloat16ToFloat(aclFloat16 value) { return ah_f16_to_f32(value); }

AH_API aclFloat16 aclFloatToFloat16(float value) { return ah_f32_to_f16(value); }

AH_API size_t aclDataTypeSize(aclDataType dataType) {
    switch (dataType) {
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: case ACL_INT4: case ACL_UINT1: return 1;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: case ACL_COMPLEX32: return 4;
    case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: case ACL_COMPLEX64: return 8;
    case ACL_COMPLEX128: return 16;
    default: return 0;
    }
}
