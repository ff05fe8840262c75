/* test_aclnn_nn.c - the nn aclnn ops of acl_host (RmsNorm, AddRmsNorm, Softmax, Silu, SwiGlu, GeluV2, Tanh, Sin,
 * Cos, Div, ArgMax, InplaceIndexCopy) against double references; errors naming the op; batch
 * invariance of RmsNorm and Softmax rows (a row alone, in 7 rows, in 64 rows) and thread invariance
 * of those and of GeluV2 / Tanh (the test re-runs itself with CANN_LLM_THREADS=1 and 2, read at
 * init, and compares the bits).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnn_api.h"
#include "ctest_util.h"
#include "aclnn_util.h"

static aclrtStream stream;




typedef aclnnStatus (*phase2_fn)(void *, uint64_t, aclOpExecutor *, aclrtStream);
/* ws / ex by pointer: they are read after phase 1 has filled them */
static void launch(aclnnStatus prepared, phase2_fn run, const uint64_t *ws, aclOpExecutor *const *ex) {
    CHECK(prepared == ACLNN_SUCCESS);
    if (prepared != ACLNN_SUCCESS) {
        fprintf(stderr, "  phase 1: %s\n", aclGetRecentErrMsg());
        return;
    }
    aclnnStatus st = run(NULL, *ws, *ex, stream);
    CHECK(st == ACLNN_SUCCESS);
    if (st != ACLNN_SUCCESS) fprintf(stderr, "  phase 2: %s\n", aclGetRecentErrMsg());
    CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
}

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* ---- RmsNorm and Softmax over m rows of n: returns the device results in out ------------------ */
static void rms_norm_rows(const float *x, int64_t m, int64_t n, float *y, float *rstd) {
    int64_t dx[2] = {m, n}, dg[1] = {n}, dr[2] = {m, 1};
    float *ones = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) ones[i] = 1.0f;
    void *px = dev_from(x, (size_t)(m * n) * 4), *pg = dev_from(ones, (size_t)n * 4);
    void *py = dev_from(NULL, (size_t)(m * n) * 4), *pr = dev_from(NULL, (size_t)m * 4);
    aclTensor *tx = acl_view(dx, 2, ACL_FLOAT, NULL, 0, px), *tg = acl_view(dg, 1, ACL_FLOAT, NULL, 0, pg);
    aclTensor *ty = acl_view(dx, 2, ACL_FLOAT, NULL, 0, py), *tr = acl_view(dr, 2, ACL_FLOAT, NULL, 0, pr);
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    launch(aclnnRmsNormGetWorkspaceSize(tx, tg, 1e-6, ty, tr, &ws, &ex), aclnnRmsNorm, &ws, &ex);
    to_host(y, py, (size_t)(m * n) * 4);
    if (rstd) to_host(rstd, pr, (size_t)m * 4);
    aclDestroyTensor(tx), aclDestroyTensor(tg), aclDestroyTensor(ty), aclDestroyTensor(tr);
    aclrtFree(px), aclrtFree(pg), aclrtFree(py), aclrtFree(pr);
    free(ones);
}

static void softmax_rows(const float *x, int64_t m, int64_t n, float *y) {
    int64_t dx[2] = {m, n};
    void *px = dev_from(x, (size_t)(m * n) * 4), *py = dev_from(NULL, (size_t)(m * n) * 4);
    aclTensor *tx = acl_view(dx, 2, ACL_FLOAT, NULL, 0, px), *ty = acl_view(dx, 2, ACL_FLOAT, NULL, 0, py);
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    launch(aclnnSoftmaxGetWorkspaceSize(tx, -1, ty, &ws, &ex), aclnnSoftmax, &ws, &ex);
    to_host(y, py, (size_t)(m * n) * 4);
    aclDestroyTensor(tx), aclDestroyTensor(ty);
    aclrtFree(px), aclrtFree(py);
}

#define N 4099   /* odd: exercises the 16-lane tail */

/* Row 0 of a batch of m rows (other rows random); a fixed digest of both ops' row 0. */
static uint64_t batch_row0(int64_t m, float *rms_row, float *sm_row) {
    float *x = malloc((size_t)(m * N) * 4), *y = malloc((size_t)(m * N) * 4);
    uint32_t s = 7;
    for (int64_t i = 0; i < N; i++) x[i] = frand(&s) * 3.0f;
    uint32_t t = (uint32_t)m * 77u;
    for (int64_t i = N; i < m * N; i++) x[i] = frand(&t) * 5.0f;
    rms_norm_rows(x, m, N, y, NULL);
    memcpy(rms_row, y, N * 4);
    softmax_rows(x, m, N, y);
    memcpy(sm_row, y, N * 4);
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < N; i++) {
        uint32_t a, b;
        memcpy(&a, &rms_row[i], 4);
        memcpy(&b, &sm_row[i], 4);
        h = (h ^ a) * 1099511628211ull;
        h = (h ^ b) * 1099511628211ull;
    }
    free(x), free(y);
    return h;
}

static void test_rms_norm_and_softmax_values(void) {
    int64_t m = 3, n = 37;
    float x[3 * 37], y[3 * 37], rstd[3];
    uint32_t s = 1;
    for (int i = 0; i < m * n; i++) x[i] = frand(&s) * 4.0f;
    x[40] = -INFINITY; /* softmax: a masked cell gives 0 */
    x[40] = 0.5f;
    rms_norm_rows(x, m, n, y, rstd);
    for (int r = 0; r < m; r++) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x[r * n + i] * x[r * n + i];
        double rs = 1.0 / sqrt(ss / n + 1e-6);
        CHECK(fabs(rstd[r] - rs) <= 1e-6 * rs);
        for (int i = 0; i < n; i++) CHECK(fabs(y[r * n + i] - x[r * n + i] * rs) <= 1e-5);
    }
    x[n + 3] = -INFINITY;
    softmax_rows(x, m, n, y);
    for (int r = 0; r < m; r++) {
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++) mx = fmax(mx, x[r * n + i]);
        for (int i = 0; i < n; i++) sum += exp((double)x[r * n + i] - mx);
        for (int i = 0; i < n; i++) CHECK(fabs(y[r * n + i] - exp((double)x[r * n + i] - mx) / sum) <= 1e-6);
    }
    CHECK(y[n + 3] == 0.0f);
}

/* ---- AddRmsNorm over m rows of n (dtype dt, es bytes an element), three ways: mode 0 the fused
 * op; 1 the CANN backend's unfused path (aclnnAdd, aclnnRmsNorm with F32 ones, aclnnMul by gamma);
 * 2 aclnnAdd then aclnnRmsNorm with gamma. Host buffers in dt; rstd F32. -------------------------- */
static void add_rms_norm_rows(int mode, aclDataType dt, size_t es, const void *x1, const void *x2, const void *g,
                              int64_t m, int64_t n, void *y, float *rstd, void *xo) {
    int64_t dx[2] = {m, n}, dg[1] = {n}, dr[2] = {m, 1};
    size_t bx = (size_t)(m * n) * es;
    void *p1 = dev_from(x1, bx), *p2 = dev_from(x2, bx), *pg = dev_from(g, (size_t)n * es);
    void *py = dev_from(NULL, bx), *pr = dev_from(NULL, (size_t)m * 4), *px = dev_from(NULL, bx);
    aclTensor *t1 = acl_view(dx, 2, dt, NULL, 0, p1), *t2 = acl_view(dx, 2, dt, NULL, 0, p2);
    aclTensor *tg = acl_view(dg, 1, dt, NULL, 0, pg), *ty = acl_view(dx, 2, dt, NULL, 0, py);
    aclTensor *tr = acl_view(dr, 2, ACL_FLOAT, NULL, 0, pr), *tx = acl_view(dx, 2, dt, NULL, 0, px);
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    if (mode == 0) {
        launch(aclnnAddRmsNormGetWorkspaceSize(t1, t2, tg, 1e-6, ty, tr, tx, &ws, &ex), aclnnAddRmsNorm, &ws, &ex);
    } else {
        float one = 1.0f;
        aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT);
        launch(aclnnAddGetWorkspaceSize(t1, t2, alpha, tx, &ws, &ex), aclnnAdd, &ws, &ex);
        aclDestroyScalar(alpha);
        if (mode == 2) {
            launch(aclnnRmsNormGetWorkspaceSize(tx, tg, 1e-6, ty, tr, &ws, &ex), aclnnRmsNorm, &ws, &ex);
        } else {
            float *ones = malloc((size_t)n * 4);
            for (int64_t i = 0; i < n; i++) ones[i] = 1.0f;
            void *po = dev_from(ones, (size_t)n * 4), *pt = dev_from(NULL, bx);
            aclTensor *to = acl_view(dg, 1, ACL_FLOAT, NULL, 0, po), *tt = acl_view(dx, 2, dt, NULL, 0, pt);
            launch(aclnnRmsNormGetWorkspaceSize(tx, to, 1e-6, tt, tr, &ws, &ex), aclnnRmsNorm, &ws, &ex);
            launch(aclnnMulGetWorkspaceSize(tt, tg, ty, &ws, &ex), aclnnMul, &ws, &ex);
            aclDestroyTensor(to), aclDestroyTensor(tt);
            aclrtFree(po), aclrtFree(pt);
            free(ones);
        }
    }
    to_host(y, py, bx);
    to_host(rstd, pr, (size_t)m * 4);
    to_host(xo, px, bx);
    aclDestroyTensor(t1), aclDestroyTensor(t2), aclDestroyTensor(tg), aclDestroyTensor(ty);
    aclDestroyTensor(tr), aclDestroyTensor(tx);
    aclrtFree(p1), aclrtFree(p2), aclrtFree(pg), aclrtFree(py), aclrtFree(pr), aclrtFree(px);
}

/* F32: the fused op against a double reference, and bit for bit against the backend's unfused path;
 * F16: xOut and rstd bit for bit as aclnnAdd + aclnnRmsNorm(gamma), yOut too (one rounding each). */
static void test_add_rms_norm(void) {
    int64_t m = 5, n = N;
    size_t cnt = (size_t)(m * n);
    float *a = malloc(cnt * 4), *b = malloc(cnt * 4), *g = malloc((size_t)n * 4);
    float *y0 = malloc(cnt * 4), *y1 = malloc(cnt * 4), *x0 = malloc(cnt * 4), *x1 = malloc(cnt * 4);
    float r0[5], r1[5];
    uint32_t s = 11;
    for (size_t i = 0; i < cnt; i++) a[i] = frand(&s) * 3.0f, b[i] = frand(&s) * 2.0f;
    for (int64_t i = 0; i < n; i++) g[i] = 0.5f + frand(&s);
    add_rms_norm_rows(0, ACL_FLOAT, 4, a, b, g, m, n, y0, r0, x0);
    add_rms_norm_rows(1, ACL_FLOAT, 4, a, b, g, m, n, y1, r1, x1);
    CHECK(memcmp(y0, y1, cnt * 4) == 0);
    CHECK(memcmp(r0, r1, sizeof(r0)) == 0);
    CHECK(memcmp(x0, x1, cnt * 4) == 0);
    for (int64_t r = 0; r < m; r++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) {
            float x = a[r * n + i] + b[r * n + i];
            CHECK(x0[r * n + i] == x);
            ss += (double)x * x;
        }
        double rs = 1.0 / sqrt(ss / (double)n + 1e-6);
        CHECK(fabs(r0[r] - rs) <= 1e-5 * rs);
        for (int64_t i = 0; i < n; i++) {
            double want = (double)x0[r * n + i] * rs * g[i];
            CHECK(fabs(y0[r * n + i] - want) <= 1e-5 * (1.0 + fabs(want)));
        }
    }
    /* F16 */
    uint16_t *ha = malloc(cnt * 2), *hb = malloc(cnt * 2), *hg = malloc((size_t)n * 2);
    uint16_t *hy0 = malloc(cnt * 2), *hy1 = malloc(cnt * 2), *hx0 = malloc(cnt * 2), *hx1 = malloc(cnt * 2);
    for (size_t i = 0; i < cnt; i++) ha[i] = f16(a[i]), hb[i] = f16(b[i]);
    for (int64_t i = 0; i < n; i++) hg[i] = f16(g[i]);
    add_rms_norm_rows(0, ACL_FLOAT16, 2, ha, hb, hg, m, n, hy0, r0, hx0);
    add_rms_norm_rows(2, ACL_FLOAT16, 2, ha, hb, hg, m, n, hy1, r1, hx1);
    CHECK(memcmp(hx0, hx1, cnt * 2) == 0);
    CHECK(memcmp(r0, r1, sizeof(r0)) == 0);
    CHECK(memcmp(hy0, hy1, cnt * 2) == 0);
    for (size_t i = 0; i < cnt; i++) CHECK(hx0[i] == f16(from_f16(ha[i]) + from_f16(hb[i])));
    free(a), free(b), free(g), free(y0), free(y1), free(x0), free(x1);
    free(ha), free(hb), free(hg), free(hy0), free(hy1), free(hx0), free(hx1);
}

/* A digest of the fused op's outputs over 64 rows (thread-count invariance, see main). */
static uint64_t add_rms_digest(void) {
    int64_t m = 64, n = 517;
    size_t cnt = (size_t)(m * n);
    float *a = malloc(cnt * 4), *b = malloc(cnt * 4), *g = malloc((size_t)n * 4), *y = malloc(cnt * 4);
    float *x = malloc(cnt * 4), r[64];
    uint32_t s = 5;
    for (size_t i = 0; i < cnt; i++) a[i] = frand(&s) * 3.0f, b[i] = frand(&s);
    for (int64_t i = 0; i < n; i++) g[i] = frand(&s);
    add_rms_norm_rows(0, ACL_FLOAT, 4, a, b, g, m, n, y, r, x);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < cnt; i++) {
        uint32_t v;
        memcpy(&v, &y[i], 4);
        h = (h ^ v) * 1099511628211ull;
    }
    for (int i = 0; i < 64; i++) {
        uint32_t v;
        memcpy(&v, &r[i], 4);
        h = (h ^ v) * 1099511628211ull;
    }
    free(a), free(b), free(g), free(y), free(x);
    return h;
}

/* Phase-1 refusals of the documented rules, each naming the op and the operand. */
static bool refused(aclnnStatus st, const char *op, const char *what) {
    const char *msg = aclGetRecentErrMsg();
    bool ok = st == ACLNN_ERR_PARAM_INVALID && msg && strstr(msg, op) && strstr(msg, what);
    if (!ok) fprintf(stderr, "  status %d, message '%s' (wanted %s / %s)\n", (int)st, msg ? msg : "(null)", op, what);
    return ok;
}

static void test_documented_refusals(void) {
    int64_t d23[2] = {2, 3}, d3[1] = {3}, d2[1] = {2}, d21[2] = {2, 1}, d4[1] = {4};
    void *p = dev_from(NULL, 256);
    aclTensor *x = acl_view(d23, 2, ACL_FLOAT, NULL, 0, p), *xi = acl_view(d23, 2, ACL_INT32, NULL, 0, p);
    aclTensor *xh = acl_view(d23, 2, ACL_FLOAT16, NULL, 0, p), *g3 = acl_view(d3, 1, ACL_FLOAT, NULL, 0, p);
    aclTensor *g4 = acl_view(d4, 1, ACL_FLOAT, NULL, 0, p), *r21 = acl_view(d21, 2, ACL_FLOAT, NULL, 0, p);
    aclTensor *r21h = acl_view(d21, 2, ACL_FLOAT16, NULL, 0, p), *g3bf = acl_view(d3, 1, ACL_BF16, NULL, 0, p);
    aclTensor *i2 = acl_view(d2, 1, ACL_INT64, NULL, 0, p), *f2 = acl_view(d2, 1, ACL_FLOAT, NULL, 0, p);
    aclTensor *b23 = acl_view(d23, 2, ACL_BOOL, NULL, 0, p);
    uint64_t ws;
    aclOpExecutor *ex;
    /* RmsNorm: gamma = x's trailing dims, gamma x's dtype or FLOAT, yOut x's dtype, rstdOut FLOAT */
    CHECK(refused(aclnnRmsNormGetWorkspaceSize(x, g4, 1e-6, x, r21, &ws, &ex), "aclnnRmsNorm", "gamma"));
    CHECK(refused(aclnnRmsNormGetWorkspaceSize(xh, g3bf, 1e-6, xh, r21, &ws, &ex), "aclnnRmsNorm", "gamma"));
    CHECK(refused(aclnnRmsNormGetWorkspaceSize(x, g3, 1e-6, xh, r21, &ws, &ex), "aclnnRmsNorm", "yOut"));
    CHECK(refused(aclnnRmsNormGetWorkspaceSize(x, g3, 1e-6, x, r21h, &ws, &ex), "aclnnRmsNorm", "rstdOut"));
    CHECK(refused(aclnnRmsNormGetWorkspaceSize(xi, g3, 1e-6, x, r21, &ws, &ex), "aclnnRmsNorm", "x"));
    CHECK(aclnnRmsNormGetWorkspaceSize(xh, g3, 1e-6, xh, r21, &ws, &ex) == ACLNN_SUCCESS); /* F16 x, F32 gamma */
    CHECK(aclDestroyAclOpExecutor(ex) == ACLNN_SUCCESS);
    /* AddRmsNorm: x1, x2, gamma, yOut, xOut one float dtype; rstdOut FLOAT; x2, yOut, xOut x1's shape,
     * gamma x1's trailing dims, rstdOut x1's shape with those dims 1; epsilon >= 0; no empty tensor */
    {
        int64_t d03[2] = {0, 3}, d01[2] = {0, 1}, d22[2] = {2, 2}, d31[2] = {3, 1};
        aclTensor *e03 = acl_view(d03, 2, ACL_FLOAT, NULL, 0, p), *e01 = acl_view(d01, 2, ACL_FLOAT, NULL, 0, p);
        aclTensor *x22 = acl_view(d22, 2, ACL_FLOAT, NULL, 0, p), *r31 = acl_view(d31, 2, ACL_FLOAT, NULL, 0, p);
        aclTensor *g3h = acl_view(d3, 1, ACL_FLOAT16, NULL, 0, p);
        const char *op = "aclnnAddRmsNorm";
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(xi, x, g3, 1e-6, x, r21, x, &ws, &ex), op, "x1"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(x, xh, g3, 1e-6, x, r21, x, &ws, &ex), op, "x2"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(x, x22, g3, 1e-6, x, r21, x, &ws, &ex), op, "x2"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(xh, xh, g3, 1e-6, xh, r21, xh, &ws, &ex), op, "gamma"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(x, x, g3h, 1e-6, x, r21, x, &ws, &ex), op, "gamma"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(x, x, g4, 1e-6, x, r21, x, &ws, &ex), op, "gamma"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(x, x, g3, 1e-6, xh, r21, x, &ws, &ex), op, "yOut"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(x, x, g3, 1e-6, x22, r21, x, &ws, &ex), op, "yOut"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(x, x, g3, 1e-6, x, r21h, x, &ws, &ex), op, "rstdOut"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(x, x, g3, 1e-6, x, r31, x, &ws, &ex), op, "rstdOut"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(x, x, g3, 1e-6, x, r21, xh, &ws, &ex), op, "xOut"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(x, x, g3, 1e-6, x, r21, x22, &ws, &ex), op, "xOut"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(x, x, g3, -1.0, x, r21, x, &ws, &ex), op, "epsilon"));
        CHECK(refused(aclnnAddRmsNormGetWorkspaceSize(e03, e03, g3, 1e-6, e03, e01, e03, &ws, &ex), op, "empty"));
        CHECK(aclnnAddRmsNormGetWorkspaceSize(NULL, x, g3, 1e-6, x, r21, x, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR);
        CHECK(aclnnAddRmsNormGetWorkspaceSize(x, x, g3, 1e-6, x, r21, NULL, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR);
        CHECK(aclnnAddRmsNormGetWorkspaceSize(x, x, g3, 1e-6, x, r21, x, &ws, &ex) == ACLNN_SUCCESS);
        CHECK(aclDestroyAclOpExecutor(ex) == ACLNN_SUCCESS);
        aclDestroyTensor(e03), aclDestroyTensor(e01), aclDestroyTensor(x22), aclDestroyTensor(r31);
        aclDestroyTensor(g3h);
    }
    /* Softmax: float dtypes, dim inside the rank, out of self's shape */
    CHECK(refused(aclnnSoftmaxGetWorkspaceSize(xi, 1, xi, &ws, &ex), "aclnnSoftmax", "self"));
    CHECK(refused(aclnnSoftmaxGetWorkspaceSize(x, 2, x, &ws, &ex), "aclnnSoftmax", "dim"));
    CHECK(refused(aclnnSoftmaxGetWorkspaceSize(x, -3, x, &ws, &ex), "aclnnSoftmax", "dim"));
    CHECK(refused(aclnnSoftmaxGetWorkspaceSize(x, 1, r21, &ws, &ex), "aclnnSoftmax", "out"));
    /* ArgMax: self not BOOL, out INT32 / INT64, dim inside the rank */
    CHECK(refused(aclnnArgMaxGetWorkspaceSize(b23, 1, false, i2, &ws, &ex), "aclnnArgMax", "self"));
    CHECK(refused(aclnnArgMaxGetWorkspaceSize(x, 1, false, f2, &ws, &ex), "aclnnArgMax", "out"));
    CHECK(refused(aclnnArgMaxGetWorkspaceSize(x, 2, false, i2, &ws, &ex), "aclnnArgMax", "dim"));
    /* GeluV2: float x, y of x's dtype and shape, approximate 0 or 1; Tanh: a float out of self's shape */
    CHECK(refused(aclnnGeluV2GetWorkspaceSize(xi, 0, xi, &ws, &ex), "aclnnGeluV2", "x"));
    CHECK(refused(aclnnGeluV2GetWorkspaceSize(x, 0, xh, &ws, &ex), "aclnnGeluV2", "y"));
    CHECK(refused(aclnnGeluV2GetWorkspaceSize(x, 1, r21, &ws, &ex), "aclnnGeluV2", "y"));
    CHECK(refused(aclnnGeluV2GetWorkspaceSize(x, 2, x, &ws, &ex), "aclnnGeluV2", "approximate"));
    CHECK(refused(aclnnGeluV2GetWorkspaceSize(x, -1, x, &ws, &ex), "aclnnGeluV2", "approximate"));
    CHECK(aclnnGeluV2GetWorkspaceSize(NULL, 0, x, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR);
    CHECK(aclnnGeluV2GetWorkspaceSize(x, 2, NULL, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR);
    CHECK(refused(aclnnTanhGetWorkspaceSize(x, xi, &ws, &ex), "aclnnTanh", "out"));
    CHECK(refused(aclnnTanhGetWorkspaceSize(x, b23, &ws, &ex), "aclnnTanh", "out"));
    CHECK(refused(aclnnTanhGetWorkspaceSize(x, r21, &ws, &ex), "aclnnTanh", "out"));
    CHECK(aclnnTanhGetWorkspaceSize(NULL, x, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR);
    {
        aclTensor *xd = acl_view(d23, 2, ACL_DOUBLE, NULL, 0, p);
        CHECK(refused(aclnnTanhGetWorkspaceSize(xd, x, &ws, &ex), "aclnnTanh", "self"));
        aclDestroyTensor(xd);
    }
    CHECK(aclnnTanhGetWorkspaceSize(b23, xh, &ws, &ex) == ACLNN_SUCCESS); /* BOOL self, F16 out */
    CHECK(aclDestroyAclOpExecutor(ex) == ACLNN_SUCCESS);
    /* Sin / Cos / Div: a float out */
    CHECK(refused(aclnnSinGetWorkspaceSize(x, xi, &ws, &ex), "aclnnSin", "out"));
    CHECK(refused(aclnnCosGetWorkspaceSize(x, xi, &ws, &ex), "aclnnCos", "out"));
    CHECK(refused(aclnnDivGetWorkspaceSize(x, x, xi, &ws, &ex), "aclnnDiv", "out"));
    aclTensor *all[] = {x, xi, xh, g3, g4, r21, r21h, g3bf, i2, f2, b23};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) aclDestroyTensor(all[i]);
    aclrtFree(p);
}

static void test_batch_invariance(void) {
    float *r1 = malloc(N * 4), *s1 = malloc(N * 4), *r = malloc(N * 4), *s = malloc(N * 4);
    uint64_t h1 = batch_row0(1, r1, s1);
    for (int64_t m = 7; m <= 64; m += 57) {
        CHECK(batch_row0(m, r, s) == h1);
        CHECK(memcmp(r, r1, N * 4) == 0 && memcmp(s, s1, N * 4) == 0);
    }
    free(r1), free(s1), free(r), free(s);
}

/* ---- elementwise and index ops ------------------------------------------------------------------ */
static void test_silu_swiglu(void) {
    int64_t dx[2] = {2, 8}, dh[2] = {2, 4};
    float x[16], y[16], g[8];
    uint32_t s = 3;
    for (int i = 0; i < 16; i++) x[i] = frand(&s) * 6.0f;
    void *px = dev_from(x, 64), *py = dev_from(NULL, 64), *pg = dev_from(NULL, 32);
    aclTensor *tx = acl_view(dx, 2, ACL_FLOAT, NULL, 0, px), *ty = acl_view(dx, 2, ACL_FLOAT, NULL, 0, py), *tg = acl_view(dh, 2, ACL_FLOAT, NULL, 0, pg);
    uint64_t ws;
    aclOpExecutor *ex;
    launch(aclnnSiluGetWorkspaceSize(tx, ty, &ws, &ex), aclnnSilu, &ws, &ex);
    to_host(y, py, 64);
    for (int i = 0; i < 16; i++) CHECK(fabs(y[i] - x[i] / (1.0 + exp(-(double)x[i]))) <= 1e-6);
    launch(aclnnSwiGluGetWorkspaceSize(tx, -1, tg, &ws, &ex), aclnnSwiGlu, &ws, &ex);
    to_host(g, pg, 32);
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 4; i++) {
            double a = x[r * 8 + i], b = x[r * 8 + 4 + i];
            CHECK(fabs(g[r * 4 + i] - a / (1.0 + exp(-a)) * b) <= 1e-5);
        }
    /* acl_host's own exp (16 lanes, then a scalar tail): within a few ulp of the true silu over a
     * wide range, the same bits wherever an element lies, and the IEEE cases */
    {
        enum { NS = 203 };
        int64_t dn[1] = {NS};
        float v[NS], w[NS], rv[NS], rw[NS];
        for (int i = 0; i < NS - 11; i++) v[i] = -40.0f + 80.0f * (float)i / (NS - 12);
        const float special[11] = {-100.0f, -88.0f, -87.3f, -0.0f, 0.0f, 88.7f, 89.0f, 100.0f,
                                   INFINITY, -INFINITY, NAN};
        memcpy(v + NS - 11, special, sizeof special);
        for (int i = 0; i < NS; i++) rv[i] = v[(i + 5) % NS]; /* every element at another lane */
        void *pv = dev_from(v, sizeof v), *pw = dev_from(NULL, sizeof v);
        void *prv = dev_from(rv, sizeof v), *prw = dev_from(NULL, sizeof v);
        aclTensor *tv = acl_view(dn, 1, ACL_FLOAT, NULL, 0, pv), *tw = acl_view(dn, 1, ACL_FLOAT, NULL, 0, pw);
        aclTensor *trv = acl_view(dn, 1, ACL_FLOAT, NULL, 0, prv), *trw = acl_view(dn, 1, ACL_FLOAT, NULL, 0, prw);
        launch(aclnnSiluGetWorkspaceSize(tv, tw, &ws, &ex), aclnnSilu, &ws, &ex);
        launch(aclnnSiluGetWorkspaceSize(trv, trw, &ws, &ex), aclnnSilu, &ws, &ex);
        to_host(w, pw, sizeof w);
        to_host(rw, prw, sizeof w);
        for (int i = 0; i < NS; i++) CHECK(memcmp(&rw[i], &w[(i + 5) % NS], 4) == 0);
        for (int i = 0; i < NS - 11; i++) {
            double ref = v[i] / (1.0 + exp(-(double)v[i]));
            CHECK(fabs(w[i] - ref) <= 4e-7 * fabs(ref) + 1e-30);
        }
        const float *sw = w + NS - 11;
        CHECK(sw[0] == 0.0f && signbit(sw[0]));           /* -100 / inf */
        CHECK(fabsf(sw[1]) < 1e-30f && fabsf(sw[2]) < 1e-30f);
        CHECK(sw[3] == 0.0f && signbit(sw[3]) && sw[4] == 0.0f && !signbit(sw[4]));
        CHECK(sw[5] == 88.7f && sw[6] == 89.0f && sw[7] == 100.0f);
        CHECK(isinf(sw[8]) && sw[8] > 0 && isnan(sw[9]) && isnan(sw[10]));
        aclDestroyTensor(tv), aclDestroyTensor(tw), aclDestroyTensor(trv), aclDestroyTensor(trw);
        aclrtFree(pv), aclrtFree(pw), aclrtFree(prv), aclrtFree(prw);
    }
    /* errors name the op and the operand */
    CHECK(aclnnSwiGluGetWorkspaceSize(tx, -1, ty, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "aclnnSwiGlu") != NULL);
    int64_t dz[2] = {0, 8}, dzh[2] = {0, 4};
    aclTensor *tz = acl_view(dz, 2, ACL_FLOAT, NULL, 0, px), *tzh = acl_view(dzh, 2, ACL_FLOAT, NULL, 0, pg);
    CHECK(aclnnSwiGluGetWorkspaceSize(tz, -1, tzh, &ws, &ex) == ACLNN_ERR_PARAM_INVALID); /* no empty x */
    CHECK(strstr(aclGetRecentErrMsg(), "empty") != NULL);
    aclDestroyTensor(tz), aclDestroyTensor(tzh);
    aclTensor *ti = acl_view(dx, 2, ACL_INT32, NULL, 0, px);
    CHECK(aclnnSiluGetWorkspaceSize(ti, ty, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    const char *msg = aclGetRecentErrMsg();
    CHECK(strstr(msg, "aclnnSilu") != NULL && strstr(msg, "self") != NULL);
    CHECK(aclnnSiluGetWorkspaceSize(NULL, ty, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR);
    aclDestroyTensor(tx), aclDestroyTensor(ty), aclDestroyTensor(tg), aclDestroyTensor(ti);
    aclrtFree(px), aclrtFree(py), aclrtFree(pg);
}

/* ---- GeluV2 (tanh and erf forms) and Tanh ------------------------------------------------------- */
typedef enum { K_GELU_TANH, K_GELU_ERF, K_TANH, K_SILU } act_k;

static double ref_act(act_k k, double x) {
    if (k == K_TANH) return tanh(x);
    if (k == K_SILU) return isinf(x) ? (x > 0 ? x : 0.0) : x / (1.0 + exp(-x));
    if (isinf(x)) return x > 0 ? x : 0.0;
    if (k == K_GELU_ERF) return 0.5 * x * erfc(-x / sqrt(2.0));
    double u = sqrt(2.0 / M_PI) * x * (1.0 + 0.044715 * x * x);
    return x / (1.0 + exp(-2.0 * u));
}

/* y = act(x) for n F32 values through the aclnn call (dtype dt for x and y: F32 or F16 storage) */
static void run_act(act_k k, const void *x, void *y, int64_t n, aclDataType dt, aclDataType out_dt) {
    size_t in_sz = dt == ACL_FLOAT ? 4 : dt == ACL_INT32 ? 4 : 2, out_sz = out_dt == ACL_FLOAT ? 4 : 2;
    int64_t d[1] = {n};
    void *px = dev_from(x, (size_t)n * in_sz), *py = dev_from(NULL, (size_t)n * out_sz);
    aclTensor *tx = acl_view(d, 1, dt, NULL, 0, px), *ty = acl_view(d, 1, out_dt, NULL, 0, py);
    uint64_t ws;
    aclOpExecutor *ex;
    if (k == K_TANH)
        launch(aclnnTanhGetWorkspaceSize(tx, ty, &ws, &ex), aclnnTanh, &ws, &ex);
    else if (k == K_SILU)
        launch(aclnnSiluGetWorkspaceSize(tx, ty, &ws, &ex), aclnnSilu, &ws, &ex);
    else
        launch(aclnnGeluV2GetWorkspaceSize(tx, k == K_GELU_TANH ? 1 : 0, ty, &ws, &ex), aclnnGeluV2, &ws, &ex);
    to_host(y, py, (size_t)n * out_sz);
    aclDestroyTensor(tx), aclDestroyTensor(ty);
    aclrtFree(px), aclrtFree(py);
}

/* A digest of the three ops over 3 x N values (several thread-pool tasks). */
/* The bits of every activation over random values and the IEEE cases (the vector lanes and the
 * one-at-a-time tail both see some), for comparing thread counts and instruction sets. */
static uint64_t act_digest(void) {
    int64_t n = 3 * N + 13;
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    uint32_t s = 11;
    for (int64_t i = 0; i < n; i++) x[i] = frand(&s) * 12.0f;
    const float special[10] = {-INFINITY, -1e30f, -90.0f, -0.0f, 0.0f, 1e-30f, 90.0f, 1e30f, INFINITY, NAN};
    memcpy(x + 5, special, sizeof special);        /* in the vector part */
    memcpy(x + n - 10, special, sizeof special);   /* in the tail */
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < 4; k++) {
        run_act((act_k)k, x, y, n, ACL_FLOAT, ACL_FLOAT);
        for (int64_t i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &y[i], 4);
            h = (h ^ b) * 1099511628211ull;
        }
    }
    free(x), free(y);
    return h;
}

static void test_gelu_tanh(void) {
    /* accuracy over a dense sweep (ulp of the result, below 1e-30 in absolute terms), the IEEE cases,
     * and lane independence: the sweep rotated by 5 elements gives the same bits per element */
    enum { NS = 20011 };
    float *v = malloc(NS * 4), *w = malloc(NS * 4), *rv = malloc(NS * 4), *rw = malloc(NS * 4);
    const float special[12] = {-INFINITY, -1e30f, -200.0f, -14.5f, -0.0f, 0.0f, 1e-30f, 14.5f, 200.0f,
                               1e30f, INFINITY, NAN};
    for (int i = 0; i < NS - 12; i++) v[i] = -16.0f + 32.0f * (float)i / (NS - 13);
    memcpy(v + NS - 12, special, sizeof special);
    for (int i = 0; i < NS; i++) rv[i] = v[(i + 5) % NS];
    /* measured 2.5 / 4.4 / 1.2 ulp: gelu tanh (2u in double), gelu erf (the products of the erfc
     * branch: exp, its correction, the polynomial), tanh */
    const double max_ulp[3] = {3.0, 5.0, 1.5};
    for (int k = 0; k < 3; k++) {
        run_act((act_k)k, v, w, NS, ACL_FLOAT, ACL_FLOAT);
        run_act((act_k)k, rv, rw, NS, ACL_FLOAT, ACL_FLOAT);
        int lane_mismatch = 0;
        for (int i = 0; i < NS; i++) lane_mismatch += memcmp(&rw[i], &w[(i + 5) % NS], 4) != 0;
        CHECK(lane_mismatch == 0);
        double worst = 0, worst_tail = 0;
        for (int i = 0; i < NS - 12; i++) {
            double ref = ref_act((act_k)k, v[i]), err = fabs(w[i] - ref);
            if (fabs(ref) < 1e-30) { CHECK(fabs(w[i]) < 1e-29); continue; }
            double ulp = err / (ldexp(1.0, ilogb(ref) - 23));
            if (fabsf(v[i]) < 3.0f) worst = fmax(worst, ulp);
            else worst_tail = fmax(worst_tail, ulp);
        }
        if (getenv("ACT_ULP") || worst > max_ulp[k] || worst_tail > max_ulp[k])
            fprintf(stderr, "  act %d: %.2f ulp (|x| < 3), %.2f ulp (|x| >= 3)\n", k, worst, worst_tail);
        /* the tails as good as the core: exp's argument (2u, x^2 / 2) is carried beyond F32 */
        CHECK(worst <= max_ulp[k] && worst_tail <= max_ulp[k]);
        const float *sw = w + NS - 12;
        if (k == K_TANH) {
            CHECK(sw[0] == -1.0f && sw[1] == -1.0f && sw[2] == -1.0f && sw[3] == -1.0f);
            CHECK(sw[4] == 0.0f && signbit(sw[4]) && sw[5] == 0.0f && !signbit(sw[5]) && sw[6] == 1e-30f);
            CHECK(sw[7] == 1.0f && sw[8] == 1.0f && sw[9] == 1.0f && sw[10] == 1.0f && isnan(sw[11]));
        } else {
            CHECK(sw[0] == 0.0f && sw[1] == 0.0f && sw[2] == 0.0f && fabsf(sw[3]) < 1e-30f);
            CHECK(sw[4] == 0.0f && sw[5] == 0.0f && fabsf(sw[6] - 0.5e-30f) < 1e-36f);
            CHECK(sw[7] == 14.5f && sw[8] == 200.0f && sw[9] == 1e30f && isinf(sw[10]) && sw[10] > 0);
            CHECK(isnan(sw[11]));
        }
    }
    /* F16 in and out: computed in F32, rounded once */
    {
        enum { NH = 37 };
        uint16_t hx[NH], hy[NH];
        for (int i = 0; i < NH; i++) hx[i] = f16(-6.0f + 12.0f * (float)i / (NH - 1));
        for (int k = 0; k < 3; k++) {
            run_act((act_k)k, hx, hy, NH, ACL_FLOAT16, ACL_FLOAT16);
            for (int i = 0; i < NH; i++) {
                double ref = ref_act((act_k)k, from_f16(hx[i]));
                CHECK(fabs(from_f16(hy[i]) - ref) <= fabs(ref) * 0x1p-11 + 1e-7);
            }
        }
    }
    /* Tanh of INT32 self into an F32 out (integers are computed as FLOAT) */
    {
        int32_t ix[4] = {-3, 0, 1, 20};
        float fy[4];
        run_act(K_TANH, ix, fy, 4, ACL_INT32, ACL_FLOAT);
        for (int i = 0; i < 4; i++) CHECK(fabs(fy[i] - tanh((double)ix[i])) <= 1.2e-7);
    }
    /* empty tensors: accepted, nothing to do */
    {
        int64_t d0[2] = {0, 4};
        void *p = dev_from(NULL, 16);
        aclTensor *e0 = acl_view(d0, 2, ACL_FLOAT, NULL, 0, p), *e1 = acl_view(d0, 2, ACL_FLOAT, NULL, 0, p);
        uint64_t ws;
        aclOpExecutor *ex;
        launch(aclnnGeluV2GetWorkspaceSize(e0, 0, e1, &ws, &ex), aclnnGeluV2, &ws, &ex);
        launch(aclnnTanhGetWorkspaceSize(e0, e1, &ws, &ex), aclnnTanh, &ws, &ex);
        aclDestroyTensor(e0), aclDestroyTensor(e1);
        aclrtFree(p);
    }
    free(v), free(w), free(rv), free(rw);
}

static void test_sin_cos_div(void) {
    int64_t d[1] = {6};
    float x[6] = {0.0f, 0.5f, -1.25f, 3.0f, 100.0f, 4000.5f}, b[6] = {1, 2, 4, -8, 0.5f, 3}, y[6];
    void *px = dev_from(x, 24), *pb = dev_from(b, 24), *py = dev_from(NULL, 24);
    aclTensor *tx = acl_view(d, 1, ACL_FLOAT, NULL, 0, px), *tb = acl_view(d, 1, ACL_FLOAT, NULL, 0, pb), *ty = acl_view(d, 1, ACL_FLOAT, NULL, 0, py);
    uint64_t ws;
    aclOpExecutor *ex;
    launch(aclnnSinGetWorkspaceSize(tx, ty, &ws, &ex), aclnnSin, &ws, &ex);
    to_host(y, py, 24);
    for (int i = 0; i < 6; i++) CHECK(fabs(y[i] - sin((double)x[i])) <= 1e-6);
    launch(aclnnCosGetWorkspaceSize(tx, ty, &ws, &ex), aclnnCos, &ws, &ex);
    to_host(y, py, 24);
    for (int i = 0; i < 6; i++) CHECK(fabs(y[i] - cos((double)x[i])) <= 1e-6);
    launch(aclnnDivGetWorkspaceSize(tx, tb, ty, &ws, &ex), aclnnDiv, &ws, &ex);
    to_host(y, py, 24);
    for (int i = 0; i < 6; i++) CHECK(y[i] == x[i] / b[i]);
    aclDestroyTensor(tx), aclDestroyTensor(tb), aclDestroyTensor(ty);
    aclrtFree(px), aclrtFree(pb), aclrtFree(py);
}

/* Clamp and IsNegInf on F16 (IsNegInf also on F32, BF16 and a strided view): how the attention
 * mask becomes a finite pse and a BOOL attenMask. */
static void test_clamp_isneginf(void) {
    int64_t d[1] = {6};
    const float x[6] = {0.0f, -INFINITY, 3.5f, INFINITY, -70000.0f, NAN};
    uint16_t xh[6], yh[6];
    unsigned char m[6];
    for (int i = 0; i < 6; i++) xh[i] = aclFloatToFloat16(x[i]);
    void *px = dev_from(xh, 12), *py = dev_from(NULL, 12), *pm = dev_from(NULL, 6);
    aclTensor *tx = acl_view(d, 1, ACL_FLOAT16, NULL, 0, px), *ty = acl_view(d, 1, ACL_FLOAT16, NULL, 0, py);
    aclTensor *tm = acl_view(d, 1, ACL_BOOL, NULL, 0, pm), *tf = acl_view(d, 1, ACL_FLOAT, NULL, 0, py);
    float lo = -65504.0f, hi = 65504.0f;
    aclScalar *slo = aclCreateScalar(&lo, ACL_FLOAT), *shi = aclCreateScalar(&hi, ACL_FLOAT);
    uint64_t ws;
    aclOpExecutor *ex;
    launch(aclnnClampGetWorkspaceSize(tx, slo, shi, ty, &ws, &ex), aclnnClamp, &ws, &ex);
    to_host(yh, py, 12);
    const float want[5] = {0.0f, -65504.0f, 3.5f, 65504.0f, -65504.0f};
    for (int i = 0; i < 5; i++) CHECK(aclFloat16ToFloat(yh[i]) == want[i]);
    CHECK(isnan(aclFloat16ToFloat(yh[5])));
    launch(aclnnIsNegInfGetWorkspaceSize(tx, tm, &ws, &ex), aclnnIsNegInf, &ws, &ex);
    to_host(m, pm, 6);
    for (int i = 0; i < 6; i++) CHECK(m[i] == (i == 1 || i == 4)); /* -70000 is -inf in F16 */
    { /* F32, BF16 and a strided F16 view (every other element) give the same answers */
        uint16_t bh[6];
        for (int i = 0; i < 6; i++) {
            uint32_t b;
            memcpy(&b, &x[i], 4);
            bh[i] = (uint16_t)(b >> 16); /* each value is exact in BF16 */
        }
        void *pf = dev_from(x, 24), *pb = dev_from(bh, 12), *ps = dev_from(NULL, 24);
        for (int i = 0; i < 6; i++) /* xh[i] at element 2i, a decoy -inf between */
            CHECK(aclrtMemcpy((char *)ps + 4 * i, 4, (uint16_t[2]){xh[i], 0xfc00u}, 4, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
        int64_t st[1] = {2};
        aclTensor *in[3] = {acl_view(d, 1, ACL_FLOAT, NULL, 0, pf), acl_view(d, 1, ACL_BF16, NULL, 0, pb),
                            acl_view(d, 1, ACL_FLOAT16, st, 0, ps)};
        for (int k = 0; k < 3; k++) {
            memset(m, 7, sizeof m);
            CHECK(aclrtMemcpy(pm, 6, m, 6, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
            launch(aclnnIsNegInfGetWorkspaceSize(in[k], tm, &ws, &ex), aclnnIsNegInf, &ws, &ex);
            to_host(m, pm, 6);
            for (int i = 0; i < 6; i++) CHECK(m[i] == (i == 1 || (k == 2 && i == 4)));
            aclDestroyTensor(in[k]);
        }
        aclrtFree(pf), aclrtFree(pb), aclrtFree(ps);
    }
    /* errors: out dtype */
    CHECK(aclnnClampGetWorkspaceSize(tx, slo, shi, tf, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "aclnnClamp") != NULL);
    CHECK(aclnnIsNegInfGetWorkspaceSize(tx, ty, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "aclnnIsNegInf") != NULL);
    CHECK(aclnnClampGetWorkspaceSize(tx, NULL, NULL, ty, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR);
    aclDestroyScalar(slo), aclDestroyScalar(shi);
    aclDestroyTensor(tx), aclDestroyTensor(ty), aclDestroyTensor(tm), aclDestroyTensor(tf);
    aclrtFree(px), aclrtFree(py), aclrtFree(pm);
}

static void test_argmax_index_copy(void) {
    int64_t dx[2] = {3, 5}, dout[1] = {3};
    float x[15] = {1, 5, 5, 0, 2, -1, -2, -3, -0.5f, -4, 0, 0, 0, 0, 7};
    int64_t idx[3];
    void *px = dev_from(x, 60), *pi = dev_from(NULL, 24);
    aclTensor *tx = acl_view(dx, 2, ACL_FLOAT, NULL, 0, px), *ti = acl_view(dout, 1, ACL_INT64, NULL, 0, pi);
    uint64_t ws;
    aclOpExecutor *ex;
    launch(aclnnArgMaxGetWorkspaceSize(tx, 1, false, ti, &ws, &ex), aclnnArgMax, &ws, &ex);
    to_host(idx, pi, 24);
    CHECK(idx[0] == 1 && idx[1] == 3 && idx[2] == 4);
    /* selfRef [4, 5] F16 rows 3 and 0 from source [2, 5] */
    int64_t dself[2] = {4, 5}, dsrc[2] = {2, 5}, dind[1] = {2};
    uint16_t self[20] = {0}, src[10];
    for (int i = 0; i < 10; i++) src[i] = aclFloatToFloat16((float)(i + 1));
    int32_t ind[2] = {3, 0};
    void *ps = dev_from(self, 40), *pr = dev_from(src, 20), *pn = dev_from(ind, 8);
    aclTensor *ts = acl_view(dself, 2, ACL_FLOAT16, NULL, 0, ps), *tr = acl_view(dsrc, 2, ACL_FLOAT16, NULL, 0, pr);
    aclTensor *tn = acl_view(dind, 1, ACL_INT32, NULL, 0, pn);
    launch(aclnnInplaceIndexCopyGetWorkspaceSize(ts, 0, tn, tr, &ws, &ex), aclnnInplaceIndexCopy, &ws, &ex);
    to_host(self, ps, 40);
    for (int i = 0; i < 5; i++) {
        CHECK(self[15 + i] == src[i] && self[i] == src[5 + i] && self[5 + i] == 0);
    }
    /* a source of another dtype is an error naming the op */
    aclTensor *tf = acl_view(dsrc, 2, ACL_FLOAT, NULL, 0, pr);
    CHECK(aclnnInplaceIndexCopyGetWorkspaceSize(ts, 0, tn, tf, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "aclnnInplaceIndexCopy") != NULL);
    /* an index out of range fails the launch */
    ind[1] = 9;
    CHECK(aclrtMemcpy(pn, 8, ind, 8, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
    CHECK(aclnnInplaceIndexCopyGetWorkspaceSize(ts, 0, tn, tr, &ws, &ex) == ACLNN_SUCCESS);
    aclnnStatus st = aclnnInplaceIndexCopy(NULL, ws, ex, stream);
    aclError sync = aclrtSynchronizeStream(stream);
    CHECK(st != ACLNN_SUCCESS || sync != ACL_SUCCESS);
    aclGetRecentErrMsg();
    aclDestroyTensor(tx), aclDestroyTensor(ti), aclDestroyTensor(ts), aclDestroyTensor(tr), aclDestroyTensor(tn),
        aclDestroyTensor(tf);
    aclrtFree(px), aclrtFree(pi), aclrtFree(ps), aclrtFree(pr), aclrtFree(pn);
}

/* ---- ReduceSum and Argsort ---------------------------------------------------------------------- */
/* Sums of the m rows (n each) of x over the last dim, keepDims, F32. */
static void reduce_sum_rows(const float *x, int64_t m, int64_t n, float *y) {
    int64_t dx[2] = {m, n}, dy[2] = {m, 1}, last = 1;
    void *px = dev_from(x, (size_t)(m * n) * 4), *py = dev_from(NULL, (size_t)m * 4);
    aclTensor *tx = acl_view(dx, 2, ACL_FLOAT, NULL, 0, px), *ty = acl_view(dy, 2, ACL_FLOAT, NULL, 0, py);
    aclIntArray *dims = aclCreateIntArray(&last, 1);
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    launch(aclnnReduceSumGetWorkspaceSize(tx, dims, true, ACL_FLOAT, ty, &ws, &ex), aclnnReduceSum, &ws, &ex);
    to_host(y, py, (size_t)m * 4);
    aclDestroyIntArray(dims);
    aclDestroyTensor(tx), aclDestroyTensor(ty);
    aclrtFree(px), aclrtFree(py);
}

/* Argsort of the m rows (n each) of F32 x along the last dim. */
static void argsort_rows(const float *x, int64_t m, int64_t n, bool descending, int64_t *idx) {
    int64_t dx[2] = {m, n};
    void *px = dev_from(x, (size_t)(m * n) * 4), *pi = dev_from(NULL, (size_t)(m * n) * 8);
    aclTensor *tx = acl_view(dx, 2, ACL_FLOAT, NULL, 0, px), *ti = acl_view(dx, 2, ACL_INT64, NULL, 0, pi);
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    launch(aclnnArgsortGetWorkspaceSize(tx, -1, descending, ti, &ws, &ex), aclnnArgsort, &ws, &ex);
    to_host(idx, pi, (size_t)(m * n) * 8);
    aclDestroyTensor(tx), aclDestroyTensor(ti);
    aclrtFree(px), aclrtFree(pi);
}

/* A digest of ReduceSum and Argsort (with ties) over 64 rows: the same for any thread count. */
static uint64_t reduce_digest(void) {
    int64_t m = 64, n = N;
    float *x = malloc((size_t)(m * n) * 4), *y = malloc((size_t)m * 4);
    int64_t *idx = malloc((size_t)(m * n) * 8);
    uint32_t s = 5;
    for (int64_t i = 0; i < m * n; i++) x[i] = (float)(int)(frand(&s) * 50.0f) * 0.5f; /* many ties */
    reduce_sum_rows(x, m, n, y);
    argsort_rows(x, m, n, true, idx);
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < m; i++) {
        uint32_t b;
        memcpy(&b, &y[i], 4);
        h = (h ^ b) * 1099511628211ull;
    }
    for (int64_t i = 0; i < m * n; i++) h = (h ^ (uint64_t)idx[i]) * 1099511628211ull;
    free(x), free(y), free(idx);
    return h;
}

static void test_reduce_sum_argsort(void) {
    /* ReduceSum: rows of a strided view (every other column), both keepDims, F16 in and out */
    float x[4 * 6];
    for (int i = 0; i < 24; i++) x[i] = (float)(i % 7) - 2.5f;
    void *px = dev_from(x, sizeof x), *py = dev_from(NULL, 64);
    int64_t dv[2] = {4, 3}, sv[2] = {6, 2}, dk[2] = {4, 1}, dn[1] = {4}, last = -1, d0 = 0;
    aclTensor *tv = acl_view(dv, 2, ACL_FLOAT, sv, 0, px), *tk = acl_view(dk, 2, ACL_FLOAT, NULL, 0, py);
    aclTensor *tn = acl_view(dn, 1, ACL_FLOAT, NULL, 0, py);
    aclIntArray *dims = aclCreateIntArray(&last, 1), *dims0 = aclCreateIntArray(&d0, 1);
    uint64_t ws;
    aclOpExecutor *ex;
    float y[4];
    launch(aclnnReduceSumGetWorkspaceSize(tv, dims, true, ACL_FLOAT, tk, &ws, &ex), aclnnReduceSum, &ws, &ex);
    to_host(y, py, 16);
    for (int r = 0; r < 4; r++) CHECK(y[r] == x[6 * r] + x[6 * r + 2] + x[6 * r + 4]);
    int64_t d3[1] = {3};
    aclTensor *t3 = acl_view(d3, 1, ACL_FLOAT, NULL, 0, py);
    launch(aclnnReduceSumGetWorkspaceSize(tv, dims0, false, ACL_FLOAT, t3, &ws, &ex), aclnnReduceSum, &ws, &ex);
    aclDestroyTensor(t3);
    to_host(y, py, 12);
    for (int c = 0; c < 3; c++) CHECK(y[c] == x[2 * c] + x[6 + 2 * c] + x[12 + 2 * c] + x[18 + 2 * c]);
    /* refusals: out dtype differs from dtype, a dim out of range or repeated, the wrong out shape,
     * an empty dims list (not implemented), complex dtype */
    aclTensor *th = acl_view(dk, 2, ACL_FLOAT16, NULL, 0, py);
    int64_t rep[2] = {1, -1}, far = 2;
    aclIntArray *drep = aclCreateIntArray(rep, 2), *dfar = aclCreateIntArray(&far, 1), *dnone = aclCreateIntArray(rep, 0);
    CHECK(refused(aclnnReduceSumGetWorkspaceSize(tv, dims, true, ACL_FLOAT, th, &ws, &ex), "aclnnReduceSum", "dtype"));
    CHECK(refused(aclnnReduceSumGetWorkspaceSize(tv, dfar, true, ACL_FLOAT, tk, &ws, &ex), "aclnnReduceSum", "dims"));
    CHECK(refused(aclnnReduceSumGetWorkspaceSize(tv, drep, true, ACL_FLOAT, tk, &ws, &ex), "aclnnReduceSum", "twice"));
    CHECK(refused(aclnnReduceSumGetWorkspaceSize(tv, dims, false, ACL_FLOAT, tk, &ws, &ex), "aclnnReduceSum", "out"));
    CHECK(refused(aclnnReduceSumGetWorkspaceSize(tv, dnone, true, ACL_FLOAT, tk, &ws, &ex), "aclnnReduceSum", "empty"));
    CHECK(aclnnReduceSumGetWorkspaceSize(tv, NULL, true, ACL_FLOAT, tk, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR);
    CHECK(aclnnReduceSumGetWorkspaceSize(tv, dims, true, ACL_FLOAT16, th, &ws, &ex) == ACLNN_SUCCESS);
    CHECK(aclDestroyAclOpExecutor(ex) == ACLNN_SUCCESS);
    aclDestroyIntArray(drep), aclDestroyIntArray(dfar), aclDestroyIntArray(dnone);
    aclDestroyIntArray(dims), aclDestroyIntArray(dims0);
    aclDestroyTensor(tv), aclDestroyTensor(tk), aclDestroyTensor(tn), aclDestroyTensor(th);
    aclrtFree(px), aclrtFree(py);

    /* Argsort: ties in ascending index order both ways, NaN above every number, -0 == 0 */
    const float row[8] = {3.0f, 1.0f, NAN, 1.0f, -0.0f, 3.0f, 0.0f, -INFINITY};
    int64_t idx[8];
    argsort_rows(row, 1, 8, false, idx);
    const int64_t asc[8] = {7, 4, 6, 1, 3, 0, 5, 2}, desc[8] = {2, 0, 5, 1, 3, 4, 6, 7};
    CHECK(memcmp(idx, asc, sizeof asc) == 0);
    argsort_rows(row, 1, 8, true, idx);
    CHECK(memcmp(idx, desc, sizeof desc) == 0);
    /* along dim 0 of a [3, 2] INT32 tensor */
    int32_t xi[6] = {5, -1, 2, 7, -9, 0};
    int64_t d32[2] = {3, 2}, oi[6];
    void *pxi = dev_from(xi, 24), *poi = dev_from(NULL, 48);
    aclTensor *txi = acl_view(d32, 2, ACL_INT32, NULL, 0, pxi), *toi = acl_view(d32, 2, ACL_INT64, NULL, 0, poi);
    launch(aclnnArgsortGetWorkspaceSize(txi, 0, false, toi, &ws, &ex), aclnnArgsort, &ws, &ex);
    to_host(oi, poi, 48);
    const int64_t want[6] = {2, 0, 1, 2, 0, 1};
    CHECK(memcmp(oi, want, sizeof want) == 0);
    /* refusals: out INT64 of self's shape, dim inside the rank, no DOUBLE / BOOL self */
    aclTensor *to32 = acl_view(d32, 2, ACL_INT32, NULL, 0, poi), *tof = acl_view(dn, 1, ACL_INT64, NULL, 0, poi);
    aclTensor *txd = acl_view(d32, 2, ACL_DOUBLE, NULL, 0, poi), *txb = acl_view(d32, 2, ACL_BOOL, NULL, 0, pxi);
    CHECK(refused(aclnnArgsortGetWorkspaceSize(txi, 0, false, to32, &ws, &ex), "aclnnArgsort", "out"));
    CHECK(refused(aclnnArgsortGetWorkspaceSize(txi, 0, false, tof, &ws, &ex), "aclnnArgsort", "out"));
    CHECK(refused(aclnnArgsortGetWorkspaceSize(txi, 2, false, toi, &ws, &ex), "aclnnArgsort", "dim"));
    CHECK(refused(aclnnArgsortGetWorkspaceSize(txi, -3, false, toi, &ws, &ex), "aclnnArgsort", "dim"));
    CHECK(refused(aclnnArgsortGetWorkspaceSize(txd, 0, false, toi, &ws, &ex), "aclnnArgsort", "self"));
    CHECK(refused(aclnnArgsortGetWorkspaceSize(txb, 0, false, toi, &ws, &ex), "aclnnArgsort", "self"));
    CHECK(aclnnArgsortGetWorkspaceSize(NULL, 0, false, toi, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR);
    aclDestroyTensor(txi), aclDestroyTensor(toi), aclDestroyTensor(to32), aclDestroyTensor(tof);
    aclDestroyTensor(txd), aclDestroyTensor(txb);
    aclrtFree(pxi), aclrtFree(poi);

    /* empty tensors (both documents: "支持空Tensor"): a sum over an empty dim is 0; an empty sort
     * writes nothing */
    int64_t d20[2] = {2, 0}, d21[2] = {2, 1}, d03[2] = {0, 3};
    float sums[2] = {7.0f, 7.0f};
    void *pe = dev_alloc(16), *ps = dev_from(sums, 8);
    aclTensor *te = acl_view(d20, 2, ACL_FLOAT, NULL, 0, pe), *tsum = acl_view(d21, 2, ACL_FLOAT, NULL, 0, ps);
    aclTensor *t03 = acl_view(d03, 2, ACL_FLOAT, NULL, 0, pe), *t03i = acl_view(d03, 2, ACL_INT64, NULL, 0, pe);
    int64_t lastd = 1;
    aclIntArray *dl = aclCreateIntArray(&lastd, 1);
    launch(aclnnReduceSumGetWorkspaceSize(te, dl, true, ACL_FLOAT, tsum, &ws, &ex), aclnnReduceSum, &ws, &ex);
    to_host(sums, ps, 8);
    CHECK(sums[0] == 0.0f && sums[1] == 0.0f);
    launch(aclnnArgsortGetWorkspaceSize(t03, 1, true, t03i, &ws, &ex), aclnnArgsort, &ws, &ex);
    aclDestroyIntArray(dl);
    aclDestroyTensor(te), aclDestroyTensor(tsum), aclDestroyTensor(t03), aclDestroyTensor(t03i);
    aclrtFree(pe), aclrtFree(ps);
}

/* The digests of row 0 and of the activations under CANN_LLM_THREADS=n, from a child process. */
static uint64_t child_digest(const char *self, int threads, const char *isa, uint64_t *act) {
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "CANN_LLM_THREADS=%d CANN_LLM_HOST_ISA=%s '%s' --digest", threads, isa, self);
    FILE *f = popen(cmd, "r");
    unsigned long long h = 0, a = 0;
    if (!f || fscanf(f, "%llx %llx", &h, &a) != 2) h = a = 0;
    if (f) pclose(f);
    *act = (uint64_t)a;
    return (uint64_t)h;
}

int main(int argc, char **argv) {
    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
    CHECK(aclrtCreateStream(&stream) == ACL_SUCCESS);
    if (argc > 1 && strcmp(argv[1], "--digest") == 0) {
        float *r = malloc(N * 4), *s = malloc(N * 4);
        printf("%llx %llx\n", (unsigned long long)batch_row0(64, r, s),
               (unsigned long long)(act_digest() ^ reduce_digest() ^ add_rms_digest()));
        fflush(stdout); /* before any exit-time sanitizer report */
        free(r), free(s);
        return 0;
    }
    test_rms_norm_and_softmax_values();
    test_batch_invariance();
    test_add_rms_norm();
    test_silu_swiglu();
    test_gelu_tanh();
    test_sin_cos_div();
    test_clamp_isneginf();
    test_argmax_index_copy();
    test_reduce_sum_argsort();
    test_documented_refusals();
    float *r = malloc(N * 4), *s = malloc(N * 4);
    const char *isa = getenv("CANN_LLM_HOST_ISA") ? getenv("CANN_LLM_HOST_ISA") : "avx512";
    uint64_t a1, a2, a3, h1 = batch_row0(1, r, s), t1 = child_digest(argv[0], 1, isa, &a1);
    uint64_t t2 = child_digest(argv[0], 2, isa, &a2);
    CHECK(t1 != 0 && t1 == h1 && t2 == h1);
    /* Silu / GeluV2 / Tanh / AddRmsNorm: the same bits for any thread count and ISA path;
     * RmsNorm and Softmax (exp in 16 / 8 lanes or one at a time) on the scalar and AVX2 paths */
    uint64_t a4, t3 = child_digest(argv[0], 2, "scalar", &a3), t4 = child_digest(argv[0], 2, "avx2", &a4);
    CHECK(a1 != 0 && a1 == (act_digest() ^ reduce_digest() ^ add_rms_digest()) && a2 == a1 && a3 == a1);
    CHECK(a4 == a1); /* the AVX2 activations too */
    CHECK(t3 == h1 && t4 == h1);
    free(r), free(s);
    aclrtDestroyStream(stream);
    aclrtResetDevice(0);
    aclFinalize();
    return CT_RESULT();
}
