/* test_aclnn_moe.c - acl_host's mixture-of-experts ops through the CANN API:
 * aclnnMoeInitRoutingV2 (the stable sort by expert, expanded rows, counts and running sums, a
 * strided expertIdx, the active mode, out-of-range ids as launch errors, the documented refusals)
 * and aclnnGroupedMatmulV4 (F16 / BF16 / F32 and INT8 / INT4 antiquant groups against a
 * double-precision reference, empty groups, both group-list types, bias; an antiquant group gives
 * WeightQuantBatchMatmulV2's bits for the same rows; a row's bits do not depend on its group's
 * size or the thread count; bad group lists as launch errors; the documented refusals).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "aclnn_api.h"
#include "ctest_util.h"
#include "aclnn_util.h"

static aclrtStream stream;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static int irand(int n) { return (int)((urand() + 1.0) * 0.5 * n) % n; }
static int sync_ok(void) { return aclrtSynchronizeStream(stream) == ACL_SUCCESS; }

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
static size_t dsize(aclDataType dt) { return dt == ACL_FLOAT ? 4 : 2; }
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

/* ==== MoeInitRoutingV2 ================================================================================ */
typedef struct route_out {
    int st;      /* phase-1 status */
    int run_ok;  /* the launch and synchronize succeeded */
} route_out;

/* Routes x (rows, h) by ids (rows, k; row stride ids_stride) with expertNum e and the flag; the
 * outputs go to host ex (active x h), row (rows * k), counts (e). */
static route_out route(aclDataType dt, const void *x, int64_t rows, int64_t h, const int32_t *ids, int64_t k,
                       int64_t ids_stride, int64_t e, int64_t active_num, int64_t flag, void *ex, int32_t *row,
                       int32_t *counts) {
    int64_t n = rows * k, active = active_num ? (active_num < n ? active_num : n) : n;
    void *dx = dev_from(x, (size_t)(rows * h) * dsize(dt));
    void *di = dev_from(ids, (size_t)(rows * ids_stride) * 4);
    void *dex = dev_alloc((size_t)(active * h) * dsize(dt)), *drow = dev_alloc((size_t)n * 4);
    void *dc = dev_alloc((size_t)e * 4);
    int64_t xd[2] = {rows, h}, id[2] = {rows, k}, is[2] = {ids_stride, 1}, exd[2] = {active, h};
    aclTensor *tx = acl_view(xd, 2, dt, NULL, 0, dx), *ti = acl_view(id, 2, ACL_INT32, is, 0, di);
    aclTensor *tex = acl_view(exd, 2, dt, NULL, 0, dex), *trow = acl_view(&n, 1, ACL_INT32, NULL, 0, drow);
    aclTensor *tc = acl_view(&e, 1, ACL_INT32, NULL, 0, dc);
    uint64_t ws = 0;
    aclOpExecutor *exe = NULL;
    route_out r = {0, 0};
    r.st = aclnnMoeInitRoutingV2GetWorkspaceSize(tx, ti, active_num, 0, e, 0, flag, false, tex, trow,
                                                 flag ? tc : NULL, NULL, &ws, &exe);
    if (r.st == 0) {
        r.run_ok = aclnnMoeInitRoutingV2(NULL, ws, exe, stream) == 0 && sync_ok();
        if (r.run_ok) {
            to_host(ex, dex, (size_t)(active * h) * dsize(dt));
            to_host(row, drow, (size_t)n * 4);
            if (flag)
                to_host(counts, dc, (size_t)e * 4);
        }
    }
    aclDestroyTensor(tx), aclDestroyTensor(ti), aclDestroyTensor(tex), aclDestroyTensor(trow), aclDestroyTensor(tc);
    aclrtFree(dx), aclrtFree(di), aclrtFree(dex), aclrtFree(drow), aclrtFree(dc);
    return r;
}

static void test_routing_values(aclDataType dt, int64_t rows, int64_t k, int64_t e, int64_t ids_stride,
                                int64_t active_num, int64_t flag) {
    int64_t h = 12, n = rows * k, active = active_num ? (active_num < n ? active_num : n) : n;
    size_t es = dsize(dt);
    char *x = malloc((size_t)(rows * h) * es), *ex = malloc((size_t)(n * h) * es);
    int32_t *ids = malloc((size_t)(rows * ids_stride) * 4), *row = malloc((size_t)n * 4), *counts = calloc((size_t)e, 4);
    for (int64_t i = 0; i < rows * h; i++)
        store_val(dt, x, i, (float)(i % 977) * 0.25f);
    for (int64_t t = 0; t < rows; t++)
        for (int64_t j = 0; j < ids_stride; j++) /* repeats within and across tokens; padding past k */
            ids[t * ids_stride + j] = j < k ? irand((int)(e < 3 ? e : 3)) + (t % 2 ? (int)(e - (e < 3 ? e : 3)) : 0)
                                            : -7;
    route_out r = route(dt, x, rows, h, ids, k, ids_stride, e, active_num, flag, ex, row, counts);
    CHECK(r.st == 0 && r.run_ok);
    /* the expected order: a stable sort of the pairs by expert */
    int64_t *order = malloc((size_t)n * sizeof(int64_t)), q = 0;
    int64_t *hist = calloc((size_t)e, sizeof(int64_t));
    for (int64_t x_e = 0; x_e < e; x_e++)
        for (int64_t i = 0; i < n; i++)
            if (ids[(i / k) * ids_stride + i % k] == x_e) {
                order[q++] = i;
                hist[x_e]++;
            }
    CHECK(q == n);
    int bad = 0;
    for (int64_t p = 0; p < n; p++)
        bad += row[order[p]] != p;
    for (int64_t p = 0; p < active; p++)
        bad += memcmp(ex + p * h * (int64_t)es, x + (order[p] / k) * h * (int64_t)es, (size_t)h * es) != 0;
    int64_t run = 0;
    for (int64_t x_e = 0; x_e < e && flag; x_e++) {
        run += hist[x_e];
        bad += counts[x_e] != (flag == 2 ? hist[x_e] : run);
    }
    if (bad)
        fprintf(stderr, "routing dt=%d rows=%lld k=%lld e=%lld active=%lld flag=%lld: %d wrong\n", (int)dt,
                (long long)rows, (long long)k, (long long)e, (long long)active_num, (long long)flag, bad);
    CHECK(bad == 0);
    free(order), free(hist), free(x), free(ex), free(ids), free(row), free(counts);
}

static void test_routing_errors(void) {
    void *buf = dev_alloc(1 << 16);
    int64_t xd[2] = {4, 8}, id[2] = {4, 2}, exd[2] = {8, 8}, n = 8, e = 6, bad_ex[2] = {7, 8}, id3[2] = {3, 2};
    aclTensor *x = acl_view(xd, 2, ACL_FLOAT16, NULL, 0, buf), *ids = acl_view(id, 2, ACL_INT32, NULL, 0, buf);
    aclTensor *ex = acl_view(exd, 2, ACL_FLOAT16, NULL, 0, buf), *row = acl_view(&n, 1, ACL_INT32, NULL, 0, buf);
    aclTensor *cnt = acl_view(&e, 1, ACL_INT32, NULL, 0, buf), *exbad = acl_view(bad_ex, 2, ACL_FLOAT16, NULL, 0, buf);
    aclTensor *ex32 = acl_view(exd, 2, ACL_FLOAT, NULL, 0, buf), *ids3 = acl_view(id3, 2, ACL_INT32, NULL, 0, buf);
    aclTensor *ids64 = acl_view(id, 2, ACL_INT64, NULL, 0, buf);
    int64_t five = 5;
    aclTensor *cnt5 = acl_view(&five, 1, ACL_INT32, NULL, 0, buf);
    uint64_t ws;
    aclOpExecutor *exe;
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids, 0, 0, e, 0, 1, false, ex, row, cnt, NULL, &ws, &exe) == 0);
    CHECK(aclDestroyAclOpExecutor(exe) == 0);
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(NULL, ids, 0, 0, e, 0, 1, false, ex, row, cnt, NULL, &ws, &exe) ==
          ACLNN_ERR_PARAM_NULLPTR);
    /* drop / pad mode: not implemented */
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids, 0, 2, e, 1, 0, true, ex, row, NULL, cnt, &ws, &exe) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "dropPadMode 1") != NULL);
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids, 0, 0, e, 2, 0, false, ex, row, NULL, NULL, &ws, &exe) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids, -1, 0, e, 0, 0, false, ex, row, NULL, NULL, &ws, &exe) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids, 0, 0, e, 0, 3, false, ex, row, cnt, NULL, &ws, &exe) ==
          ACLNN_ERR_PARAM_INVALID);
    /* the counts need expertNum > 0 and an (expertNum) INT32 tensor */
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids, 0, 0, 0, 0, 2, false, ex, row, cnt, NULL, &ws, &exe) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids, 0, 0, e, 0, 2, false, ex, row, NULL, NULL, &ws, &exe) ==
          ACLNN_ERR_PARAM_NULLPTR);
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids, 0, 0, e, 0, 2, false, ex, row, cnt5, NULL, &ws, &exe) ==
          ACLNN_ERR_PARAM_INVALID);
    /* shapes and dtypes */
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids, 0, 0, e, 0, 1, false, exbad, row, cnt, NULL, &ws, &exe) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "expandedXOut") != NULL);
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids, 7, 0, e, 0, 1, false, exbad, row, cnt, NULL, &ws, &exe) == 0);
    CHECK(aclDestroyAclOpExecutor(exe) == 0); /* activeNum 7: seven rows */
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids, 0, 0, e, 0, 1, false, ex32, row, cnt, NULL, &ws, &exe) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids3, 0, 0, e, 0, 1, false, ex, row, cnt, NULL, &ws, &exe) ==
          ACLNN_ERR_PARAM_INVALID);
    CHECK(aclnnMoeInitRoutingV2GetWorkspaceSize(x, ids64, 0, 0, e, 0, 1, false, ex, row, cnt, NULL, &ws, &exe) ==
          ACLNN_ERR_PARAM_INVALID);
    aclDestroyTensor(x), aclDestroyTensor(ids), aclDestroyTensor(ex), aclDestroyTensor(row), aclDestroyTensor(cnt);
    aclDestroyTensor(exbad), aclDestroyTensor(ex32), aclDestroyTensor(ids3), aclDestroyTensor(ids64);
    aclDestroyTensor(cnt5);
    aclrtFree(buf);

    /* ids out of [0, expertNum) with counts requested, or negative without: launch errors */
    uint16_t xh[2 * 4] = {0};
    int32_t ids_hi[4] = {0, 1, 2, 6}, ids_neg[4] = {0, -1, 2, 3}, rows[4], counts[6];
    uint16_t exh[4 * 4];
    route_out r = route(ACL_FLOAT16, xh, 2, 4, ids_hi, 2, 2, 6, 0, 2, exh, rows, counts);
    CHECK(r.st == 0 && !r.run_ok);
    CHECK(strstr(aclGetRecentErrMsg(), "outside") != NULL);
    r = route(ACL_FLOAT16, xh, 2, 4, ids_hi, 2, 2, 6, 0, 0, exh, rows, counts); /* no counts: 6 is fine */
    CHECK(r.st == 0 && r.run_ok);
    r = route(ACL_FLOAT16, xh, 2, 4, ids_neg, 2, 2, 6, 0, 0, exh, rows, counts);
    CHECK(r.st == 0 && !r.run_ok);
}

/* ==== GroupedMatmulV4 ================================================================================== */
typedef struct gmm_case {
    aclDataType xt, wt;     /* x / y dtype; weight dtype (INT8 / INT4 = antiquant) */
    int64_t e, k, n;
    int group;              /* antiquant K rows per group; 0 per channel */
    int offset, transposed, bias, list_type;
} gmm_case;

typedef struct gmm_data {
    gmm_case c;
    int64_t ng;
    float *w;               /* [e][k][n] values (quantized: the integers) */
    float *scale, *off;     /* [e][ng][n] */
    float *bias;            /* [e][n] */
    void *d_w, *d_s, *d_o, *d_b;
} gmm_data;

static bool gmm_quant(const gmm_case *c) { return c->wt == ACL_INT8 || c->wt == ACL_INT4; }

static void gmm_make(gmm_data *d, gmm_case c) {
    memset(d, 0, sizeof *d);
    d->c = c;
    int64_t e = c.e, k = c.k, n = c.n;
    d->ng = c.group ? k / c.group : 1;
    d->w = malloc((size_t)(e * k * n) * sizeof(float));
    d->scale = malloc((size_t)(e * d->ng * n) * sizeof(float));
    d->off = malloc((size_t)(e * d->ng * n) * sizeof(float));
    d->bias = malloc((size_t)(e * n) * sizeof(float));
    for (int64_t i = 0; i < e * k * n; i++) {
        if (c.wt == ACL_INT4) d->w[i] = (float)(irand(16) - 8);
        else if (c.wt == ACL_INT8) d->w[i] = (float)(irand(256) - 128);
        else if (c.wt == ACL_FLOAT16) d->w[i] = from_f16(f16((float)urand()));
        else if (c.wt == ACL_BF16) d->w[i] = from_bf16(bf16((float)urand()));
        else d->w[i] = (float)urand();
    }
    aclDataType pt = c.xt; /* antiquant parameters in x's dtype */
    for (int64_t i = 0; i < e * d->ng * n; i++) {
        float s = (float)(0.01 + 0.02 * fabs(urand())), o = (float)(urand() * 4);
        d->scale[i] = pt == ACL_BF16 ? from_bf16(bf16(s)) : from_f16(f16(s));
        d->off[i] = pt == ACL_BF16 ? from_bf16(bf16(o)) : from_f16(f16(o));
    }
    aclDataType bt = c.xt == ACL_FLOAT16 ? ACL_FLOAT16 : ACL_FLOAT;
    for (int64_t i = 0; i < e * n; i++)
        d->bias[i] = bt == ACL_FLOAT16 ? from_f16(f16((float)urand())) : (float)urand();
    /* weight storage: (e, k, n) row-major, or (e, n, k) when transposed */
    int64_t cnt = e * k * n;
    size_t wbytes = c.wt == ACL_INT4 ? (size_t)(cnt / 2) : c.wt == ACL_INT8 ? (size_t)cnt : (size_t)cnt * dsize(c.wt);
    uint8_t *wh = calloc(wbytes, 1);
    for (int64_t g = 0; g < e; g++)
        for (int64_t kk = 0; kk < k; kk++)
            for (int64_t j = 0; j < n; j++) {
                int64_t at = c.transposed ? (g * n + j) * k + kk : (g * k + kk) * n + j;
                float v = d->w[(g * k + kk) * n + j];
                if (c.wt == ACL_INT4) wh[at / 2] |= (uint8_t)(((int)v & 0xf) << (at & 1 ? 4 : 0));
                else if (c.wt == ACL_INT8) wh[at] = (uint8_t)(int8_t)v;
                else store_val(c.wt, wh, at, v);
            }
    d->d_w = dev_from(wh, wbytes);
    free(wh);
    size_t ps = dsize(pt);
    uint8_t *sh = malloc((size_t)(e * d->ng * n) * ps), *oh = malloc((size_t)(e * d->ng * n) * ps);
    for (int64_t i = 0; i < e * d->ng * n; i++) {
        store_val(pt, sh, i, d->scale[i]);
        store_val(pt, oh, i, d->off[i]);
    }
    d->d_s = dev_from(sh, (size_t)(e * d->ng * n) * ps);
    d->d_o = dev_from(oh, (size_t)(e * d->ng * n) * ps);
    free(sh), free(oh);
    uint8_t *bh = malloc((size_t)(e * n) * dsize(bt));
    for (int64_t i = 0; i < e * n; i++)
        store_val(bt, bh, i, d->bias[i]);
    d->d_b = dev_from(bh, (size_t)(e * n) * dsize(bt));
    free(bh);
}

static void gmm_free(gmm_data *d) {
    aclrtFree(d->d_w), aclrtFree(d->d_s), aclrtFree(d->d_o), aclrtFree(d->d_b);
    free(d->w), free(d->scale), free(d->off), free(d->bias);
}

/* The weight as the op sees it: (e, k, n), a transposed view of (e, n, k) storage when asked. */
static aclTensor *gmm_weight(const gmm_data *d) {
    const gmm_case *c = &d->c;
    int64_t wd[3] = {c->e, c->k, c->n}, wst[3] = {c->n * c->k, 1, c->k};
    return acl_view(wd, 3, c->wt, c->transposed ? wst : NULL, 0, d->d_w);
}

static aclTensor *gmm_param(const gmm_data *d, void *data) {
    const gmm_case *c = &d->c;
    int64_t pd3[3] = {c->e, d->ng, c->n}, pd2[2] = {c->e, c->n};
    return c->group ? acl_view(pd3, 3, c->xt, NULL, 0, data) : acl_view(pd2, 2, c->xt, NULL, 0, data);
}

static aclTensorList *list1(aclTensor *t) { return aclCreateTensorList((const aclTensor *const *)&t, 1); }

/* y (m, n) = the grouped product of x (m, k) host values (in x's dtype) with the group sizes. Returns
 * the phase-1 status; *run_ok tells whether the launch and synchronize succeeded. */
static int gmm_run(const gmm_data *d, const void *x, int64_t m, const int64_t *sizes, void *y, int *run_ok) {
    const gmm_case *c = &d->c;
    size_t xs = dsize(c->xt);
    int64_t list[64], at = 0;
    for (int64_t g = 0; g < c->e; g++) {
        at += sizes[g];
        list[g] = c->list_type == 0 ? at : sizes[g];
    }
    void *dx = m ? dev_from(x, (size_t)(m * c->k) * xs) : dev_alloc(0), *dy = dev_alloc((size_t)(m * c->n) * xs);
    void *dl = dev_from(list, (size_t)c->e * 8);
    int64_t xd[2] = {m, c->k}, yd[2] = {m, c->n}, bd[2] = {c->e, c->n};
    aclTensorList *lx = list1(acl_view(xd, 2, c->xt, NULL, 0, dx)), *lw = list1(gmm_weight(d));
    aclTensorList *ly = list1(acl_view(yd, 2, c->xt, NULL, 0, dy));
    aclTensorList *ls = gmm_quant(c) ? list1(gmm_param(d, d->d_s)) : NULL;
    aclTensorList *lo = gmm_quant(c) && c->offset ? list1(gmm_param(d, d->d_o)) : NULL;
    aclTensorList *lb = c->bias ? list1(acl_view(bd, 2, c->xt == ACL_FLOAT16 ? ACL_FLOAT16 : ACL_FLOAT, NULL, 0, d->d_b))
                                : NULL;
    aclTensor *tl = acl_view(&c->e, 1, ACL_INT64, NULL, 0, dl);
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    int st = aclnnGroupedMatmulV4GetWorkspaceSize(lx, lw, lb, NULL, NULL, ls, lo, NULL, tl, NULL, NULL, NULL, 2, 0,
                                                  c->list_type, 0, ly, NULL, NULL, &ws, &ex);
    *run_ok = 0;
    if (st == 0) {
        *run_ok = aclnnGroupedMatmulV4(NULL, ws, ex, stream) == 0 && sync_ok();
        if (*run_ok)
            to_host(y, dy, (size_t)(m * c->n) * xs);
    }
    aclDestroyTensorList(lx), aclDestroyTensorList(lw), aclDestroyTensorList(ly), aclDestroyTensorList(ls);
    aclDestroyTensorList(lo), aclDestroyTensorList(lb), aclDestroyTensor(tl);
    aclrtFree(dx), aclrtFree(dy), aclrtFree(dl);
    return st;
}

static void random_x(aclDataType dt, void *x, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        store_val(dt, x, i, (float)urand());
}

static void test_gmm_values(gmm_case c, const int64_t *sizes) {
    gmm_data d;
    gmm_make(&d, c);
    int64_t m = 0;
    for (int64_t g = 0; g < c.e; g++)
        m += sizes[g];
    size_t xs = dsize(c.xt);
    char *x = malloc((size_t)(m * c.k) * xs), *y = malloc((size_t)(m * c.n) * xs);
    random_x(c.xt, x, m * c.k);
    int ok;
    CHECK(gmm_run(&d, x, m, sizes, y, &ok) == 0 && ok);
    int bad = 0;
    int64_t r = 0;
    double tol = c.xt == ACL_BF16 ? 8e-3 : c.xt == ACL_FLOAT16 ? 1e-3 : 1e-5;
    for (int64_t g = 0; g < c.e; g++)
        for (int64_t i = 0; i < sizes[g]; i++, r++)
            for (int64_t j = 0; j < c.n && ok; j++) {
                double ref = 0, mag = 0;
                for (int64_t kk = 0; kk < c.k; kk++) {
                    double w = d.w[(g * c.k + kk) * c.n + j];
                    if (gmm_quant(&c)) {
                        int64_t p = (g * d.ng + (c.group ? kk / c.group : 0)) * c.n + j;
                        w = (w + (c.offset ? d.off[p] : 0.0)) * d.scale[p];
                    }
                    double v = load_val(c.xt, x, r * c.k + kk) * w;
                    ref += v, mag += fabs(v);
                }
                if (c.bias)
                    ref += d.bias[g * c.n + j];
                double got = load_val(c.xt, y, r * c.n + j);
                if (fabs(got - ref) > tol * fabs(ref) + 1e-5 * mag + 1e-6 && bad++ < 3)
                    fprintf(stderr, "gmm xt=%d wt=%d e=%lld k=%lld n=%lld: y[%lld][%lld] = %g, ref %g\n", (int)c.xt,
                            (int)c.wt, (long long)c.e, (long long)c.k, (long long)c.n, (long long)r, (long long)j, got,
                            ref);
            }
    CHECK(bad == 0);
    free(x), free(y);
    gmm_free(&d);
}

/* WeightQuantBatchMatmulV2 on `m` rows of x with group g's weight (the MUL_MAT_ID gather path). */
static void wqbmm_group(const gmm_data *d, const uint16_t *x, int64_t m, int64_t g, uint16_t *y) {
    const gmm_case *c = &d->c;
    void *dx = dev_from(x, (size_t)(m * c->k) * 2), *dy = dev_alloc((size_t)(m * c->n) * 2);
    int64_t xd[2] = {m, c->k}, wd[2] = {c->k, c->n}, wst[2] = {1, c->k}, yd[2] = {m, c->n};
    int64_t sd[2] = {d->ng, c->n}, per_expert = c->k * c->n;
    aclTensor *tx = acl_view(xd, 2, ACL_FLOAT16, NULL, 0, dx);
    aclTensor *tw = acl_view(wd, 2, c->wt, wst, g * per_expert, d->d_w);
    aclTensor *ts = c->group ? acl_view(sd, 2, ACL_FLOAT16, NULL, g * d->ng * c->n, d->d_s)
                             : acl_view(&c->n, 1, ACL_FLOAT16, NULL, g * c->n, d->d_s);
    aclTensor *to = !c->offset ? NULL : c->group ? acl_view(sd, 2, ACL_FLOAT16, NULL, g * d->ng * c->n, d->d_o)
                                                 : acl_view(&c->n, 1, ACL_FLOAT16, NULL, g * c->n, d->d_o);
    aclTensor *ty = acl_view(yd, 2, ACL_FLOAT16, NULL, 0, dy);
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK(aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(tx, tw, ts, to, NULL, NULL, NULL, c->group, ty, &ws, &ex) == 0);
    CHECK(aclnnWeightQuantBatchMatmulV2(NULL, ws, ex, stream) == 0 && sync_ok());
    to_host(y, dy, (size_t)(m * c->n) * 2);
    aclDestroyTensor(tx), aclDestroyTensor(tw), aclDestroyTensor(ts), aclDestroyTensor(to), aclDestroyTensor(ty);
    aclrtFree(dx), aclrtFree(dy);
}

/* An antiquant group's rows give WQBMM's bits (one row at a time and all together), and a row's bits
 * do not depend on how many rows its group has. */
static void test_gmm_bits(gmm_case c) {
    gmm_data d;
    gmm_make(&d, c);
    int64_t sizes[4] = {1, 0, 40, 3}, m = 44;
    uint16_t *x = malloc((size_t)(m * c.k) * 2), *y = malloc((size_t)(m * c.n) * 2);
    uint16_t *yw = malloc((size_t)(m * c.n) * 2);
    random_x(ACL_FLOAT16, x, m * c.k);
    int ok;
    CHECK(gmm_run(&d, x, m, sizes, y, &ok) == 0 && ok);
    /* group 2 (rows 1..40) through WQBMM at m = 40 (tiled), and row 1 alone (decode) */
    wqbmm_group(&d, x + 1 * c.k, 40, 2, yw);
    CHECK(memcmp(yw, y + 1 * c.n, (size_t)(40 * c.n) * 2) == 0);
    wqbmm_group(&d, x + 1 * c.k, 1, 2, yw);
    CHECK(memcmp(yw, y + 1 * c.n, (size_t)c.n * 2) == 0);
    wqbmm_group(&d, x + 41 * c.k, 3, 3, yw);
    CHECK(memcmp(yw, y + 41 * c.n, (size_t)(3 * c.n) * 2) == 0);
    /* rows 1..40 regrouped: group 2 takes only row 20's copy; its bits are row 20's above */
    int64_t sizes1[4] = {0, 0, 1, 0};
    uint16_t y1[512];
    CHECK(c.n <= 512);
    CHECK(gmm_run(&d, x + 20 * c.k, 1, sizes1, y1, &ok) == 0 && ok);
    CHECK(memcmp(y1, y + 20 * c.n, (size_t)c.n * 2) == 0);
    free(x), free(y), free(yw);
    gmm_free(&d);
}

static void test_gmm_errors(void) {
    void *buf = dev_alloc(1 << 20);
    int64_t e = 4, k = 64, n = 16, m = 6;
    int64_t xd[2] = {m, k}, wd[3] = {e, k, n}, wst[3] = {n * k, 1, k}, yd[2] = {m, n}, sd3[3] = {e, 2, n};
    int64_t sd2[2] = {e, n}, xst[2] = {1, m};
    aclTensor *tx = acl_view(xd, 2, ACL_FLOAT16, NULL, 0, buf), *tw4 = acl_view(wd, 3, ACL_INT4, wst, 0, buf);
    aclTensor *tw8 = acl_view(wd, 3, ACL_INT8, wst, 0, buf), *twf = acl_view(wd, 3, ACL_FLOAT16, wst, 0, buf);
    aclTensor *ty = acl_view(yd, 2, ACL_FLOAT16, NULL, 0, buf), *ts3 = acl_view(sd3, 3, ACL_FLOAT16, NULL, 0, buf);
    aclTensor *ts2 = acl_view(sd2, 2, ACL_FLOAT16, NULL, 0, buf), *tgl = acl_view(&e, 1, ACL_INT64, NULL, 0, buf);
    int64_t sst[3] = {2 * n, 1, 2}; /* a (E, G, N) view of (E, N, G) storage */
    aclTensor *ts3t = acl_view(sd3, 3, ACL_FLOAT16, sst, 0, buf), *txt = acl_view(xd, 2, ACL_FLOAT16, xst, 0, buf);
    aclTensor *tgl32 = acl_view(&e, 1, ACL_INT32, NULL, 0, buf), *ty32 = acl_view(yd, 2, ACL_FLOAT, NULL, 0, buf);
    int64_t one = 1, wd1[3] = {1, k, n}, three = 3;
    aclTensor *tgl1 = acl_view(&one, 1, ACL_INT64, NULL, 0, buf), *tw1 = acl_view(wd1, 3, ACL_FLOAT16, NULL, 0, buf);
    aclTensor *tgl3 = acl_view(&three, 1, ACL_INT64, NULL, 0, buf);
    aclTensorList *x = list1(tx), *w4 = list1(tw4), *w8 = list1(tw8), *wf = list1(twf), *y = list1(ty);
    aclTensorList *s3 = list1(ts3), *s2 = list1(ts2), *s3t = list1(ts3t), *xt = list1(txt), *y32 = list1(ty32);
    aclTensorList *w1 = list1(tw1);
    aclTensor *pair[2] = {acl_view(xd, 2, ACL_FLOAT16, NULL, 0, buf), acl_view(xd, 2, ACL_FLOAT16, NULL, 0, buf)};
    aclTensorList *x2 = aclCreateTensorList((const aclTensor *const *)pair, 2);
    uint64_t ws;
    aclOpExecutor *ex;
#define GMM(X, W, S, O, GL, SPLIT, GT, GLT, ACT, Y)                                                                  \
    aclnnGroupedMatmulV4GetWorkspaceSize(X, W, NULL, NULL, NULL, S, O, NULL, GL, NULL, NULL, NULL, SPLIT, GT, GLT,  \
                                         ACT, Y, NULL, NULL, &ws, &ex)
    CHECK(GMM(x, w4, s3, s3, tgl, 2, 0, 0, 0, y) == 0);
    CHECK(aclDestroyAclOpExecutor(ex) == 0);
    CHECK(GMM(x, w8, s2, NULL, tgl, 3, 0, 1, 0, y) == 0);
    CHECK(aclDestroyAclOpExecutor(ex) == 0);
    CHECK(GMM(x, wf, NULL, NULL, tgl, 2, 0, 0, 0, y) == 0);
    CHECK(aclDestroyAclOpExecutor(ex) == 0);
    CHECK(GMM(NULL, w4, s3, NULL, tgl, 2, 0, 0, 0, y) == ACLNN_ERR_PARAM_NULLPTR);
    CHECK(GMM(x, w4, s3, NULL, NULL, 2, 0, 0, 0, y) == ACLNN_ERR_PARAM_NULLPTR);
    /* the scenario: groupType 0, splitItem 2 / 3, one tensor per list, no activation */
    CHECK(GMM(x, w4, s3, NULL, tgl, 2, 1, 0, 0, y) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "groupType 1") != NULL);
    CHECK(GMM(x, w4, s3, NULL, tgl, 2, -1, 0, 0, y) == ACLNN_ERR_PARAM_INVALID);
    CHECK(GMM(x, w4, s3, NULL, tgl, 0, 0, 0, 0, y) == ACLNN_ERR_PARAM_INVALID);
    CHECK(GMM(x, w4, s3, NULL, tgl, 2, 0, 2, 0, y) == ACLNN_ERR_PARAM_INVALID);
    CHECK(GMM(x, w4, s3, NULL, tgl, 2, 0, 0, 5, y) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "activation") != NULL);
    CHECK(GMM(x2, w4, s3, NULL, tgl, 2, 0, 0, 0, y) == ACLNN_ERR_PARAM_INVALID);
    /* INT8: per channel only; INT4 per group with G dividing K */
    CHECK(GMM(x, w8, s3, NULL, tgl, 2, 0, 0, 0, y) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "per-channel") != NULL);
    /* antiquant parameters must be contiguous; x must not be transposed */
    CHECK(GMM(x, w4, s3t, NULL, tgl, 2, 0, 0, 0, y) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "contiguous") != NULL);
    CHECK(GMM(xt, w4, s3, NULL, tgl, 2, 0, 0, 0, y) == ACLNN_ERR_PARAM_INVALID);
    /* dtypes: out = x's; the group list INT64; antiquant needs a quantized weight and a scale */
    CHECK(GMM(x, w4, s3, NULL, tgl, 2, 0, 0, 0, y32) == ACLNN_ERR_PARAM_INVALID);
    CHECK(GMM(x, w4, s3, NULL, tgl32, 2, 0, 0, 0, y) == ACLNN_ERR_PARAM_INVALID);
    CHECK(GMM(x, wf, s3, NULL, tgl, 2, 0, 0, 0, y) == ACLNN_ERR_PARAM_INVALID);
    CHECK(GMM(x, w4, NULL, NULL, tgl, 2, 0, 0, 0, y) == ACLNN_ERR_PARAM_NULLPTR);
    /* the group list: one entry per matrix; groupListType 1 not of length 1 */
    CHECK(GMM(x, w4, s3, NULL, tgl3, 2, 0, 0, 0, y) == ACLNN_ERR_PARAM_INVALID);
    CHECK(GMM(x, w1, NULL, NULL, tgl1, 2, 0, 0, 0, y) == 0);
    CHECK(aclDestroyAclOpExecutor(ex) == 0);
    CHECK(GMM(x, w1, NULL, NULL, tgl1, 2, 0, 1, 0, y) == ACLNN_ERR_PARAM_INVALID);
    /* the last dims below 65536 */
    int64_t kbig = 65536, xdb[2] = {m, kbig}, wdb[3] = {e, kbig, n}, wstb[3] = {n * kbig, 1, kbig};
    aclTensor *txb = acl_view(xdb, 2, ACL_FLOAT16, NULL, 0, buf), *twb = acl_view(wdb, 3, ACL_FLOAT16, wstb, 0, buf);
    aclTensorList *xb = list1(txb), *wb = list1(twb);
    CHECK(GMM(xb, wb, NULL, NULL, tgl, 2, 0, 0, 0, y) == ACLNN_ERR_PARAM_INVALID);
    CHECK(strstr(aclGetRecentErrMsg(), "65536") != NULL);
#undef GMM
    aclDestroyTensorList(x), aclDestroyTensorList(w4), aclDestroyTensorList(w8), aclDestroyTensorList(wf);
    aclDestroyTensorList(y), aclDestroyTensorList(s3), aclDestroyTensorList(s2), aclDestroyTensorList(s3t);
    aclDestroyTensorList(xt), aclDestroyTensorList(y32), aclDestroyTensorList(w1), aclDestroyTensorList(x2);
    aclDestroyTensorList(xb), aclDestroyTensorList(wb);
    aclDestroyTensor(tgl), aclDestroyTensor(tgl32), aclDestroyTensor(tgl1), aclDestroyTensor(tgl3);
    aclrtFree(buf);

    /* a bad group list is an error of the launch */
    gmm_data d;
    gmm_make(&d, (gmm_case){ACL_FLOAT16, ACL_FLOAT16, 3, 32, 8, 0, 0, 1, 0, 0});
    uint16_t xh[4 * 32], yh[4 * 8];
    random_x(ACL_FLOAT16, xh, 4 * 32);
    int ok;
    int64_t short_sizes[3] = {1, 1, 1}; /* sums to 3 of 4 rows */
    CHECK(gmm_run(&d, xh, 4, short_sizes, yh, &ok) == 0 && !ok);
    CHECK(strstr(aclGetRecentErrMsg(), "groupListOptional") != NULL);
    int64_t neg[3] = {3, -1, 2};
    d.c.list_type = 1;
    CHECK(gmm_run(&d, xh, 4, neg, yh, &ok) == 0 && !ok);
    d.c.list_type = 0;
    CHECK(gmm_run(&d, xh, 4, neg, yh, &ok) == 0 && !ok); /* running sums 3, 2, 4 decrease */
    gmm_free(&d);
}

int main(void) {
    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
    CHECK(aclrtCreateStream(&stream) == ACL_SUCCESS);
    /* dt, rows, k, expertNum, ids row stride, activeNum, flag */
    test_routing_values(ACL_FLOAT16, 5, 3, 4, 3, 0, 2);
    test_routing_values(ACL_FLOAT, 9, 2, 8, 5, 0, 1);   /* expertIdx a view of a wider tensor */
    test_routing_values(ACL_BF16, 1, 8, 16, 8, 0, 1);   /* one token (decode) */
    test_routing_values(ACL_FLOAT16, 40, 4, 6, 4, 0, 2); /* more tokens than experts */
    test_routing_values(ACL_FLOAT16, 6, 2, 5, 2, 7, 2);  /* active mode: 7 of 12 rows */
    test_routing_values(ACL_FLOAT16, 6, 1, 5, 1, 0, 0);  /* k = 1, no counts */
    test_routing_errors();
    /* xt, wt, e, k, n, group, offset, transposed, bias, list_type */
    int64_t sizes4[4] = {3, 0, 17, 2}, sizes4b[4] = {0, 5, 0, 1}, sizes3[3] = {2, 2, 0};
    test_gmm_values((gmm_case){ACL_FLOAT16, ACL_FLOAT16, 4, 96, 24, 0, 0, 1, 0, 0}, sizes4);
    test_gmm_values((gmm_case){ACL_FLOAT16, ACL_FLOAT16, 4, 80, 9, 0, 0, 0, 1, 1}, sizes4b);
    test_gmm_values((gmm_case){ACL_BF16, ACL_BF16, 3, 64, 20, 0, 0, 1, 1, 1}, sizes3);
    test_gmm_values((gmm_case){ACL_FLOAT, ACL_FLOAT, 4, 48, 12, 0, 0, 0, 0, 0}, sizes4);
    test_gmm_values((gmm_case){ACL_FLOAT16, ACL_INT4, 4, 128, 40, 32, 1, 1, 0, 0}, sizes4);
    test_gmm_values((gmm_case){ACL_FLOAT16, ACL_INT4, 4, 128, 40, 64, 0, 1, 1, 1}, sizes4b);
    test_gmm_values((gmm_case){ACL_FLOAT16, ACL_INT4, 3, 64, 16, 0, 1, 0, 0, 0}, sizes3); /* per channel, (E,K,N) */
    test_gmm_values((gmm_case){ACL_FLOAT16, ACL_INT8, 4, 96, 20, 0, 1, 1, 0, 1}, sizes4);
    test_gmm_values((gmm_case){ACL_BF16, ACL_INT8, 3, 64, 12, 0, 0, 0, 1, 0}, sizes3);
    test_gmm_bits((gmm_case){ACL_FLOAT16, ACL_INT4, 4, 256, 72, 32, 1, 1, 0, 0});
    test_gmm_bits((gmm_case){ACL_FLOAT16, ACL_INT4, 4, 256, 72, 32, 0, 1, 0, 1});
    test_gmm_bits((gmm_case){ACL_FLOAT16, ACL_INT8, 4, 192, 40, 0, 0, 1, 0, 0});
    test_gmm_errors();
    CHECK(aclrtDestroyStream(stream) == ACL_SUCCESS);
    CHECK(aclrtResetDevice(0) == ACL_SUCCESS);
    CHECK(aclFinalize() == ACL_SUCCESS);
    return CT_RESULT();
}
