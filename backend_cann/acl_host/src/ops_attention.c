/* ops_attention.c - aclnnFusedInferAttentionScoreV2 (fused attention for inference).
 *
 * out[b, h, i, :] = softmax_j(scale * q[b,h,i,:] . k[b,g,j,:] + pse[b,h,i,j], masked) . v[b,g,j,:]
 * with g = h / (numHeads / numKeyValueHeads) (native GQA). The subset implemented: layouts BSH,
 * BSND, BNSD and BNSD_BSND; F16 or BF16 query / key / value / out; key and value as one-tensor
 * lists; optional pseShift (query's dtype, (B|1, N, >= Sq, >= Skv), finite) and attenMask (BOOL /
 * INT8 / UINT8, 1 = excluded); sparseMode 0 with the preTokens / nextTokens window applied when a
 * mask is given and Sq > 1; optional softmaxLse (F32 [B, N, Sq, 1]). Quantization, paging, actual
 * sequence lengths and shared prefixes are rejected with ACLNN_ERR_PARAM_INVALID.
 *
 * Contiguity, as the operator document states: query, pseShift and attenMask must be contiguous
 * (a stride-0 broadcast dim is not). Relaxed for key and value: they may be strided views with a
 * contiguous head dim, because ggml's CANN backend passes permuted views into its KV cache on
 * hardware. Two rules from hardware reports rather than the document: a pseShift holding -inf or
 * NaN makes the NPU return NaN rows (llama.cpp-omni PR #89), so the run fails with
 * ACL_ERROR_RT_AICORE_EXCEPTION when the pse data is not finite (checked on the data when the task
 * runs: phase 1 cannot see device data); and a decode (Sq = 1) attenMask is ignored past key 512
 * (vllm-ascend issue #15503), so one over more than 512 keys is refused.
 *
 * Arithmetic, as the NPU's cube and vector units do it: F16/BF16 inputs widened to F32 (K and V
 * in registers as they are read, in place in the cache: both widenings are exact); each score is
 * one F32 dot product over D in a fixed order (16 lanes, lane l takes d = l mod 16, then a fixed
 * pairwise tree), times scale, plus the pse widened to F32; a row's softmax is two-pass
 * (exact max, then exp(s - max) in F32, row sum in F64 over 16 lanes); the probabilities are rounded to the
 * input dtype (the cube unit multiplies F16/BF16 operands) and P . V accumulates in F64 (each
 * product of two F16/BF16 values is exact there); out = acc / sum, rounded to F32, then to the
 * output dtype, nearest even. The F64 sums make a row's output independent of the order of its
 * keys, so a sequence whose cells are scattered, reordered by preemption or shared from a cached
 * prefix gets the bits it gets with its keys in position order (the NPU sums in F32 in its own
 * tiling order; the outputs agree within F16 rounding). exp is acl_host's own (ah_exp.h: 1 ulp,
 * 16 or 8 lanes at a time, the same bits one at a time) and the row sum takes element t in lane
 * t mod 16, folded in a fixed tree. A position masked to -inf (attenMask,
 * window, or a -inf pse) takes no part. A row with every position masked gives zeros (the
 * innerPrecise row-invalid correction, applied in every mode) and softmaxLse +inf; a row with a
 * NaN score (NaN in q or k) comes out NaN, as IEEE softmax gives, never as quiet zeros. innerPrecise
 * bit 0 (high performance) does not change the host arithmetic.
 *
 * Work is split over (batch, KV head, query-head chunk, query-row block); every query row is
 * computed alone, over its own list of live keys, in the same order whatever the split (so its
 * cost follows its own keys, not the cells of the other sequences of a batched decode, which
 * interleave with its own), and its output is bit-identical for any batch size, other rows or
 * thread count; every ISA path (AVX-512, AVX2, scalar) gives the same bits (a multiply-add is
 * fused only where the product is exact: F16/BF16 times F16/BF16 in F32, and in F64).
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ah_convert.h"
#include "ah_exp.h"
#include "ah_reduce8.h"
#include "ah_tensor.h"

#if defined(__x86_64__) || defined(__i386__)
#define AH_X86 1
#include <immintrin.h>
#endif

#define FIA "aclnnFusedInferAttentionScoreV2"
#define FIA_MAX_HEADS 256
#define FIA_MAX_GROUP 64
#define FIA_MAX_D 512
#define FIA_MAX_BATCH 65536
#define FIA_MASK_BIAS (-65504.0f) /* F16's lowest finite value */
#define FIA_DECODE_MASK_MAX 512 /* keys a decode attenMask is honoured for on hardware */
#define FIA_UNIT_ROWS 32  /* query rows a task aims for */
#define FIA_MIN_PARALLEL_MACS (1 << 20) /* below this the whole op runs on the calling thread */

typedef enum fia_layout { LAYOUT_BSH, LAYOUT_BSND, LAYOUT_BNSD, LAYOUT_BNSD_BSND } fia_layout;

typedef struct fia_params {
    int8_t slot_q, slot_k, slot_v, slot_pse, slot_mask, slot_out, slot_lse;
    int8_t layout;
    aclDataType dtype;
    int32_t n_head, n_kv_head;
    int64_t batch, s_q, s_kv, head_dim;
    float scale;
    bool band;
    int64_t pre_tokens, next_tokens;
} fia_params;

/* Element strides of (batch, head, seq) of a q / k / v / out operand; the head dim has stride 1. */
typedef struct fia_geom {
    const char *base; /* element (0,0,0,0) */
    int64_t sb, sn, ss;
} fia_geom;

static const char *elem_ptr(const aclTensor *t) {
    return (const char *)t->data + t->offset * (int64_t)ah_dtype_size(t->dtype);
}

/* (B, S, N, D) extents and the geometry of an operand in `layout` (BSH split into n_head heads). */
static void layout_geom(const aclTensor *t, fia_layout layout, int64_t n_head, int64_t *dims4,
                        fia_geom *g) {
    g->base = elem_ptr(t);
    if (layout == LAYOUT_BSH) {
        int64_t d = n_head > 0 ? t->dims[2] / n_head : 0;
        dims4[0] = t->dims[0], dims4[1] = t->dims[1], dims4[2] = n_head, dims4[3] = d;
        g->sb = t->strides[0], g->ss = t->strides[1], g->sn = d * t->strides[2];
    } else if (layout == LAYOUT_BSND) {
        dims4[0] = t->dims[0], dims4[1] = t->dims[1], dims4[2] = t->dims[2], dims4[3] = t->dims[3];
        g->sb = t->strides[0], g->ss = t->strides[1], g->sn = t->strides[2];
    } else { /* BNSD */
        dims4[0] = t->dims[0], dims4[1] = t->dims[2], dims4[2] = t->dims[1], dims4[3] = t->dims[3];
        g->sb = t->strides[0], g->sn = t->strides[1], g->ss = t->strides[2];
    }
}

/* ---- vector kernels ------------------------------------------------------------------------------
 * K and V are read as stored (F16 or BF16) and widened in registers; both widenings are exact.
 * fia_scores: s[t] = (q . k[keys[t]]) * scale + s[t], each dot in the fixed 16-lane order (lane l
 * takes d = l mod 16, then lanes l + 8, l + 4, l + 2, l + 1 pairwise).
 * fia_pv: acc += p[t] * v[keys[t]] in F64 for every t with p[t] != 0, in t order. p and v hold
 * F16/BF16 values, so each product is exact and the sum does not depend on the order the keys come
 * in (except for sums spanning more than 2^53, which no attention row reaches): a row's output is
 * the same whichever cells its keys sit in. kv_stride: bytes from one key's row to the next. */
typedef void (*fia_scores_fn)(const float *q, const char *k, int64_t kv_stride,
                              const int32_t *keys, int64_t n, int64_t D, float scale, float *s);
typedef void (*fia_pv_fn)(double *acc, const char *v, int64_t kv_stride, const int32_t *keys,
                          const float *p, int64_t n, int64_t D);
/* The same for nq rows that share their keys (the query heads of one position on one KV head):
 * row r's query q[r], scores s[r], P p[r] and accumulator acc[r]; each row gets the bits the
 * one-row function gives it, K and V are read (and widened) once per key for all rows. */
typedef void (*fia_scores_multi_fn)(const float *const *q, int nq, const char *k, int64_t kv_stride,
                                    const int32_t *keys, int64_t n, int64_t D, float scale, float *const *s);
typedef void (*fia_pv_multi_fn)(double *const *acc, const float *const *p, int nq, const char *v,
                                int64_t kv_stride, const int32_t *keys, int64_t n, int64_t D);

static inline float load_half(const char *row, int64_t d, bool bf16) {
    uint16_t h;
    memcpy(&h, row + 2 * d, 2);
    return bf16 ? ah_bf16_to_f32(h) : ah_f16_to_f32(h);
}

static inline __attribute__((always_inline)) void scores_scalar(const float *q, const char *k,
                                                                int64_t ks, const int32_t *keys,
                                                                int64_t n, int64_t D, float scale,
                                                                float *s, bool bf16) {
    for (int64_t t = 0; t < n; t++) {
        const char *row = k + keys[t] * ks;
        float acc[16] = {0};
        for (int64_t i = 0; i < D; i += 16)
            for (int l = 0; l < 16; l++)
                acc[l] += q[i + l] * load_half(row, i + l, bf16);
        for (int w = 8; w >= 1; w /= 2)
            for (int l = 0; l < w; l++)
                acc[l] += acc[l + w];
        s[t] = acc[0] * scale + s[t];
    }
}

static inline __attribute__((always_inline)) void pv_scalar(double *acc, const char *v, int64_t vs,
                                                            const int32_t *keys, const float *p,
                                                            int64_t n, int64_t D, bool bf16) {
    for (int64_t t = 0; t < n; t++) {
        if (p[t] == 0.0f)
            continue;
        const char *row = v + keys[t] * vs;
        for (int64_t d = 0; d < D; d++)
            acc[d] += (double)p[t] * (double)load_half(row, d, bf16);
    }
}

#define FIA_KERNELS(isa, attr)                                                                     \
    attr static void scores_f16_##isa(const float *q, const char *k, int64_t ks,                  \
                                      const int32_t *keys, int64_t n, int64_t D, float scale,     \
                                      float *s) {                                                 \
        scores_##isa(q, k, ks, keys, n, D, scale, s, false);                                      \
    }                                                                                             \
    attr static void scores_bf16_##isa(const float *q, const char *k, int64_t ks,                 \
                                       const int32_t *keys, int64_t n, int64_t D, float scale,    \
                                       float *s) {                                                \
        scores_##isa(q, k, ks, keys, n, D, scale, s, true);                                       \
    }                                                                                             \
    attr static void pv_f16_##isa(double *acc, const char *v, int64_t vs, const int32_t *keys,    \
                                  const float *p, int64_t n, int64_t D) {                         \
        pv_##isa(acc, v, vs, keys, p, n, D, false);                                               \
    }                                                                                             \
    attr static void pv_bf16_##isa(double *acc, const char *v, int64_t vs, const int32_t *keys,   \
                                   const float *p, int64_t n, int64_t D) {                        \
        pv_##isa(acc, v, vs, keys, p, n, D, true);                                                \
    }                                                                                             \
    attr static void scores_multi_f16_##isa(const float *const *q, int nq, const char *k,         \
                                            int64_t ks, const int32_t *keys, int64_t n,           \
                                            int64_t D, float scale, float *const *s) {            \
        scores_multi_##isa(q, nq, k, ks, keys, n, D, scale, s, false);                            \
    }                                                                                             \
    attr static void scores_multi_bf16_##isa(const float *const *q, int nq, const char *k,        \
                                             int64_t ks, const int32_t *keys, int64_t n,          \
                                             int64_t D, float scale, float *const *s) {           \
        scores_multi_##isa(q, nq, k, ks, keys, n, D, scale, s, true);                             \
    }                                                                                             \
    attr static void pv_multi_f16_##isa(double *const *acc, const float *const *p, int nq,        \
                                        const char *v, int64_t vs, const int32_t *keys,           \
                                        int64_t n, int64_t D) {                                   \
        pv_multi_##isa(acc, p, nq, v, vs, keys, n, D, false);                                     \
    }                                                                                             \
    attr static void pv_multi_bf16_##isa(double *const *acc, const float *const *p, int nq,       \
                                         const char *v, int64_t vs, const int32_t *keys,          \
                                         int64_t n, int64_t D) {                                  \
        pv_multi_##isa(acc, p, nq, v, vs, keys, n, D, true);                                      \
    }

/* Several rows one after the other: for the paths without a multi-row kernel. */
#define FIA_ROW_LOOPS(isa, attr)                                                                  \
    attr static inline __attribute__((always_inline)) void scores_multi_##isa(                   \
        const float *const *q, int nq, const char *k, int64_t ks, const int32_t *keys, int64_t n, \
        int64_t D, float scale, float *const *s, bool bf16) {                                     \
        for (int r = 0; r < nq; r++)                                                              \
            scores_##isa(q[r], k, ks, keys, n, D, scale, s[r], bf16);                             \
    }                                                                                             \
    attr static inline __attribute__((always_inline)) void pv_multi_##isa(                       \
        double *const *acc, const float *const *p, int nq, const char *v, int64_t vs,             \
        const int32_t *keys, int64_t n, int64_t D, bool bf16) {                                   \
        for (int r = 0; r < nq; r++)                                                              \
            pv_##isa(acc[r], v, vs, keys, p[r], n, D, bf16);                                      \
    }

FIA_ROW_LOOPS(scalar, )
FIA_KERNELS(scalar, )

#ifdef AH_X86
#define T2 __attribute__((target("avx2,f16c"), always_inline)) static inline
#define T5 __attribute__((target("avx512f,avx2,f16c"), always_inline)) static inline

T2 __m256 load8_avx2(const char *row, bool bf16) {
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)row);
    return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                : _mm256_cvtph_ps(h);
}

T2 float hsum8_avx2(__m256 h) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)); /* l + l+4 */
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));                                         /* l + l+2 */
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));                                     /* l + l+1 */
    return _mm_cvtss_f32(x);
}

T2 void scores_avx2(const float *q, const char *k, int64_t ks, const int32_t *keys, int64_t n,
                    int64_t D, float scale, float *s, bool bf16) {
    for (int64_t t = 0; t < n; t++) {
        const char *row = k + keys[t] * ks;
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps(); /* lanes 0-7, 8-15 */
        for (int64_t i = 0; i < D; i += 16) {
            lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(q + i), load8_avx2(row + 2 * i, bf16)));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(q + i + 8),
                                                 load8_avx2(row + 2 * i + 16, bf16)));
        }
        s[t] = hsum8_avx2(_mm256_add_ps(lo, hi)) * scale + s[t]; /* l + l+8 first */
    }
}

/* acc[0, W) += p[t] * v[keys[t]][0, W) with the W doubles of acc held in registers */
T2 void pv_block_avx2(double *acc, const char *v, int64_t vs, const int32_t *keys, const float *p,
                      int64_t n, int W, bool bf16) {
    __m256d a[8];
    for (int c = 0; c < W / 4; c++)
        a[c] = _mm256_loadu_pd(acc + 4 * c);
    for (int64_t t = 0; t < n; t++) {
        if (p[t] == 0.0f)
            continue;
        const __m256d pv = _mm256_set1_pd((double)p[t]);
        const char *row = v + keys[t] * vs;
        for (int c = 0; c < W / 8; c++) {
            __m256 x = load8_avx2(row + 16 * c, bf16);
            a[2 * c] = _mm256_add_pd(a[2 * c], _mm256_mul_pd(pv, _mm256_cvtps_pd(_mm256_castps256_ps128(x))));
            a[2 * c + 1] = _mm256_add_pd(a[2 * c + 1],
                                         _mm256_mul_pd(pv, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
        }
    }
    for (int c = 0; c < W / 4; c++)
        _mm256_storeu_pd(acc + 4 * c, a[c]);
}

T2 void pv_avx2(double *acc, const char *v, int64_t vs, const int32_t *keys, const float *p,
                int64_t n, int64_t D, bool bf16) {
    int64_t d = 0;
    for (; d + 32 <= D; d += 32)
        pv_block_avx2(acc + d, v + 2 * d, vs, keys, p, n, 32, bf16);
    for (; d < D; d += 16)
        pv_block_avx2(acc + d, v + 2 * d, vs, keys, p, n, 16, bf16);
}

T5 __m512 load16_avx512(const char *row, bool bf16) {
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)row);
    return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                : _mm512_cvtph_ps(h);
}

T5 float dot16_avx512(const float *q, const char *row, int64_t D, bool bf16) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < D; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16_avx512(row + 2 * i, bf16), acc);
    __m256 lo = _mm512_castps512_ps256(acc);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    return hsum8_avx2(_mm256_add_ps(lo, hi)); /* l + l+8 first */
}

T5 void scores_avx512(const float *q, const char *k, int64_t ks, const int32_t *keys, int64_t n,
                      int64_t D, float scale, float *s, bool bf16) {
    if (D == 64) /* the common head dim, unrolled */
        for (int64_t t = 0; t < n; t++)
            s[t] = dot16_avx512(q, k + keys[t] * ks, 64, bf16) * scale + s[t];
    else
        for (int64_t t = 0; t < n; t++)
            s[t] = dot16_avx512(q, k + keys[t] * ks, D, bf16) * scale + s[t];
}

T5 void pv_block_avx512(double *acc, const char *v, int64_t vs, const int32_t *keys,
                        const float *p, int64_t n, int W, bool bf16) {
    __m512d a[8];
    for (int c = 0; c < W / 8; c++)
        a[c] = _mm512_loadu_pd(acc + 8 * c);
    for (int64_t t = 0; t < n; t++) {
        if (p[t] == 0.0f)
            continue;
        const __m512d pv = _mm512_set1_pd((double)p[t]);
        const char *row = v + keys[t] * vs;
        for (int c = 0; c < W / 16; c++) {
            __m512 x = load16_avx512(row + 32 * c, bf16);
            __m256 xh = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
            a[2 * c] = _mm512_add_pd(a[2 * c], _mm512_mul_pd(pv, _mm512_cvtps_pd(_mm512_castps512_ps256(x))));
            a[2 * c + 1] = _mm512_add_pd(a[2 * c + 1], _mm512_mul_pd(pv, _mm512_cvtps_pd(xh)));
        }
    }
    for (int c = 0; c < W / 8; c++)
        _mm512_storeu_pd(acc + 8 * c, a[c]);
}

T5 void pv_avx512(double *acc, const char *v, int64_t vs, const int32_t *keys, const float *p,
                  int64_t n, int64_t D, bool bf16) {
    int64_t d = 0;
    for (; d + 64 <= D; d += 64)
        pv_block_avx512(acc + d, v + 2 * d, vs, keys, p, n, 64, bf16);
    for (; d < D; d += 16)
        pv_block_avx512(acc + d, v + 2 * d, vs, keys, p, n, 16, bf16);
}

/* ---- the multi-row kernels on AVX2 (+ FMA, F16C): as the AVX-512 ones below, 8 lanes ---------- */
#define T2F __attribute__((target("avx2,fma,f16c"), always_inline)) static inline
#define FIA_MR 4 /* rows of a group computed together */
/* The rows of a batched decode's keys are scattered over the cache (every n_seq-th cell) and, by
 * the time a layer's attention runs again, out of the caches; no hardware prefetcher follows
 * them. So the kernels ask for the rows of key t + FIA_PREFETCH while they work on key t. */
#define FIA_PREFETCH 32

static inline __attribute__((always_inline)) void prefetch_row(const char *row, int64_t bytes) {
    for (int64_t b = 0; b < bytes; b += 64)
        __builtin_prefetch(row + b, 0, 3);
}

/* rn rows of one group, keys [t0, t0 + tn) (tn <= 8): scores_avx2's lanes per key and row (q * k
 * exact in F32, so fused), lo + hi kept per key, then the 8 keys' trees at once (ah_reduce8.h,
 * hsum8_avx2's pairing) */
T2F void scores_rows_avx2(const float *const *q, int rn, const char *k, int64_t ks, const int32_t *keys,
                          int64_t t0, int tn, int64_t n, int64_t D, __m256 vscale, float *const *s, bool bf16,
                          bool pf) {
    __m256 part[FIA_MR][8];
    for (int tt = 0; tt < tn; tt++) {
        const char *row = k + keys[t0 + tt] * ks;
        if (pf && t0 + tt + FIA_PREFETCH < n)
            prefetch_row(k + keys[t0 + tt + FIA_PREFETCH] * ks, 2 * D);
        __m256 lo[FIA_MR], hi[FIA_MR];
        for (int r = 0; r < rn; r++)
            lo[r] = hi[r] = _mm256_setzero_ps();
        for (int64_t d = 0; d < D; d += 16) {
            const __m256 kl = load8_avx2(row + 2 * d, bf16), kh = load8_avx2(row + 2 * d + 16, bf16);
            for (int r = 0; r < rn; r++) {
                lo[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + d), kl, lo[r]);
                hi[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + d + 8), kh, hi[r]);
            }
        }
        for (int r = 0; r < rn; r++)
            part[r][tt] = _mm256_add_ps(lo[r], hi[r]); /* l + l+8 first */
    }
    const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(tn), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int r = 0; r < rn; r++) {
        for (int tt = tn; tt < 8; tt++)
            part[r][tt] = _mm256_setzero_ps();
        float *sr = s[r] + t0;
        const __m256 y = _mm256_add_ps(_mm256_mul_ps(ah_reduce8_avx2(part[r]), vscale), _mm256_maskload_ps(sr, live));
        _mm256_maskstore_ps(sr, live, y);
    }
}

T2F void scores_multi_avx2(const float *const *q, int nq, const char *k, int64_t ks, const int32_t *keys, int64_t n,
                           int64_t D, float scale, float *const *s, bool bf16) {
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int64_t t = 0; t < n && t < FIA_PREFETCH; t++)
        prefetch_row(k + keys[t] * ks, 2 * D);
    for (int r0 = 0; r0 < nq; r0 += FIA_MR) {
        const int rn = nq - r0 < FIA_MR ? nq - r0 : FIA_MR;
        const bool pf = r0 == 0; /* later groups of rows find the keys in the cache */
        for (int64_t t0 = 0; t0 < n; t0 += 8) {
            const int tn = n - t0 < 8 ? (int)(n - t0) : 8;
#define SCORES_ROWS(R)                                                                              \
    (D == 64 /* the common head dim, unrolled */                                                     \
         ? scores_rows_avx2(q + r0, R, k, ks, keys, t0, tn, n, 64, vscale, s + r0, bf16, pf)         \
         : scores_rows_avx2(q + r0, R, k, ks, keys, t0, tn, n, D, vscale, s + r0, bf16, pf))
            switch (rn) {
            case 1: SCORES_ROWS(1); break;
            case 2: SCORES_ROWS(2); break;
            case 3: SCORES_ROWS(3); break;
            default: SCORES_ROWS(4); break;
            }
#undef SCORES_ROWS
        }
    }
}

/* rn rows of one group, w8 (1 or 2) 8-element parts of D at d0: F64 accumulators in registers
 * over all keys, each V row widened once per key for the rows; p * v is exact in F64, so the
 * fused multiply-add rounds as pv_block_avx2's multiply then add */
T2F void pv_rows_avx2(double *const *acc, const float *const *p, int rn, const char *v, int64_t vs,
                      const int32_t *keys, int64_t n, int64_t d0, int w8, bool bf16, int64_t pf_bytes) {
    __m256d a[FIA_MR][4];
    for (int r = 0; r < rn; r++)
        for (int c = 0; c < 2 * w8; c++)
            a[r][c] = _mm256_loadu_pd(acc[r] + d0 + 4 * c);
    for (int64_t t = 0; t < n; t++) {
        const char *row = v + keys[t] * vs + 2 * d0;
        if (pf_bytes && t + FIA_PREFETCH < n)
            prefetch_row(v + keys[t + FIA_PREFETCH] * vs, pf_bytes);
        __m256d x[4];
        for (int hh = 0; hh < w8; hh++) {
            const __m256 w = load8_avx2(row + 16 * hh, bf16);
            x[2 * hh] = _mm256_cvtps_pd(_mm256_castps256_ps128(w));
            x[2 * hh + 1] = _mm256_cvtps_pd(_mm256_extractf128_ps(w, 1));
        }
        for (int r = 0; r < rn; r++) {
            const float pr = p[r][t];
            if (pr == 0.0f)
                continue;
            const __m256d pv = _mm256_set1_pd((double)pr);
            for (int c = 0; c < 2 * w8; c++)
                a[r][c] = _mm256_fmadd_pd(pv, x[c], a[r][c]);
        }
    }
    for (int r = 0; r < rn; r++)
        for (int c = 0; c < 2 * w8; c++)
            _mm256_storeu_pd(acc[r] + d0 + 4 * c, a[r][c]);
}

T2F void pv_multi_avx2(double *const *acc, const float *const *p, int nq, const char *v, int64_t vs,
                       const int32_t *keys, int64_t n, int64_t D, bool bf16) {
    for (int64_t t = 0; t < n && t < FIA_PREFETCH; t++)
        prefetch_row(v + keys[t] * vs, 2 * D);
    for (int r0 = 0; r0 < nq; r0 += FIA_MR) {
        const int rn = nq - r0 < FIA_MR ? nq - r0 : FIA_MR;
        for (int64_t d0 = 0; d0 < D;) {
            /* 16 elements of the row for up to 2 rows, else 8: at most 8 accumulators */
            const int width = rn <= 2 && D - d0 >= 16 ? 16 : 8;
            const int64_t pf = r0 == 0 && d0 == 0 ? 2 * D : 0; /* the first pass brings whole rows */
#define PV_ROWS(R)                                                                                   \
    (width == 16 ? pv_rows_avx2(acc + r0, p + r0, R, v, vs, keys, n, d0, 2, bf16, pf)                 \
                 : pv_rows_avx2(acc + r0, p + r0, R, v, vs, keys, n, d0, 1, bf16, pf))
            switch (rn) {
            case 1: PV_ROWS(1); break;
            case 2: PV_ROWS(2); break;
            case 3: PV_ROWS(3); break;
            default: PV_ROWS(4); break;
            }
#undef PV_ROWS
            d0 += width;
        }
    }
}

/* Multi-row kernels. Rows go in groups of FIA_MR; for each key its K (V) row is widened once per
 * group. Scores: a row's 16-lane dot products of 16 keys are kept, then summed all at once by the
 * tree of dot16_avx512 (l + l+8, l + l+4, l + l+2, l + l+1, the lower half first), so each score
 * has the bits dot16_avx512 gives. P . V: the rows' F64 accumulators of 32 (or 16) of the D
 * elements stay in registers over all keys; p * v is exact in F64, so the fused multiply-add
 * rounds as pv_block_avx512's multiply then add (and q * k, two widened F16/BF16 values, is exact
 * in F32: the scores' multiply-adds are fused too, with the bits of the scalar path). */
/* lane j: the sum of v[j] by the tree above */
T5 __m512 reduce16_avx512(const __m512 *v) {
    __m512 t[8], u[4], z[2];
    for (int p = 0; p < 8; p++)
        t[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int q = 0; q < 4; q++)
        u[q] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * q], t[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(t[2 * q], t[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int r = 0; r < 2; r++) {
        __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(u[2 * r]), _mm512_castps_pd(u[2 * r + 1]));
        __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(u[2 * r]), _mm512_castps_pd(u[2 * r + 1]));
        z[r] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
    }
    __m512 sum = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), sum);
}

/* rn (constant after inlining) rows of one group, keys [t0, t0 + tn) of n; pf: prefetch the
 * K rows FIA_PREFETCH keys ahead */
T5 void scores_rows_avx512(const float *const *q, int rn, const char *k, int64_t ks, const int32_t *keys,
                           int64_t t0, int tn, int64_t n, int64_t D, __m512 vscale, float *const *s,
                           bool bf16, bool pf) {
    __m512 part[FIA_MR][16];
    for (int tt = 0; tt < tn; tt++) {
        const char *row = k + keys[t0 + tt] * ks;
        if (pf && t0 + tt + FIA_PREFETCH < n)
            prefetch_row(k + keys[t0 + tt + FIA_PREFETCH] * ks, 2 * D);
        __m512 acc[FIA_MR];
        for (int r = 0; r < rn; r++)
            acc[r] = _mm512_setzero_ps();
        for (int64_t d = 0; d < D; d += 16) {
            const __m512 kv = load16_avx512(row + 2 * d, bf16);
            for (int r = 0; r < rn; r++) /* q * k is exact in F32: fused, the same bits */
                acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(q[r] + d), kv, acc[r]);
        }
        for (int r = 0; r < rn; r++)
            part[r][tt] = acc[r];
    }
    const __mmask16 live = (__mmask16)((1u << tn) - 1u);
    for (int r = 0; r < rn; r++) {
        for (int tt = tn; tt < 16; tt++)
            part[r][tt] = _mm512_setzero_ps();
        float *sr = s[r] + t0;
        __m512 y = _mm512_add_ps(_mm512_mul_ps(reduce16_avx512(part[r]), vscale), _mm512_maskz_loadu_ps(live, sr));
        _mm512_mask_storeu_ps(sr, live, y);
    }
}

T5 void scores_multi_avx512(const float *const *q, int nq, const char *k, int64_t ks, const int32_t *keys,
                            int64_t n, int64_t D, float scale, float *const *s, bool bf16) {
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int64_t t = 0; t < n && t < FIA_PREFETCH; t++)
        prefetch_row(k + keys[t] * ks, 2 * D);
    for (int r0 = 0; r0 < nq; r0 += FIA_MR) {
        const int rn = nq - r0 < FIA_MR ? nq - r0 : FIA_MR;
        const bool pf = r0 == 0; /* later groups of rows find the keys in the cache */
        for (int64_t t0 = 0; t0 < n; t0 += 16) {
            const int tn = n - t0 < 16 ? (int)(n - t0) : 16;
#define SCORES_ROWS(R)                                                                              \
    (D == 64 /* the common head dim, unrolled */                                                     \
         ? scores_rows_avx512(q + r0, R, k, ks, keys, t0, tn, n, 64, vscale, s + r0, bf16, pf)       \
         : scores_rows_avx512(q + r0, R, k, ks, keys, t0, tn, n, D, vscale, s + r0, bf16, pf))
            switch (rn) {
            case 1: SCORES_ROWS(1); break;
            case 2: SCORES_ROWS(2); break;
            case 3: SCORES_ROWS(3); break;
            default: SCORES_ROWS(4); break;
            }
#undef SCORES_ROWS
        }
    }
}

/* rn (constant after inlining) rows of one group, `half` (1, 2, or 4 when rn <= 3: the accumulators fill the registers) 16-element
 * parts of the d-block at d0; pf_bytes: of each V row FIA_PREFETCH keys ahead, the bytes to
 * prefetch (0: none) */
T5 void pv_rows_avx512(double *const *acc, const float *const *p, int rn, const char *v, int64_t vs,
                       const int32_t *keys, int64_t n, int64_t d0, int half, bool bf16, int64_t pf_bytes) {
    __m512d a[FIA_MR][8];
    for (int r = 0; r < rn; r++)
        for (int c = 0; c < 2 * half; c++)
            a[r][c] = _mm512_loadu_pd(acc[r] + d0 + 8 * c);
    for (int64_t t = 0; t < n; t++) {
        const char *row = v + keys[t] * vs + 2 * d0;
        if (pf_bytes && t + FIA_PREFETCH < n)
            prefetch_row(v + keys[t + FIA_PREFETCH] * vs, pf_bytes);
        __m512d x[8];
        for (int hh = 0; hh < half; hh++) {
            const __m512 w16 = load16_avx512(row + 32 * hh, bf16);
            x[2 * hh] = _mm512_cvtps_pd(_mm512_castps512_ps256(w16));
            x[2 * hh + 1] = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(w16), 1)));
        }
        for (int r = 0; r < rn; r++) {
            const float pr = p[r][t];
            if (pr == 0.0f)
                continue;
            const __m512d pv = _mm512_set1_pd((double)pr);
            for (int c = 0; c < 2 * half; c++)
                a[r][c] = _mm512_fmadd_pd(pv, x[c], a[r][c]);
        }
    }
    for (int r = 0; r < rn; r++)
        for (int c = 0; c < 2 * half; c++)
            _mm512_storeu_pd(acc[r] + d0 + 8 * c, a[r][c]);
}

T5 void pv_multi_avx512(double *const *acc, const float *const *p, int nq, const char *v, int64_t vs,
                        const int32_t *keys, int64_t n, int64_t D, bool bf16) {
    for (int64_t t = 0; t < n && t < FIA_PREFETCH; t++)
        prefetch_row(v + keys[t] * vs, 2 * D);
    for (int r0 = 0; r0 < nq; r0 += FIA_MR) {
        const int rn = nq - r0 < FIA_MR ? nq - r0 : FIA_MR;
        for (int64_t d0 = 0; d0 < D;) {
            /* 64 elements of the row for up to 3 rows, else 32, or the last 16 */
            const int width = rn <= 3 && D - d0 >= 64 ? 64 : D - d0 >= 32 ? 32 : 16;
            const int64_t pf = r0 == 0 && d0 == 0 ? 2 * D : 0; /* the first pass brings whole rows */
#define PV_ROWS(R)                                                                                   \
    (width == 64 ? pv_rows_avx512(acc + r0, p + r0, R, v, vs, keys, n, d0, 4, bf16, pf)              \
     : width == 32 ? pv_rows_avx512(acc + r0, p + r0, R, v, vs, keys, n, d0, 2, bf16, pf)             \
                   : pv_rows_avx512(acc + r0, p + r0, R, v, vs, keys, n, d0, 1, bf16, pf))
            switch (rn) {
            case 1: PV_ROWS(1); break;
            case 2: PV_ROWS(2); break;
            case 3: PV_ROWS(3); break;
            default: PV_ROWS(4); break;
            }
#undef PV_ROWS
            d0 += width;
        }
    }
}

FIA_KERNELS(avx2, __attribute__((target("avx2,fma,f16c"))))
FIA_KERNELS(avx512, __attribute__((target("avx512f,avx2,f16c"))))

/* The row work around the kernels, 16 at a time: what the scalar loops of fia_live_keys,
 * row_max and normalize_row give, bit for bit. */

/* keys[n++] = j for every j in [j, hi) with m[j] == 0 (a contiguous mask row), from n; whole
 * blocks of 16 only (the caller does the tail). Each block stores 16 lanes at keys + n, which
 * stays inside the row's S slots because n <= j - lo and j + 16 <= hi <= S. */
__attribute__((target("avx512f,popcnt"))) static int64_t mask_live_avx512(const unsigned char *m, int64_t *jp,
                                                                          int64_t hi, int32_t *keys, int64_t n) {
    int64_t j = *jp;
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int)j),
                                   _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    const __m512i step = _mm512_set1_epi32(16), zero = _mm512_setzero_si512();
    for (; j + 16 <= hi; j += 16) {
        __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(m + j)));
        __mmask16 live = _mm512_cmpeq_epi32_mask(b, zero);
        /* compress in a register, then a plain store: a compressing store is slow on Zen 4 */
        _mm512_storeu_si512((void *)(keys + n), _mm512_maskz_compress_epi32(live, idx));
        n += _mm_popcnt_u32(live);
        idx = _mm512_add_epi32(idx, step);
    }
    *jp = j;
    return n;
}

/* The largest of s[0, n) (NaN ignored) into *m and whether any is NaN; whole blocks only.
 * The max of a set does not depend on the order it is taken in (a +0 / -0 tie may come out
 * either way, and s - m, exp and m + log(sum) are the same for both). */
__attribute__((target("avx512f"))) static int64_t row_max_avx512(const float *s, int64_t n, float *m, bool *nan) {
    __m512 vm = _mm512_set1_ps(-INFINITY);
    __mmask16 bad = 0;
    int64_t t = 0;
    for (; t + 16 <= n; t += 16) {
        __m512 x = _mm512_loadu_ps(s + t);
        bad |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        vm = _mm512_max_ps(vm, x); /* a NaN may land in a lane: such rows are flagged anyway */
    }
    float r = _mm512_reduce_max_ps(vm);
    *m = r > *m ? r : *m;
    *nan = *nan || bad != 0;
    return t;
}

/* out[d] = (float)(acc[d] / sum): one IEEE division in F64 and one rounding to F32 per element */
__attribute__((target("avx512f"))) static int64_t normalize_avx512(const double *acc, double sum, float *out,
                                                                   int64_t D) {
    const __m512d vs = _mm512_set1_pd(sum);
    int64_t d = 0;
    for (; d + 8 <= D; d += 8)
        _mm256_storeu_ps(out + d, _mm512_cvtpd_ps(_mm512_div_pd(_mm512_loadu_pd(acc + d), vs)));
    return d;
}
#undef T2
#undef T5
#endif

static int64_t mask_live(const unsigned char *m, int64_t lo, int64_t hi, int32_t *keys) {
    int64_t n = 0, j = lo;
#ifdef AH_X86
    if (ah_isa() == AH_ISA_AVX512)
        n = mask_live_avx512(m, &j, hi, keys, n);
#endif
    for (; j < hi; j++) {
        keys[n] = (int32_t)j;
        n += m[j] == 0;
    }
    return n;
}

static void row_max(const float *s, int64_t n, float *m, bool *nan) {
    int64_t t = 0;
    *m = -INFINITY, *nan = false;
#ifdef AH_X86
    if (ah_isa() == AH_ISA_AVX512)
        t = row_max_avx512(s, n, m, nan);
#endif
    for (; t < n; t++) {
        *m = s[t] > *m ? s[t] : *m;
        *nan |= s[t] != s[t];
    }
}

static void normalize_row(const double *acc, double sum, float *out, int64_t D) {
    int64_t d = 0;
#ifdef AH_X86
    if (ah_isa() == AH_ISA_AVX512)
        d = normalize_avx512(acc, sum, out, D);
#endif
    for (; d < D; d++)
        out[d] = (float)(acc[d] / sum);
}

/* ---- the kernel --------------------------------------------------------------------------------- */
typedef struct fia_job {
    fia_params p;
    int64_t group;         /* query heads per KV head */
    int64_t chunk_heads;   /* query heads per task */
    int64_t n_head_chunks; /* per KV head */
    int64_t block_rows;    /* query rows per task */
    int64_t n_row_blocks;
    fia_geom q, k, v, out;
    /* pse (b, n, s, kv) and mask (b, s, kv) element strides; base NULL when absent */
    const char *pse;
    int64_t pse_s[4];
    const char *mask;
    int64_t mask_s[3];
    float *lse; /* [B, N, Sq] contiguous, or NULL */
    fia_scores_fn scores;
    fia_pv_fn pv;
    fia_scores_multi_fn scores_multi;
    fia_pv_multi_fn pv_multi;
    atomic_int failed;
} fia_job;

static void widen_row(aclDataType t, const char *src, float *dst, int64_t n) {
    if (t == ACL_FLOAT16)
        ah_f16_to_f32_row((const uint16_t *)(const void *)src, dst, n);
    else
        ah_bf16_to_f32_row((const uint16_t *)(const void *)src, dst, n);
}

static float widen_one(aclDataType t, const char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return t == ACL_FLOAT16 ? ah_f16_to_f32(h) : ah_bf16_to_f32(h);
}

/* A task's scratch: F32 query rows and outputs [R][D], per row its max and sum, its live keys
 * (index and score, at most S) and one row of P. */
typedef struct fia_scratch {
    float *qf, *rmax, *scores;
    double *acc, *rsum; /* F64: P . V and the row sums do not depend on the keys' order */
    int32_t *keys;
    int64_t *n_live;
    const int32_t **live;
    uint16_t *p16;
    int64_t S; /* the row stride of scores and keys */
} fia_scratch;

/* Builds row r's live keys: (index, bias) in key order for every key that takes part - not masked
 * by attenMask or the window, and, when the row's pse has a bias above F16's lowest value, not at
 * or below it (such a bias adds exp(s - 65504 - m) = 0 in F32 unless a masked score exceeds the
 * row's max by more than 65400, which no attention row reaches: the keys take no part, as -inf
 * ones do, with the same result bits). A row whose every bias is that low keeps them (softmax then
 * spreads over all of them, as on the NPU). bias receives the live biases, compacted in place. */
static int64_t fia_live_keys(const fia_job *job, int64_t b, int64_t h, int64_t i, float *bias, int32_t *keys) {
    const fia_params *p = &job->p;
    const int64_t S = p->s_kv;
    int64_t j_lo = 0, j_hi = S; /* the window: keys i - pre_tokens .. i + next_tokens */
    if (p->band) {
        j_lo = i - p->pre_tokens > 0 ? i - p->pre_tokens : 0;
        j_hi = i + p->next_tokens + 1 < S ? i + p->next_tokens + 1 : S;
    }
    const unsigned char *m = job->mask ? (const unsigned char *)job->mask + b * job->mask_s[0] + i * job->mask_s[1]
                                       : NULL;
    const int64_t ms = job->mask_s[2];
    int64_t n = 0;
    if (job->pse) {
        const char *pse_row = job->pse + (b * job->pse_s[0] + h * job->pse_s[1] + i * job->pse_s[2]) * 2;
        if (job->pse_s[3] == 1)
            widen_row(p->dtype, pse_row, bias, S);
        else
            for (int64_t j = 0; j < S; j++)
                bias[j] = widen_one(p->dtype, pse_row + j * job->pse_s[3] * 2);
        bool low = false;
        for (int64_t j = 0; j < S && !low; j++)
            low = bias[j] > FIA_MASK_BIAS;
        for (int64_t j = j_lo; j < j_hi; j++) {
            float v = bias[j];
            keys[n] = (int32_t)j;
            bias[n] = v;
            n += (!m || m[j * ms] == 0) && (!low || v > FIA_MASK_BIAS);
        }
    } else if (m && ms == 1) {
        n = mask_live(m, j_lo, j_hi, keys);
        memset(bias, 0, (size_t)n * sizeof(float));
    } else if (m) {
        for (int64_t j = j_lo; j < j_hi; j++) {
            keys[n] = (int32_t)j;
            n += m[j * ms] == 0;
        }
        memset(bias, 0, (size_t)n * sizeof(float));
    } else {
        for (int64_t j = j_lo; j < j_hi; j++)
            keys[n++] = (int32_t)j;
        memset(bias, 0, (size_t)n * sizeof(float));
    }
    return n;
}

/* Whether heads [h0, h0 + nh) of batch b have the same pse bits in rows [i0, i0 + ni): the decode
 * pse is one mask written for every head (backend_cann's ops_attention.c), so the heads of a
 * group can share their live keys and read each key once for all of them. */
static bool pse_same_for_heads(const fia_job *job, int64_t b, int64_t h0, int64_t nh, int64_t i0, int64_t ni) {
    const int64_t S = job->p.s_kv, ks = job->pse_s[3];
    for (int64_t i = i0; i < i0 + ni; i++) {
        const uint16_t *first = (const uint16_t *)(const void *)job->pse + b * job->pse_s[0] + h0 * job->pse_s[1] +
                                i * job->pse_s[2];
        for (int64_t h = h0 + 1; h < h0 + nh; h++) {
            const uint16_t *row = first + (h - h0) * job->pse_s[1];
            if (ks == 1) {
                if (memcmp(first, row, (size_t)S * sizeof *row) != 0)
                    return false;
            } else {
                for (int64_t j = 0; j < S; j++)
                    if (first[j * ks] != row[j * ks])
                        return false;
            }
        }
    }
    return true;
}

/* One task: query heads [h0, h0 + nh) of batch b (all on KV head g), rows [i0, i0 + ni). Each row
 * works on its live keys only (fia_live_keys), in key order, so its cost follows its own keys,
 * not the cache cells of the other sequences of a batch, and its bits do not depend on them. */
static void fia_unit(const fia_job *job, int64_t b, int64_t g, int64_t h0, int64_t nh, int64_t i0,
                     int64_t ni, fia_scratch *w) {
    const fia_params *p = &job->p;
    const aclDataType dt = p->dtype;
    const int64_t D = p->head_dim, S = w->S, R = nh * ni;
    const int64_t es = 2;
    float *qf = w->qf, *scores = w->scores;
    const char *k = job->k.base + (b * job->k.sb + g * job->k.sn) * es;
    const char *v = job->v.base + (b * job->v.sb + g * job->v.sn) * es;
    double *acc = w->acc;

    for (int64_t r = 0; r < R; r++) {
        int64_t h = h0 + r / ni, i = i0 + r % ni;
        const char *src = job->q.base + (b * job->q.sb + h * job->q.sn + i * job->q.ss) * es;
        widen_row(dt, src, qf + r * D, D);
    }

    /* live keys per row; rows of one query position share them when the pse (if any) does not
     * depend on the head (a stride-0 head dim, or the same bits for each head of the task).
     * scores row r starts as the live keys' biases. */
    bool shared = !job->pse || job->pse_s[1] == 0 || (nh > 1 && pse_same_for_heads(job, b, h0, nh, i0, ni));
    for (int64_t r = 0; r < R; r++) {
        int64_t h = h0 + r / ni, i = i0 + r % ni;
        if (shared && r >= ni) {
            int64_t r0 = r % ni;
            w->live[r] = w->live[r0];
            w->n_live[r] = w->n_live[r0];
            memcpy(scores + r * S, scores + r0 * S, (size_t)w->n_live[r0] * sizeof(float));
            continue;
        }
        w->live[r] = w->keys + r * S;
        w->n_live[r] = fia_live_keys(job, b, h, i, scores + r * S, w->keys + r * S);
    }

    /* scores: s = (q . k) * scale + bias for the live keys; rows that share their keys (the heads
     * of one position) together, so each key is read once for them */
    const float *qrow[FIA_MAX_GROUP];
    float *srows[FIA_MAX_GROUP];
    if (shared && nh > 1) {
        for (int64_t ii = 0; ii < ni; ii++) {
            for (int64_t hh = 0; hh < nh; hh++) {
                qrow[hh] = qf + (hh * ni + ii) * D;
                srows[hh] = scores + (hh * ni + ii) * S;
            }
            job->scores_multi(qrow, (int)nh, k, job->k.ss * es, w->live[ii], w->n_live[ii], D, p->scale, srows);
        }
    } else {
        for (int64_t r = 0; r < R; r++)
            job->scores(qf + r * D, k, job->k.ss * es, w->live[r], w->n_live[r], D, p->scale,
                        scores + r * S);
    }

    /* softmax: exact max, exp in F32, sum in F64, P rounded to the input dtype (keys that
     * are not live hold P = 0 and add nothing) */
    for (int64_t r = 0; r < R; r++) {
        const int64_t n = w->n_live[r];
        float *srow = scores + r * S, m;
        double sum;
        bool nan;
        row_max(srow, n, &m, &nan);
        if (nan) { /* a NaN score (NaN in q or k) poisons the row, as softmax does on the NPU */
            w->rmax[r] = NAN;
            w->rsum[r] = NAN;
            continue;
        }
        if (m == -INFINITY) {
            w->rmax[r] = m;
            w->rsum[r] = 0.0;
            continue;
        }
        sum = ah_exp_sub_row_sum(srow, n, m); /* exp(-inf - m) is 0 */
        if (dt == ACL_FLOAT16) {
            ah_f32_to_f16_row(srow, w->p16, n);
            ah_f16_to_f32_row(w->p16, srow, n);
        } else {
            ah_f32_to_bf16_row(srow, w->p16, n);
            ah_bf16_to_f32_row(w->p16, srow, n);
        }
        w->rmax[r] = m;
        w->rsum[r] = sum;
    }

    /* P . V in F64 for rows with a finite, non-zero sum; positions with P == 0 add nothing */
    memset(acc, 0, (size_t)(R * D) * sizeof(double));
    if (shared && nh > 1) {
        double *arows[FIA_MAX_GROUP];
        const float *prows[FIA_MAX_GROUP];
        for (int64_t ii = 0; ii < ni; ii++) {
            int nq = 0;
            for (int64_t hh = 0; hh < nh; hh++) {
                int64_t r = hh * ni + ii;
                if (w->rsum[r] != 0.0 && w->rsum[r] == w->rsum[r]) {
                    arows[nq] = acc + r * D;
                    prows[nq++] = scores + r * S;
                }
            }
            if (nq > 0)
                job->pv_multi(arows, prows, nq, v, job->v.ss * es, w->live[ii], w->n_live[ii], D);
        }
    } else {
        for (int64_t r = 0; r < R; r++)
            if (w->rsum[r] != 0.0 && w->rsum[r] == w->rsum[r])
                job->pv(acc + r * D, v, job->v.ss * es, w->live[r], scores + r * S, w->n_live[r], D);
    }

    for (int64_t r = 0; r < R; r++) {
        int64_t h = h0 + r / ni, i = i0 + r % ni;
        float *a = qf + r * D; /* the query row is done with: it takes the output */
        const double *ad = acc + r * D, rsum = w->rsum[r];
        if (rsum != rsum)
            for (int64_t d = 0; d < D; d++)
                a[d] = NAN;
        else if (rsum == 0.0)
            memset(a, 0, (size_t)D * sizeof(float));
        else
            normalize_row(ad, rsum, a, D);
        char *dst = (char *)job->out.base + (b * job->out.sb + h * job->out.sn + i * job->out.ss) * es;
        if (dt == ACL_FLOAT16)
            ah_f32_to_f16_row(a, (uint16_t *)(void *)dst, D);
        else
            ah_f32_to_bf16_row(a, (uint16_t *)(void *)dst, D);
        if (job->lse)
            job->lse[(b * p->n_head + h) * p->s_q + i] =
                rsum == 0.0 ? INFINITY : w->rmax[r] + (float)log(rsum);
    }
}

static void fia_chunk(void *ctx, int64_t begin, int64_t end) {
    fia_job *job = ctx;
    const int64_t D = job->p.head_dim, S = job->p.s_kv > 0 ? job->p.s_kv : 1;
    const int64_t R = job->chunk_heads * job->block_rows;
    size_t doubles = (size_t)(R * D + R);
    size_t floats = (size_t)(R * D + R * S + R + S / 2 + 1);
    size_t bytes = (doubles * sizeof(double) + floats * sizeof(float) + 63) / 64 * 64;
    size_t extra = (size_t)(R * S) * sizeof(int32_t) + (size_t)R * sizeof(int64_t) +
                   (size_t)R * sizeof(int32_t *);
    char *buf = aligned_alloc(64, bytes + (extra + 63) / 64 * 64);
    if (!buf) {
        atomic_store(&job->failed, 1);
        return;
    }
    fia_scratch w;
    w.acc = (double *)(void *)buf, w.rsum = w.acc + R * D;
    w.qf = (float *)(void *)(w.rsum + R), w.rmax = w.qf + R * D;
    w.scores = w.rmax + R;
    w.p16 = (uint16_t *)(void *)(w.scores + R * S); /* one row of P in the input dtype */
    w.S = S;
    w.n_live = (int64_t *)(void *)(buf + bytes);
    w.live = (const int32_t **)(void *)(w.n_live + R);
    w.keys = (int32_t *)(void *)(w.live + R);
    for (int64_t u = begin; u < end; u++) {
        int64_t rb = u % job->n_row_blocks, rest = u / job->n_row_blocks;
        int64_t hc = rest % job->n_head_chunks;
        rest /= job->n_head_chunks;
        int64_t g = rest % job->p.n_kv_head, b = rest / job->p.n_kv_head;
        int64_t h0 = g * job->group + hc * job->chunk_heads;
        int64_t nh = job->group - hc * job->chunk_heads;
        nh = nh < job->chunk_heads ? nh : job->chunk_heads;
        int64_t i0 = rb * job->block_rows, ni = job->p.s_q - i0;
        ni = ni < job->block_rows ? ni : job->block_rows;
        fia_unit(job, b, g, h0, nh, i0, ni, &w);
    }
    free(buf);
}

/* Index of the first F16 / BF16 element with an all-ones exponent (inf or NaN), or -1. */
static int64_t first_non_finite(const char *data, int64_t n, aclDataType t) {
    const uint16_t *h = (const uint16_t *)(const void *)data;
    const uint16_t exp = t == ACL_FLOAT16 ? 0x7c00 : 0x7f80;
    for (int64_t i = 0; i < n; i++)
        if ((h[i] & exp) == exp)
            return i;
    return -1;
}

static aclError fia_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    fia_job *job = calloc(1, sizeof *job);
    if (!job)
        return ah_error(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", FIA);
    const fia_params *p = AH_EXEC_PARAMS(ex, const fia_params);
    job->p = *p;
    fia_layout in_layout = p->layout == LAYOUT_BNSD_BSND ? LAYOUT_BNSD : (fia_layout)p->layout;
    fia_layout out_layout = p->layout == LAYOUT_BNSD_BSND ? LAYOUT_BSND : (fia_layout)p->layout;
    int64_t dims4[4];
    layout_geom(&ex->tensors[p->slot_q], in_layout, p->n_head, dims4, &job->q);
    layout_geom(&ex->tensors[p->slot_k], in_layout, p->n_kv_head, dims4, &job->k);
    layout_geom(&ex->tensors[p->slot_v], in_layout, p->n_kv_head, dims4, &job->v);
    layout_geom(&ex->tensors[p->slot_out], out_layout, p->n_head, dims4, &job->out);
    if (p->slot_pse >= 0) {
        const aclTensor *t = &ex->tensors[p->slot_pse];
        job->pse = elem_ptr(t);
        for (int i = 0; i < 4; i++)
            job->pse_s[i] = t->dims[i] == 1 ? 0 : t->strides[i];
        int64_t bad = first_non_finite(job->pse, ah_tensor_numel(t), t->dtype);
        if (bad >= 0) {
            free(job);
            return ah_error(ACL_ERROR_RT_AICORE_EXCEPTION,
                            "%s: pseShiftOptional element %lld is not finite (-inf / NaN in the pse "
                            "gives NaN rows on the NPU; mask with attenMaskOptional)", FIA,
                            (long long)bad);
        }
    }
    if (p->slot_mask >= 0) {
        const aclTensor *t = &ex->tensors[p->slot_mask];
        int n = t->ndim;
        job->mask = elem_ptr(t);
        job->mask_s[2] = t->strides[n - 1];
        job->mask_s[1] = t->dims[n - 2] == 1 ? 0 : t->strides[n - 2];
        job->mask_s[0] = n >= 3 && t->dims[0] != 1 ? t->strides[0] : 0;
        /* (B, Skv) for a single query row: the first dim is the batch */
        if (n == 2 && p->s_q == 1 && t->dims[0] == p->batch && p->batch > 1)
            job->mask_s[0] = t->strides[0], job->mask_s[1] = 0;
    }
    if (p->slot_lse >= 0)
        job->lse = (float *)(void *)elem_ptr(&ex->tensors[p->slot_lse]);
    const bool bf16 = p->dtype == ACL_BF16;
    job->scores = bf16 ? scores_bf16_scalar : scores_f16_scalar;
    job->pv = bf16 ? pv_bf16_scalar : pv_f16_scalar;
    job->scores_multi = bf16 ? scores_multi_bf16_scalar : scores_multi_f16_scalar;
    job->pv_multi = bf16 ? pv_multi_bf16_scalar : pv_multi_f16_scalar;
#ifdef AH_X86
    if (ah_isa() == AH_ISA_AVX512) {
        job->scores = bf16 ? scores_bf16_avx512 : scores_f16_avx512;
        job->pv = bf16 ? pv_bf16_avx512 : pv_f16_avx512;
        job->scores_multi = bf16 ? scores_multi_bf16_avx512 : scores_multi_f16_avx512;
        job->pv_multi = bf16 ? pv_multi_bf16_avx512 : pv_multi_f16_avx512;
    } else if (ah_isa() == AH_ISA_AVX2) {
        job->scores = bf16 ? scores_bf16_avx2 : scores_f16_avx2;
        job->pv = bf16 ? pv_bf16_avx2 : pv_f16_avx2;
        job->scores_multi = bf16 ? scores_multi_bf16_avx2 : scores_multi_f16_avx2;
        job->pv_multi = bf16 ? pv_multi_bf16_avx2 : pv_multi_f16_avx2;
    }
#endif
    /* the split: whole GQA groups and FIA_UNIT_ROWS rows per task; when there are too few tasks
     * for the pool, rows split further first (rows of different sequences in a batched decode
     * read disjoint keys, while the heads of a group share theirs), then heads (results do not
     * depend on it) */
    job->group = p->n_head / p->n_kv_head;
    job->chunk_heads = job->group;
    job->block_rows = FIA_UNIT_ROWS / job->group > 0 ? FIA_UNIT_ROWS / job->group : 1;
    if (job->block_rows > p->s_q)
        job->block_rows = p->s_q;
    job->n_row_blocks = (p->s_q + job->block_rows - 1) / job->block_rows;
    /* a small attention (decode over a short context) costs less than waking a thread: it runs
     * on the calling thread in whole groups (a group split into head chunks reads its keys once
     * per chunk) */
    const int64_t macs = p->batch * p->n_head * p->s_q * p->s_kv * p->head_dim * 2;
    const bool serial = macs < FIA_MIN_PARALLEL_MACS;
    int64_t want = serial ? 1 : 2 * (int64_t)ah_n_threads();
    while (job->block_rows > 1 && p->batch * p->n_kv_head * job->n_row_blocks < want) {
        job->block_rows = (job->block_rows + 1) / 2;
        job->n_row_blocks = (p->s_q + job->block_rows - 1) / job->block_rows;
    }
    for (;;) {
        job->n_head_chunks = (job->group + job->chunk_heads - 1) / job->chunk_heads;
        int64_t units = p->batch * p->n_kv_head * job->n_head_chunks * job->n_row_blocks;
        if (units >= want || job->chunk_heads == 1)
            break;
        job->chunk_heads = (job->chunk_heads + 1) / 2;
    }
    int64_t units = p->batch * p->n_kv_head * job->n_head_chunks * job->n_row_blocks;
    if (units > 0)
        ah_parallel_for(units, serial ? units : 1, fia_chunk, job);
    aclError err = ACL_SUCCESS;
    if (atomic_load(&job->failed))
        err = ah_error(ACL_ERROR_BAD_ALLOC, "%s: out of host memory for the score buffers", FIA);
    free(job);
    return err;
}

/* ---- phase 1 -------------------------------------------------------------------------------------- */

static aclnnStatus unsupported(const char *name) {
    return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s is not supported by acl_host (pass NULL)", FIA,
                    name);
}

static aclnnStatus parse_layout(const char *s, fia_layout *out) {
    if (!s)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: inputLayout is NULL", FIA);
    static const struct { const char *name; fia_layout layout; } names[] = {
        {"BSH", LAYOUT_BSH}, {"BSND", LAYOUT_BSND}, {"BNSD", LAYOUT_BNSD},
        {"BNSD_BSND", LAYOUT_BNSD_BSND}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].layout;
            return ACLNN_SUCCESS;
        }
    return ah_error(ACLNN_ERR_PARAM_INVALID,
                    "%s: inputLayout \"%.32s\" is not one of BSH, BSND, BNSD, BNSD_BSND", FIA, s);
}

/* dtype, rank for the layout, contiguous head dim; fills (B, S, N, D). */
static aclnnStatus check_qkv(const char *name, const aclTensor *t, fia_layout layout,
                             aclDataType dtype, int64_t n_head, int64_t *dims4, bool contiguous) {
    int rank = layout == LAYOUT_BSH ? 3 : 4;
    AH_TRY(ah_check_tensor(FIA, name, t, AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16), rank,
                        rank));
    if (t->dtype != dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s has dtype %s, query has %s", FIA, name,
                        ah_dtype_name(t->dtype), ah_dtype_name(dtype));
    if (layout == LAYOUT_BSH && (n_head <= 0 || t->dims[2] % n_head != 0))
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: %s's hidden size %lld is not a multiple of its %lld heads", FIA, name,
                        (long long)t->dims[2], (long long)n_head);
    fia_geom g;
    layout_geom(t, layout, n_head, dims4, &g);
    if (dims4[3] > 1 && t->strides[rank - 1] != 1)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: %s's head dim has stride %lld; acl_host needs it contiguous", FIA,
                        name, (long long)t->strides[rank - 1]);
    if (contiguous && !ah_tensor_is_contiguous(t))
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: %s must be contiguous in its layout (non-contiguous query / pseShift "
                        "/ attenMask are not supported)", FIA, name);
    return ACLNN_SUCCESS;
}

static aclnnStatus check_pse(const aclTensor *pse, aclDataType dtype, const int64_t *q4,
                             int64_t s_kv) {
    AH_TRY(ah_check_tensor(FIA, "pseShiftOptional", pse,
                        AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16), 4, 4));
    if (pse->dtype != dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: pseShiftOptional has dtype %s, query has %s",
                        FIA, ah_dtype_name(pse->dtype), ah_dtype_name(dtype));
    const int64_t *d = pse->dims;
    if ((d[0] != 1 && d[0] != q4[0]) || d[1] != q4[2] || d[2] < q4[1] || d[3] < s_kv) {
        char buf[96];
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: pseShiftOptional %s must be (B or 1, N, >= Sq, >= Skv) = (%lld or 1, "
                        "%lld, >= %lld, >= %lld)", FIA, ah_shape_str(buf, sizeof buf, d, 4),
                        (long long)q4[0], (long long)q4[2], (long long)q4[1], (long long)s_kv);
    }
    if (!ah_tensor_is_contiguous(pse))
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: pseShiftOptional must be contiguous (no stride-0 broadcast dims)", FIA);
    return ACLNN_SUCCESS;
}

static aclnnStatus check_mask(const aclTensor *m, const int64_t *q4, int64_t s_kv) {
    AH_TRY(ah_check_tensor(FIA, "attenMaskOptional", m,
                        AH_DTYPE_BIT(ACL_BOOL) | AH_DTYPE_BIT(ACL_INT8) | AH_DTYPE_BIT(ACL_UINT8),
                        2, 4));
    const int64_t *d = m->dims;
    int n = m->ndim;
    int64_t B = q4[0], S = q4[1];
    bool ok = d[n - 1] >= s_kv;
    if (n == 2) /* (Sq, Skv), or (B, Skv) for one query row */
        ok = ok && (d[0] >= S || (S == 1 && d[0] == B));
    else if (n == 3) /* (B|1, Sq, Skv) */
        ok = ok && (d[0] == 1 || d[0] == B) && d[1] >= S;
    else /* (B|1, 1, Sq, Skv) */
        ok = ok && (d[0] == 1 || d[0] == B) && d[1] == 1 && d[2] >= S;
    if (!ok) {
        char buf[96];
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: attenMaskOptional %s does not fit B=%lld, Sq=%lld, Skv=%lld (expected "
                        "(Sq,Skv), (B,Sq,Skv), (1,Sq,Skv), (B,1,Sq,Skv) or (1,1,Sq,Skv))", FIA,
                        ah_shape_str(buf, sizeof buf, d, n), (long long)B, (long long)S,
                        (long long)s_kv);
    }
    if (!ah_tensor_is_contiguous(m))
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: attenMaskOptional must be contiguous (no stride-0 broadcast dims)", FIA);
    if (S == 1 && s_kv > FIA_DECODE_MASK_MAX)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: attenMaskOptional with one query row over %lld > %d keys: the decode "
                        "kernel ignores it past key %d on hardware; pass the mask as a full-head "
                        "pseShift", FIA, (long long)s_kv, FIA_DECODE_MASK_MAX, FIA_DECODE_MASK_MAX);
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclnnFusedInferAttentionScoreV2GetWorkspaceSize(
    const aclTensor *query, const aclTensorList *key, const aclTensorList *value,
    const aclTensor *pseShiftOptional, const aclTensor *attenMaskOptional,
    const aclIntArray *actualSeqLengthsOptional, const aclIntArray *actualSeqLengthsKvOptional,
    const aclTensor *deqScale1Optional, const aclTensor *quantScale1Optional,
    const aclTensor *deqScale2Optional, const aclTensor *quantScale2Optional,
    const aclTensor *quantOffset2Optional, const aclTensor *antiquantScaleOptional,
    const aclTensor *antiquantOffsetOptional, const aclTensor *blockTableOptional,
    const aclTensor *queryPaddingSizeOptional, const aclTensor *kvPaddingSizeOptional,
    const aclTensor *keyAntiquantScaleOptional, const aclTensor *keyAntiquantOffsetOptional,
    const aclTensor *valueAntiquantScaleOptional, const aclTensor *valueAntiquantOffsetOptional,
    const aclTensor *keySharedPrefixOptional, const aclTensor *valueSharedPrefixOptional,
    const aclIntArray *actualSharedPrefixLenOptional, int64_t numHeads, double scaleValue,
    int64_t preTokens, int64_t nextTokens, char *inputLayout, int64_t numKeyValueHeads,
    int64_t sparseMode, int64_t innerPrecise, int64_t blockSize, int64_t antiquantMode,
    bool softmaxLseFlag, int64_t keyAntiquantMode, int64_t valueAntiquantMode,
    const aclTensor *attentionOut, const aclTensor *softmaxLse, uint64_t *workspaceSize,
    aclOpExecutor **executor) {
    (void)blockSize, (void)antiquantMode, (void)keyAntiquantMode, (void)valueAntiquantMode;
    if (!query)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: query is NULL", FIA);
    if (!attentionOut)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: attentionOut is NULL", FIA);
    AH_TRY(ah_check_out_ptrs(FIA, workspaceSize, executor));
    const struct { const void *ptr; const char *name; } optional[] = {
        {actualSeqLengthsOptional, "actualSeqLengthsOptional"},
        {actualSeqLengthsKvOptional, "actualSeqLengthsKvOptional"},
        {deqScale1Optional, "deqScale1Optional"}, {quantScale1Optional, "quantScale1Optional"},
        {deqScale2Optional, "deqScale2Optional"}, {quantScale2Optional, "quantScale2Optional"},
        {quantOffset2Optional, "quantOffset2Optional"},
        {antiquantScaleOptional, "antiquantScaleOptional"},
        {antiquantOffsetOptional, "antiquantOffsetOptional"},
        {blockTableOptional, "blockTableOptional"},
        {queryPaddingSizeOptional, "queryPaddingSizeOptional"},
        {kvPaddingSizeOptional, "kvPaddingSizeOptional"},
        {keyAntiquantScaleOptional, "keyAntiquantScaleOptional"},
        {keyAntiquantOffsetOptional, "keyAntiquantOffsetOptional"},
        {valueAntiquantScaleOptional, "valueAntiquantScaleOptional"},
        {valueAntiquantOffsetOptional, "valueAntiquantOffsetOptional"},
        {keySharedPrefixOptional, "keySharedPrefixOptional"},
        {valueSharedPrefixOptional, "valueSharedPrefixOptional"},
        {actualSharedPrefixLenOptional, "actualSharedPrefixLenOptional"}};
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++)
        if (optional[i].ptr)
            return unsupported(optional[i].name);

    fia_layout layout = LAYOUT_BSND;
    AH_TRY(parse_layout(inputLayout, &layout));
    fia_layout in_layout = layout == LAYOUT_BNSD_BSND ? LAYOUT_BNSD : layout;
    const aclTensor *k = NULL, *v = NULL;
    AH_TRY(ah_check_single_tensor(FIA, "key", key, "the tensorlist batch mode", &k));
    AH_TRY(ah_check_single_tensor(FIA, "value", value, "the tensorlist batch mode", &v));
    if (numHeads <= 0 || numHeads > FIA_MAX_HEADS)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: numHeads %lld is outside [1, %d]", FIA,
                        (long long)numHeads, FIA_MAX_HEADS);
    int64_t n_kv = numKeyValueHeads == 0 ? numHeads : numKeyValueHeads;
    if (n_kv < 0 || numHeads % n_kv != 0 || numHeads / n_kv > FIA_MAX_GROUP)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: numHeads %lld and numKeyValueHeads %lld: numHeads must be a multiple "
                        "of numKeyValueHeads with a ratio of at most %d", FIA, (long long)numHeads,
                        (long long)numKeyValueHeads, FIA_MAX_GROUP);
    AH_TRY(ah_check_tensor(FIA, "query", query, AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16),
                        0, AH_OP_MAX_RANK));
    aclDataType dtype = query->dtype;
    int64_t q4[4], k4[4], v4[4], o4[4];
    AH_TRY(check_qkv("query", query, in_layout, dtype, numHeads, q4, true));
    AH_TRY(check_qkv("key", k, in_layout, dtype, n_kv, k4, false));   /* relaxed: see the top */
    AH_TRY(check_qkv("value", v, in_layout, dtype, n_kv, v4, false));
    if (q4[2] != numHeads)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: query has %lld heads, numHeads is %lld",
                        FIA, (long long)q4[2], (long long)numHeads);
    if (k4[2] != n_kv)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: key has %lld heads, numKeyValueHeads is %lld", FIA, (long long)k4[2],
                        (long long)n_kv);
    if (k->ndim != v->ndim || memcmp(k->dims, v->dims, sizeof(int64_t) * (size_t)k->ndim) != 0) {
        char a[96], b[96];
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: key %s and value %s must have one shape", FIA,
                        ah_shape_str(a, sizeof a, k->dims, k->ndim),
                        ah_shape_str(b, sizeof b, v->dims, v->ndim));
    }
    if (k4[0] != q4[0] || k4[3] != q4[3]) {
        char a[96], b[96];
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: key %s does not match query %s in batch or head dim", FIA,
                        ah_shape_str(a, sizeof a, k->dims, k->ndim),
                        ah_shape_str(b, sizeof b, query->dims, query->ndim));
    }
    int64_t D = q4[3];
    if (D <= 0 || D > FIA_MAX_D || D % 16 != 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: head dim %lld must be a multiple of 16 in [16, %d]", FIA, (long long)D,
                        FIA_MAX_D);
    if (q4[0] > FIA_MAX_BATCH)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: batch %lld exceeds %d", FIA,
                        (long long)q4[0], FIA_MAX_BATCH);
    if (layout == LAYOUT_BNSD_BSND && q4[1] == 1)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: inputLayout BNSD_BSND needs a query sequence longer than 1", FIA);
    if (sparseMode != 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: sparseMode %lld is not supported by acl_host (only 0)", FIA,
                        (long long)sparseMode);
    if (innerPrecise < 0 || innerPrecise > 3 || (q4[1] == 1 && innerPrecise > 1))
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: innerPrecise %lld is invalid (0..3; 0 or 1 when the query sequence "
                        "is 1)", FIA, (long long)innerPrecise);

    /* out: query's shape (BSND for BNSD_BSND), query's dtype */
    fia_layout out_layout = layout == LAYOUT_BNSD_BSND ? LAYOUT_BSND : layout;
    AH_TRY(check_qkv("attentionOut", attentionOut, out_layout, dtype, numHeads, o4, false));
    if (memcmp(o4, q4, sizeof q4) != 0) {
        char a[96];
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: attentionOut %s must be (B, S, N, D) = (%lld, %lld, %lld, %lld) in "
                        "its layout", FIA, ah_shape_str(a, sizeof a, attentionOut->dims,
                                                        attentionOut->ndim),
                        (long long)q4[0], (long long)q4[1], (long long)q4[2], (long long)q4[3]);
    }
    int64_t s_kv = k4[1];
    if (pseShiftOptional)
        AH_TRY(check_pse(pseShiftOptional, dtype, q4, s_kv));
    if (attenMaskOptional)
        AH_TRY(check_mask(attenMaskOptional, q4, s_kv));
    if (softmaxLseFlag) {
        if (!softmaxLse)
            return ah_error(ACLNN_ERR_PARAM_NULLPTR,
                            "%s: softmaxLse is NULL while softmaxLseFlag is true", FIA);
        AH_TRY(ah_check_tensor(FIA, "softmaxLse", softmaxLse, AH_DTYPE_BIT(ACL_FLOAT), 4, 4));
        int64_t want[4] = {q4[0], q4[2], q4[1], 1};
        AH_TRY(ah_check_shape(FIA, "softmaxLse", softmaxLse, want, 4, "(B, N, Sq, 1)"));
        if (!ah_tensor_is_contiguous(softmaxLse))
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: softmaxLse must be contiguous", FIA);
    }

    fia_params bp = {.slot_pse = -1, .slot_mask = -1, .slot_lse = -1, .layout = (int8_t)layout,
                     .dtype = dtype, .n_head = (int32_t)numHeads, .n_kv_head = (int32_t)n_kv,
                     .batch = q4[0], .s_q = q4[1], .s_kv = s_kv, .head_dim = D,
                     .scale = (float)scaleValue, .pre_tokens = preTokens,
                     .next_tokens = nextTokens};
    bp.band = attenMaskOptional != NULL && q4[1] > 1;
    aclOpExecutor *ex = ah_executor_new(FIA, fia_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    bp.slot_q = (int8_t)ah_executor_add_tensor(ex, "query", query, AH_IN);
    bp.slot_k = (int8_t)ah_executor_add_tensor(ex, "key", k, AH_IN);
    bp.slot_v = (int8_t)ah_executor_add_tensor(ex, "value", v, AH_IN);
    if (pseShiftOptional)
        bp.slot_pse = (int8_t)ah_executor_add_tensor(ex, "pseShiftOptional", pseShiftOptional, AH_IN);
    if (attenMaskOptional)
        bp.slot_mask =
            (int8_t)ah_executor_add_tensor(ex, "attenMaskOptional", attenMaskOptional, AH_IN);
    bp.slot_out = (int8_t)ah_executor_add_tensor(ex, "attentionOut", attentionOut, AH_OUT);
    if (softmaxLseFlag)
        bp.slot_lse = (int8_t)ah_executor_add_tensor(ex, "softmaxLse", softmaxLse, AH_OUT);
    *AH_EXEC_PARAMS(ex, fia_params) = bp;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnFusedInferAttentionScoreV2(void *workspace, uint64_t workspaceSize,
                                                   aclOpExecutor *executor,
                                                   const aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, FIA);
}
