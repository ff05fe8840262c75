/* rows.c - row views and fixed-order reductions for the row-wise aclnn ops (see ah_rows.h). */
#pragma GCC optimize("fp-contract=off")

#include <string.h>

#include "ah_convert.h"
#include "ah_rows.h"

#if defined(__x86_64__) || defined(__i386__)
#define AH_X86 1
#include <immintrin.h>
#endif

void ah_rows_init(ah_rows *r, const aclTensor *t, unsigned inner_mask) {
    memset(r, 0, sizeof *r);
    int64_t es = (int64_t)ah_dtype_size(t->dtype);
    r->base = (char *)t->data + t->offset * es;
    r->dtype = t->dtype;
    r->n_rows = 1;
    r->len = 1;
    for (int i = 0; i < t->ndim; i++) {
        int64_t d = t->dims[i], s = t->strides[i] * es;
        if (inner_mask & (1u << i)) {
            r->len *= d;
            if (d == 1)
                continue;
            /* merge with the previous inner dim when it steps exactly over this one */
            if (r->n_inner > 0 && r->inner_strides[r->n_inner - 1] == s * d) {
                r->inner_dims[r->n_inner - 1] *= d;
                r->inner_strides[r->n_inner - 1] = s;
            } else {
                r->inner_dims[r->n_inner] = d;
                r->inner_strides[r->n_inner++] = s;
            }
        } else {
            r->n_rows *= d;
            r->outer_dims[r->n_outer] = d;
            r->outer_strides[r->n_outer++] = s;
        }
    }
    if (r->n_inner == 0) { /* a row of one element (or none) */
        r->inner_dims[0] = r->len;
        r->inner_strides[0] = es;
        r->n_inner = 1;
    }
}

char *ah_rows_ptr(const ah_rows *r, int64_t row) {
    char *p = r->base;
    for (int i = r->n_outer - 1; i >= 0; i--) {
        int64_t d = r->outer_dims[i];
        p += (row % d) * r->outer_strides[i];
        row /= d;
    }
    return p;
}

/* Calls fn on each innermost run of the row: (pointer, count, byte stride, element offset). */
typedef void (*run_fn)(void *ctx, char *p, int64_t n, int64_t stride, int64_t at);

static void for_each_run(const ah_rows *r, int64_t row, run_fn fn, void *ctx) {
    char *p = ah_rows_ptr(r, row);
    int last = r->n_inner - 1;
    int64_t n = r->inner_dims[last], stride = r->inner_strides[last];
    if (last == 0) {
        fn(ctx, p, n, stride, 0);
        return;
    }
    int64_t idx[AH_OP_MAX_RANK] = {0}, runs = r->len / (n > 0 ? n : 1);
    for (int64_t k = 0; k < runs; k++) {
        char *q = p;
        for (int i = 0; i < last; i++)
            q += idx[i] * r->inner_strides[i];
        fn(ctx, q, n, stride, k * n);
        for (int i = last - 1; i >= 0; i--) {
            if (++idx[i] < r->inner_dims[i])
                break;
            idx[i] = 0;
        }
    }
}

typedef struct run_io {
    aclDataType dtype;
    void *buf;
} run_io;

static void load_run(void *ctx, char *p, int64_t n, int64_t stride, int64_t at) {
    run_io *io = ctx;
    ah_convert_run(n, (char *)((float *)io->buf + at), ACL_FLOAT, 4, p, io->dtype, stride);
}

static void store_run(void *ctx, char *p, int64_t n, int64_t stride, int64_t at) {
    run_io *io = ctx;
    ah_convert_run(n, p, io->dtype, stride, (const char *)((float *)io->buf + at), ACL_FLOAT, 4);
}

static void load_run_f64(void *ctx, char *p, int64_t n, int64_t stride, int64_t at) {
    run_io *io = ctx;
    ah_load_f64(io->dtype, p, stride, n, (double *)io->buf + at);
}

static void store_run_f64(void *ctx, char *p, int64_t n, int64_t stride, int64_t at) {
    run_io *io = ctx;
    ah_store_f64(io->dtype, p, stride, n, (const double *)io->buf + at);
}

void ah_rows_load(const ah_rows *r, int64_t row, float *dst) {
    run_io io = {r->dtype, dst};
    for_each_run(r, row, load_run, &io);
}

void ah_rows_store(const ah_rows *r, int64_t row, const float *src) {
    run_io io = {r->dtype, (void *)(uintptr_t)src};
    for_each_run(r, row, store_run, &io);
}

void ah_rows_load_f64(const ah_rows *r, int64_t row, double *dst) {
    run_io io = {r->dtype, dst};
    for_each_run(r, row, load_run_f64, &io);
}

void ah_rows_store_f64(const ah_rows *r, int64_t row, const double *src) {
    run_io io = {r->dtype, (void *)(uintptr_t)src};
    for_each_run(r, row, store_run_f64, &io);
}

/* ---- 16-lane sums -------------------------------------------------------------------------- */
#define LANES 16

static float fold_lanes(float *acc) {
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            acc[l] = acc[l] + acc[l + w];
    return acc[0];
}

static void lanes_scalar(const float *x, int64_t n, int64_t i, bool square, float *acc) {
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            float v = x[i + l];
            acc[l] = acc[l] + (square ? v * v : v);
        }
    for (int l = 0; i < n; i++, l++) { /* the tail, into the first lanes */
        float v = x[i];
        acc[l] = acc[l] + (square ? v * v : v);
    }
}

#ifdef AH_X86
__attribute__((target("avx2"))) static void lanes_avx2(const float *x, int64_t n, bool square,
                                                       float *acc) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        if (square) {
            a = _mm256_mul_ps(a, a);
            b = _mm256_mul_ps(b, b);
        }
        lo = _mm256_add_ps(lo, a);
        hi = _mm256_add_ps(hi, b);
    }
    _mm256_storeu_ps(acc, lo);
    _mm256_storeu_ps(acc + 8, hi);
    lanes_scalar(x, n, i, square, acc);
}

__attribute__((target("avx512f"))) static void lanes_avx512(const float *x, int64_t n,
                                                            bool square, float *acc) {
    __m512 s = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        __m512 a = _mm512_loadu_ps(x + i);
        if (square)
            a = _mm512_mul_ps(a, a);
        s = _mm512_add_ps(s, a);
    }
    _mm512_storeu_ps(acc, s);
    lanes_scalar(x, n, i, square, acc);
}
#endif

static float lane_sum(const float *x, int64_t n, bool square) {
    float acc[LANES] = {0};
#ifdef AH_X86
    switch (ah_isa()) {
    case AH_ISA_AVX512: lanes_avx512(x, n, square, acc); return fold_lanes(acc);
    case AH_ISA_AVX2: lanes_avx2(x, n, square, acc); return fold_lanes(acc);
    default: break;
    }
#endif
    lanes_scalar(x, n, 0, square, acc);
    return fold_lanes(acc);
}

float ah_sum_f32(const float *x, int64_t n) { return lane_sum(x, n, false); }
float ah_sum_sq_f32(const float *x, int64_t n) { return lane_sum(x, n, true); }

double ah_sum_f64(const double *x, int64_t n) {
    double acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += x[i + l];
    for (int l = 0; i < n; i++, l++)
        acc[l] += x[i];
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            acc[l] += acc[l + w];
    return acc[0];
}
