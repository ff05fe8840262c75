/* convert.c - host-side type conversion: dequantizers (ggml block formats, K-quants included),
 * ggml's reference quantizers for Q8_0 / Q4_0 / Q4_1 (same rounding, so the bytes match
 * gguf.quants), F16 / BF16 encoders, and the direct mappings Q4_K -> Q4_1 (sub-blocks) and
 * Q5_0 -> Q8_0 (exact).
 * Used by the loader to convert weights at load and by `cann-llm quantize`.
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define CLM_X86 1
#include <immintrin.h>
#endif

#include "clm_impl.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "convert.c moves Q5_0 quants as little-endian words"
#endif

/* Whether the host's AVX-512 forms (these conversions, the Q4_1 device-layout pack) run: the CPU
 * has AVX-512 F/BW/VL/DQ and F16C, and CANN_LLM_HOST_ISA (scalar or avx2) does not cap below. */
bool clm_host_avx512(void) {
#ifdef CLM_X86
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("f16c");
        const char *cap = getenv("CANN_LLM_HOST_ISA");
        if (cap && (strcmp(cap, "scalar") == 0 || strcmp(cap, "avx2") == 0)) v = 0;
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
#else
    return false;
#endif
}

#define QK 32
#define QK_K 256
#define CHUNK 4096   /* elements dequantized at a time on the generic path (multiple of QK_K) */

/* ---- scalar helpers --------------------------------------------------------------------------- */
static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = (float)man * 0x1p-24f;   /* subnormal (or zero): exact */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest even, as numpy's astype(float16) and ggml's converters. */
static uint16_t f32_to_f16(float f) {
    uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000;
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((x >> 13) & 0x3ff));  /* NaN */
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);                      /* inf */
    if (x >= 0x38800000u) {                                                         /* normal */
        uint32_t r = x - 0x38000000u;
        r += 0xfff + ((r >> 13) & 1);
        return (uint16_t)(sign | (r >> 13));
    }
    if (x < 0x33000000u) return (uint16_t)sign;                         /* below half the least */
    uint32_t e = x >> 23, m = (x & 0x7fffff) | 0x800000, s = 126 - e;   /* s in [14, 24] */
    uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

/* As ggml_compute_fp32_to_bf16: quiet NaNs, otherwise round to nearest even. */
static uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* ---- dequantizers: n is a multiple of the block size ---------------------------------------- */
static void deq_q4_0(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK; i++, b += 18, y += QK) {
        float d = f16_to_f32(rd16(b));
        for (int j = 0; j < 16; j++) {
            y[j] = ((b[2 + j] & 0xf) - 8) * d;
            y[j + 16] = ((b[2 + j] >> 4) - 8) * d;
        }
    }
}

static void deq_q4_1(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK; i++, b += 20, y += QK) {
        float d = f16_to_f32(rd16(b)), m = f16_to_f32(rd16(b + 2));
        for (int j = 0; j < 16; j++) {
            y[j] = (b[4 + j] & 0xf) * d + m;
            y[j + 16] = (b[4 + j] >> 4) * d + m;
        }
    }
}

static void deq_q5(const uint8_t *b, float *y, int64_t n, int has_min) {
    const size_t bs = has_min ? 24 : 22;
    for (int64_t i = 0; i < n / QK; i++, b += bs, y += QK) {
        float d = f16_to_f32(rd16(b)), m = has_min ? f16_to_f32(rd16(b + 2)) : 0.0f;
        const uint8_t *qhp = b + (has_min ? 4 : 2), *qs = qhp + 4;
        uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 |
                      (uint32_t)qhp[3] << 24;
        for (int j = 0; j < 16; j++) {
            int x0 = (qs[j] & 0xf) | (int)(((qh >> j) << 4) & 0x10);
            int x1 = (qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
            if (has_min) {
                y[j] = x0 * d + m;
                y[j + 16] = x1 * d + m;
            } else {
                y[j] = (x0 - 16) * d;
                y[j + 16] = (x1 - 16) * d;
            }
        }
    }
}

static void deq_q8_0(const uint8_t *b, float *y, int64_t n, size_t bs) {
    for (int64_t i = 0; i < n / QK; i++, b += bs, y += QK) {
        float d = f16_to_f32(rd16(b));
        const int8_t *qs = (const int8_t *)(b + bs - QK);
        for (int j = 0; j < QK; j++) y[j] = qs[j] * d;
    }
}

/* 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void deq_q4_k(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, b += 144) {
        float d = f16_to_f32(rd16(b)), dmin = f16_to_f32(rd16(b + 2));
        const uint8_t *sc = b + 4, *q = b + 16;
        for (int j = 0; j < QK_K / 64; j++, q += 32) {
            uint8_t s, m;
            scale_min_k4(2 * j, sc, &s, &m);
            float d1 = d * s, m1 = dmin * m;
            scale_min_k4(2 * j + 1, sc, &s, &m);
            float d2 = d * s, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

static void deq_q5_k(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, b += 176) {
        float d = f16_to_f32(rd16(b)), dmin = f16_to_f32(rd16(b + 2));
        const uint8_t *sc = b + 4, *qh = b + 16, *ql = b + 48;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K / 64; j++, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t s, m;
            scale_min_k4(2 * j, sc, &s, &m);
            float d1 = d * s, m1 = dmin * m;
            scale_min_k4(2 * j + 1, sc, &s, &m);
            float d2 = d * s, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

static void deq_q6_k(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, b += 210) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = f16_to_f32(rd16(b + 208));
        for (int h = 0; h < QK_K / 128; h++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = (int)((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
                int q2 = (int)((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

static void deq_q2_k(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, b += 84) {
        const uint8_t *sc = b, *q = b + 16;
        float d = f16_to_f32(rd16(b + 80)), dmin = f16_to_f32(rd16(b + 82));
        int is = 0;
        for (int h = 0; h < QK_K / 128; h++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    uint8_t s = sc[is++];
                    float dl = d * (s & 0xf), ml = dmin * (s >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
                }
            }
        }
    }
}

static void deq_q3_k(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, b += 110) {
        const uint8_t *hm = b, *q = b + 32, *s = b + 96;
        float d_all = f16_to_f32(rd16(b + 108));
        int8_t scales[16];
        for (int j = 0; j < 16; j++) {   /* 6-bit scales: low 4 bits, then 2 high bits */
            int lo = j < 8 ? (s[j] & 0xf) : (s[j - 8] >> 4);
            int hi = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
            scales[j] = (int8_t)((lo | (hi << 4)) - 32);
        }
        int is = 0;
        uint8_t m = 1;
        for (int h = 0; h < QK_K / 128; h++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int half = 0; half < 2; half++) {
                    float dl = d_all * scales[is++];
                    for (int l = 0; l < 16; l++) {
                        int k = l + 16 * half;
                        *y++ = dl * ((int)((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4));
                    }
                }
            }
        }
    }
}

static void deq_q8_k(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, b += 292) {
        float d;
        memcpy(&d, b, 4);
        const int8_t *qs = (const int8_t *)(b + 4);
        for (int j = 0; j < QK_K; j++) *y++ = d * qs[j];
    }
}

static bool can_dequantize(int32_t t) {
    switch (t) {
    case CLM_TYPE_F32: case CLM_TYPE_F16: case CLM_TYPE_BF16: case CLM_TYPE_Q4_0:
    case CLM_TYPE_Q4_1: case CLM_TYPE_Q5_0: case CLM_TYPE_Q5_1: case CLM_TYPE_Q8_0:
    case CLM_TYPE_Q8_1: case CLM_TYPE_Q2_K: case CLM_TYPE_Q3_K: case CLM_TYPE_Q4_K:
    case CLM_TYPE_Q5_K: case CLM_TYPE_Q6_K: case CLM_TYPE_Q8_K:
        return true;
    default:
        return false;
    }
}

static bool can_quantize(int32_t t) {
    return t == CLM_TYPE_F32 || t == CLM_TYPE_F16 || t == CLM_TYPE_BF16 || t == CLM_TYPE_Q8_0 ||
           t == CLM_TYPE_Q4_0 || t == CLM_TYPE_Q4_1;
}

/* ---- AVX-512 forms of the load-time conversions --------------------------------------------------
 * The generic path's two hot loops (Q6_K dequantizer, Q8_0 quantizer) and the direct Q5_0 -> Q8_0
 * and Q4_K -> Q4_1. The same IEEE operations on the same values in the same order per element
 * (fp-contract is off: no fused multiply-adds), so the same bytes as the scalar loops.
 * Chosen once from the CPU; CANN_LLM_HOST_ISA=scalar or avx2 keeps the scalar loops (as it caps
 * acl_host's kernels), so both forms are tested on one machine. */
#ifdef CLM_X86
#define CLM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

/* round_q8 on 16 lanes: truncate, then step away from zero on a remainder of at least 0.5; lanes
 * outside (-128, 128) (inf, NaN, huge) give 127, -127 or 0 (NaN) as the scalar form does. */
CLM_AVX512 static inline __m128i round_q8_x16(__m512 v) {
    __m512i i = _mm512_cvttps_epi32(v);
    __m512 f = _mm512_sub_ps(v, _mm512_cvtepi32_ps(i));
    const __m512i one = _mm512_set1_epi32(1);
    i = _mm512_mask_add_epi32(i, _mm512_cmp_ps_mask(f, _mm512_set1_ps(0.5f), _CMP_GE_OQ), i, one);
    i = _mm512_mask_sub_epi32(i, _mm512_cmp_ps_mask(f, _mm512_set1_ps(-0.5f), _CMP_LE_OQ), i, one);
    __mmask16 in = _mm512_cmp_ps_mask(v, _mm512_set1_ps(-128.0f), _CMP_GT_OQ) &
                   _mm512_cmp_ps_mask(v, _mm512_set1_ps(128.0f), _CMP_LT_OQ);
    __mmask16 pos = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ);
    __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
    i = _mm512_mask_mov_epi32(i, (__mmask16)~in, _mm512_setzero_si512());
    i = _mm512_mask_mov_epi32(i, (__mmask16)(~in & pos), _mm512_set1_epi32(127));
    i = _mm512_mask_mov_epi32(i, (__mmask16)(~in & neg), _mm512_set1_epi32(-127));
    return _mm512_cvtepi32_epi8(i);
}

/* quant_q8_0 of one block of 32 values held in two vectors. */
CLM_AVX512 static inline void quant_q8_0_x32(__m512 x0, __m512 x1, uint8_t *b) {
    /* max(a, acc) gives acc where a is NaN: NaN lanes are skipped, as the scalar > skips them */
    __m512 acc = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps());
    acc = _mm512_max_ps(_mm512_abs_ps(x1), acc);
    const float amax = _mm512_reduce_max_ps(acc);
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(b, f32_to_f16(d));
    const __m512 vid = _mm512_set1_ps(id);
    _mm_storeu_si128((__m128i *)(b + 2), round_q8_x16(_mm512_mul_ps(x0, vid)));
    _mm_storeu_si128((__m128i *)(b + 18), round_q8_x16(_mm512_mul_ps(x1, vid)));
}

/* The largest lane of each of a[0..15], in lanes 0..15: a tree of pairwise maxima over shuffled
 * halves (exact in any order: the lanes hold no NaN). */
CLM_AVX512 static inline __m512 max_lanes_x16(__m512 a[16]) {
    for (int p = 0; p < 8; p++)   /* lanes 0-7: a[2p]'s 8 partial maxima, 8-15: a[2p + 1]'s */
        a[p] = _mm512_max_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0xee));
    for (int p = 0; p < 4; p++)   /* 128-bit chunk k: block 4p + k's 4 partial maxima */
        a[p] = _mm512_max_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0xdd));
    for (int p = 0; p < 2; p++)   /* chunk k: blocks 8p + k and 8p + 4 + k, two partials each */
        a[p] = _mm512_max_ps(_mm512_shuffle_ps(a[2 * p], a[2 * p + 1], 0x44),
                             _mm512_shuffle_ps(a[2 * p], a[2 * p + 1], 0xee));
    __m512 m = _mm512_max_ps(_mm512_shuffle_ps(a[0], a[1], 0x88), _mm512_shuffle_ps(a[0], a[1], 0xdd));
    /* lane 4k + j holds block 4j + k: transpose the 4 x 4 back */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, m);
}

/* quant_q8_0 on 16 blocks at a time: the block maxima, scales and fp16 scales as vectors (the
 * same division; the hardware's fp16 conversion rounds to nearest even as f32_to_f16 does), so
 * no block waits on a scalar reduction and division chain. */
CLM_AVX512 static void quant_q8_0_avx512(const float *x, uint8_t *b, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n / QK; i += 16, x += 16 * QK, b += 16 * 34) {
        __m512 a[16];
        for (int j = 0; j < 16; j++) {   /* as quant_q8_0_x32: NaN lanes skipped */
            __m512 acc = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + QK * j)), _mm512_setzero_ps());
            a[j] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + QK * j + 16)), acc);
        }
        const __m512 amax = max_lanes_x16(a);
        const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
        const __m512 id = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ),
                                              _mm512_set1_ps(1.0f), d);
        uint16_t dh[16];
        float ids[16];
        _mm256_storeu_si256((__m256i *)dh,
                            _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        _mm512_storeu_ps(ids, id);
        for (int j = 0; j < 16; j++) {
            uint8_t *o = b + 34 * j;
            const __m512 vid = _mm512_set1_ps(ids[j]);
            const __m512 x0 = _mm512_loadu_ps(x + QK * j), x1 = _mm512_loadu_ps(x + QK * j + 16);
            wr16(o, dh[j]);
            _mm_storeu_si128((__m128i *)(o + 2), round_q8_x16(_mm512_mul_ps(x0, vid)));
            _mm_storeu_si128((__m128i *)(o + 18), round_q8_x16(_mm512_mul_ps(x1, vid)));
        }
    }
    for (; i < n / QK; i++, x += QK, b += 34)
        quant_q8_0_x32(_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16), b);
}

/* 16 six-bit quants minus 32, as floats: ql's nibbles at `shift` with qh's two bits at `qshift`. */
CLM_AVX512 static inline __m512 q6_x16(const uint8_t *ql, int shift, const uint8_t *qh, int qshift) {
    __m512i l = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)ql));
    __m512i h = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qh));
    l = _mm512_and_si512(_mm512_srli_epi32(l, (unsigned)shift), _mm512_set1_epi32(0xf));
    h = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, (unsigned)qshift), _mm512_set1_epi32(3)), 4);
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(l, h), _mm512_set1_epi32(32)));
}

/* deq_q6_k's (d * sc) * q per element, a scale per 16 lanes (is = l / 16). */
CLM_AVX512 static void deq_q6_k_avx512(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, b += 210) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = f16_to_f32(rd16(b + 208));
        for (int h = 0; h < QK_K / 128; h++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0, is = 0; l < 32; l += 16, is++) {
                _mm512_storeu_ps(y + l, _mm512_mul_ps(_mm512_set1_ps(d * sc[is]),
                                                      q6_x16(ql + l, 0, qh + l, 0)));
                _mm512_storeu_ps(y + l + 32, _mm512_mul_ps(_mm512_set1_ps(d * sc[is + 2]),
                                                           q6_x16(ql + l + 32, 0, qh + l, 2)));
                _mm512_storeu_ps(y + l + 64, _mm512_mul_ps(_mm512_set1_ps(d * sc[is + 4]),
                                                           q6_x16(ql + l, 4, qh + l, 4)));
                _mm512_storeu_ps(y + l + 96, _mm512_mul_ps(_mm512_set1_ps(d * sc[is + 6]),
                                                           q6_x16(ql + l + 32, 4, qh + l, 6)));
            }
        }
    }
}

/* q5_0_to_q8_0 a block at a time: the 32 quants as bytes (low nibbles of qs, then high), and
 * 0xf0 over each one whose fifth bit (qh, one bit per quant) is clear: q - 16 as int8. */
CLM_AVX512 static void q5_0_to_q8_0_avx512(const uint8_t *b, uint8_t *o, int64_t n) {
    const __m256i nib = _mm256_set1_epi8(0x0f), top = _mm256_set1_epi8((char)0xf0);
    for (int64_t i = 0; i < n / QK; i++, b += 22, o += 34) {
        uint32_t qh;
        memcpy(&qh, b + 2, 4);
        __m128i qs = _mm_loadu_si128((const __m128i *)(b + 6));
        __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), nib);
        q = _mm256_mask_blend_epi8((__mmask32)qh, _mm256_or_si256(q, top), q);
        memcpy(o, b, 2);
        _mm256_storeu_si256((__m256i *)(o + 2), q);
    }
}

/* The eight 6-bit scales (bytes 0-7) and mins (bytes 8-15) of a Q4_K super-block's 12 scale
 * bytes: scale_min_k4 for all eight sub-blocks, four at a time in 32-bit words. */
static inline void scales_mins_k4(const uint8_t *q, uint32_t w[4]) {
    uint32_t a, b, c;
    memcpy(&a, q, 4);
    memcpy(&b, q + 4, 4);
    memcpy(&c, q + 8, 4);
    const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, two = 0x03030303u;
    w[0] = a & low6;                                      /* scales 0-3: q[j] & 63 */
    w[1] = (c & low4) | (((a >> 6) & two) << 4);         /* scales 4-7: q[j+4] & 15, q[j-4] >> 6 */
    w[2] = b & low6;                                      /* mins 0-3: q[j+4] & 63 */
    w[3] = ((c >> 4) & low4) | (((b >> 6) & two) << 4);  /* mins 4-7: q[j+4] >> 4, q[j] >> 6 */
}

/* q4_k_to_q4_1 a super-block at a time: the 16 block constants d * sc and -(dmin * m) in one
 * vector (products of an fp16 value and a 6-bit integer: exact in f32), converted to fp16 by
 * the hardware (round to nearest even, NaNs quiet with their payload: f32_to_f16's bits); the
 * nibbles regrouped 16 bytes at a time. */
CLM_AVX512 static void q4_k_to_q4_1_avx512(const uint8_t *b, uint8_t *o, int64_t n) {
    const __m128i nib = _mm_set1_epi8(0x0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (int64_t i = 0; i < n / QK_K; i++, b += 144) {
        const float d = f16_to_f32(rd16(b)), dmin = f16_to_f32(rd16(b + 2));
        uint32_t w[4];
        scales_mins_k4(b + 4, w);
        __m512 sm = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)w)));
        const __m512 dd = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(d), _mm512_set1_ps(dmin));
        __m512 f = _mm512_mul_ps(dd, sm);
        f = _mm512_castsi512_ps(_mm512_mask_xor_epi32(_mm512_castps_si512(f), 0xff00,
                                                      _mm512_castps_si512(f), sign));
        __m256i h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m128i hd = _mm256_castsi256_si128(h), hm = _mm256_extracti128_si256(h, 1);
        uint32_t dm[8];   /* d | m << 16 of each output block */
        _mm_storeu_si128((__m128i *)dm, _mm_unpacklo_epi16(hd, hm));
        _mm_storeu_si128((__m128i *)(dm + 4), _mm_unpackhi_epi16(hd, hm));
        const uint8_t *q = b + 16;
        for (int j = 0; j < 4; j++, q += 32, o += 40) {   /* sub-blocks 2j (low nibbles), 2j + 1 */
            const __m128i a = _mm_loadu_si128((const __m128i *)q);
            const __m128i c = _mm_loadu_si128((const __m128i *)(q + 16));
            __m128i lo = _mm_or_si128(_mm_and_si128(a, nib), _mm_slli_epi16(_mm_and_si128(c, nib), 4));
            __m128i hi = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(a, 4), nib),
                                      _mm_andnot_si128(nib, c));
            memcpy(o, dm + 2 * j, 4);
            _mm_storeu_si128((__m128i *)(o + 4), lo);
            memcpy(o + 20, dm + 2 * j + 1, 4);
            _mm_storeu_si128((__m128i *)(o + 24), hi);
        }
    }
}

#endif

static void dequantize(int32_t t, const uint8_t *src, float *y, int64_t n) {
    switch (t) {
    case CLM_TYPE_F32: memcpy(y, src, (size_t)n * 4); break;
    case CLM_TYPE_F16: for (int64_t i = 0; i < n; i++) y[i] = f16_to_f32(rd16(src + 2 * i)); break;
    case CLM_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) y[i] = bits_f32((uint32_t)rd16(src + 2 * i) << 16);
        break;
    case CLM_TYPE_Q4_0: deq_q4_0(src, y, n); break;
    case CLM_TYPE_Q4_1: deq_q4_1(src, y, n); break;
    case CLM_TYPE_Q5_0: deq_q5(src, y, n, 0); break;
    case CLM_TYPE_Q5_1: deq_q5(src, y, n, 1); break;
    case CLM_TYPE_Q8_0: deq_q8_0(src, y, n, 34); break;
    case CLM_TYPE_Q8_1: deq_q8_0(src, y, n, 40); break;
    case CLM_TYPE_Q2_K: deq_q2_k(src, y, n); break;
    case CLM_TYPE_Q3_K: deq_q3_k(src, y, n); break;
    case CLM_TYPE_Q4_K: deq_q4_k(src, y, n); break;
    case CLM_TYPE_Q5_K: deq_q5_k(src, y, n); break;
    case CLM_TYPE_Q6_K:
#ifdef CLM_X86
        if (clm_host_avx512()) {
            deq_q6_k_avx512(src, y, n);
            break;
        }
#endif
        deq_q6_k(src, y, n);
        break;
    case CLM_TYPE_Q8_K: deq_q8_k(src, y, n); break;
    default: break;
    }
}

/* ---- quantizers (ggml's *_ref: identical rounding) ------------------------------------------ */
/* roundf (half away from zero) for |v| <= 127.5 without a libm call: v - (int)v is exact. */
static inline int8_t round_q8(float v) {
    if (!(v > -128.0f && v < 128.0f)) return v > 0 ? 127 : (v < 0 ? -127 : 0);  /* inf / NaN */
    int i = (int)v;
    float f = v - (float)i;
    i += (f >= 0.5f) - (f <= -0.5f);
    return (int8_t)i;
}

static void quant_q8_0(const float *x, uint8_t *b, int64_t n) {
    for (int64_t i = 0; i < n / QK; i++, x += QK, b += 34) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        wr16(b, f32_to_f16(d));
        for (int j = 0; j < QK; j++) b[2 + j] = (uint8_t)round_q8(x[j] * id);
    }
}

static void quant_q4_0(const float *x, uint8_t *b, int64_t n) {
    for (int64_t i = 0; i < n / QK; i++, x += QK, b += 18) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        wr16(b, f32_to_f16(d));
        for (int j = 0; j < 16; j++) {
            float x0 = x[j] * id + 8.5f, x1 = x[16 + j] * id + 8.5f;
            int q0 = (int)x0, q1 = (int)x1;
            q0 = q0 < 0 ? 0 : (q0 > 15 ? 15 : q0);
            q1 = q1 < 0 ? 0 : (q1 > 15 ? 15 : q1);
            b[2 + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quant_q4_1(const float *x, uint8_t *b, int64_t n) {
    for (int64_t i = 0; i < n / QK; i++, x += QK, b += 20) {
        float min = x[0], max = x[0];
        for (int j = 1; j < QK; j++) {
            min = x[j] < min ? x[j] : min;
            max = x[j] > max ? x[j] : max;
        }
        const float d = (max - min) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        wr16(b, f32_to_f16(d));
        wr16(b + 2, f32_to_f16(min));
        for (int j = 0; j < 16; j++) {
            float x0 = (x[j] - min) * id + 0.5f, x1 = (x[16 + j] - min) * id + 0.5f;
            int q0 = (int)x0, q1 = (int)x1;
            q0 = q0 < 0 ? 0 : (q0 > 15 ? 15 : q0);
            q1 = q1 < 0 ? 0 : (q1 > 15 ? 15 : q1);
            b[4 + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quantize(int32_t t, const float *x, uint8_t *dst, int64_t n) {
    switch (t) {
    case CLM_TYPE_F32: memcpy(dst, x, (size_t)n * 4); break;
    case CLM_TYPE_F16: for (int64_t i = 0; i < n; i++) wr16(dst + 2 * i, f32_to_f16(x[i])); break;
    case CLM_TYPE_BF16: for (int64_t i = 0; i < n; i++) wr16(dst + 2 * i, f32_to_bf16(x[i])); break;
    case CLM_TYPE_Q8_0:
#ifdef CLM_X86
        if (clm_host_avx512()) {
            quant_q8_0_avx512(x, dst, n);
            break;
        }
#endif
        quant_q8_0(x, dst, n);
        break;
    case CLM_TYPE_Q4_0: quant_q4_0(x, dst, n); break;
    case CLM_TYPE_Q4_1: quant_q4_1(x, dst, n); break;
    default: break;
    }
}

/* Q4_K -> Q4_1 without requantizing: the 8 sub-blocks of 32 of a super-block each become one
 * Q4_1 block with d = fp16(d_super * sc), m = fp16(-dmin_super * mc); the nibbles are kept. */
static void q4_k_to_q4_1(const uint8_t *b, uint8_t *o, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, b += 144) {
        float d = f16_to_f32(rd16(b)), dmin = f16_to_f32(rd16(b + 2));
        const uint8_t *sc = b + 4, *q = b + 16;
        for (int sub = 0; sub < 8; sub++, o += 20) {
            uint8_t s, m;
            scale_min_k4(sub, sc, &s, &m);
            wr16(o, f32_to_f16(d * s));
            wr16(o + 2, f32_to_f16(-(dmin * m)));
            const uint8_t *qq = q + 32 * (sub / 2);
            int shift = (sub & 1) * 4;
            for (int j = 0; j < 16; j++)
                o[4 + j] = (uint8_t)(((qq[j] >> shift) & 0xf) | (((qq[j + 16] >> shift) & 0xf) << 4));
        }
    }
}

/* The low 8 bits of b spread over the 8 bytes of a word (byte k <- bit k): 0xff where the bit is
 * set, 0 where it is clear. */
static inline uint64_t bits_to_bytes(uint32_t b) {
    uint64_t x = ((uint64_t)(b & 0xffu) * 0x0101010101010101ull) & 0x8040201008040201ull;
    x = ((x + 0x7f7f7f7f7f7f7f7full) | x) & 0x8080808080808080ull;   /* each byte's flag in its top bit */
    return (x >> 7) * 0xffull;
}

/* Q5_0 -> Q8_0 exactly: a Q5_0 value is (q - 16) * d with q - 16 in [-16, 15], so the Q8_0 block
 * with the same fp16 d and quants q - 16 holds the very same values (requantizing through F32
 * would round them to a new scale). Eight quants per 64-bit word: q - 16 as int8 is q's low
 * nibble when its fifth bit (from qh) is set, else the nibble with 0xf0 over it. */
static void q5_0_to_q8_0(const uint8_t *b, uint8_t *o, int64_t n) {
    const uint64_t nib = 0x0f0f0f0f0f0f0f0full, top = 0xf0f0f0f0f0f0f0f0ull;
    for (int64_t i = 0; i < n / QK; i++, b += 22, o += 34) {
        uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
        o[0] = b[0], o[1] = b[1];
        for (int h = 0; h < 2; h++) {   /* quants 8h.. (low nibbles of qs) and 16 + 8h.. (high) */
            uint64_t qs;
            memcpy(&qs, b + 6 + 8 * h, 8);
            uint64_t lo = (qs & nib) | (~bits_to_bytes(qh >> (8 * h)) & top);
            uint64_t hi = ((qs >> 4) & nib) | (~bits_to_bytes(qh >> (16 + 8 * h)) & top);
            memcpy(o + 2 + 8 * h, &lo, 8);
            memcpy(o + 18 + 8 * h, &hi, 8);
        }
    }
}

/* ---- public entry points ------------------------------------------------------------------ */
static clm_status check_count(const char *what, int32_t t, int64_t n) {
    int64_t bs = clm_type_block_size(t);
    if (bs <= 0) return clm_error(CLM_ERR_INVALID_ARG, "%s: unknown type %d", what, (int)t);
    if (n < 0 || n % bs)
        return clm_error(CLM_ERR_INVALID_ARG, "%s: %lld elements is not a whole number of %s "
                         "blocks of %lld", what, (long long)n, clm_type_name(t), (long long)bs);
    return CLM_OK;
}

bool clm_convert_supported(int32_t src_type, int32_t dst_type) {
    return src_type == dst_type ? clm_type_block_size(src_type) > 0
                                : can_dequantize(src_type) && can_quantize(dst_type);
}

clm_status clm_dequantize_f32(int32_t src_type, const void *src, float *dst, int64_t n_elements) {
    CLM_CHECK_ARG(src && dst, "dequantize: NULL pointer");
    if (!can_dequantize(src_type))
        return clm_error(CLM_ERR_UNSUPPORTED, "dequantize: no dequantizer for type %s",
                         clm_type_name(src_type) ? clm_type_name(src_type) : "(unknown)");
    clm_status st = check_count("dequantize", src_type, n_elements);
    if (st != CLM_OK) return st;
    dequantize(src_type, src, dst, n_elements);
    return CLM_OK;
}

clm_status clm_quantize_f32(int32_t dst_type, const float *src, void *dst, int64_t n_elements) {
    CLM_CHECK_ARG(src && dst, "quantize: NULL pointer");
    if (!can_quantize(dst_type))
        return clm_error(CLM_ERR_UNSUPPORTED, "quantize: cannot quantize to type %s "
                         "(f32, f16, bf16, q8_0, q4_0, q4_1 can)",
                         clm_type_name(dst_type) ? clm_type_name(dst_type) : "(unknown)");
    clm_status st = check_count("quantize", dst_type, n_elements);
    if (st != CLM_OK) return st;
    quantize(dst_type, src, dst, n_elements);
    return CLM_OK;
}

clm_status clm_convert(int32_t src_type, const void *src, int32_t dst_type, void *dst,
                       int64_t n_elements) {
    CLM_CHECK_ARG(src && dst, "convert: NULL pointer");
    const char *sn = clm_type_name(src_type), *dn = clm_type_name(dst_type);
    if (!clm_convert_supported(src_type, dst_type))
        return clm_error(CLM_ERR_UNSUPPORTED, "convert: no conversion from %s to %s",
                         sn ? sn : "(unknown)", dn ? dn : "(unknown)");
    clm_status st = check_count("convert", src_type, n_elements);
    if (st == CLM_OK) st = check_count("convert", dst_type, n_elements);
    if (st != CLM_OK) return st;
    if (src_type == dst_type) {
        memcpy(dst, src, (size_t)(n_elements / clm_type_block_size(src_type)) * clm_type_size(src_type));
        return CLM_OK;
    }
    if (src_type == CLM_TYPE_Q4_K && dst_type == CLM_TYPE_Q4_1) {
#ifdef CLM_X86
        if (clm_host_avx512()) {
            q4_k_to_q4_1_avx512(src, dst, n_elements);
            return CLM_OK;
        }
#endif
        q4_k_to_q4_1(src, dst, n_elements);
        return CLM_OK;
    }
    if (src_type == CLM_TYPE_Q5_0 && dst_type == CLM_TYPE_Q8_0) {
#ifdef CLM_X86
        if (clm_host_avx512()) {
            q5_0_to_q8_0_avx512(src, dst, n_elements);
            return CLM_OK;
        }
#endif
        q5_0_to_q8_0(src, dst, n_elements);
        return CLM_OK;
    }
    /* generic: dequantize a chunk to f32, quantize it; CHUNK is a multiple of every block size */
    float buf[CHUNK];
    const uint8_t *s = src;
    uint8_t *d = dst;
    const int64_t sbs = clm_type_block_size(src_type), dbs = clm_type_block_size(dst_type);
    const size_t ssz = clm_type_size(src_type), dsz = clm_type_size(dst_type);
    for (int64_t done = 0; done < n_elements;) {
        int64_t n = n_elements - done < CHUNK ? n_elements - done : CHUNK;
        dequantize(src_type, s, buf, n);
        quantize(dst_type, buf, d, n);
        s += (size_t)(n / sbs) * ssz;
        d += (size_t)(n / dbs) * dsz;
        done += n;
    }
    return CLM_OK;
}
