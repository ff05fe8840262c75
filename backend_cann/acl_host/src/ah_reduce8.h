/* ah_reduce8.h - eight 8-lane sums at once on AVX2, by the fixed tree the kernels reduce with:
 * lanes i + i+4, then i + i+2, then i + i+1 (gemm.c's a2_reduce after its lo + hi step,
 * ops_attention.c's hsum8_avx2). Lane j of the result is the sum of v[j], bit for bit the one
 * lane-at-a-time tree gives: IEEE addition commutes, so only the pairing matters. */
#ifndef AH_REDUCE8_H
#define AH_REDUCE8_H

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

static inline __attribute__((target("avx2"), always_inline)) __m256 ah_reduce8_avx2(const __m256 *v) {
    __m256 t[4], u[2];
    for (int p = 0; p < 4; p++) /* lanes 0-3: v[2p]'s i + i+4, lanes 4-7: v[2p+1]'s */
        t[p] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x31));
    for (int q = 0; q < 2; q++) /* 128-bit lane L: v[4q + L]'s two i + i+2, then v[4q + 2 + L]'s */
        u[q] = _mm256_add_ps(_mm256_shuffle_ps(t[2 * q], t[2 * q + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(t[2 * q], t[2 * q + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane 4L + e: the sum of v[2e + L] */
    const __m256 s = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif

#endif /* AH_REDUCE8_H */
