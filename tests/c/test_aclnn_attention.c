/* test_aclnn_attention.c - aclnnFusedInferAttentionScoreV2 on acl_host against a double-precision
 * reference: GQA (9/3, 32/8, 4/4), head dims 64 and 128, query lengths 1, 7 and 33, up to 300 keys,
 * BSND / BNSD / BSH layouts, non-contiguous K/V views into a larger cache, a contiguous full-head
 * finite F16 pse with the -inf positions in a BOOL attenMask, a BOOL attenMask alone, fully masked
 * rows, softmaxLse; the contiguity, finiteness and decode-mask rules;
 * batch invariance (a row's bits at Sq = 1, 7, 64), thread-count and ISA invariance (1 vs 2 threads,
 * scalar / AVX2 / AVX-512, in separate processes: the settings are read at init); error codes and messages.
 * CT_BENCH=1 prints decode GB/s of KV, prefill GFLOPS and the time of a batched decode (8 sequences);
 * CT_BENCH_BATCHED=1 runs only the last (K/V in cache, and cold), three times each.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "acl/acl.h"
#include "aclnn_api.h"
#include "ctest_util.h"
#include "aclnn_util.h"

static aclrtStream stream;

/* ---- helpers ---------------------------------------------------------------------------------- */



/* strides NULL = contiguous; 1-D storage covering the view */


static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(void) { /* [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static aclTensorList *list1(aclTensor *t) { return aclCreateTensorList((const aclTensor *const *)&t, 1); }

/* Phase 1 with the common defaults; on success (and run) phase 2 and a synchronize. Takes the key
 * and value descriptors (the lists own them). */
typedef struct fia_args {
    aclTensor *q, *k, *v, *pse, *mask, *out, *lse;
    int64_t n_head, n_kv_head, sparse, inner;
    double scale;
    const char *layout;
    bool lse_flag;
} fia_args;

static aclnnStatus fia(const fia_args *a) {
    aclTensorList *kl = list1(a->k), *vl = list1(a->v);
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    char layout[16];
    snprintf(layout, sizeof layout, "%s", a->layout);
    aclnnStatus st = aclnnFusedInferAttentionScoreV2GetWorkspaceSize(
        a->q, kl, vl, a->pse, a->mask, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, a->n_head, a->scale, 65535, 65535,
        a->layout ? layout : NULL, a->n_kv_head, a->sparse, a->inner, 0, 0, a->lse_flag, 0, 0,
        a->out, a->lse, &ws, &ex);
    if (st == ACLNN_SUCCESS) {
        void *w = ws ? dev_alloc(ws) : NULL;
        st = aclnnFusedInferAttentionScoreV2(w, ws, ex, stream);
        CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
        if (w)
            aclrtFree(w);
    }
    aclDestroyTensorList(kl);
    aclDestroyTensorList(vl);
    return st;
}

/* ---- one case against the double reference -------------------------------------------------- */
typedef struct fa_case {
    int64_t B, N, KVN, Sq, Skv, D;
    const char *layout; /* BSND, BNSD or BSH */
    bool strided_kv;    /* K/V as views into a larger, padded cache */
    int mask_kind;      /* 0 none, 1 finite F16 pse (every head) + BOOL attenMask, 2 BOOL attenMask */
} fa_case;

/* Host data in logical (b, n, s, d) order; pse / mask logical (i, j) shared by batch and heads. */
typedef struct fa_data {
    uint16_t *q, *k, *v; /* [B][N][Sq][D], [B][KVN][Skv][D] */
    float *bias;         /* [Sq][Skv]: additive (pse) or 0 / -inf (mask) */
} fa_data;

static void fa_fill(const fa_case *c, fa_data *d) {
    int64_t nq = c->B * c->N * c->Sq * c->D, nk = c->B * c->KVN * c->Skv * c->D;
    d->q = malloc((size_t)nq * 2), d->k = malloc((size_t)nk * 2), d->v = malloc((size_t)nk * 2);
    d->bias = malloc((size_t)(c->Sq * c->Skv) * sizeof(float));
    for (int64_t i = 0; i < nq; i++) d->q[i] = f16(urand());
    for (int64_t i = 0; i < nk; i++) d->k[i] = f16(urand()), d->v[i] = f16(urand());
    for (int64_t i = 0; i < c->Sq; i++)
        for (int64_t j = 0; j < c->Skv; j++) {
            bool causal_out = j > i + (c->Skv - c->Sq);
            bool holed = urand() > 0.8f;
            float b = (causal_out || holed) ? -INFINITY : (c->mask_kind == 1 ? from_f16(f16(urand())) : 0.0f);
            if (c->mask_kind == 0) b = 0.0f;
            d->bias[i * c->Skv + j] = b;
        }
    if (c->mask_kind != 0 && c->Sq > 2) /* one fully masked row */
        for (int64_t j = 0; j < c->Skv; j++) d->bias[1 * c->Skv + j] = -INFINITY;
}

static void fa_free(fa_data *d) { free(d->q), free(d->k), free(d->v), free(d->bias); }

static void reference(const fa_case *c, const fa_data *d, double scale, double *out, double *lse) {
    int64_t G = c->N / c->KVN, D = c->D;
    double *s = malloc((size_t)c->Skv * sizeof(double));
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->N; h++)
            for (int64_t i = 0; i < c->Sq; i++) {
                const uint16_t *qr = d->q + ((b * c->N + h) * c->Sq + i) * D;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < c->Skv; j++) {
                    const uint16_t *kr = d->k + ((b * c->KVN + h / G) * c->Skv + j) * D;
                    double dot = 0;
                    for (int64_t x = 0; x < D; x++) dot += (double)from_f16(qr[x]) * from_f16(kr[x]);
                    float bias = d->bias[i * c->Skv + j];
                    s[j] = bias == -INFINITY ? -INFINITY : dot * scale + bias;
                    if (s[j] > m) m = s[j];
                }
                double *o = out + ((b * c->N + h) * c->Sq + i) * D;
                for (int64_t x = 0; x < D; x++) o[x] = 0;
                if (m == -INFINITY) {
                    lse[(b * c->N + h) * c->Sq + i] = INFINITY;
                    continue;
                }
                for (int64_t j = 0; j < c->Skv; j++) {
                    double p = s[j] == -INFINITY ? 0 : exp(s[j] - m);
                    sum += p;
                    const uint16_t *vr = d->v + ((b * c->KVN + h / G) * c->Skv + j) * D;
                    for (int64_t x = 0; x < D; x++) o[x] += p * from_f16(vr[x]);
                }
                for (int64_t x = 0; x < D; x++) o[x] /= sum;
                lse[(b * c->N + h) * c->Sq + i] = m + log(sum);
            }
    free(s);
}

/* Dims and strides of a (B, S, H, D) logical operand in `layout`, stored in a buffer of
 * (B, S_store, H, D_store) BSND or (B, H, S_store, D_store) BNSD order; BSH merges H and D. */
static int layout_dims(const char *layout, int64_t B, int64_t S, int64_t H, int64_t D, int64_t S_store,
                       int64_t D_store, int64_t *dims, int64_t *strides) {
    if (strcmp(layout, "BNSD") == 0) {
        int64_t d[4] = {B, H, S, D}, st[4] = {H * S_store * D_store, S_store * D_store, D_store, 1};
        memcpy(dims, d, sizeof d), memcpy(strides, st, sizeof st);
        return 4;
    }
    int64_t st[4] = {S_store * H * D_store, H * D_store, D_store, 1};
    if (strcmp(layout, "BSH") == 0) {
        int64_t d[3] = {B, S, H * D}, st3[3] = {st[0], st[1], 1};
        memcpy(dims, d, sizeof d), memcpy(strides, st3, sizeof st3);
        return 3;
    }
    int64_t d[4] = {B, S, H, D};
    memcpy(dims, d, sizeof d), memcpy(strides, st, sizeof st);
    return 4;
}

/* Element index of logical (b, h, s, x) in the stored buffer. */
static int64_t stored_index(const char *layout, int64_t b, int64_t h, int64_t s, int64_t x, int64_t H,
                            int64_t S_store, int64_t D_store) {
    if (strcmp(layout, "BNSD") == 0) return ((b * H + h) * S_store + s) * D_store + x;
    return ((b * S_store + s) * H + h) * D_store + x;
}

typedef struct fa_result {
    uint16_t *out; /* logical [B][N][Sq][D] */
    float *lse;    /* [B][N][Sq] */
} fa_result;

/* Runs FIA on the case's data; q rows [row0, row0 + Sq) of a data set with Sq_data rows. */
static aclnnStatus fa_run(const fa_case *c, const fa_data *d, int64_t Sq_data, int64_t row0, double scale,
                          bool want_lse, fa_result *r) {
    const char *layout = c->layout;
    int64_t B = c->B, N = c->N, KVN = c->KVN, Sq = c->Sq, Skv = c->Skv, D = c->D;
    /* q: stored exactly (contiguous in its layout) */
    int64_t nq = B * N * Sq * D;
    uint16_t *qh = malloc((size_t)nq * 2);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < N; h++)
            for (int64_t i = 0; i < Sq; i++)
                for (int64_t x = 0; x < D; x++)
                    qh[stored_index(layout, b, h, i, x, N, Sq, D)] = d->q[((b * N + h) * Sq_data + row0 + i) * D + x];
    /* k / v: a padded cache when strided: S_store = Skv + 5 rows, D_store = D + 16, start at row 2 */
    int64_t S_store = c->strided_kv ? Skv + 5 : Skv, D_store = c->strided_kv ? D + 16 : D;
    int64_t row_off = c->strided_kv ? 2 : 0;
    int64_t nk = B * KVN * S_store * D_store;
    uint16_t *kh = calloc((size_t)nk, 2), *vh = calloc((size_t)nk, 2);
    for (int64_t i = 0; i < nk; i++) kh[i] = f16(1000.0f), vh[i] = 0x7e00; /* poison outside the view */
    for (int64_t b = 0; b < B; b++)
        for (int64_t g = 0; g < KVN; g++)
            for (int64_t j = 0; j < Skv; j++)
                for (int64_t x = 0; x < D; x++) {
                    int64_t at = stored_index(layout, b, g, j + row_off, x, KVN, S_store, D_store);
                    kh[at] = d->k[((b * KVN + g) * Skv + j) * D + x];
                    vh[at] = d->v[((b * KVN + g) * Skv + j) * D + x];
                }
    void *qd = dev_from(qh, (size_t)nq * 2), *kd = dev_from(kh, (size_t)nk * 2), *vd = dev_from(vh, (size_t)nk * 2);
    void *od = dev_alloc((size_t)nq * 2), *lsed = dev_alloc((size_t)(B * N * Sq) * 4);
    int64_t dims[4], strides[4];
    int nd = layout_dims(layout, B, Sq, N, D, Sq, D, dims, strides);
    fia_args a = {.n_head = N, .n_kv_head = KVN, .scale = scale, .layout = layout, .inner = Sq == 1 ? 0 : 2};
    a.q = acl_view(dims, nd, ACL_FLOAT16, strides, 0, qd);
    a.out = acl_view(dims, nd, ACL_FLOAT16, strides, 0, od);
    nd = layout_dims(layout, B, Skv, KVN, D, S_store, D_store, dims, strides);
    int64_t off = row_off * (strcmp(layout, "BNSD") == 0 ? D_store : KVN * D_store);
    if (c->strided_kv && strcmp(layout, "BSH") == 0) { /* BSH needs contiguous hidden: no D padding */
        CHECK(!"strided BSH case is not meaningful");
    }
    a.k = acl_view(dims, nd, ACL_FLOAT16, strides, off, kd);
    a.v = acl_view(dims, nd, ACL_FLOAT16, strides, off, vd);
    /* contiguous: pse (1, N, Sq, pad) finite, -65504 where masked; mask (1, Sq, pad) BOOL; the
     * key dim padded to Skv + 3 (the document allows padded sizes) */
    void *pd = NULL, *md = NULL;
    int64_t pad = Skv + 3;
    if (c->mask_kind == 1) {
        uint16_t *ph = malloc((size_t)(N * Sq * pad) * 2);
        for (int64_t h = 0; h < N; h++)
            for (int64_t i = 0; i < Sq; i++)
                for (int64_t j = 0; j < pad; j++) {
                    float b = j < Skv ? d->bias[(row0 + i) * Skv + j] : -INFINITY;
                    ph[(h * Sq + i) * pad + j] = f16(b == -INFINITY ? -65504.0f : b);
                }
        pd = dev_from(ph, (size_t)(N * Sq * pad) * 2);
        free(ph);
        int64_t pdims[4] = {1, N, Sq, pad};
        a.pse = acl_view(pdims, 4, ACL_FLOAT16, NULL, 0, pd);
    }
    if (c->mask_kind != 0) {
        unsigned char *mh = malloc((size_t)(Sq * pad));
        for (int64_t i = 0; i < Sq; i++)
            for (int64_t j = 0; j < pad; j++) mh[i * pad + j] = j >= Skv || d->bias[(row0 + i) * Skv + j] == -INFINITY;
        md = dev_from(mh, (size_t)(Sq * pad));
        free(mh);
        int64_t mdims[3] = {1, Sq, pad};
        a.mask = acl_view(mdims, 3, ACL_BOOL, NULL, 0, md);
    }
    if (want_lse) {
        int64_t ldims[4] = {B, N, Sq, 1};
        a.lse = acl_view(ldims, 4, ACL_FLOAT, NULL, 0, lsed);
        a.lse_flag = true;
    }
    aclnnStatus st = fia(&a);
    if (st != ACLNN_SUCCESS) fprintf(stderr, "  FIA: %d %s\n", st, aclGetRecentErrMsg());
    uint16_t *oh = malloc((size_t)nq * 2);
    to_host(oh, od, (size_t)nq * 2);
    r->out = malloc((size_t)nq * 2);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < N; h++)
            for (int64_t i = 0; i < Sq; i++)
                for (int64_t x = 0; x < D; x++)
                    r->out[((b * N + h) * Sq + i) * D + x] = oh[stored_index(layout, b, h, i, x, N, Sq, D)];
    r->lse = malloc((size_t)(B * N * Sq) * 4);
    to_host(r->lse, lsed, (size_t)(B * N * Sq) * 4);
    aclDestroyTensor(a.q), aclDestroyTensor(a.out), aclDestroyTensor(a.pse), aclDestroyTensor(a.mask);
    aclDestroyTensor(a.lse);
    aclrtFree(qd), aclrtFree(kd), aclrtFree(vd), aclrtFree(od), aclrtFree(lsed);
    if (pd) aclrtFree(pd);
    if (md) aclrtFree(md);
    free(qh), free(kh), free(vh), free(oh);
    return st;
}

static void test_case(const fa_case *c) {
    fa_data d;
    fa_fill(c, &d);
    double scale = 1.0 / sqrt((double)c->D);
    fa_result r;
    aclnnStatus st = fa_run(c, &d, c->Sq, 0, scale, true, &r);
    CHECK(st == ACLNN_SUCCESS);
    int64_t n = c->B * c->N * c->Sq * c->D;
    double *ref = malloc((size_t)n * sizeof(double)), *lse = malloc((size_t)(c->B * c->N * c->Sq) * sizeof(double));
    reference(c, &d, scale, ref, lse);
    double max_err = 0, err2 = 0, ref2 = 0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double got = from_f16(r.out[i]), e = fabs(got - ref[i]);
        if (!(e <= 2e-3 + 4e-3 * fabs(ref[i]))) bad++;
        max_err = e > max_err ? e : max_err;
        err2 += e * e, ref2 += ref[i] * ref[i];
    }
    int bad_lse = 0;
    for (int64_t i = 0; i < c->B * c->N * c->Sq; i++) {
        if (isinf(lse[i])) bad_lse += !(isinf(r.lse[i]) && r.lse[i] > 0);
        else bad_lse += !(fabs(r.lse[i] - lse[i]) <= 1e-4 * (1 + fabs(lse[i])));
    }
    double nmse = ref2 > 0 ? err2 / ref2 : err2;
    printf("  B=%lld N=%lld/%lld Sq=%lld Skv=%lld D=%lld %s%s mask=%d: max err %.2e nmse %.2e\n",
           (long long)c->B, (long long)c->N, (long long)c->KVN, (long long)c->Sq, (long long)c->Skv,
           (long long)c->D, c->layout, c->strided_kv ? " strided" : "", c->mask_kind, max_err, nmse);
    CHECK(bad == 0);
    CHECK(bad_lse == 0);
    CHECK(nmse < 5e-6);
    free(ref), free(lse), free(r.out), free(r.lse);
    fa_free(&d);
}

static void test_against_reference(void) {
    const fa_case cases[] = {
        {1, 9, 3, 1, 37, 64, "BSND", true, 1},     {1, 9, 3, 7, 300, 64, "BSND", true, 1},
        {2, 9, 3, 33, 120, 64, "BSND", true, 1},   {1, 32, 8, 1, 300, 128, "BSND", true, 1},
        {1, 32, 8, 7, 64, 128, "BSND", true, 1},   {2, 32, 8, 33, 257, 128, "BNSD", true, 1},
        {1, 4, 4, 7, 50, 64, "BSND", false, 0},    {2, 8, 2, 33, 100, 128, "BSND", true, 2},
        {1, 8, 2, 5, 40, 64, "BSH", false, 1},     {1, 14, 2, 1, 299, 64, "BNSD", false, 2},
        {1, 2, 1, 3, 16, 16, "BSND", false, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_case(&cases[i]);
}

/* A fully masked row gives zeros; an empty key sequence gives zeros. */
static void test_fully_masked_rows_are_zero(void) {
    fa_case c = {1, 4, 2, 4, 20, 64, "BSND", false, 1};
    fa_data d;
    fa_fill(&c, &d);
    for (int64_t j = 0; j < c.Skv; j++) d.bias[2 * c.Skv + j] = -INFINITY;
    fa_result r;
    CHECK(fa_run(&c, &d, c.Sq, 0, 0.125, true, &r) == ACLNN_SUCCESS);
    for (int64_t h = 0; h < c.N; h++)
        for (int64_t x = 0; x < c.D; x++) CHECK(r.out[((h * c.Sq) + 2) * c.D + x] == 0);
    free(r.out), free(r.lse);
    fa_free(&d);
}

/* Row outputs are bit-identical whether computed with Sq = 64, 7 or 1. */
static void test_batch_invariance(void) {
    fa_case c = {1, 9, 3, 64, 200, 64, "BSND", true, 1};
    fa_data d;
    fa_fill(&c, &d);
    fa_result full, part, one;
    CHECK(fa_run(&c, &d, 64, 0, 0.125, false, &full) == ACLNN_SUCCESS);
    fa_case c7 = c;
    c7.Sq = 7;
    CHECK(fa_run(&c7, &d, 64, 20, 0.125, false, &part) == ACLNN_SUCCESS);
    fa_case c1 = c;
    c1.Sq = 1;
    CHECK(fa_run(&c1, &d, 64, 23, 0.125, false, &one) == ACLNN_SUCCESS);
    int diff7 = 0, diff1 = 0;
    for (int64_t h = 0; h < c.N; h++) {
        for (int64_t i = 0; i < 7; i++)
            diff7 += memcmp(full.out + ((h * 64) + 20 + i) * c.D, part.out + ((h * 7) + i) * c.D, (size_t)c.D * 2) != 0;
        diff1 += memcmp(full.out + ((h * 64) + 23) * c.D, one.out + h * c.D, (size_t)c.D * 2) != 0;
    }
    CHECK(diff7 == 0);
    CHECK(diff1 == 0);
    free(full.out), free(full.lse), free(part.out), free(part.lse), free(one.out), free(one.lse);
    fa_free(&d);
}

/* A pse that is the same for every head (a decode's mask, written for each head by the backend):
 * the heads of a group share their live keys and read each key once for all of them; each head's
 * output and softmaxLse are still the bits of that head computed alone (N = KVN = 1). */
static void test_heads_sharing_a_pse_match_each_head_alone(void) {
    for (int64_t Sq = 1; Sq <= 5; Sq += 4) {
        fa_case c = {1, 9, 3, Sq, 150, 64, "BSND", false, 1};
        fa_data d;
        fa_fill(&c, &d);
        fa_result all;
        CHECK(fa_run(&c, &d, Sq, 0, 0.125, true, &all) == ACLNN_SUCCESS);
        int diff = 0;
        for (int64_t h = 0; h < c.N; h++) {
            int64_t g = h / (c.N / c.KVN);
            fa_case c1 = c;
            c1.N = 1, c1.KVN = 1;
            fa_data d1 = {d.q + h * Sq * c.D, d.k + g * c.Skv * c.D, d.v + g * c.Skv * c.D, d.bias};
            fa_result one;
            CHECK(fa_run(&c1, &d1, Sq, 0, 0.125, true, &one) == ACLNN_SUCCESS);
            diff += memcmp(all.out + h * Sq * c.D, one.out, (size_t)(Sq * c.D) * 2) != 0;
            diff += memcmp(all.lse + h * Sq, one.lse, (size_t)Sq * 4) != 0;
            free(one.out), free(one.lse);
        }
        CHECK(diff == 0);
        free(all.out), free(all.lse);
        fa_free(&d);
    }
}

/* --dump FILE: fixed cases' output and softmaxLse bytes, for the thread-count and ISA comparison: a
 * pse written for every head (the same bits, so the heads share their keys), and masks shared by
 * the heads (the heads of a position computed together: groups of 7 and 3, D = 64 and 48; 8 rows
 * over 530 keys, as a batched decode's, with live-key counts that are not multiples of 16). */
static const fa_case dump_cases[] = {{2, 32, 8, 9, 150, 128, "BSND", true, 1},
                                     {1, 14, 2, 40, 100, 64, "BSND", true, 2},
                                     {1, 9, 3, 8, 530, 64, "BSND", true, 2},
                                     {2, 6, 2, 5, 70, 48, "BNSD", false, 0}};
#define N_DUMP_CASES (sizeof dump_cases / sizeof dump_cases[0])

static size_t dump_bytes(void) {
    size_t n = 0;
    for (size_t i = 0; i < N_DUMP_CASES; i++)
        n += (size_t)(dump_cases[i].B * dump_cases[i].N * dump_cases[i].Sq) * (size_t)(dump_cases[i].D * 2 + 4);
    return n;
}

static int dump(const char *path) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    for (size_t i = 0; i < N_DUMP_CASES; i++) {
        const fa_case c = dump_cases[i];
        fa_data d;
        fa_fill(&c, &d);
        fa_result r;
        CHECK(fa_run(&c, &d, c.Sq, 0, 0.088, true, &r) == ACLNN_SUCCESS);
        if (f) { /* the output, and softmaxLse (F32: the last bits of the scores show there) */
            fwrite(r.out, 2, (size_t)(c.B * c.N * c.Sq * c.D), f);
            fwrite(r.lse, 4, (size_t)(c.B * c.N * c.Sq), f);
        }
        free(r.out), free(r.lse);
        fa_free(&d);
    }
    if (f)
        fclose(f);
    return 0;
}

/* Runs `self --dump` under `env` and reads the bytes back; NULL on failure. */
static char *dump_with(const char *self, const char *env, const char *tag, size_t n) {
    char path[96], cmd[1024];
    snprintf(path, sizeof path, "/tmp/test_fia_%d_%s.bin", (int)getpid(), tag);
    snprintf(cmd, sizeof cmd, "%s '%s' --dump %s > /dev/null", env, self, path);
    CHECK(system(cmd) == 0);
    char *buf = malloc(n);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    bool ok = f && fread(buf, 1, n, f) == n;
    CHECK(ok);
    if (f) fclose(f);
    remove(path);
    if (!ok) free(buf);
    return ok ? buf : NULL;
}

/* 1 vs 2 threads, and the scalar / AVX2 / best ISA paths, give the same bits. */
static void test_thread_and_isa_invariance(const char *self) {
    size_t n = dump_bytes();
    const char *envs[][2] = {{"CANN_LLM_THREADS=1", "t1"}, {"CANN_LLM_THREADS=2", "t2"},
                             {"CANN_LLM_THREADS=2 CANN_LLM_HOST_ISA=avx2", "avx2"},
                             {"CANN_LLM_THREADS=2 CANN_LLM_HOST_ISA=scalar", "scalar"}};
    char *first = dump_with(self, envs[0][0], envs[0][1], n);
    for (size_t i = 1; i < sizeof envs / sizeof envs[0]; i++) {
        char *other = dump_with(self, envs[i][0], envs[i][1], n);
        if (first && other && memcmp(first, other, n) != 0) {
            fprintf(stderr, "  %s differs from %s\n", envs[i][0], envs[0][0]);
            CHECK(!"outputs differ");
        }
        free(other);
    }
    free(first);
}

/* ---- errors ------------------------------------------------------------------------------------- */
static aclnnStatus try_phase1(aclDataType qt, int64_t N, int64_t KVN, int64_t D, const char *layout,
                              int64_t sparse, int list_size, bool quant) {
    void *buf = dev_alloc(1 << 16);
    int64_t qd[4] = {1, 2, N, D}, kd[4] = {1, 8, KVN, D};
    aclTensor *q = acl_view(qd, 4, qt, NULL, 0, buf), *out = acl_view(qd, 4, qt, NULL, 0, buf);
    aclTensor *k[2] = {acl_view(kd, 4, ACL_FLOAT16, NULL, 0, buf), acl_view(kd, 4, ACL_FLOAT16, NULL, 0, buf)};
    aclTensor *v = acl_view(kd, 4, ACL_FLOAT16, NULL, 0, buf);
    aclTensorList *kl = aclCreateTensorList((const aclTensor *const *)k, (uint64_t)list_size);
    aclTensorList *vl = list1(v);
    char lay[16];
    if (layout) snprintf(lay, sizeof lay, "%s", layout);
    uint64_t ws;
    aclOpExecutor *ex;
    aclnnStatus st = aclnnFusedInferAttentionScoreV2GetWorkspaceSize(
        q, kl, vl, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, quant ? q : NULL, NULL, NULL, NULL, NULL,
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, N, 1.0, 65535, 65535, layout ? lay : NULL, KVN, sparse, 0, 0, 0,
        false, 0, 0, out, NULL, &ws, &ex);
    if (st == ACLNN_SUCCESS) { /* consume the executor */
        CHECK(aclnnFusedInferAttentionScoreV2(NULL, ws, ex, stream) == ACLNN_SUCCESS);
        CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    } else {
        CHECK(strstr(aclGetRecentErrMsg(), "aclnnFusedInferAttentionScoreV2") != NULL);
    }
    aclDestroyTensorList(kl);
    if (list_size == 1) aclDestroyTensor(k[1]);
    aclDestroyTensorList(vl);
    aclDestroyTensor(q), aclDestroyTensor(out);
    aclrtFree(buf);
    return st;
}

static void test_errors(void) {
    CHECK(try_phase1(ACL_FLOAT16, 8, 2, 64, "BSND", 0, 1, false) == ACLNN_SUCCESS);
    CHECK(try_phase1(ACL_FLOAT16, 8, 2, 64, "SBH", 0, 1, false) == ACLNN_ERR_PARAM_INVALID);
    CHECK(try_phase1(ACL_FLOAT16, 8, 2, 64, NULL, 0, 1, false) == ACLNN_ERR_PARAM_NULLPTR);
    CHECK(try_phase1(ACL_FLOAT, 8, 2, 64, "BSND", 0, 1, false) == ACLNN_ERR_PARAM_INVALID);
    CHECK(try_phase1(ACL_FLOAT16, 9, 4, 64, "BSND", 0, 1, false) == ACLNN_ERR_PARAM_INVALID); /* head ratio */
    CHECK(try_phase1(ACL_FLOAT16, 8, 2, 40, "BSND", 0, 1, false) == ACLNN_ERR_PARAM_INVALID); /* D % 16 */
    CHECK(try_phase1(ACL_FLOAT16, 8, 2, 64, "BSND", 2, 1, false) == ACLNN_ERR_PARAM_INVALID); /* sparseMode */
    CHECK(try_phase1(ACL_FLOAT16, 8, 2, 64, "BSND", 0, 2, false) == ACLNN_ERR_PARAM_INVALID); /* list of 2 */
    CHECK(try_phase1(ACL_FLOAT16, 8, 2, 64, "BSND", 0, 1, true) == ACLNN_ERR_PARAM_INVALID);  /* antiquant */
    CHECK(try_phase1(ACL_BF16, 8, 2, 64, "BSND", 0, 1, false) == ACLNN_ERR_PARAM_INVALID);    /* q BF16, k F16 */
}

/* The rules the backend's old call pattern broke: a stride-0 (broadcast) pse head dim, a query
 * laid out BNSD but described as BSND, a -inf in the pse (a run-time error at synchronize), a decode
 * attenMask over more than 512 keys. Strided K / V stay accepted (the relaxation). */
static char rule_msg[512];

static aclnnStatus rules_case(int which) {
    const int64_t N = 4, KVN = 2, Sq = which == 3 || which == 4 ? 1 : 3, Skv = which >= 3 ? 512 + (which == 3) : 40;
    const int64_t D = 64;
    size_t nq = (size_t)(N * Sq * D), nk = (size_t)(KVN * Skv * D), np = (size_t)(N * Sq * Skv);
    uint16_t *h = malloc((nk > np ? nk : np) * 2);
    for (size_t i = 0; i < (nk > np ? nk : np); i++) h[i] = f16(0.5f * urand());
    void *qd = dev_from(h, nq * 2), *kd = dev_from(h, nk * 2), *vd = dev_from(h, nk * 2), *od = dev_alloc(nq * 2);
    if (which == 2) h[7] = f16(-INFINITY);
    void *pd = dev_from(h, np * 2);
    unsigned char *mh = calloc((size_t)Skv, 1);
    void *md = dev_from(mh, (size_t)Skv);
    int64_t qdims[4] = {1, Sq, N, D}, kdims[4] = {1, Skv, KVN, D}, pdims[4] = {1, N, Sq, Skv};
    int64_t qbnsd_st[4] = {N * Sq * D, D, Sq * D, 1}, pst0[4] = {0, 0, Skv, 1};
    fia_args a = {.n_head = N, .n_kv_head = KVN, .scale = 0.125, .layout = "BSND", .inner = Sq == 1 ? 0 : 2};
    a.q = acl_view(qdims, 4, ACL_FLOAT16, which == 1 ? qbnsd_st : NULL, 0, qd);
    a.out = acl_view(qdims, 4, ACL_FLOAT16, NULL, 0, od);
    a.k = acl_view(kdims, 4, ACL_FLOAT16, NULL, 0, kd), a.v = acl_view(kdims, 4, ACL_FLOAT16, NULL, 0, vd);
    if (which == 0) a.pse = acl_view(pdims, 4, ACL_FLOAT16, pst0, 0, pd);   /* stride-0 heads */
    if (which == 2) a.pse = acl_view(pdims, 4, ACL_FLOAT16, NULL, 0, pd);   /* one -inf */
    if (which >= 3) {                                                       /* (B, 1, 1, Skv) */
        int64_t mdims[4] = {1, 1, 1, Skv};
        a.mask = acl_view(mdims, 4, ACL_BOOL, NULL, 0, md);
    }
    aclTensorList *kl = list1(a.k), *vl = list1(a.v);
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    char layout[] = "BSND";
    aclnnStatus st = aclnnFusedInferAttentionScoreV2GetWorkspaceSize(
        a.q, kl, vl, a.pse, a.mask, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        NULL, NULL, NULL, NULL, NULL, NULL, N, 0.125, 65535, 65535, layout, KVN, 0, a.inner, 0, 0, false, 0, 0,
        a.out, NULL, &ws, &ex);
    if (st == ACLNN_SUCCESS) {
        CHECK(ws == 0);
        CHECK(aclnnFusedInferAttentionScoreV2(NULL, 0, ex, stream) == ACLNN_SUCCESS);
        st = (aclnnStatus)aclrtSynchronizeStream(stream);
    }
    rule_msg[0] = 0;
    if (st != ACLNN_SUCCESS) {
        const char *m = aclGetRecentErrMsg(); /* reading it clears it */
        snprintf(rule_msg, sizeof rule_msg, "%s", m ? m : "");
        printf("  rule %d: %d %s\n", which, st, rule_msg);
        CHECK(strstr(rule_msg, "aclnnFusedInferAttentionScoreV2") != NULL);
    }
    aclDestroyTensorList(kl), aclDestroyTensorList(vl);
    aclDestroyTensor(a.q), aclDestroyTensor(a.out), aclDestroyTensor(a.pse), aclDestroyTensor(a.mask);
    aclrtFree(qd), aclrtFree(kd), aclrtFree(vd), aclrtFree(od), aclrtFree(pd), aclrtFree(md);
    free(h), free(mh);
    return st;
}

static void test_contiguity_finiteness_decode_mask(void) {
    CHECK(rules_case(0) == ACLNN_ERR_PARAM_INVALID);                   /* stride-0 pse heads */
    CHECK(strstr(rule_msg, "pseShiftOptional must be contiguous") != NULL);
    CHECK(rules_case(1) == ACLNN_ERR_PARAM_INVALID);                   /* strided query */
    CHECK(strstr(rule_msg, "query must be contiguous") != NULL);
    CHECK(rules_case(2) == (aclnnStatus)ACL_ERROR_RT_AICORE_EXCEPTION); /* -inf in the pse */
    CHECK(strstr(rule_msg, "not finite") != NULL);
    CHECK(rules_case(3) == ACLNN_ERR_PARAM_INVALID);                   /* decode mask, 513 keys */
    CHECK(strstr(rule_msg, "512") != NULL);
    CHECK(rules_case(4) == ACLNN_SUCCESS);                             /* decode mask, 512 keys */
}

/* One operand breaking one phase-1 rule on an otherwise valid call: B 2, N 4, KVN 2, Skv 40, D 64,
 * BSND, zero data. pse / mask / lse given when their rank (nd) is non-zero; a call that passes
 * phase 1 also runs. The message of a refused call lands in op_msg. */
typedef struct fia_rule {
    int64_t Sq, inner;
    int pse_nd, mask_nd, lse_nd;
    aclDataType pse_dt, mask_dt, lse_dt;
    int64_t pse[4], mask[4], lse[4];
    const int64_t *mask_st, *lse_st;
    bool lse_flag;
} fia_rule;

static char op_msg[512];

static aclnnStatus fia_rule_run(const fia_rule *c) {
    const int64_t B = 2, N = 4, KVN = 2, Skv = 40, D = 64;
    void *zeros = calloc(1, 1 << 16), *in = dev_from(zeros, 1 << 16); /* q, k, v, pse, mask */
    free(zeros);
    void *od = dev_alloc((size_t)(B * c->Sq * N * D * 2)), *ld = dev_alloc(1 << 12);
    int64_t qd[4] = {B, c->Sq, N, D}, kd[4] = {B, Skv, KVN, D};
    fia_args a = {.n_head = N, .n_kv_head = KVN, .scale = 0.125, .layout = "BSND", .inner = c->inner,
                  .lse_flag = c->lse_flag};
    a.q = acl_view(qd, 4, ACL_FLOAT16, NULL, 0, in), a.out = acl_view(qd, 4, ACL_FLOAT16, NULL, 0, od);
    a.k = acl_view(kd, 4, ACL_FLOAT16, NULL, 0, in), a.v = acl_view(kd, 4, ACL_FLOAT16, NULL, 0, in);
    if (c->pse_nd) a.pse = acl_view(c->pse, c->pse_nd, c->pse_dt, NULL, 0, in);
    if (c->mask_nd) a.mask = acl_view(c->mask, c->mask_nd, c->mask_dt, c->mask_st, 0, in);
    if (c->lse_nd) a.lse = acl_view(c->lse, c->lse_nd, c->lse_dt, c->lse_st, 0, ld);
    aclnnStatus st = fia(&a);
    op_msg[0] = 0;
    if (st != ACLNN_SUCCESS) {
        const char *m = aclGetRecentErrMsg();
        snprintf(op_msg, sizeof op_msg, "%s", m ? m : "");
    }
    aclDestroyTensor(a.q), aclDestroyTensor(a.out), aclDestroyTensor(a.pse), aclDestroyTensor(a.mask);
    aclDestroyTensor(a.lse);
    aclrtFree(in), aclrtFree(od), aclrtFree(ld);
    return st;
}

/* want: the status; operand: the name the message must carry with the op's (NULL on success). */
static void expect_rule(fia_rule c, aclnnStatus want, const char *operand) {
    aclnnStatus st = fia_rule_run(&c);
    if (st != want) fprintf(stderr, "  want %d, got %d: %s\n", want, st, op_msg);
    CHECK(st == want);
    if (operand) {
        printf("  refused: %d %s\n", st, op_msg);
        CHECK(strstr(op_msg, "aclnnFusedInferAttentionScoreV2") != NULL);
        CHECK(strstr(op_msg, operand) != NULL);
    }
}

#define F16_ ACL_FLOAT16
static void test_pse_rules(void) {
    const char *P = "pseShiftOptional";
    expect_rule((fia_rule){.Sq = 3, .pse_nd = 4, .pse_dt = F16_, .pse = {1, 4, 3, 40}}, ACLNN_SUCCESS, NULL);
    expect_rule((fia_rule){.Sq = 3, .pse_nd = 4, .pse_dt = F16_, .pse = {2, 4, 3, 40}}, ACLNN_SUCCESS, NULL);
    expect_rule((fia_rule){.Sq = 3, .pse_nd = 4, .pse_dt = ACL_BF16, .pse = {1, 4, 3, 40}}, ACLNN_ERR_PARAM_INVALID, P);
    expect_rule((fia_rule){.Sq = 3, .pse_nd = 4, .pse_dt = ACL_FLOAT, .pse = {1, 4, 3, 40}}, ACLNN_ERR_PARAM_INVALID, P);
    expect_rule((fia_rule){.Sq = 3, .pse_nd = 4, .pse_dt = F16_, .pse = {1, 2, 3, 40}}, ACLNN_ERR_PARAM_INVALID, P);
    expect_rule((fia_rule){.Sq = 3, .pse_nd = 4, .pse_dt = F16_, .pse = {1, 4, 3, 39}}, ACLNN_ERR_PARAM_INVALID, P);
    expect_rule((fia_rule){.Sq = 3, .pse_nd = 4, .pse_dt = F16_, .pse = {1, 4, 2, 40}}, ACLNN_ERR_PARAM_INVALID, P);
    expect_rule((fia_rule){.Sq = 3, .pse_nd = 4, .pse_dt = F16_, .pse = {3, 4, 3, 40}}, ACLNN_ERR_PARAM_INVALID, P);
    expect_rule((fia_rule){.Sq = 3, .pse_nd = 3, .pse_dt = F16_, .pse = {4, 3, 40}}, ACLNN_ERR_PARAM_INVALID, P);
}

static void test_mask_rules(void) {
    const char *M = "attenMaskOptional";
    static const int64_t padded[2] = {48, 1};
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 2, .mask_dt = ACL_BOOL, .mask = {3, 40}}, ACLNN_SUCCESS, NULL);
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 2, .mask_dt = ACL_INT8, .mask = {3, 40}}, ACLNN_SUCCESS, NULL);
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 2, .mask_dt = ACL_UINT8, .mask = {3, 40}}, ACLNN_SUCCESS, NULL);
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 3, .mask_dt = ACL_BOOL, .mask = {2, 3, 40}}, ACLNN_SUCCESS, NULL);
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 4, .mask_dt = ACL_BOOL, .mask = {1, 1, 3, 40}}, ACLNN_SUCCESS, NULL);
    expect_rule((fia_rule){.Sq = 1, .mask_nd = 2, .mask_dt = ACL_BOOL, .mask = {2, 40}}, ACLNN_SUCCESS, NULL);
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 2, .mask_dt = ACL_FLOAT16, .mask = {3, 40}}, ACLNN_ERR_PARAM_INVALID, M);
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 2, .mask_dt = ACL_FLOAT, .mask = {3, 40}}, ACLNN_ERR_PARAM_INVALID, M);
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 2, .mask_dt = ACL_BOOL, .mask = {2, 40}}, ACLNN_ERR_PARAM_INVALID, M);
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 2, .mask_dt = ACL_BOOL, .mask = {3, 39}}, ACLNN_ERR_PARAM_INVALID, M);
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 3, .mask_dt = ACL_BOOL, .mask = {3, 3, 40}}, ACLNN_ERR_PARAM_INVALID, M);
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 4, .mask_dt = ACL_BOOL, .mask = {2, 4, 3, 40}}, ACLNN_ERR_PARAM_INVALID, M);
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 1, .mask_dt = ACL_BOOL, .mask = {40}}, ACLNN_ERR_PARAM_INVALID, M);
    expect_rule((fia_rule){.Sq = 3, .mask_nd = 2, .mask_dt = ACL_BOOL, .mask = {3, 40}, .mask_st = padded},
                ACLNN_ERR_PARAM_INVALID, "attenMaskOptional must be contiguous");
}

static void test_inner_precise_rules(void) {
    for (int64_t ip = 0; ip <= 3; ip++) expect_rule((fia_rule){.Sq = 3, .inner = ip}, ACLNN_SUCCESS, NULL);
    expect_rule((fia_rule){.Sq = 3, .inner = -1}, ACLNN_ERR_PARAM_INVALID, "innerPrecise");
    expect_rule((fia_rule){.Sq = 3, .inner = 4}, ACLNN_ERR_PARAM_INVALID, "innerPrecise");
    expect_rule((fia_rule){.Sq = 1, .inner = 1}, ACLNN_SUCCESS, NULL);
    expect_rule((fia_rule){.Sq = 1, .inner = 2}, ACLNN_ERR_PARAM_INVALID, "innerPrecise");
    expect_rule((fia_rule){.Sq = 1, .inner = 3}, ACLNN_ERR_PARAM_INVALID, "innerPrecise");
}

static void test_softmax_lse_rules(void) {
    const char *L = "softmaxLse";
    static const int64_t spread[4] = {24, 6, 2, 1};
    expect_rule((fia_rule){.Sq = 3, .lse_flag = true, .lse_nd = 4, .lse_dt = ACL_FLOAT, .lse = {2, 4, 3, 1}},
                ACLNN_SUCCESS, NULL);
    expect_rule((fia_rule){.Sq = 3, .lse_flag = true}, ACLNN_ERR_PARAM_NULLPTR, L);
    expect_rule((fia_rule){.Sq = 3, .lse_flag = true, .lse_nd = 4, .lse_dt = ACL_FLOAT16, .lse = {2, 4, 3, 1}},
                ACLNN_ERR_PARAM_INVALID, L);
    expect_rule((fia_rule){.Sq = 3, .lse_flag = true, .lse_nd = 4, .lse_dt = ACL_FLOAT, .lse = {2, 3, 4, 1}},
                ACLNN_ERR_PARAM_INVALID, L);
    expect_rule((fia_rule){.Sq = 3, .lse_flag = true, .lse_nd = 3, .lse_dt = ACL_FLOAT, .lse = {2, 4, 3}},
                ACLNN_ERR_PARAM_INVALID, L);
    expect_rule((fia_rule){.Sq = 3, .lse_flag = true, .lse_nd = 4, .lse_dt = ACL_FLOAT, .lse = {2, 4, 3, 1},
                           .lse_st = spread}, ACLNN_ERR_PARAM_INVALID, "softmaxLse must be contiguous");
}

/* ---- bench -------------------------------------------------------------------------------------- */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* mask_only: a causal BOOL attenMask (Sq, Skv) shared by the heads, as the runner's prefill
 * passes it, instead of the full-head pse */
static void bench_one(int64_t N, int64_t KVN, int64_t Sq, int64_t Skv, int64_t D, int reps, bool mask_only) {
    int64_t nq = N * Sq * D, nk = KVN * Skv * D;
    uint16_t *h = malloc((size_t)(nq > nk ? nq : nk) * 2);
    for (int64_t i = 0; i < (nq > nk ? nq : nk); i++) h[i] = f16(urand());
    void *qd = dev_from(h, (size_t)nq * 2), *kd = dev_from(h, (size_t)nk * 2), *vd = dev_from(h, (size_t)nk * 2);
    void *od = dev_alloc((size_t)nq * 2);
    uint16_t *ph = malloc((size_t)(N * Sq * Skv) * 2); /* causal, as a full-head finite pse */
    for (int64_t i = 0; i < N * Sq; i++)
        for (int64_t j = 0; j < Skv; j++) ph[i * Skv + j] = f16(j > i % Sq + Skv - Sq ? -65504.0f : 0.0f);
    void *pd = dev_from(ph, (size_t)(N * Sq * Skv) * 2);
    uint8_t *mh = malloc((size_t)(Sq * Skv));
    for (int64_t i = 0; i < Sq; i++)
        for (int64_t j = 0; j < Skv; j++) mh[i * Skv + j] = j > i + Skv - Sq;
    void *md = dev_from(mh, (size_t)(Sq * Skv));
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        int64_t qdims[4] = {1, Sq, N, D}, kdims[4] = {1, Skv, KVN, D}, pdims[4] = {1, N, Sq, Skv};
        fia_args a = {.n_head = N, .n_kv_head = KVN, .scale = 0.1, .layout = "BSND", .inner = Sq == 1 ? 0 : 2};
        a.q = acl_view(qdims, 4, ACL_FLOAT16, NULL, 0, qd), a.out = acl_view(qdims, 4, ACL_FLOAT16, NULL, 0, od);
        a.k = acl_view(kdims, 4, ACL_FLOAT16, NULL, 0, kd), a.v = acl_view(kdims, 4, ACL_FLOAT16, NULL, 0, vd);
        int64_t mdims[2] = {Sq, Skv};
        if (mask_only)
            a.mask = acl_view(mdims, 2, ACL_BOOL, NULL, 0, md);
        else
            a.pse = acl_view(pdims, 4, ACL_FLOAT16, NULL, 0, pd);
        double t0 = now();
        CHECK(fia(&a) == ACLNN_SUCCESS);
        double t = now() - t0;
        best = t < best ? t : best;
        aclDestroyTensor(a.q), aclDestroyTensor(a.out), aclDestroyTensor(a.pse), aclDestroyTensor(a.mask);
    }
    if (Sq == 1)
        printf("  bench decode N=%lld/%lld Skv=%lld D=%lld: %.3f ms, %.1f GB/s of KV\n", (long long)N,
               (long long)KVN, (long long)Skv, (long long)D, best * 1e3, 2.0 * (double)nk * 2 / best / 1e9);
    else
        printf("  bench prefill N=%lld/%lld Sq=%lld Skv=%lld D=%lld (causal, %s): %.2f ms, %.1f GFLOPS (dense-equivalent "
               "4*N*Sq*Skv*D), %.1f GFLOPS (unmasked half)\n",
               (long long)N, (long long)KVN, (long long)Sq, (long long)Skv, (long long)D,
               mask_only ? "shared mask" : "full-head pse", best * 1e3,
               4.0 * N * Sq * Skv * D / best / 1e9, 2.0 * N * Sq * Skv * D / best / 1e9);
    aclrtFree(qd), aclrtFree(kd), aclrtFree(vd), aclrtFree(od), aclrtFree(pd), aclrtFree(md);
    free(h), free(ph), free(mh);
}

/* Batched decode as the engine runs it: n_seq sequences, one query row each, over a cache whose
 * cells interleave the sequences (cell j holds sequence j mod n_seq; all but the last 3 cells
 * are filled), one shared BOOL attenMask (1, n_seq, Skv). Prints the median time; cold: K and V
 * are flushed from the caches before each call (x86), as in a model whose other layers and
 * weights passed through the caches since the last step. */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bench_batched_decode(int64_t N, int64_t KVN, int64_t n_seq, int64_t Skv, int64_t D, int reps, bool cold) {
    int64_t nq = N * n_seq * D, nk = KVN * Skv * D;
    uint16_t *h = malloc((size_t)(nq > nk ? nq : nk) * 2);
    for (int64_t i = 0; i < (nq > nk ? nq : nk); i++) h[i] = f16(urand());
    void *qd = dev_from(h, (size_t)nq * 2), *kd = dev_from(h, (size_t)nk * 2), *vd = dev_from(h, (size_t)nk * 2);
    void *od = dev_alloc((size_t)nq * 2);
    uint8_t *mh = malloc((size_t)(n_seq * Skv));
    int64_t filled = Skv - 3; /* a few padding cells at the end */
    for (int64_t i = 0; i < n_seq; i++)
        for (int64_t j = 0; j < Skv; j++) mh[i * Skv + j] = !(j < filled && j % n_seq == i);
    void *md = dev_from(mh, (size_t)(n_seq * Skv));
    double *t = malloc((size_t)reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
        int64_t qdims[4] = {1, n_seq, N, D}, kdims[4] = {1, Skv, KVN, D}, mdims[3] = {1, n_seq, Skv};
        fia_args a = {.n_head = N, .n_kv_head = KVN, .scale = 0.125, .layout = "BSND", .inner = 2};
        a.q = acl_view(qdims, 4, ACL_FLOAT16, NULL, 0, qd), a.out = acl_view(qdims, 4, ACL_FLOAT16, NULL, 0, od);
        a.k = acl_view(kdims, 4, ACL_FLOAT16, NULL, 0, kd), a.v = acl_view(kdims, 4, ACL_FLOAT16, NULL, 0, vd);
        a.mask = acl_view(mdims, 3, ACL_BOOL, NULL, 0, md);
#if defined(__x86_64__)
        if (cold) { /* K and V out of every cache level (acl_host's device memory is host memory) */
            for (int64_t i = 0; i < nk * 2; i += 64) {
                __builtin_ia32_clflush((const char *)kd + i);
                __builtin_ia32_clflush((const char *)vd + i);
            }
            __builtin_ia32_mfence();
        }
#endif
        double t0 = now();
        CHECK(fia(&a) == ACLNN_SUCCESS);
        t[r] = now() - t0;
        aclDestroyTensor(a.q), aclDestroyTensor(a.out), aclDestroyTensor(a.mask);
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    printf("  bench batched decode N=%lld/%lld n_seq=%lld Skv=%lld D=%lld%s: median %.1f us (min %.1f)\n",
           (long long)N, (long long)KVN, (long long)n_seq, (long long)Skv, (long long)D,
           cold ? " (K/V cold)" : "", t[reps / 2] * 1e6, t[0] * 1e6);
    aclrtFree(qd), aclrtFree(kd), aclrtFree(vd), aclrtFree(od), aclrtFree(md);
    free(h), free(mh), free(t);
}

static void bench(void) {
    if (getenv("CT_BENCH_BATCHED")) { /* only the batched-decode shape, three times each */
        for (int i = 0; i < 3; i++) bench_batched_decode(9, 3, 8, 528, 64, 400, false);
        for (int i = 0; i < 3; i++) bench_batched_decode(9, 3, 8, 528, 64, 60, true);
        return;
    }
    bench_batched_decode(9, 3, 8, 528, 64, 400, false);
    bench_batched_decode(9, 3, 8, 528, 64, 60, true);
    bench_one(32, 8, 1, 4096, 128, 10, false);
    bench_one(9, 3, 1, 8192, 64, 10, false);
    bench_one(32, 8, 512, 512, 128, 3, false);
    bench_one(9, 3, 512, 512, 64, 3, false);
    bench_one(9, 3, 512, 512, 64, 15, true);
    bench_one(14, 2, 512, 512, 64, 15, true);
}

int main(int argc, char **argv) {
    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
    CHECK(aclrtCreateStream(&stream) == ACL_SUCCESS);
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) {
        dump(argv[2]);
    } else if (getenv("CT_BENCH_BATCHED")) { /* the batched-decode timing alone */
        bench();
    } else {
        test_against_reference();
        test_fully_masked_rows_are_zero();
        test_batch_invariance();
        test_heads_sharing_a_pse_match_each_head_alone();
        test_thread_and_isa_invariance(argv[0]);
        test_errors();
        test_contiguity_finiteness_decode_mask();
        test_pse_rules();
        test_mask_rules();
        test_inner_precise_rules();
        test_softmax_lse_rules();
        if (getenv("CT_BENCH")) bench();
    }
    CHECK(aclrtDestroyStream(stream) == ACL_SUCCESS);
    CHECK(aclrtResetDevice(0) == ACL_SUCCESS);
    CHECK(aclFinalize() == ACL_SUCCESS);
    return CT_RESULT();
}
