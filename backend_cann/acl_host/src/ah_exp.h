/* ah_exp.h - acl_host's own exp(x) in F32, for Silu, SwiGlu, GeluV2, Tanh, Softmax and the
 * attention softmax.
 *
 * exp(x) = 2^n * e^r, n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts, fused), e^r by a
 * degree-6 polynomial (Horner, fused). Below AH_EXP_LO the result is 0 (e^x is then under 2^-126),
 * above AH_EXP_HI it is inf; NaN stays NaN. Within 1.01 ulp of the true value over [-87, 88].
 * Every step is one correctly rounded IEEE operation, so the one-at-a-time function and the 8- and
 * 16-lane ones give the same bits: an element's result does not depend on its position in a row,
 * on the batch, the thread count or the instruction set. The file that includes this header must
 * not contract a * b + c (the operations are written so that there is nothing to contract, and the
 * including files build with fp-contract off).
 */
#ifndef AH_EXP_H
#define AH_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define AH_EXP_X86 1
#endif

#define AH_EXP_LO -87.33654f
#define AH_EXP_HI 88.72283f
#define AH_EXP_LOG2E 1.44269504f
#define AH_EXP_LN2_HI 0.693359375f
#define AH_EXP_LN2_LO -2.12194440e-4f
#define AH_EXP_P0 1.9875691500e-4f
#define AH_EXP_P1 1.3981999507e-3f
#define AH_EXP_P2 8.3334519073e-3f
#define AH_EXP_P3 4.1665795894e-2f
#define AH_EXP_P4 1.6666665459e-1f
#define AH_EXP_P5 5.0000001201e-1f

static inline float ah_exp(float x) {
    if (!(x >= AH_EXP_LO)) /* NaN too */
        return x != x ? x : 0.0f;
    if (x > AH_EXP_HI)
        return INFINITY;
    float n = nearbyintf(x * AH_EXP_LOG2E);
    float r = fmaf(n, -AH_EXP_LN2_HI, x);
    r = fmaf(n, -AH_EXP_LN2_LO, r);
    float p = fmaf(AH_EXP_P0, r, AH_EXP_P1);
    p = fmaf(p, r, AH_EXP_P2);
    p = fmaf(p, r, AH_EXP_P3);
    p = fmaf(p, r, AH_EXP_P4);
    p = fmaf(p, r, AH_EXP_P5);
    float e = fmaf(p, r * r, r) + 1.0f;
    uint32_t bits; /* unsigned: n is negative for x < 0, and shifting a negative int is undefined */
    memcpy(&bits, &e, 4);
    bits += (uint32_t)(int32_t)n << 23;
    memcpy(&e, &bits, 4);
    return e;
}

#ifdef AH_EXP_X86
__attribute__((target("avx512f"))) static inline __m512 ah_exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(AH_EXP_LO), hi = _mm512_set1_ps(AH_EXP_HI);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_NGE_UQ); /* x < lo or NaN */
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __mmask16 over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(AH_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-AH_EXP_LN2_HI), xc);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-AH_EXP_LN2_LO), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(AH_EXP_P0), r, _mm512_set1_ps(AH_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AH_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AH_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AH_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AH_EXP_P5));
    __m512 e = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    e = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(e),
                                             _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23)));
    e = _mm512_mask_mov_ps(e, under, _mm512_setzero_ps());
    e = _mm512_mask_mov_ps(e, over, _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(e, nan, x);
}

__attribute__((target("avx2,fma"))) static inline __m256 ah_exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(AH_EXP_LO), hi = _mm256_set1_ps(AH_EXP_HI);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_NGE_UQ); /* x < lo or NaN */
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(AH_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-AH_EXP_LN2_HI), xc);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-AH_EXP_LN2_LO), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(AH_EXP_P0), r, _mm256_set1_ps(AH_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AH_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AH_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AH_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AH_EXP_P5));
    __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    e = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(e),
                                             _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23)));
    e = _mm256_blendv_ps(e, _mm256_setzero_ps(), under);
    e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), over);
    return _mm256_blendv_ps(e, x, nan);
}
#endif

/* v[i] = exp(v[i] - sub) for i < n (the subtraction an F32 one). */
void ah_exp_sub_row(float *v, int64_t n, float sub);

/* The same, returning the sum of the results in F64, element i in lane i % 16 (a tail past the
 * last 16 into the first lanes), the 16 lanes folded l + l+8, l + l+4, l + l+2, l + l+1. */
double ah_exp_sub_row_sum(float *v, int64_t n, float sub);

#endif /* AH_EXP_H */
