/* logits.c - one pass over a decode step's logits row: the first non-finite value (the runner's
 * NonFiniteLogitsError) and the greedy pick, the lowest id of the largest value outside a sorted
 * list of banned ids (logit_bias bans). The row is read once, straight after the device copied it
 * out (for a 151936-token vocabulary, 600 KB that another core wrote), instead of once for the
 * check and again for numpy's argmax. */
#include <math.h>
#include <string.h>

#include "clm_impl.h"

#define SCAN_LANES 16     /* independent lanes: the compiler keeps each in a vector register */
#define SCAN_BLOCK 256    /* values per block: the lanes are reduced once per block */

static inline bool f32_bits_bad(uint32_t u) { return (u & 0x7f800000u) == 0x7f800000u; }

/* Whether any of the n values (a multiple of SCAN_LANES) is NaN or inf; *max: their largest
 * (meaningful when none is). SSE2 (every x86-64) in four vectors, else lanes in plain C. */
#if defined(__SSE2__)
#include <emmintrin.h>
static bool block_scan(const float *x, int64_t n, float *max) {
    const __m128i expo = _mm_set1_epi32(0x7f800000);
    __m128 m0 = _mm_loadu_ps(x), m1 = m0, m2 = m0, m3 = m0;
    __m128i bad = _mm_setzero_si128();
    for (int64_t i = 0; i < n; i += SCAN_LANES) {
        const __m128 v0 = _mm_loadu_ps(x + i), v1 = _mm_loadu_ps(x + i + 4), v2 = _mm_loadu_ps(x + i + 8),
                     v3 = _mm_loadu_ps(x + i + 12);
        m0 = _mm_max_ps(m0, v0);
        m1 = _mm_max_ps(m1, v1);
        m2 = _mm_max_ps(m2, v2);
        m3 = _mm_max_ps(m3, v3);
        const __m128i e0 = _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(v0), expo), expo);
        const __m128i e1 = _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(v1), expo), expo);
        const __m128i e2 = _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(v2), expo), expo);
        const __m128i e3 = _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(v3), expo), expo);
        bad = _mm_or_si128(bad, _mm_or_si128(_mm_or_si128(e0, e1), _mm_or_si128(e2, e3)));
    }
    float lane[4];
    _mm_storeu_ps(lane, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
    float m = lane[0];
    for (int j = 1; j < 4; j++) m = lane[j] > m ? lane[j] : m;
    *max = m;
    return _mm_movemask_epi8(bad) != 0;
}
#else
static bool block_scan(const float *x, int64_t n, float *max) {
    float lane[SCAN_LANES];
    uint32_t bad = 0;
    memcpy(lane, x, sizeof lane);
    for (int64_t i = 0; i < n; i += SCAN_LANES) {
        for (int j = 0; j < SCAN_LANES; j++) {
            uint32_t u;
            memcpy(&u, x + i + j, sizeof u);
            bad |= f32_bits_bad(u);
            lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
        }
    }
    float m = lane[0];
    for (int j = 1; j < SCAN_LANES; j++) m = lane[j] > m ? lane[j] : m;
    *max = m;
    return bad != 0;
}
#endif

clm_status clm_logits_scan(const float *x, int64_t n, const int64_t *banned, int64_t n_banned, int64_t *first_bad,
                           int64_t *best) {
    CLM_CHECK_ARG(first_bad != NULL && best != NULL, "logits_scan: NULL result");
    CLM_CHECK_ARG(n >= 0 && n_banned >= 0, "logits_scan: negative length");
    CLM_CHECK_ARG(x != NULL || n == 0, "logits_scan: NULL logits");
    CLM_CHECK_ARG(banned != NULL || n_banned == 0, "logits_scan: NULL banned ids");
    for (int64_t b = 1; b < n_banned; b++)
        CLM_CHECK_ARG(banned[b - 1] <= banned[b], "logits_scan: banned ids are not sorted (%lld after %lld)",
                      (long long)banned[b], (long long)banned[b - 1]);
    *first_bad = -1;
    *best = -1;
    int64_t nb = 0; /* banned[nb] is the first banned id not below the current block */
    while (nb < n_banned && banned[nb] < 0) nb++;
    float top = -INFINITY;
    int64_t top_block = -1;
    for (int64_t b0 = 0; b0 < n; b0 += SCAN_BLOCK) {
        const int64_t b1 = n - b0 < SCAN_BLOCK ? n : b0 + SCAN_BLOCK;
        const int64_t full = b0 + (b1 - b0) / SCAN_LANES * SCAN_LANES;
        float m = -INFINITY;
        bool bad = full > b0 && block_scan(x + b0, full - b0, &m);
        for (int64_t i = full; i < b1; i++) { /* the row's tail */
            uint32_t u;
            memcpy(&u, x + i, sizeof u);
            bad |= f32_bits_bad(u);
            m = x[i] > m ? x[i] : m;
        }
        if (bad) { /* the first one, in this block */
            for (int64_t i = b0; i < b1; i++) {
                uint32_t u;
                memcpy(&u, x + i, sizeof u);
                if (f32_bits_bad(u)) {
                    *first_bad = i;
                    return CLM_OK;
                }
            }
        }
        if (nb < n_banned && banned[nb] < b1) { /* banned ids here: this block's best without them */
            m = -INFINITY;
            for (int64_t i = b0; i < b1; i++) {
                if (nb < n_banned && banned[nb] == i) {
                    while (nb < n_banned && banned[nb] == i) nb++;
                    continue;
                }
                m = x[i] > m ? x[i] : m;
            }
            if (m == -INFINITY) continue; /* every value banned (finite values are all > -inf) */
        }
        if (m > top) { /* strictly: an equal maximum in a later block is a higher id */
            top = m;
            top_block = b0;
        }
    }
    if (top_block < 0) return CLM_OK; /* no values, or every one banned */
    const int64_t b1 = n - top_block < SCAN_BLOCK ? n : top_block + SCAN_BLOCK;
    int64_t k = 0;
    while (k < n_banned && banned[k] < top_block) k++;
    for (int64_t i = top_block; i < b1; i++) {
        if (k < n_banned && banned[k] == i) {
            while (k < n_banned && banned[k] == i) k++;
            continue;
        }
        if (x[i] == top) {
            *best = i;
            break;
        }
    }
    return CLM_OK;
}
