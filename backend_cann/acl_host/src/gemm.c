/* gemm.c - the matmul micro-kernels (ah_gemm.h) for AVX-512, AVX2 + FMA and portable C, all
 * computing the same fused multiply-add sequence per output element (gemm_kernel.inc). */
#include <math.h>
#include <string.h>

#include "ah_convert.h"
#include "ah_gemm.h"
#include "ah_reduce8.h"


#if defined(__x86_64__) || defined(__i386__)
#define AH_X86 1
#include <immintrin.h>
#endif

/* ---- portable: 16 lanes in a struct --------------------------------------------------------- */
typedef struct v16 {
    float l[16];
} v16;

static inline v16 s_zero(void) {
    v16 v = {{0}};
    return v;
}
static inline v16 s_load(const float *p) {
    v16 v;
    for (int i = 0; i < 16; i++)
        v.l[i] = p[i];
    return v;
}
static inline void s_store(float *p, v16 v) {
    for (int i = 0; i < 16; i++)
        p[i] = v.l[i];
}
static inline v16 s_set1(float x) {
    v16 v;
    for (int i = 0; i < 16; i++)
        v.l[i] = x;
    return v;
}
static inline v16 s_fma(v16 a, v16 b, v16 c) {
    for (int i = 0; i < 16; i++)
        c.l[i] = fmaf(a.l[i], b.l[i], c.l[i]);
    return c;
}
static inline v16 s_add(v16 a, v16 b) {
    for (int i = 0; i < 16; i++)
        a.l[i] += b.l[i];
    return a;
}
static inline v16 s_mul(v16 a, v16 b) {
    for (int i = 0; i < 16; i++)
        a.l[i] *= b.l[i];
    return a;
}
static inline float s_reduce(v16 v) {
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++)
            v.l[i] = v.l[i] + v.l[i + w];
    return v.l[0];
}
static inline v16 s_i8(const int8_t *p) {
    v16 v;
    for (int i = 0; i < 16; i++)
        v.l[i] = (float)p[i];
    return v;
}
#define S_I4(p, lo, hi)                                                                       \
    do {                                                                                      \
        for (int i_ = 0; i_ < 16; i_++) {                                                     \
            int8_t b_ = (p)[i_];                                                              \
            (lo).l[i_] = (float)(int8_t)((uint8_t)b_ << 4) / 16.0f;                           \
            (hi).l[i_] = (float)(b_ >> 4);                                                    \
        }                                                                                     \
    } while (0)

#define SFX _scalar
#define TGT
#define VT v16
#define MR 2
#define NR 2
#define QNR 2
#define VZERO s_zero
#define VLOAD s_load
#define VSTORE s_store
#define VSET1 s_set1
#define VFMA s_fma
#define VADD s_add
#define VMUL s_mul
#define VREDUCE s_reduce
#define VI8 s_i8
#define VI4 S_I4
#include "gemm_kernel.inc"

#ifdef AH_X86
/* ---- AVX2 + FMA: two 8-lane halves (lanes 0-7, 8-15) ------------------------------------------- */
typedef struct v2x8 {
    __m256 lo, hi;
} v2x8;

#define T2 __attribute__((target("avx2,fma,f16c"))) /* ah_isa's AVX2 level has F16C and FMA */
static inline T2 v2x8 a2_zero(void) {
    v2x8 v = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    return v;
}
static inline T2 v2x8 a2_load(const float *p) {
    v2x8 v = {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
    return v;
}
static inline T2 void a2_store(float *p, v2x8 v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
}
static inline T2 v2x8 a2_set1(float x) {
    v2x8 v = {_mm256_set1_ps(x), _mm256_set1_ps(x)};
    return v;
}
static inline T2 v2x8 a2_fma(v2x8 a, v2x8 b, v2x8 c) {
    v2x8 v = {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
    return v;
}
static inline T2 v2x8 a2_add(v2x8 a, v2x8 b) {
    v2x8 v = {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
    return v;
}
static inline T2 v2x8 a2_mul(v2x8 a, v2x8 b) {
    v2x8 v = {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
    return v;
}
static inline T2 float a2_reduce(v2x8 v) {
    __m256 r8 = _mm256_add_ps(v.lo, v.hi);
    __m128 r4 = _mm_add_ps(_mm256_castps256_ps128(r8), _mm256_extractf128_ps(r8, 1));
    __m128 r2 = _mm_add_ps(r4, _mm_movehl_ps(r4, r4));
    __m128 r1 = _mm_add_ss(r2, _mm_shuffle_ps(r2, r2, 1));
    return _mm_cvtss_f32(r1);
}
static inline T2 __m256 a2_i8x8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}
static inline T2 v2x8 a2_i8(const int8_t *p) {
    v2x8 v = {a2_i8x8(p), a2_i8x8(p + 8)};
    return v;
}
static inline T2 void a2_i4(const int8_t *p, v2x8 *lo, v2x8 *hi) {
    __m256i b0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    __m256i b1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p + 8)));
    lo->lo = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(b0, 28), 28));
    lo->hi = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(b1, 28), 28));
    hi->lo = _mm256_cvtepi32_ps(_mm256_srai_epi32(b0, 4));
    hi->hi = _mm256_cvtepi32_ps(_mm256_srai_epi32(b1, 4));
}

#define SFX _avx2
#define TGT T2
#define VT v2x8
#define MR 2
#define NR 2
#define QNR 2
#define VZERO a2_zero
#define VLOAD a2_load
#define VSTORE a2_store
#define VSET1 a2_set1
#define VFMA a2_fma
#define VADD a2_add
#define VMUL a2_mul
#define VREDUCE a2_reduce
#define VI8 a2_i8
#define VI4(p, lo, hi) a2_i4((p), &(lo), &(hi))
#include "gemm_kernel.inc"
#include "gemm_avx2.inc"

/* ---- AVX-512 ------------------------------------------------------------------------------------- */
#define T5 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
static inline T5 __m512 a5_zero(void) { return _mm512_setzero_ps(); }
static inline T5 __m512 a5_load(const float *p) { return _mm512_loadu_ps(p); }
static inline T5 void a5_store(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
static inline T5 __m512 a5_set1(float x) { return _mm512_set1_ps(x); }
static inline T5 __m512 a5_fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
static inline T5 __m512 a5_add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
static inline T5 __m512 a5_mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
static inline T5 float a5_reduce(__m512 v) {
    __m256 r8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 r4 = _mm_add_ps(_mm256_castps256_ps128(r8), _mm256_extractf128_ps(r8, 1));
    __m128 r2 = _mm_add_ps(r4, _mm_movehl_ps(r4, r4));
    __m128 r1 = _mm_add_ss(r2, _mm_shuffle_ps(r2, r2, 1));
    return _mm_cvtss_f32(r1);
}
static inline T5 __m512 a5_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}
static inline T5 void a5_i4(const int8_t *p, __m512 *lo, __m512 *hi) {
    __m512i b = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    *lo = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(b, 28), 28));
    *hi = _mm512_cvtepi32_ps(_mm512_srai_epi32(b, 4));
}

/* nibble n as a signed int4, in F32 lanes */
static inline T5 __m512 a5_i4tab(void) {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
}
/* vpermps reads the low 4 bits of each index lane: the low nibble as is, the high one shifted */
static inline T5 void a5_i4lut(const int8_t *p, __m512 tab, __m512 *lo, __m512 *hi) {
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    *lo = _mm512_permutexvar_ps(b, tab);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), tab);
}

#define SFX _avx512
#define TGT T5
#define VT __m512
#define MR 4
#define NR 3
#define QNR 4
#define VZERO a5_zero
#define VLOAD a5_load
#define VSTORE a5_store
#define VSET1 a5_set1
#define VFMA a5_fma
#define VADD a5_add
#define VMUL a5_mul
#define VREDUCE a5_reduce
#define VI8 a5_i8
#define VI4(p, lo, hi) a5_i4((p), &(lo), &(hi))
#define VI4TAB a5_i4tab
#define VI4LUT(p, tab, lo, hi) a5_i4lut((p), (tab), &(lo), &(hi))
#include "gemm_kernel.inc"

/* The decode case m = 1, INT4 on AVX-512: the same per-element sequence as quant_block (ah_gemm.h),
 * specialised so the loop is branch-free: Q4_RN columns interleaved as independent load streams,
 * the dequantized lookup table (tab0 + offset) * scale built once per (column, group), and for
 * 32-element groups (g1) one flat loop over the blocks. 8 vector instructions per column and block. */
#define Q4_RN 4
static inline __attribute__((always_inline)) T5 void q4m1_block(const ah_gemm_quant *q, int64_t j0, int rn,
                                                               bool offs, bool g1) {
    enum { RN = Q4_RN };
    const __m512 tab0 = a5_i4tab();
    const int64_t nblk = q->kp / 32, gblk = g1 ? 1 : q->group / 32, ldw = q->ldw, lds = q->lds;
    const uint8_t *w = (const uint8_t *)q->w + j0 * ldw;
    const float *sc = q->scales ? q->scales + j0 * lds : NULL, *of = offs ? q->offsets + j0 * lds : NULL;
    const float *a = q->a;
    /* see quant_block: prefetch AH_GEMM_PF_BYTES ahead, pf_step bytes per block */
    const char *pf = (const char *)w + AH_GEMM_PF_BYTES;
    const int64_t pf_step = ldw * rn / nblk;
    __m512 tot[RN];
    for (int c = 0; c < rn; c++)
        tot[c] = _mm512_setzero_ps();
    for (int64_t b0 = 0, g = 0; b0 < nblk; b0 += gblk, g++) {
        const int64_t b1 = g1 ? b0 + 1 : (b0 + gblk < nblk ? b0 + gblk : nblk);
        __m512 tab[RN];
        for (int c = 0; c < rn; c++) {
            tab[c] = offs ? _mm512_add_ps(tab0, _mm512_set1_ps(of[c * lds + g])) : tab0;
            if (sc)
                tab[c] = _mm512_mul_ps(tab[c], _mm512_set1_ps(sc[c * lds + g]));
        }
        for (int64_t blk = b0; blk < b1; blk++) {
            if (g1 && pf_step <= 64)
                AH_GEMM_PREFETCH(pf + blk * pf_step);
            else
                for (int64_t off = 0; off < pf_step; off += 64)
                    AH_GEMM_PREFETCH(pf + blk * pf_step + off);
            const __m512 alo = _mm512_loadu_ps(a + blk * 32), ahi = _mm512_loadu_ps(a + blk * 32 + 16);
            for (int c = 0; c < rn; c++) {
                __m512i nib = _mm512_cvtepu8_epi32(
                    _mm_loadu_si128((const __m128i *)(const void *)(w + c * ldw + blk * 16)));
                __m512 lo = _mm512_permutexvar_ps(nib, tab[c]);
                __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(nib, 4), tab[c]);
                tot[c] = _mm512_fmadd_ps(alo, lo, tot[c]);
                tot[c] = _mm512_fmadd_ps(ahi, hi, tot[c]);
            }
        }
    }
    for (int c = 0; c < rn; c++)
        q->c[j0 + c] = a5_reduce(tot[c]);
}

static inline __attribute__((always_inline)) T5 void q4m1_cols(const ah_gemm_quant *q, bool offs, bool g1) {
    int64_t j = 0;
    for (; j + Q4_RN <= q->n; j += Q4_RN)
        q4m1_block(q, j, Q4_RN, offs, g1);
    for (; j < q->n; j++)
        q4m1_block(q, j, 1, offs, g1);
}

static T5 void q4m1_run_avx512(const ah_gemm_quant *q) {
    if (q->group == 32) {
        if (q->offsets)
            q4m1_cols(q, true, true);
        else
            q4m1_cols(q, false, true);
    } else {
        if (q->offsets)
            q4m1_cols(q, true, false);
        else
            q4m1_cols(q, false, false);
    }
}

/* The decode case m = 1 for INT8 columns (the Q8_0 output layer of the default model, Q8_0
 * files): as q4m1_block, each half widened (vpmovsxbd, vcvtdq2ps), + offset, * scale, then the two
 * FMAs; Q4_RN columns at once, one flat loop over the blocks for 32-element groups. */
static inline __attribute__((always_inline)) T5 void q8m1_block(const ah_gemm_quant *q, int64_t j0, int rn,
                                                               bool offs, bool g1) {
    enum { RN = Q4_RN };
    const int64_t nblk = q->kp / 32, gblk = g1 ? 1 : q->group / 32, ldw = q->ldw, lds = q->lds;
    const int8_t *w = q->w + j0 * ldw;
    const float *sc = q->scales ? q->scales + j0 * lds : NULL, *of = offs ? q->offsets + j0 * lds : NULL;
    const float *a = q->a;
    const char *pf = (const char *)w + AH_GEMM_PF_BYTES; /* see quant_block */
    const int64_t pf_step = ldw * rn / nblk;
    __m512 tot[RN];
    for (int c = 0; c < rn; c++)
        tot[c] = _mm512_setzero_ps();
    for (int64_t b0 = 0, g = 0; b0 < nblk; b0 += gblk, g++) {
        const int64_t b1 = g1 ? b0 + 1 : (b0 + gblk < nblk ? b0 + gblk : nblk);
        __m512 sv[RN], ov[RN];
        for (int c = 0; c < rn; c++) {
            if (offs)
                ov[c] = _mm512_set1_ps(of[c * lds + g]);
            if (sc)
                sv[c] = _mm512_set1_ps(sc[c * lds + g]);
        }
        for (int64_t blk = b0; blk < b1; blk++) {
            for (int64_t off = 0; off < pf_step; off += 64)
                AH_GEMM_PREFETCH(pf + blk * pf_step + off);
            const __m512 alo = _mm512_loadu_ps(a + blk * 32), ahi = _mm512_loadu_ps(a + blk * 32 + 16);
            for (int c = 0; c < rn; c++) {
                __m512 lo = a5_i8(w + c * ldw + blk * 32), hi = a5_i8(w + c * ldw + blk * 32 + 16);
                if (offs) {
                    lo = _mm512_add_ps(lo, ov[c]);
                    hi = _mm512_add_ps(hi, ov[c]);
                }
                if (sc) {
                    lo = _mm512_mul_ps(lo, sv[c]);
                    hi = _mm512_mul_ps(hi, sv[c]);
                }
                tot[c] = _mm512_fmadd_ps(alo, lo, tot[c]);
                tot[c] = _mm512_fmadd_ps(ahi, hi, tot[c]);
            }
        }
    }
    for (int c = 0; c < rn; c++)
        q->c[j0 + c] = a5_reduce(tot[c]);
}

static inline __attribute__((always_inline)) T5 void q8m1_cols(const ah_gemm_quant *q, bool offs, bool g1) {
    int64_t j = 0;
    for (; j + Q4_RN <= q->n; j += Q4_RN)
        q8m1_block(q, j, Q4_RN, offs, g1);
    for (; j < q->n; j++)
        q8m1_block(q, j, 1, offs, g1);
}

static T5 void q8m1_run_avx512(const ah_gemm_quant *q) {
    if (q->group == 32) {
        if (q->offsets)
            q8m1_cols(q, true, true);
        else
            q8m1_cols(q, false, true);
    } else {
        if (q->offsets)
            q8m1_cols(q, true, false);
        else
            q8m1_cols(q, false, false);
    }
}

/* The sums of 16 accumulators by the fixed tree of ah_gemm.h (lanes i + i+8, then i + i+4, i + i+2,
 * 0 + 1, each add with the lower half first, as a5_reduce), computed for all 16 at once: lane j of
 * the result is the sum of v[j], bit for bit what a5_reduce(v[j]) gives. */
static inline __attribute__((always_inline)) T5 __m512 a5_reduce16(const __m512 *v) {
    __m512 t[8], u[4], z[2];
    for (int p = 0; p < 8; p++) /* t[p]: lanes 0-7 v[2p]'s i + i+8, lanes 8-15 v[2p+1]'s */
        t[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int q = 0; q < 4; q++) /* u[q]: 128-bit lane L holds v[4q + L]'s four i + i+4 */
        u[q] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * q], t[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(t[2 * q], t[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int r = 0; r < 2; r++) { /* z[r]: lane L holds v[8r + L]'s two i + i+2, then v[8r + 4 + L]'s */
        __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(u[2 * r]), _mm512_castps_pd(u[2 * r + 1]));
        __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(u[2 * r]), _mm512_castps_pd(u[2 * r + 1]));
        z[r] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
    }
    /* lane 4L + e: the sum of v[4e + L] */
    __m512 s = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, s);
}

/* The same for 8 accumulators: lane j < 8 of the result is the sum of v[j]. */
static inline __attribute__((always_inline)) T5 __m256 a5_reduce8(const __m512 *v) {
    __m512 t[4], u[2];
    for (int p = 0; p < 4; p++)
        t[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int q = 0; q < 2; q++)
        u[q] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * q], t[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(t[2 * q], t[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(u[0]), _mm512_castps_pd(u[1]));
    __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(u[0]), _mm512_castps_pd(u[1]));
    __m512 z = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
    /* lane 4L + e (e < 2): the sum of v[4e + L] */
    __m512 s = _mm512_add_ps(_mm512_shuffle_ps(z, z, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(z, z, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, s));
}

/* Several rows (batched decode), 32-element groups on AVX-512: register tiles of rm <= MR_RM rows
 * x rn columns (rn = 4 for up to 4 rows, else 2: at most 16 accumulators), each running the whole
 * K with the per-element sequence of q4m1_block / q8m1_block. Each 32-element block of the tile's
 * columns is dequantized into registers once (the expensive part: widening or lookups, + offset,
 * * scale), then every row loads its two halves of a once and does its two FMAs per column, so the
 * dequantizing is shared by up to 8 rows; the 16 sums are reduced together (a5_reduce16). The
 * columns' bytes come from L1 after the first row chunk, so the weights are read from memory once
 * for all m rows. */
#define MR_RM 8
static inline __attribute__((always_inline)) T5 void mr_block(const ah_gemm_quant *q, int64_t i0, int64_t j0,
                                                             int rm, int rn, int rnt, bool offs, bool int8) {
    const __m512 tab0 = a5_i4tab();
    const int64_t nblk = q->kp / 32, ldw = q->ldw, lds = q->lds, lda = q->lda;
    const int8_t *w = q->w + j0 * ldw;
    const float *sc = q->scales ? q->scales + j0 * lds : NULL, *of = offs ? q->offsets + j0 * lds : NULL;
    const float *a = q->a + i0 * lda;
    const char *pf = (const char *)w + AH_GEMM_PF_BYTES; /* see quant_block */
    const int64_t pf_step = ldw * rn / nblk;
    __m512 tot[16]; /* row r, column c at r * rnt + c; all zeroed, so all can be reduced */
    for (int x = 0; x < 16; x++)
        tot[x] = _mm512_setzero_ps();
    for (int64_t blk = 0; blk < nblk; blk++) {
        if (pf_step <= 64)
            AH_GEMM_PREFETCH(pf + blk * pf_step);
        else
            for (int64_t off = 0; off < pf_step; off += 64)
                AH_GEMM_PREFETCH(pf + blk * pf_step + off);
        __m512 lo[4], hi[4];
        for (int c = 0; c < rn; c++) {
            if (int8) {
                lo[c] = a5_i8(w + c * ldw + blk * 32), hi[c] = a5_i8(w + c * ldw + blk * 32 + 16);
                if (offs) {
                    const __m512 o = _mm512_set1_ps(of[c * lds + blk]);
                    lo[c] = _mm512_add_ps(lo[c], o);
                    hi[c] = _mm512_add_ps(hi[c], o);
                }
                if (sc) {
                    const __m512 s = _mm512_set1_ps(sc[c * lds + blk]);
                    lo[c] = _mm512_mul_ps(lo[c], s);
                    hi[c] = _mm512_mul_ps(hi[c], s);
                }
            } else {
                __m512 tab = offs ? _mm512_add_ps(tab0, _mm512_set1_ps(of[c * lds + blk])) : tab0;
                if (sc)
                    tab = _mm512_mul_ps(tab, _mm512_set1_ps(sc[c * lds + blk]));
                const __m512i nib =
                    _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(w + c * ldw + blk * 16)));
                lo[c] = _mm512_permutexvar_ps(nib, tab);
                hi[c] = _mm512_permutexvar_ps(_mm512_srli_epi32(nib, 4), tab);
            }
        }
        for (int r = 0; r < rm; r++) {
            __m512 alo = _mm512_loadu_ps(a + r * lda + blk * 32), ahi = _mm512_loadu_ps(a + r * lda + blk * 32 + 16);
            if (rn > 1) /* keep the row in registers for its columns rather than loading it per FMA */
                __asm__("" : "+v"(alo), "+v"(ahi));
            for (int c = 0; c < rn; c++) {
                tot[r * rnt + c] = _mm512_fmadd_ps(alo, lo[c], tot[r * rnt + c]);
                tot[r * rnt + c] = _mm512_fmadd_ps(ahi, hi[c], tot[r * rnt + c]);
            }
        }
    }
    /* the sums by the fixed tree, 8 or 16 at once (a5_reduce8 / a5_reduce16: a5_reduce's bits) */
    float sums[16];
    if (rm * rnt <= 8)
        _mm256_storeu_ps(sums, a5_reduce8(tot));
    else
        _mm512_storeu_ps(sums, a5_reduce16(tot));
    for (int r = 0; r < rm; r++)
        for (int c = 0; c < rn; c++)
            q->c[(i0 + r) * q->ldc + j0 + c] = sums[r * rnt + c];
}

/* Columns [j, j + rn) of every row: row chunks of at most MR_RM rows, sizes as even as possible,
 * each an mr_block with a constant row count, so the compiler unrolls the rows of each size. */
#define MR_CASE(n)                                                                                    \
    case n: mr_block(q, i0, j, n, rn, rnt, offs, int8); break
static inline __attribute__((always_inline)) T5 void mr_cols(const ah_gemm_quant *q, int64_t j, int rn, int rnt,
                                                            bool offs, bool int8) {
    const int64_t nchunk = (q->m + MR_RM - 1) / MR_RM;
    for (int64_t ch = 0, i0 = 0; ch < nchunk; ch++) {
        int64_t i1 = q->m * (ch + 1) / nchunk;
        if (rnt == 4) /* m <= 4 */
            switch (i1 - i0) {
                MR_CASE(1);
                MR_CASE(2);
                MR_CASE(3);
            default: mr_block(q, i0, j, 4, rn, rnt, offs, int8); break;
            }
        else
            switch (i1 - i0) { /* m > 4: chunks of 4 (m = 9) to 8 rows */
                MR_CASE(4);
                MR_CASE(5);
                MR_CASE(6);
                MR_CASE(7);
            default: mr_block(q, i0, j, 8, rn, rnt, offs, int8); break;
            }
        i0 = i1;
    }
}
#undef MR_CASE

/* tile of rnt columns (4 for up to 4 rows, else 2), the remainder one column at a time */
static inline __attribute__((always_inline)) T5 void mr_run(const ah_gemm_quant *q, int rnt, bool offs, bool int8) {
    int64_t j = 0;
    for (; j + rnt <= q->n; j += rnt)
        mr_cols(q, j, rnt, rnt, offs, int8);
    for (; j < q->n; j++)
        mr_cols(q, j, 1, rnt, offs, int8);
}

static T5 void q8mr_run_avx512(const ah_gemm_quant *q) {
    if (q->m <= 4)
        q->offsets ? mr_run(q, 4, true, true) : mr_run(q, 4, false, true);
    else
        q->offsets ? mr_run(q, 2, true, true) : mr_run(q, 2, false, true);
}

static T5 void q4mr_run_avx512(const ah_gemm_quant *q) {
    if (q->m <= 4)
        q->offsets ? mr_run(q, 4, true, false) : mr_run(q, 4, false, false);
    else
        q->offsets ? mr_run(q, 2, true, false) : mr_run(q, 2, false, false);
}

/* F16 columns on AVX-512: register tiles as mr_block's (rm <= MR_RM rows x rn columns, rn = 4 for
 * up to 4 rows, else 2), each column's 16 values widened once per step for all rows of the tile;
 * the per-element sequence of tile_block (fma(a, b, tot) per 16-element step, then the fixed
 * reduction, 8 or 16 sums at once). */
static inline __attribute__((always_inline)) T5 void f16_block(const ah_gemm_tile *t, int64_t i0, int64_t j0,
                                                              int rm, int rn, int rnt) {
    __m512 tot[16]; /* row r, column c at r * rnt + c */
    for (int x = 0; x < 16; x++)
        tot[x] = _mm512_setzero_ps();
    const float *a = t->a + i0 * t->lda;
    const uint16_t *b = t->b16 + j0 * t->ldb;
    /* the rn columns are one run when ldb == kp: fetch AH_GEMM_PF_BYTES ahead of it (hint) */
    const char *pf = (const char *)b + AH_GEMM_PF_BYTES;
    const int64_t pf_step = t->ldb * 2 * rn / (t->kp / 16);
    for (int64_t k = 0; k < t->kp; k += 16) {
        for (int64_t off = 0; off < pf_step; off += 64)
            AH_GEMM_PREFETCH(pf + (k / 16) * pf_step + off);
        __m512 bv[4];
        for (int c = 0; c < rn; c++)
            bv[c] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(b + c * t->ldb + k)));
        for (int r = 0; r < rm; r++) {
            __m512 av = _mm512_loadu_ps(a + r * t->lda + k);
            if (rn > 1) /* in a register for all its columns */
                __asm__("" : "+v"(av));
            for (int c = 0; c < rn; c++)
                tot[r * rnt + c] = _mm512_fmadd_ps(av, bv[c], tot[r * rnt + c]);
        }
    }
    float sums[16];
    if (rm * rnt <= 8)
        _mm256_storeu_ps(sums, a5_reduce8(tot));
    else
        _mm512_storeu_ps(sums, a5_reduce16(tot));
    for (int r = 0; r < rm; r++)
        for (int c = 0; c < rn; c++)
            t->c[(i0 + r) * t->ldc + j0 + c] = sums[r * rnt + c];
}

#define F16_CASE(n)                                                                                   \
    case n: f16_block(t, i0, j, n, rn, rnt); break
static inline __attribute__((always_inline)) T5 void f16_cols(const ah_gemm_tile *t, int64_t j, int rn, int rnt) {
    const int64_t nchunk = (t->m + MR_RM - 1) / MR_RM;
    for (int64_t ch = 0, i0 = 0; ch < nchunk; ch++) {
        int64_t i1 = t->m * (ch + 1) / nchunk;
        if (rnt == 4) /* m <= 4 */
            switch (i1 - i0) {
                F16_CASE(1);
                F16_CASE(2);
                F16_CASE(3);
            default: f16_block(t, i0, j, 4, rn, rnt); break;
            }
        else
            switch (i1 - i0) { /* m > 4: chunks of 4 (m = 9) to 8 rows */
                F16_CASE(4);
                F16_CASE(5);
                F16_CASE(6);
                F16_CASE(7);
            default: f16_block(t, i0, j, 8, rn, rnt); break;
            }
        i0 = i1;
    }
}
#undef F16_CASE

static inline __attribute__((always_inline)) T5 void f16_run(const ah_gemm_tile *t, int rnt) {
    int64_t j = 0;
    for (; j + rnt <= t->n; j += rnt)
        f16_cols(t, j, rnt, rnt);
    for (; j < t->n; j++)
        f16_cols(t, j, 1, rnt);
}

static T5 void f16_run_avx512(const ah_gemm_tile *t) {
    if (t->m <= 4)
        f16_run(t, 4);
    else
        f16_run(t, 2);
}

/* ---- AVX-512 panel product (prefill): register tiles of P_RM rows x P_RN columns ---------------- */

#define P_RM 4         /* rows of a register tile */
#define P_RN 6         /* columns of a register tile */
#define P_NB 16        /* register tiles per column block: P_NB * P_RN columns share the rows' loads */
#define P_KC_MAX 1024  /* longer k is cut in P_KC steps, the accumulators kept in memory between */
#define P_KC 512

/* rm x P_RN accumulators over k in [k0, k1): acc[r * P_RN + c] += a row r . b column c per lane,
 * the fused multiply-adds of ah_gemm.h in k order. */
static inline __attribute__((always_inline)) T5 void panel_tile(const float *const *a, const float *const *b,
                                                               int64_t k0, int64_t k1, int rm, __m512 *acc) {
    for (int64_t k = k0; k < k1; k += 16) {
        __m512 bv[P_RN];
        for (int c = 0; c < P_RN; c++)
            bv[c] = _mm512_loadu_ps(b[c] + k);
        for (int r = 0; r < rm; r++) {
            const __m512 av = _mm512_loadu_ps(a[r] + k);
            for (int c = 0; c < P_RN; c++)
                acc[r * P_RN + c] = _mm512_fmadd_ps(av, bv[c], acc[r * P_RN + c]);
        }
    }
}

/* rows [i0, i0 + rm) x columns [j0, j0 + nb) of a tile product; columns past t->n repeat the last
 * one (their sums are not stored). The accumulators of a k step go to accbuf (P_NB tiles) between
 * steps when k is cut. */
static inline __attribute__((always_inline)) T5 void panel_rows(const ah_gemm_tile *t, int64_t i0, int rm,
                                                               int64_t j0, int64_t nb, __m512 *accbuf) {
    const int64_t kp = t->kp, kc = kp <= P_KC_MAX ? kp : P_KC;
    const float *a[P_RM];
    for (int r = 0; r < P_RM; r++)
        a[r] = t->a + (i0 + (r < rm ? r : 0)) * t->lda;
    for (int64_t k0 = 0; k0 < kp; k0 += kc) {
        const int64_t k1 = k0 + kc < kp ? k0 + kc : kp;
        for (int64_t tb = 0; tb * P_RN < nb; tb++) {
            const int64_t jt = j0 + tb * P_RN;
            const float *b[P_RN];
            for (int c = 0; c < P_RN; c++)
                b[c] = t->b + (jt + c < t->n ? jt + c : t->n - 1) * t->ldb;
            __m512 acc[P_RM * P_RN];
            __m512 *spill = accbuf + tb * P_RM * P_RN;
            for (int x = 0; x < rm * P_RN; x++)
                acc[x] = k0 == 0 ? _mm512_setzero_ps() : spill[x];
            panel_tile(a, b, k0, k1, rm, acc);
            if (k1 < kp) {
                for (int x = 0; x < rm * P_RN; x++)
                    spill[x] = acc[x];
                continue;
            }
            float sums[P_RM * P_RN];
            for (int x = rm * P_RN; x < P_RM * P_RN; x++)
                acc[x] = _mm512_setzero_ps();
            _mm512_storeu_ps(sums, a5_reduce16(acc));
            _mm256_storeu_ps(sums + 16, a5_reduce8(acc + 16));
            const int cn = t->n - jt < P_RN ? (int)(t->n - jt) : P_RN;
            for (int r = 0; r < rm; r++)
                for (int c = 0; c < cn; c++)
                    t->c[(i0 + r) * t->ldc + jt + c] = sums[r * P_RN + c];
        }
    }
}

static T5 void panel_run_avx512(const ah_gemm_tile *t) {
    __m512 accbuf[P_NB * P_RM * P_RN];
    for (int64_t j0 = 0; j0 < t->n; j0 += P_NB * P_RN) {
        const int64_t nb = t->n - j0 < P_NB * P_RN ? t->n - j0 : P_NB * P_RN;
        int64_t i = 0;
        for (; i + P_RM <= t->m; i += P_RM)
            panel_rows(t, i, P_RM, j0, nb, accbuf);
        switch (t->m - i) {
        case 1: panel_rows(t, i, 1, j0, nb, accbuf); break;
        case 2: panel_rows(t, i, 2, j0, nb, accbuf); break;
        case 3: panel_rows(t, i, 3, j0, nb, accbuf); break;
        default: break;
        }
    }
}

/* AVX2 level without FMA (rare) falls back to the portable code. */
static int isa_level(void) {
    static int level = -1;
    int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
    if (l >= 0)
        return l;
    l = (int)ah_isa();
    if (l >= AH_ISA_AVX2 && !__builtin_cpu_supports("fma"))
        l = AH_ISA_SCALAR;
    if (l == AH_ISA_AVX512 && !(__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                                __builtin_cpu_supports("avx512vl")))
        l = AH_ISA_AVX2;
    __atomic_store_n(&level, l, __ATOMIC_RELAXED);
    return l;
}
#endif

void ah_gemm_run_tile(const ah_gemm_tile *t) {
#ifdef AH_X86
    switch (isa_level()) {
    case AH_ISA_AVX512: panel_run_avx512(t); return;
    case AH_ISA_AVX2: panel_run_avx2(t); return;
    default: break;
    }
#endif
    tile_run_scalar(t);
}

void ah_gemm_run_quant(const ah_gemm_quant *q) {
#ifdef AH_X86
    switch (isa_level()) {
    case AH_ISA_AVX512:
        if (q->m == 1 && q->int4)
            q4m1_run_avx512(q);
        else if (q->m == 1)
            q8m1_run_avx512(q);
        else if (q->int4 && q->group == 32)
            q4mr_run_avx512(q);
        else if (!q->int4 && q->group == 32 && q->m > 1)
            q8mr_run_avx512(q);
        else
            quant_run_avx512(q);
        return;
    case AH_ISA_AVX2: quant_run_avx2_direct(q); return;
    default: break;
    }
#endif
    quant_run_scalar(q);
}

bool ah_gemm_run_f16(const ah_gemm_tile *t) {
#ifdef AH_X86
    switch (isa_level()) {
    case AH_ISA_AVX512: f16_run_avx512(t); return true;
    case AH_ISA_AVX2: f16_run_avx2(t); return true;
    default: break;
    }
#endif
    (void)t;
    return false;
}

#ifdef AH_X86
static T5 void int4_order_avx512(float *row, int64_t kp) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t k = 0; k < kp; k += 32) {
        const __m512 lo = _mm512_loadu_ps(row + k), hi = _mm512_loadu_ps(row + k + 16);
        _mm512_storeu_ps(row + k, _mm512_permutex2var_ps(lo, even, hi));
        _mm512_storeu_ps(row + k + 16, _mm512_permutex2var_ps(lo, odd, hi));
    }
}
#endif

void ah_gemm_int4_order(float *row, int64_t kp) {
#ifdef AH_X86
    if (isa_level() == AH_ISA_AVX512) {
        int4_order_avx512(row, kp);
        return;
    }
#endif
    float blk[32];
    for (int64_t k = 0; k < kp; k += 32) {
        memcpy(blk, row + k, sizeof blk);
        for (int e = 0; e < 16; e++) {
            row[k + e] = blk[2 * e];
            row[k + 16 + e] = blk[2 * e + 1];
        }
    }
}

void ah_gemm_unpack_quant(const ah_gemm_quant *q, float *dst, int64_t ldd) {
#ifdef AH_X86
    switch (isa_level()) {
    case AH_ISA_AVX512: unpack_run_avx512(q, dst, ldd); return;
    case AH_ISA_AVX2: unpack_run_avx2(q, dst, ldd); return;
    default: break;
    }
#endif
    unpack_run_scalar(q, dst, ldd);
}
