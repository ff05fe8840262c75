/* exp.c - rows of exp(v - sub) (ah_exp.h), and their F64 sum in a fixed lane order: 16 lanes on
 * AVX-512, 8 on AVX2 + FMA, one element at a time elsewhere, the same bits on every path. */
#pragma GCC optimize("fp-contract=off")

#include "ah_convert.h"
#include "ah_exp.h"

#define LANES 16

static void exp_sub_scalar(float *v, int64_t n, float sub) {
    for (int64_t i = 0; i < n; i++)
        v[i] = ah_exp(v[i] - sub);
}

/* acc[l] += v[i] for the elements from i on, lane l = i % 16 for whole blocks of 16 from the
 * row's start, the tail past the last block into lanes 0, 1, ... */
static void lanes_f64(const float *v, int64_t n, int64_t i, double *acc) {
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += (double)v[i + l];
    for (int l = 0; i < n; i++, l++)
        acc[l] += (double)v[i];
}

#ifdef AH_EXP_X86
__attribute__((target("avx512f"))) static int64_t exp_sub_avx512(float *v, int64_t n, float sub,
                                                                 double *acc) {
    const __m512 s = _mm512_set1_ps(sub);
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd(); /* lanes 0-7, 8-15 */
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 e = ah_exp16(_mm512_sub_ps(_mm512_loadu_ps(v + i), s));
        _mm512_storeu_ps(v + i, e);
        if (acc) {
            lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
            hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
        }
    }
    if (i < n) { /* the tail, masked: element i + l in lane l, as lanes_f64 adds it */
        const __mmask16 live = (__mmask16)((1u << (n - i)) - 1u);
        __m512 e = _mm512_maskz_mov_ps(live, ah_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, v + i), s)));
        _mm512_mask_storeu_ps(v + i, live, e);
        if (acc) { /* a dead lane adds +0, which leaves its (non-negative) sum as it is */
            lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
            hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
        }
        i = n;
    }
    if (acc) {
        _mm512_storeu_pd(acc, lo);
        _mm512_storeu_pd(acc + 8, hi);
    }
    return i;
}

__attribute__((target("avx2,fma"))) static int64_t exp_sub_avx2(float *v, int64_t n, float sub, double *acc) {
    const __m256 s = _mm256_set1_ps(sub);
    __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int h = 0; h < 2; h++) {
            __m256 e = ah_exp8(_mm256_sub_ps(_mm256_loadu_ps(v + i + 8 * h), s));
            _mm256_storeu_ps(v + i + 8 * h, e);
            if (acc) {
                a[2 * h] = _mm256_add_pd(a[2 * h], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
                a[2 * h + 1] = _mm256_add_pd(a[2 * h + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
            }
        }
    if (acc)
        for (int q = 0; q < 4; q++)
            _mm256_storeu_pd(acc + 4 * q, a[q]);
    return i;
}
#endif

/* The vectorised part (whole blocks of 16 from the start, and on AVX-512 the tail too; acc, when
 * given, gets their lane sums), returning where the one-at-a-time tail starts. */
static int64_t exp_sub_blocks(float *v, int64_t n, float sub, double *acc) {
#ifdef AH_EXP_X86
    switch (ah_isa()) {
    case AH_ISA_AVX512: return exp_sub_avx512(v, n, sub, acc);
    case AH_ISA_AVX2:
        if (__builtin_cpu_supports("fma"))
            return exp_sub_avx2(v, n, sub, acc);
        break;
    default: break;
    }
#endif
    (void)v, (void)n, (void)sub, (void)acc;
    return 0;
}

void ah_exp_sub_row(float *v, int64_t n, float sub) {
    int64_t i = exp_sub_blocks(v, n, sub, NULL);
    exp_sub_scalar(v + i, n - i, sub);
}

double ah_exp_sub_row_sum(float *v, int64_t n, float sub) {
    double acc[LANES] = {0};
    int64_t i = exp_sub_blocks(v, n, sub, acc);
    exp_sub_scalar(v + i, n - i, sub);
    lanes_f64(v, n, i, acc);
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            acc[l] += acc[l + w];
    return acc[0];
}
