/* test_aclnn_matmul.c - acl_host's matmul and gather ops through the CANN API: Mm / BatchMatMul /
 * Matmul and WeightQuantBatchMatmulV2 against a double-precision reference (INT4 / INT8, group /
 * channel scales, offsets, transposed views, bias), batch invariance (a row of an m=64 product is
 * bit-identical to the same row computed at m=1, 2..17, and with 1 vs 2 threads: the test re-runs
 * itself with CANN_LLM_THREADS set), IndexSelect / GatherV2 / RemainderTensorScalar, error codes.
 * CT_BENCH=1 prints the time and weights/s of the products of two models' shapes (bench_all).
 */
#define _GNU_SOURCE
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "acl/acl.h"
#include "aclnn_api.h"
#include "ctest_util.h"
#include "aclnn_util.h"

extern char **environ;
static aclrtStream stream;

/* A view with element offset 0 (strides NULL = contiguous). */
static aclTensor *tensor(const int64_t *dims, int nd, aclDataType dt, const int64_t *strides, void *data) {
    return acl_view(dims, nd, dt, strides, 0, data);
}
static float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static uint64_t rng = 88172645463325252ull;
static double urand(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static int irand(int n) { return (int)((urand() + 1.0) * 0.5 * n) % n; }

static int sync_ok(void) { return aclrtSynchronizeStream(stream) == ACL_SUCCESS; }

/* ---- WeightQuantBatchMatmulV2 --------------------------------------------------------------------- */
typedef struct wq_case {
    int64_t m, k, n;
    int int4, group, offset, transposed, bias; /* group 0: per-channel */
} wq_case;

typedef struct wq_data {
    wq_case c;
    int8_t *w;        /* n x k values (row-major by output column), or k x n when !transposed */
    uint16_t *scale;  /* (ng, n) stored transposed: [n][ng] when transposed, else [ng][n] */
    uint16_t *off;
    uint16_t *bias;
    int64_t ng;
    void *d_w, *d_s, *d_o, *d_b;
} wq_data;

static void wq_make(wq_data *d, wq_case c) {
    memset(d, 0, sizeof *d);
    d->c = c;
    d->ng = c.group ? (c.k + c.group - 1) / c.group : 1;
    d->w = malloc((size_t)(c.n * c.k));
    d->scale = malloc((size_t)(d->ng * c.n) * 2);
    d->off = malloc((size_t)(d->ng * c.n) * 2);
    d->bias = malloc((size_t)c.n * 2);
    for (int64_t i = 0; i < c.n * c.k; i++)
        d->w[i] = (int8_t)(c.int4 ? irand(16) - 8 : irand(256) - 128);
    for (int64_t i = 0; i < d->ng * c.n; i++) {
        d->scale[i] = f16((float)(0.01 + 0.02 * fabs(urand())));
        d->off[i] = f16((float)(urand() * 4));
    }
    for (int64_t i = 0; i < c.n; i++)
        d->bias[i] = f16((float)urand());
    size_t wbytes = (size_t)(c.int4 ? c.n * c.k / 2 : c.n * c.k);
    uint8_t *packed = calloc(wbytes, 1);
    for (int64_t i = 0; i < c.n * c.k; i++) {
        if (c.int4)
            packed[i / 2] |= (uint8_t)((d->w[i] & 0xf) << (i & 1 ? 4 : 0));
        else
            packed[i] = (uint8_t)d->w[i];
    }
    d->d_w = dev_from(packed, wbytes);
    free(packed);
    d->d_s = dev_from(d->scale, (size_t)(d->ng * c.n) * 2);
    d->d_o = dev_from(d->off, (size_t)(d->ng * c.n) * 2);
    d->d_b = dev_from(d->bias, (size_t)c.n * 2);
}

static void wq_free(wq_data *d) {
    aclrtFree(d->d_w), aclrtFree(d->d_s), aclrtFree(d->d_o), aclrtFree(d->d_b);
    free(d->w), free(d->scale), free(d->off), free(d->bias);
}

/* weight value (k index kk, column j) and its group parameter index */
static int wq_w(const wq_data *d, int64_t kk, int64_t j) {
    return d->c.transposed ? d->w[j * d->c.k + kk] : d->w[kk * d->c.n + j];
}
static int64_t wq_p(const wq_data *d, int64_t g, int64_t j) {
    return d->c.transposed ? j * d->ng + g : g * d->c.n + j;
}

/* Runs y = x @ W for x (m, k) F16 (host), y F16 into out. Returns the aclnn status of phase 1. */
static int wq_run(const wq_data *d, const uint16_t *x, int64_t m, uint16_t *out) {
    const wq_case *c = &d->c;
    void *dx = dev_from(x, (size_t)(m * c->k) * 2), *dy = dev_alloc((size_t)(m * c->n) * 2);
    int64_t xd[2] = {m, c->k}, wd[2] = {c->k, c->n}, yd[2] = {m, c->n};
    int64_t wst[2] = {1, c->k}, sd[2] = {d->ng, c->n}, sst[2] = {1, d->ng};
    aclTensor *tx = tensor(xd, 2, ACL_FLOAT16, NULL, dx);
    aclTensor *tw = tensor(wd, 2, c->int4 ? ACL_INT4 : ACL_INT8, c->transposed ? wst : NULL, d->d_w);
    aclTensor *ts, *to = NULL, *tb = NULL;
    if (c->group)
        ts = tensor(sd, 2, ACL_FLOAT16, c->transposed ? sst : NULL, d->d_s);
    else
        ts = tensor(&c->n, 1, ACL_FLOAT16, NULL, d->d_s);
    if (c->offset)
        to = c->group ? tensor(sd, 2, ACL_FLOAT16, c->transposed ? sst : NULL, d->d_o)
                      : tensor(&c->n, 1, ACL_FLOAT16, NULL, d->d_o);
    if (c->bias)
        tb = tensor(&c->n, 1, ACL_FLOAT16, NULL, d->d_b);
    aclTensor *ty = tensor(yd, 2, ACL_FLOAT16, NULL, dy);
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    int st = aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(tx, tw, ts, to, NULL, NULL, tb, c->group, ty, &ws, &ex);
    if (st == 0) {
        CHECK(aclnnWeightQuantBatchMatmulV2(NULL, 0, ex, stream) == 0);
        CHECK(sync_ok());
        to_host(out, dy, (size_t)(m * c->n) * 2);
    }
    aclDestroyTensor(tx), aclDestroyTensor(tw), aclDestroyTensor(ts), aclDestroyTensor(to);
    aclDestroyTensor(tb), aclDestroyTensor(ty);
    aclrtFree(dx), aclrtFree(dy);
    return st;
}

static void test_wq_case(wq_case c) {
    wq_data d;
    wq_make(&d, c);
    uint16_t *x = malloc((size_t)(c.m * c.k) * 2), *y = malloc((size_t)(c.m * c.n) * 2);
    for (int64_t i = 0; i < c.m * c.k; i++)
        x[i] = f16((float)urand());
    CHECK(wq_run(&d, x, c.m, y) == 0);
    int bad = 0;
    for (int64_t i = 0; i < c.m; i++)
        for (int64_t j = 0; j < c.n; j++) {
            double ref = 0, mag = 0;
            for (int64_t kk = 0; kk < c.k; kk++) {
                int64_t g = c.group ? kk / c.group : 0;
                double w = wq_w(&d, kk, j) + (c.offset ? from_f16(d.off[wq_p(&d, g, j)]) : 0.0);
                double v = from_f16(x[i * c.k + kk]) * w * from_f16(d.scale[wq_p(&d, g, j)]);
                ref += v, mag += fabs(v);
            }
            if (c.bias)
                ref += from_f16(d.bias[j]);
            double got = from_f16(y[i * c.n + j]);
            if (fabs(got - ref) > 1e-3 * fabs(ref) + 1e-5 * mag + 1e-6) {
                if (bad++ < 3)
                    fprintf(stderr, "wq m=%lld k=%lld n=%lld int4=%d g=%d off=%d tr=%d: y[%lld][%lld] = %g, ref %g\n",
                            (long long)c.m, (long long)c.k, (long long)c.n, c.int4, c.group, c.offset, c.transposed,
                            (long long)i, (long long)j, got, ref);
            }
        }
    CHECK(bad == 0);
    free(x), free(y);
    wq_free(&d);
}

/* Row r of an m=64 product equals the m=1 and m=7 products of the same rows, bit for bit. */
static void test_wq_batch_invariance(wq_case c) {
    wq_data d;
    wq_make(&d, c);
    int64_t m = 64;
    uint16_t *x = malloc((size_t)(m * c.k) * 2), *y64 = malloc((size_t)(m * c.n) * 2);
    uint16_t *y1 = malloc((size_t)c.n * 2), *y7 = malloc((size_t)(7 * c.n) * 2);
    for (int64_t i = 0; i < m * c.k; i++)
        x[i] = f16((float)urand());
    CHECK(wq_run(&d, x, m, y64) == 0);
    int rows[3] = {0, 29, 63};
    for (int r = 0; r < 3; r++) {
        CHECK(wq_run(&d, x + rows[r] * c.k, 1, y1) == 0);
        CHECK(memcmp(y1, y64 + rows[r] * c.n, (size_t)c.n * 2) == 0);
    }
    CHECK(wq_run(&d, x + 40 * c.k, 7, y7) == 0);
    CHECK(memcmp(y7, y64 + 40 * c.n, (size_t)(7 * c.n) * 2) == 0);
    /* batched-decode sizes (rows decoded in registers, several row chunks) against the blocked m=64 */
    /* (AVX-512: 1-4 rows one tile of 4 columns; 5-8 rows one chunk, tiles of 2 columns; 9-16 two
     * chunks of 4-8 rows; 17 the blocked path) */
    const int64_t ms[] = {2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17};
    uint16_t *ym = malloc((size_t)(17 * c.n) * 2);
    for (size_t t = 0; t < sizeof ms / sizeof ms[0]; t++) {
        CHECK(wq_run(&d, x + 5 * c.k, ms[t], ym) == 0);
        CHECK(memcmp(ym, y64 + 5 * c.n, (size_t)(ms[t] * c.n) * 2) == 0);
    }
    free(ym);
    free(x), free(y64), free(y1), free(y7);
    wq_free(&d);
}

/* ---- float products ---------------------------------------------------------------------------------- */
static float load_val(aclDataType dt, const void *p, int64_t i) {
    if (dt == ACL_FLOAT16) return from_f16(((const uint16_t *)p)[i]);
    if (dt == ACL_BF16) return from_bf16(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}
static void store_val(aclDataType dt, void *p, int64_t i, float v) {
    if (dt == ACL_FLOAT16) ((uint16_t *)p)[i] = f16(v);
    else if (dt == ACL_BF16) ((uint16_t *)p)[i] = bf16(v);
    else ((float *)p)[i] = v;
}

typedef aclnnStatus (*mm_ws_fn)(const aclTensor *, const aclTensor *, aclTensor *, int8_t, uint64_t *, aclOpExecutor **);
typedef aclnnStatus (*mm_fn)(void *, uint64_t, aclOpExecutor *, aclrtStream);

/* (batch, m, k) @ (bb, k, n) with mat2 given as a transposed view of (bb, n, k); batch broadcast
 * when bb == 1. Returns max relative error vs double; out_bits receives the raw output. */
static double float_mm(aclDataType dt, int64_t batch, int64_t bb, int64_t m, int64_t k, int64_t n, int which,
                       void *out_bits) {
    size_t es = dt == ACL_FLOAT ? 4 : 2;
    void *a = malloc((size_t)(batch * m * k) * es), *b = malloc((size_t)(bb * n * k) * es);
    void *y = malloc((size_t)(batch * m * n) * es);
    uint64_t save = rng;
    rng = 12345;
    for (int64_t i = 0; i < bb * n * k; i++) store_val(dt, b, i, (float)urand());
    for (int64_t i = 0; i < batch * m * k; i++) store_val(dt, a, i, (float)urand());
    rng = save;
    void *da = dev_from(a, (size_t)(batch * m * k) * es), *db = dev_from(b, (size_t)(bb * n * k) * es);
    void *dy = dev_alloc((size_t)(batch * m * n) * es);
    aclTensor *ta, *tb, *ty;
    if (which == 0) {
        int64_t ad[2] = {m, k}, bd[2] = {k, n}, bs[2] = {1, k}, yd[2] = {m, n};
        ta = tensor(ad, 2, dt, NULL, da), tb = tensor(bd, 2, dt, bs, db), ty = tensor(yd, 2, dt, NULL, dy);
    } else {
        int64_t ad[3] = {batch, m, k}, bd[3] = {bb, k, n}, bs[3] = {bb == 1 ? 0 : n * k, 1, k}, yd[3] = {batch, m, n};
        ta = tensor(ad, 3, dt, NULL, da), tb = tensor(bd, 3, dt, bs, db), ty = tensor(yd, 3, dt, NULL, dy);
    }
    mm_ws_fn ws_fn = which == 0 ? aclnnMmGetWorkspaceSize : which == 1 ? aclnnBatchMatMulGetWorkspaceSize : aclnnMatmulGetWorkspaceSize;
    mm_fn fn = which == 0 ? aclnnMm : which == 1 ? aclnnBatchMatMul : aclnnMatmul;
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    CHECK(ws_fn(ta, tb, ty, 1, &ws, &ex) == 0);
    CHECK(fn(NULL, 0, ex, stream) == 0);
    CHECK(sync_ok());
    to_host(y, dy, (size_t)(batch * m * n) * es);
    double worst = 0;
    for (int64_t bi = 0; bi < batch; bi++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double ref = 0, mag = 0;
                for (int64_t kk = 0; kk < k; kk++) {
                    double v = (double)load_val(dt, a, (bi * m + i) * k + kk) *
                               load_val(dt, b, ((bb == 1 ? 0 : bi) * n + j) * k + kk);
                    ref += v, mag += fabs(v);
                }
                double err = fabs(load_val(dt, y, (bi * m + i) * n + j) - ref) / (mag + 1e-30);
                if (err > worst) worst = err;
            }
    if (out_bits)
        memcpy(out_bits, y, (size_t)(batch * m * n) * es);
    aclDestroyTensor(ta), aclDestroyTensor(tb), aclDestroyTensor(ty);
    aclrtFree(da), aclrtFree(db), aclrtFree(dy);
    free(a), free(b), free(y);
    return worst;
}

static void test_float_products(void) {
    CHECK(float_mm(ACL_FLOAT, 1, 1, 5, 37, 29, 0, NULL) < 1e-6);
    CHECK(float_mm(ACL_FLOAT16, 1, 1, 17, 300, 70, 0, NULL) < 2e-3);
    CHECK(float_mm(ACL_BF16, 1, 1, 3, 64, 13, 0, NULL) < 1e-2);
    CHECK(float_mm(ACL_FLOAT, 3, 3, 4, 50, 9, 1, NULL) < 1e-6);
    CHECK(float_mm(ACL_FLOAT16, 4, 1, 6, 64, 20, 1, NULL) < 2e-3);
    CHECK(float_mm(ACL_FLOAT, 2, 2, 5, 33, 7, 2, NULL) < 1e-6);
    /* batch invariance: row 3 of m=64 equals m=1 of that row (same seed: rows are the same) */
    int64_t k = 200, n = 50;
    float *y64 = malloc((size_t)(64 * n) * 4), *y4 = malloc((size_t)(4 * n) * 4);
    float_mm(ACL_FLOAT, 1, 1, 64, k, n, 0, y64);
    float_mm(ACL_FLOAT, 1, 1, 4, k, n, 0, y4);
    CHECK(memcmp(y64, y4, (size_t)(4 * n) * 4) == 0);
    free(y64), free(y4);
    /* F16 weights read in place for decode-sized m (k a multiple of 32, k-contiguous columns; on
     * AVX-512) against the widened-panel path of m=64: the same bits, for row chunks of 4 with
     * remainders and a last column group of 2 */
    k = 256, n = 50;
    uint16_t *h64 = malloc((size_t)(64 * n) * 2), *hm = malloc((size_t)(17 * n) * 2);
    CHECK(float_mm(ACL_FLOAT16, 1, 1, 64, k, n, 0, h64) < 2e-3);
    const int64_t hms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17};
    for (size_t t = 0; t < sizeof hms / sizeof hms[0]; t++) {
        CHECK(float_mm(ACL_FLOAT16, 1, 1, hms[t], k, n, 0, hm) < 2e-3);
        CHECK(memcmp(hm, h64, (size_t)(hms[t] * n) * 2) == 0);
    }
    free(h64), free(hm);
    /* a prefill whose rows go in two blocks (k = 8200: 20 + 20 rows) against the in-place decode
     * path of its first 4 rows */
    uint16_t *h40 = malloc((size_t)(40 * 7) * 2), *h4 = malloc((size_t)(4 * 7) * 2);
    CHECK(float_mm(ACL_FLOAT16, 1, 1, 40, 8200, 7, 0, h40) < 2e-3);
    CHECK(float_mm(ACL_FLOAT16, 1, 1, 4, 8200, 7, 0, h4) < 2e-3);
    CHECK(memcmp(h4, h40, (size_t)(4 * 7) * 2) == 0);
    free(h40), free(h4);
    /* k = 16400: 4 row blocks of 16 rows, packed and multiplied in 2 groups; the second group's rows
     * against the reference, its first row against the in-place decode path */
    uint16_t *h64g = malloc((size_t)(64 * 5) * 2), *h33 = malloc((size_t)(33 * 5) * 2);
    CHECK(float_mm(ACL_FLOAT16, 1, 1, 64, 16400, 5, 0, h64g) < 2e-3);
    CHECK(float_mm(ACL_FLOAT16, 1, 1, 33, 16400, 5, 0, h33) < 2e-3);
    CHECK(memcmp(h33, h64g, (size_t)(33 * 5) * 2) == 0);
    free(h64g), free(h33);
    /* Matmul with a 1-D self: (k) @ (k, n) -> (n) */
    {
        int64_t kk = 40, nn = 6, ad[1] = {kk}, bd[2] = {kk, nn}, yd[1] = {nn};
        float a[40], b[240], y[6];
        for (int i = 0; i < 40; i++) a[i] = (float)urand();
        for (int i = 0; i < 240; i++) b[i] = (float)urand();
        void *da = dev_from(a, sizeof a), *db = dev_from(b, sizeof b), *dy = dev_alloc(sizeof y);
        aclTensor *ta = tensor(ad, 1, ACL_FLOAT, NULL, da), *tb = tensor(bd, 2, ACL_FLOAT, NULL, db);
        aclTensor *ty = tensor(yd, 1, ACL_FLOAT, NULL, dy);
        uint64_t ws;
        aclOpExecutor *ex;
        CHECK(aclnnMatmulGetWorkspaceSize(ta, tb, ty, 0, &ws, &ex) == 0);
        CHECK(aclnnMatmul(NULL, 0, ex, stream) == 0);
        CHECK(sync_ok());
        to_host(y, dy, sizeof y);
        for (int j = 0; j < nn; j++) {
            double ref = 0;
            for (int i = 0; i < kk; i++) ref += (double)a[i] * b[i * nn + j];
            CHECK(fabs(y[j] - ref) < 1e-5);
        }
        /* errors: out of the wrong dtype, mismatched k */
        int64_t yd2[1] = {nn};
        aclTensor *ty16 = tensor(yd2, 1, ACL_FLOAT16, NULL, dy);
        CHECK(aclnnMatmulGetWorkspaceSize(ta, tb, ty16, 0, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
        CHECK(strstr(aclGetRecentErrMsg(), "aclnnMatmul") != NULL);
        CHECK(aclnnMmGetWorkspaceSize(ta, tb, ty, 0, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
        CHECK(aclnnMmGetWorkspaceSize(NULL, tb, ty, 0, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR);
        aclDestroyTensor(ta), aclDestroyTensor(tb), aclDestroyTensor(ty), aclDestroyTensor(ty16);
        aclrtFree(da), aclrtFree(db), aclrtFree(dy);
    }
}

/* ---- Mm dtypes: F32 self x F16 mat2 promotes to F32, so an F32 out holds results past F16's
 * range; F16 x F16 promotes to F16 and an F32 out is refused ----------------------------------------- */
static void test_mm_mixed_range(void) {
    int64_t m = 2, k = 64, n = 3, ad[2] = {m, k}, bd[2] = {k, n}, yd[2] = {m, n};
    float a[128];
    uint16_t b16[192];
    for (int i = 0; i < 128; i++) a[i] = 3.0f + (float)(i % 3);        /* 3, 4, 5 */
    for (int i = 0; i < 192; i++) b16[i] = (uint16_t)(0x5dc0 + (i % 2)); /* F16 368 and 368.25 */
    void *da = dev_from(a, sizeof a), *db = dev_from(b16, sizeof b16), *dy = dev_alloc(6 * 4);
    aclTensor *ta = tensor(ad, 2, ACL_FLOAT, NULL, da), *tb = tensor(bd, 2, ACL_FLOAT16, NULL, db);
    aclTensor *ty = tensor(yd, 2, ACL_FLOAT, NULL, dy), *ta16 = tensor(ad, 2, ACL_FLOAT16, NULL, db);
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK(aclnnMmGetWorkspaceSize(ta, tb, ty, 1, &ws, &ex) == 0);
    CHECK(aclnnMm(NULL, 0, ex, stream) == 0);
    CHECK(sync_ok());
    float y[6];
    to_host(y, dy, sizeof y);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double ref = 0;
            for (int kk = 0; kk < k; kk++)
                ref += (double)a[i * k + kk] * (((kk * n + j) % 2) ? 368.25 : 368.0);
            CHECK(ref > 65504.0 && fabs(y[i * n + j] - ref) < 1e-3 * ref);
        }
    CHECK(aclnnMmGetWorkspaceSize(ta16, tb, ty, 1, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "promoted") != NULL);
    aclDestroyTensor(ta), aclDestroyTensor(tb), aclDestroyTensor(ty), aclDestroyTensor(ta16);
    aclrtFree(da), aclrtFree(db), aclrtFree(dy);
}

/* ---- errors of WeightQuantBatchMatmulV2 -------------------------------------------------------------- */
static void test_wq_errors(void) {
    int64_t m = 2, k = 64, n = 8;
    void *buf = dev_alloc(4096);
    int64_t xd[2] = {m, k}, wd[2] = {k, n}, wst[2] = {1, k}, sd[2] = {2, n}, sst[2] = {1, 2}, yd[2] = {m, n};
    int64_t bad_sd[2] = {3, n}, xs_bad[2] = {1, 2 * m};
    aclTensor *x = tensor(xd, 2, ACL_FLOAT16, NULL, buf), *w = tensor(wd, 2, ACL_INT4, wst, buf);
    aclTensor *s = tensor(sd, 2, ACL_FLOAT16, sst, buf), *y = tensor(yd, 2, ACL_FLOAT16, NULL, buf);
    aclTensor *sbad = tensor(bad_sd, 2, ACL_FLOAT16, NULL, buf), *xbad = tensor(xd, 2, ACL_FLOAT16, xs_bad, buf);
    aclTensor *s32 = tensor(sd, 2, ACL_FLOAT, sst, buf);
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(NULL, w, s, NULL, NULL, NULL, NULL, 32, y, &ws, &ex) ==
          ACLNN_ERR_PARAM_NULLPTR);
    CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(x, w, sbad, NULL, NULL, NULL, NULL, 32, y, &ws, &ex) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "antiquantScale") != NULL);
    CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(x, w, s, NULL, NULL, NULL, NULL, 16, y, &ws, &ex) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(xbad, w, s, NULL, NULL, NULL, NULL, 32, y, &ws, &ex) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(x, w, s32, NULL, NULL, NULL, NULL, 32, y, &ws, &ex) ==
          ACLNN_ERR_PARAM_INVALID);
    /* y must be contiguous: a (m, n) view with row stride 2n (one chunk of a wider output) is refused */
    int64_t ys_wide[2] = {2 * n, 1};
    aclTensor *ywide = tensor(yd, 2, ACL_FLOAT16, ys_wide, buf);
    CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(x, w, s, NULL, NULL, NULL, NULL, 32, ywide, &ws, &ex) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "y must be contiguous") != NULL);
    /* ... but one row of it is contiguous */
    int64_t yd1[2] = {1, n}, xd1[2] = {1, k};
    aclTensor *yrow = tensor(yd1, 2, ACL_FLOAT16, ys_wide, buf), *x1 = tensor(xd1, 2, ACL_FLOAT16, NULL, buf);
    CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(x1, w, s, NULL, NULL, NULL, NULL, 32, yrow, &ws, &ex) == 0);
    CHECK(aclDestroyAclOpExecutor(ex) == 0 || 1);
    /* n (and k) must lie in [1, 65535] */
    int64_t nbig = 65536, wdb[2] = {k, nbig}, sdb[2] = {2, nbig}, ydb[2] = {m, nbig};
    aclTensor *wb = tensor(wdb, 2, ACL_INT4, wst, buf), *sb = tensor(sdb, 2, ACL_FLOAT16, sst, buf);
    aclTensor *yb = tensor(ydb, 2, ACL_FLOAT16, NULL, buf);
    CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(x, wb, sb, NULL, NULL, NULL, NULL, 32, yb, &ws, &ex) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "65535") != NULL);
    /* a non-contiguous scale must be a transposed view */
    int64_t sst_bad[2] = {2 * n, 2};
    aclTensor *sstr = tensor(sd, 2, ACL_FLOAT16, sst_bad, buf);
    CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(x, w, sstr, NULL, NULL, NULL, NULL, 32, y, &ws, &ex) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(x, w, s, NULL, NULL, NULL, NULL, 32, y, &ws, &ex) == 0);
    CHECK(aclDestroyAclOpExecutor(ex) == 0 || 1);
    aclDestroyTensor(ywide), aclDestroyTensor(yrow), aclDestroyTensor(x1), aclDestroyTensor(wb);
    aclDestroyTensor(sb), aclDestroyTensor(yb), aclDestroyTensor(sstr);
    aclDestroyTensor(x), aclDestroyTensor(w), aclDestroyTensor(s), aclDestroyTensor(y);
    aclDestroyTensor(sbad), aclDestroyTensor(xbad), aclDestroyTensor(s32);
    aclrtFree(buf);
}

/* ---- gathers and remainder --------------------------------------------------------------------------- */
static void test_gathers(void) {
    int64_t rows = 10, cols = 6;
    float table[60];
    for (int i = 0; i < 60; i++) table[i] = (float)i;
    int32_t idx[4] = {7, 0, 7, 9};
    void *dt = dev_from(table, sizeof table), *di = dev_from(idx, sizeof idx), *dout = dev_alloc(4 * 6 * 4);
    int64_t td[2] = {rows, cols}, id[1] = {4}, od[2] = {4, cols};
    aclTensor *tt = tensor(td, 2, ACL_FLOAT, NULL, dt), *ti = tensor(id, 1, ACL_INT32, NULL, di);
    aclTensor *to = tensor(od, 2, ACL_FLOAT, NULL, dout);
    uint64_t ws;
    aclOpExecutor *ex;
    float out[24];
    CHECK(aclnnIndexSelectGetWorkspaceSize(tt, 0, ti, to, &ws, &ex) == 0);
    CHECK(aclnnIndexSelect(NULL, 0, ex, stream) == 0);
    CHECK(sync_ok());
    to_host(out, dout, sizeof out);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 6; c++)
            CHECK(out[r * 6 + c] == table[idx[r] * 6 + c]);
    /* GatherV2 with a 2-D index along dim 1 of (10, 6): out (10, 2, 2) */
    int32_t idx2[4] = {5, 1, 0, 5};
    void *di2 = dev_from(idx2, sizeof idx2), *dout2 = dev_alloc(40 * 4);
    int64_t i2d[2] = {2, 2}, o2d[3] = {rows, 2, 2};
    aclTensor *ti2 = tensor(i2d, 2, ACL_INT32, NULL, di2), *to2 = tensor(o2d, 3, ACL_FLOAT, NULL, dout2);
    float out2[40];
    CHECK(aclnnGatherV2GetWorkspaceSize(tt, 1, ti2, to2, &ws, &ex) == 0);
    CHECK(aclnnGatherV2(NULL, 0, ex, stream) == 0);
    CHECK(sync_ok());
    to_host(out2, dout2, sizeof out2);
    for (int r = 0; r < rows; r++)
        for (int q = 0; q < 4; q++)
            CHECK(out2[r * 4 + q] == table[r * 6 + idx2[q]]);
    /* an index out of range fails at synchronize */
    int32_t badidx[4] = {0, 10, 1, 2};
    CHECK(aclrtMemcpy(di, sizeof badidx, badidx, sizeof badidx, ACL_MEMCPY_HOST_TO_DEVICE) == 0);
    CHECK(aclnnIndexSelectGetWorkspaceSize(tt, 0, ti, to, &ws, &ex) == 0);
    CHECK(aclnnIndexSelect(NULL, 0, ex, stream) == 0);
    CHECK(aclrtSynchronizeStream(stream) != ACL_SUCCESS);
    /* remainder: F32 Python modulo */
    float vals[6] = {-17, -1, 0, 5, 16, 127}, rem[6];
    void *dv = dev_from(vals, sizeof vals), *dr = dev_alloc(sizeof rem);
    int64_t vd[1] = {6};
    aclTensor *tv = tensor(vd, 1, ACL_FLOAT, NULL, dv), *tr = tensor(vd, 1, ACL_FLOAT, NULL, dr);
    float sixteen = 16;
    aclScalar *s16 = aclCreateScalar(&sixteen, ACL_FLOAT);
    CHECK(aclnnRemainderTensorScalarGetWorkspaceSize(tv, s16, tr, &ws, &ex) == 0);
    CHECK(aclnnRemainderTensorScalar(NULL, 0, ex, stream) == 0);
    CHECK(sync_ok());
    to_host(rem, dr, sizeof rem);
    float expect[6] = {15, 15, 0, 5, 0, 15};
    CHECK(memcmp(rem, expect, sizeof rem) == 0);
    aclDestroyScalar(s16);
    aclDestroyTensor(tt), aclDestroyTensor(ti), aclDestroyTensor(to), aclDestroyTensor(ti2), aclDestroyTensor(to2);
    aclDestroyTensor(tv), aclDestroyTensor(tr);
    aclrtFree(dt), aclrtFree(di), aclrtFree(dout), aclrtFree(di2), aclrtFree(dout2), aclrtFree(dv), aclrtFree(dr);
}

/* ---- thread-count and ISA invariance: a child prints a hash of products over every kernel path ------- */
static uint64_t fnv(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

static uint64_t child_product_hash(void) {
    wq_case c = {64, 512, 200, 1, 32, 1, 1, 0};
    wq_data d;
    wq_make(&d, c);
    uint16_t *x = malloc((size_t)(64 * c.k) * 2), *y = malloc((size_t)(64 * c.n) * 2);
    for (int64_t i = 0; i < 64 * c.k; i++) x[i] = f16((float)urand());
    wq_run(&d, x, 64, y);
    uint64_t h = fnv(y, (size_t)(64 * c.n) * 2);
    wq_run(&d, x, 1, y);
    h ^= fnv(y, (size_t)c.n * 2) * 31;
    uint16_t *yf = malloc((size_t)(70 * 50) * 4);
    float_mm(ACL_FLOAT16, 1, 1, 64, 300, 50, 0, yf);
    h ^= fnv(yf, (size_t)(64 * 50) * 2) * 7;
    /* decode-sized rows read in place (AVX-512, AVX2): every row-count branch of the kernels */
    const int64_t f16rows[] = {1, 2, 3, 5, 8, 16};
    for (size_t r = 0; r < sizeof f16rows / sizeof f16rows[0]; r++) {
        float_mm(ACL_FLOAT16, 1, 1, f16rows[r], 320, 49, 0, yf);
        h = h * 1099511628211ull ^ fnv(yf, (size_t)(f16rows[r] * 49) * 2);
    }
    /* k cut into steps by the AVX-512 panel kernel (kp 1120 > 1024), rows and columns not
     * multiples of its register tile */
    float_mm(ACL_FLOAT16, 1, 1, 70, 1100, 47, 0, yf);
    h ^= fnv(yf, (size_t)(70 * 47) * 2) * 11;
    float_mm(ACL_FLOAT16, 1, 1, 40, 8200, 7, 0, yf); /* rows in two blocks */
    h ^= fnv(yf, (size_t)(40 * 7) * 2) * 13;
    free(x), free(y), free(yf);
    wq_free(&d);
    /* a decode-sized (m = 1) product large enough to be split over the pool */
    wq_case big = {1, 576, 4096, 1, 32, 1, 1, 0};
    wq_make(&d, big);
    x = malloc((size_t)big.k * 2), y = malloc((size_t)big.n * 2);
    for (int64_t i = 0; i < big.k; i++) x[i] = f16((float)urand());
    wq_run(&d, x, 1, y);
    h ^= fnv(y, (size_t)big.n * 2) * 131;
    free(x), free(y);
    wq_free(&d);
    /* a prefill product whose rows go in three blocks (k = 8192: 24 + 24 + 22 rows) */
    wq_case tall = {70, 8192, 9, 1, 32, 1, 1, 0};
    wq_make(&d, tall);
    x = malloc((size_t)(70 * tall.k) * 2), y = malloc((size_t)(70 * tall.n) * 2);
    for (int64_t i = 0; i < 70 * tall.k; i++) x[i] = f16((float)urand());
    wq_run(&d, x, 70, y);
    h ^= fnv(y, (size_t)(70 * tall.n) * 2) * 17;
    free(x), free(y);
    wq_free(&d);
    /* the batched-decode and generic kernels: Q4_0 / Q4_1 / Q8_0, groups of 32 and 64, per-channel,
     * m = 1 to 8 (one row chunk), 12 and 16 (two); AVX2 takes other branches for 1, 2, 3-4 and 5-8 */
    const wq_case more[] = {{0, 320, 24, 1, 32, 0, 1, 0}, {0, 320, 24, 1, 32, 1, 1, 0}, {0, 320, 24, 0, 32, 0, 1, 0},
                            {0, 320, 24, 0, 32, 1, 1, 0}, {0, 320, 24, 1, 64, 1, 1, 0}, {0, 96, 21, 0, 0, 1, 1, 0},
                            {0, 100, 14, 1, 64, 1, 1, 0}};
    const int64_t mrows[] = {1, 2, 3, 4, 5, 6, 8, 12, 16};
    for (size_t t = 0; t < sizeof more / sizeof more[0]; t++) {
        wq_make(&d, more[t]);
        x = malloc((size_t)(16 * more[t].k) * 2), y = malloc((size_t)(16 * more[t].n) * 2);
        for (int64_t i = 0; i < 16 * more[t].k; i++) x[i] = f16((float)urand());
        for (size_t r = 0; r < sizeof mrows / sizeof mrows[0]; r++) {
            wq_run(&d, x, mrows[r], y);
            h = h * 1099511628211ull ^ fnv(y, (size_t)(mrows[r] * more[t].n) * 2);
        }
        free(x), free(y);
        wq_free(&d);
    }
    return h;
}

/* isa: NULL (the best one), "avx2" or "scalar" (CANN_LLM_HOST_ISA) */
static int run_child(const char *self, const char *threads, const char *isa, uint64_t *hash) {
    char env_threads[64], env_isa[64], path[512];
    snprintf(env_threads, sizeof env_threads, "CANN_LLM_THREADS=%s", threads);
    snprintf(env_isa, sizeof env_isa, "CANN_LLM_HOST_ISA=%s", isa ? isa : "");
    snprintf(path, sizeof path, "/tmp/test_aclnn_matmul.%d.%s.%s", (int)getpid(), threads, isa ? isa : "best");
    char *envp[] = {env_threads, "CT_CHILD_HASH=1", isa ? env_isa : NULL, NULL};
    char *argv[] = {(char *)self, path, NULL};
    pid_t pid;
    if (posix_spawn(&pid, self, NULL, NULL, argv, envp) != 0)
        return 0;
    int status = 0;
    waitpid(pid, &status, 0);
    FILE *f = fopen(path, "r");
    int ok = f && fscanf(f, "%lx", (unsigned long *)hash) == 1;
    if (f) fclose(f);
    remove(path);
    return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* ---- benchmark ------------------------------------------------------------------------------------- */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One product shape as the backend issues it: WeightQuantBatchMatmulV2 for Q4_0 (INT4), Q4_1 (INT4
 * + offsets) and Q8_0 (INT8) with group-32 F16 scales, or Mm with F32 activations times a
 * transposed F16 weight (F16 weights, F32 out). Each copy of the weights is launched in turn (copies
 * enough to exceed `bytes_total`, so weights come from memory rather than L2 when that is large), a
 * repeatable executor per copy, `reps` launches then one synchronize; prints the median time per
 * launch over 7 such batches, and weights/s (or multiply-adds/s). */
typedef enum { BQ4_0, BQ4_1, BQ8_0, BF16W } bench_type;

static void bench_case(bench_type type, int64_t k, int64_t n, int64_t m, double bytes_total) {
    static const char *names[] = {"Q4_0", "Q4_1", "Q8_0", "F16"};
    int64_t ng = k / 32;
    size_t wbytes = type == BF16W ? (size_t)(k * n) * 2 : type == BQ8_0 ? (size_t)(k * n) : (size_t)(k * n) / 2;
    size_t pbytes = (size_t)(ng * n) * 2;
    size_t per_copy = wbytes + pbytes * (type == BQ4_1 ? 2 : type == BF16W ? 0 : 1);
    int copies = (int)(bytes_total / (double)per_copy) + 1;
    if (copies > 64)
        copies = 64;
    uint8_t *hw = malloc(wbytes);
    uint16_t *hp = malloc(pbytes);
    for (size_t i = 0; i < wbytes; i++)
        hw[i] = (uint8_t)irand(256);
    if (type == BF16W)
        for (size_t i = 0; i < wbytes / 2; i++)
            ((uint16_t *)(void *)hw)[i] = f16((float)urand());
    for (int64_t i = 0; i < ng * n; i++)
        hp[i] = f16((float)(0.01 + 0.02 * fabs(urand())));
    size_t xes = type == BF16W ? 4 : 2;
    void *hx = malloc((size_t)(m * k) * xes);
    for (int64_t i = 0; i < m * k; i++) {
        if (type == BF16W)
            ((float *)hx)[i] = (float)urand();
        else
            ((uint16_t *)hx)[i] = f16((float)urand());
    }
    void *dx = dev_from(hx, (size_t)(m * k) * xes), *dy = dev_alloc((size_t)(m * n) * 4);
    void **dw = calloc((size_t)copies, sizeof *dw), **ds = calloc((size_t)copies, sizeof *ds);
    aclOpExecutor **ex = calloc((size_t)copies, sizeof *ex);
    aclTensor **keep = calloc((size_t)copies * 5, sizeof *keep);
    int64_t xd[2] = {m, k}, wd[2] = {k, n}, wst[2] = {1, k}, sd[2] = {ng, n}, sst[2] = {1, ng}, yd[2] = {m, n};
    aclTensor *tx = tensor(xd, 2, type == BF16W ? ACL_FLOAT : ACL_FLOAT16, NULL, dx);
    aclTensor *ty = tensor(yd, 2, type == BF16W ? ACL_FLOAT : ACL_FLOAT16, NULL, dy);
    for (int c = 0; c < copies; c++) {
        dw[c] = dev_from(hw, wbytes);
        uint64_t ws = 0;
        if (type == BF16W) {
            aclTensor *tw = tensor(wd, 2, ACL_FLOAT16, wst, dw[c]);
            CHECK(aclnnMmGetWorkspaceSize(tx, tw, ty, 1, &ws, &ex[c]) == 0);
            keep[c * 5] = tw;
        } else {
            ds[c] = dev_from(hp, pbytes);
            aclTensor *tw = tensor(wd, 2, type == BQ8_0 ? ACL_INT8 : ACL_INT4, wst, dw[c]);
            aclTensor *ts = tensor(sd, 2, ACL_FLOAT16, sst, ds[c]);
            aclTensor *to = type == BQ4_1 ? tensor(sd, 2, ACL_FLOAT16, sst, ds[c]) : NULL;
            CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(tx, tw, ts, to, NULL, NULL, NULL, 32, ty, &ws,
                                                                &ex[c]) == 0);
            keep[c * 5] = tw, keep[c * 5 + 1] = ts, keep[c * 5 + 2] = to;
        }
        CHECK(aclSetAclOpExecutorRepeatable(ex[c]) == 0);
    }
    double macs = (double)m * k * n;
    int reps = (int)(2e8 / (macs + 2e5)) + 1;
    if (reps < copies)
        reps = copies;
    double t[7];
    for (int b = -1; b < 7; b++) {
        double t0 = now();
        for (int r = 0; r < reps; r++) {
            aclOpExecutor *e = ex[r % copies];
            if (type == BF16W)
                aclnnMm(NULL, 0, e, stream);
            else
                aclnnWeightQuantBatchMatmulV2(NULL, 0, e, stream);
        }
        CHECK(sync_ok());
        if (b >= 0)
            t[b] = (now() - t0) / reps;
    }
    qsort(t, 7, sizeof t[0], cmp_double);
    printf("bench %-4s k=%-5lld n=%-6lld m=%-4lld %s: %9.1f us  %6.1f G%s/s\n", names[type], (long long)k,
           (long long)n, (long long)m, copies > 1 ? "mem  " : "cache", t[3] * 1e6, macs / t[3] * 1e-9,
           m == 1 ? "weights" : " MACs");
    for (int c = 0; c < copies; c++) {
        aclDestroyAclOpExecutor(ex[c]);
        for (int i = 0; i < 5; i++)
            aclDestroyTensor(keep[c * 5 + i]);
        aclrtFree(dw[c]);
        if (ds[c])
            aclrtFree(ds[c]);
    }
    aclDestroyTensor(tx), aclDestroyTensor(ty);
    aclrtFree(dx), aclrtFree(dy);
    free(dw), free(ds), free(ex), free(keep), free(hw), free(hp), free(hx);
}

/* The matmuls of one SmolLM2-135M decode step of `m` sequences (30 layers of q, k, v, o, gate, up,
 * down in `type`, then the 576 x 49152 Q8_0 output layer), each weight its own copy (92 MiB for
 * Q4_1, so weights come from memory as in decode), launched back to back with one synchronize: ms
 * per step, median of `rounds`. */
static void bench_token(bench_type type, int rounds, int64_t m) {
    static const char *names[] = {"Q4_0", "Q4_1", "Q8_0", "F16"};
    static const int64_t shapes[7][2] = {{576, 576}, {576, 192}, {576, 192}, {576, 576},
                                         {576, 1536}, {576, 1536}, {1536, 576}};
    enum { NL = 30, NOPS = NL * 7 + 1 };
    aclOpExecutor *ex[NOPS];
    aclTensor *keep[NOPS * 4];
    void *mem[NOPS * 3];
    int nk = 0, nm = 0;
    memset(keep, 0, sizeof keep);
    int64_t kmax = 1536;
    void *dx = dev_alloc((size_t)(m * kmax) * 4), *dy = dev_alloc((size_t)(m * 49152) * 4);
    uint16_t *hx = malloc((size_t)(m * kmax) * 4);
    for (int64_t i = 0; i < m * kmax * 2; i++)
        hx[i] = f16((float)urand());
    CHECK(aclrtMemcpy(dx, (size_t)(m * kmax) * 4, hx, (size_t)(m * kmax) * 4, ACL_MEMCPY_HOST_TO_DEVICE) == 0);
    double wbytes_total = 0;
    for (int op = 0; op < NOPS; op++) {
        bool out = op == NOPS - 1;
        bench_type ty = out ? BQ8_0 : type;
        int64_t k = out ? 576 : shapes[op % 7][0], n = out ? 49152 : shapes[op % 7][1], ng = k / 32;
        size_t wb = ty == BF16W ? (size_t)(k * n) * 2 : ty == BQ8_0 ? (size_t)(k * n) : (size_t)(k * n) / 2;
        uint8_t *hw = malloc(wb);
        for (size_t i = 0; i < wb; i++)
            hw[i] = (uint8_t)irand(256);
        if (ty == BF16W)
            for (size_t i = 0; i < wb / 2; i++)
                ((uint16_t *)(void *)hw)[i] = f16((float)urand() * 0.05f);
        void *dw = dev_from(hw, wb);
        free(hw);
        mem[nm++] = dw;
        wbytes_total += (double)wb;
        int64_t xd[2] = {m, k}, wd[2] = {k, n}, wst[2] = {1, k}, sd[2] = {ng, n}, sst[2] = {1, ng}, yd[2] = {m, n};
        uint64_t ws = 0;
        aclTensor *tx = tensor(xd, 2, ty == BF16W ? ACL_FLOAT : ACL_FLOAT16, NULL, dx);
        aclTensor *ty_ = tensor(yd, 2, ty == BF16W ? ACL_FLOAT : ACL_FLOAT16, NULL, dy);
        keep[nk++] = tx, keep[nk++] = ty_;
        if (ty == BF16W) {
            aclTensor *tw = tensor(wd, 2, ACL_FLOAT16, wst, dw);
            keep[nk++] = tw;
            CHECK(aclnnMmGetWorkspaceSize(tx, tw, ty_, 1, &ws, &ex[op]) == 0);
        } else {
            uint16_t *hp = malloc((size_t)(ng * n) * 2);
            for (int64_t i = 0; i < ng * n; i++)
                hp[i] = f16((float)(0.01 + 0.02 * fabs(urand())));
            void *dp = dev_from(hp, (size_t)(ng * n) * 2);
            free(hp);
            mem[nm++] = dp;
            wbytes_total += (double)(ng * n) * (ty == BQ4_1 ? 4 : 2);
            aclTensor *tw = tensor(wd, 2, ty == BQ8_0 ? ACL_INT8 : ACL_INT4, wst, dw);
            aclTensor *ts = tensor(sd, 2, ACL_FLOAT16, sst, dp);
            keep[nk++] = tw, keep[nk++] = ts;
            CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(tx, tw, ts, ty == BQ4_1 ? ts : NULL, NULL, NULL,
                                                                NULL, 32, ty_, &ws, &ex[op]) == 0);
        }
        CHECK(aclSetAclOpExecutorRepeatable(ex[op]) == 0);
    }
    double *t = malloc((size_t)rounds * sizeof *t);
    for (int r = -2; r < rounds; r++) {
        double t0 = now();
        for (int op = 0; op < NOPS; op++) {
            if (type == BF16W && op < NOPS - 1)
                aclnnMm(NULL, 0, ex[op], stream);
            else
                aclnnWeightQuantBatchMatmulV2(NULL, 0, ex[op], stream);
        }
        CHECK(sync_ok());
        if (r >= 0)
            t[r] = now() - t0;
    }
    qsort(t, (size_t)rounds, sizeof t[0], cmp_double);
    printf("bench token %s m=%lld: %.3f ms (min %.3f), %.1f MB of weights, %.1f GB/s\n", names[type], (long long)m,
           t[rounds / 2] * 1e3, t[0] * 1e3, wbytes_total * 1e-6, wbytes_total / t[rounds / 2] * 1e-9);
    free(t);
    for (int op = 0; op < NOPS; op++)
        aclDestroyAclOpExecutor(ex[op]);
    for (int i = 0; i < nk; i++)
        aclDestroyTensor(keep[i]);
    for (int i = 0; i < nm; i++)
        aclrtFree(mem[i]);
    aclrtFree(dx), aclrtFree(dy);
    free(hx);
}

/* CT_BENCH=1: the products of SmolLM2-135M (n_embd 576, ffn 1536, 3 KV heads of 64, vocabulary
 * 49152) and of a Qwen2.5-0.5B shape (896, 4864, 2 KV heads, 151936 split in 65535-column chunks),
 * decode (m = 1, weights from memory), batched decode (m = 8) and prefill (m = 512, from cache).
 * CT_BENCH=quick: SmolLM2's m = 1 and 512 only. CT_BENCH_TYPES=Q4_0,Q8_0,... picks types.
 * CT_BENCH=one:TYPE:K:N:M:ROUNDS[:MB]: that one product ROUNDS times, its weights in cache or cycled
 * over MB megabytes of copies (for a profiler). CT_BENCH=token[:ROUNDS[:M]]: bench_token (M sequences,
 * default 1). */
static void bench_all(void) {
    const char *sel = getenv("CT_BENCH_TYPES"), *mode = getenv("CT_BENCH");
    char tname[8];
    long long k, n, m;
    int rounds;
    double mem_bytes = 0;
    if (sscanf(mode, "one:%7[^:]:%lld:%lld:%lld:%d:%lf", tname, &k, &n, &m, &rounds, &mem_bytes) >= 5) {
        static const char *tn[] = {"Q4_0", "Q4_1", "Q8_0", "F16"};
        for (int ty = 0; ty < 4; ty++)
            if (strcmp(tname, tn[ty]) == 0)
                for (int r = 0; r < rounds; r++)
                    bench_case((bench_type)ty, k, n, m, mem_bytes * 1e6);
        return;
    }
    if (strncmp(mode, "token", 5) == 0) { /* CT_BENCH=token[:ROUNDS[:M]] */
        int r = mode[5] == ':' ? atoi(mode + 6) : 20;
        const char *mc = mode[5] == ':' ? strchr(mode + 6, ':') : NULL;
        int64_t tm = mc ? atoll(mc + 1) : 1;
        static const char *tn[] = {"Q4_0", "Q4_1", "Q8_0", "F16"};
        for (int ty = 0; ty < 4; ty++)
            if (!sel || strstr(sel, tn[ty]))
                bench_token((bench_type)ty, r > 0 ? r : 20, tm > 0 ? tm : 1);
        return;
    }
    bool quick = strcmp(mode, "quick") == 0;
    static const int64_t smol[][2] = {{576, 576}, {576, 192}, {576, 1536}, {1536, 576}, {576, 49152}};
    static const int64_t qwen[][2] = {{896, 896}, {896, 128}, {896, 4864}, {4864, 896}, {896, 65535}};
    static const char *names[] = {"Q4_0", "Q4_1", "Q8_0", "F16"};
    for (int ty = 0; ty < 4; ty++) {
        if (sel && !strstr(sel, names[ty]))
            continue;
        for (int model = 0; model < (quick ? 1 : 2); model++)
            for (int s = 0; s < 5; s++) {
                const int64_t *sh = model ? qwen[s] : smol[s];
                bench_case((bench_type)ty, sh[0], sh[1], 1, 160e6);
                if (!quick)
                    bench_case((bench_type)ty, sh[0], sh[1], 8, 160e6);
                if (sh[1] <= 4864)
                    bench_case((bench_type)ty, sh[0], sh[1], 512, 0);
            }
    }
}

int main(int argc, char **argv) {
    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
    CHECK(aclrtCreateStream(&stream) == ACL_SUCCESS);
    if (getenv("CT_CHILD_HASH") && argc > 1) {
        uint64_t h = child_product_hash();
        FILE *f = fopen(argv[1], "w");
        if (f) {
            fprintf(f, "%lx\n", (unsigned long)h);
            fclose(f);
        }
        return ct_failures ? 1 : 0;
    }
    if (getenv("CT_BENCH")) {
        bench_all();
        return 0;
    }
    /* m, k, n, int4, group, offset, transposed, bias */
    test_wq_case((wq_case){1, 256, 40, 1, 32, 0, 1, 0});
    test_wq_case((wq_case){7, 256, 40, 1, 32, 1, 1, 0});
    test_wq_case((wq_case){70, 128, 33, 1, 32, 1, 1, 1});
    test_wq_case((wq_case){3, 192, 20, 0, 64, 0, 1, 0});
    test_wq_case((wq_case){9, 96, 20, 0, 0, 1, 1, 0});
    test_wq_case((wq_case){2, 80, 12, 1, 0, 0, 1, 0});   /* k not a multiple of 32, per-channel */
    test_wq_case((wq_case){5, 100, 14, 1, 64, 1, 1, 0}); /* partial last group */
    test_wq_case((wq_case){4, 64, 10, 1, 32, 0, 0, 0});  /* contiguous (k, n) weight */
    test_wq_case((wq_case){1, 64, 9, 0, 32, 1, 0, 1});
    test_wq_batch_invariance((wq_case){0, 512, 100, 1, 32, 0, 1, 0});
    test_wq_batch_invariance((wq_case){0, 512, 100, 1, 32, 1, 1, 0});
    test_wq_batch_invariance((wq_case){0, 320, 37, 0, 32, 0, 1, 0});
    test_wq_batch_invariance((wq_case){0, 96, 21, 0, 0, 0, 1, 0});
    test_wq_batch_invariance((wq_case){0, 1056, 37, 1, 32, 1, 1, 0}); /* k cut into steps (prefill) */
    test_wq_batch_invariance((wq_case){0, 8192, 13, 0, 32, 0, 1, 0}); /* rows in two blocks (prefill) */
    test_wq_batch_invariance((wq_case){0, 16384, 13, 0, 32, 0, 1, 0}); /* 4 row blocks packed in 2 groups */
    test_wq_batch_invariance((wq_case){0, 16384, 13, 1, 32, 1, 1, 0});
    test_mm_mixed_range();
    test_wq_errors();
    test_float_products();
    test_gathers();
    uint64_t h1 = 0, h2 = 1;
    char *self = realpath(argv[0], NULL);
    CHECK(self != NULL);
    if (self) {
        CHECK(run_child(self, "1", NULL, &h1));
        CHECK(run_child(self, "2", NULL, &h2));
        CHECK(h1 == h2);
        const char *isas[] = {"avx2", "scalar"};
        for (int i = 0; i < 2; i++) {
            uint64_t hi = h1 + 1;
            CHECK(run_child(self, "2", isas[i], &hi));
            if (hi != h1)
                fprintf(stderr, "  CANN_LLM_HOST_ISA=%s gives other bits than the best ISA\n", isas[i]);
            CHECK(hi == h1);
        }
        free(self);
    }
    CHECK(aclrtDestroyStream(stream) == ACL_SUCCESS);
    return CT_RESULT();
}
