/* test_aclnn_basic.c - aclnn descriptors and the first ops (Add/Adds/InplaceAdd/Mul/Muls, Cast,
 * InplaceCopy) through the public CANN API: broadcasting, promotion, strided and stride-0 views,
 * F16/BF16 rounding, error codes and messages, sanitizer checks, repeatable executors.
 * CT_BENCH=1 also prints throughput for a 4096x4096 F32 add and F32->F16 cast.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "acl/acl.h"
#include "aclnn_api.h"
#include "ctest_util.h"
#include "aclnn_util.h"

static aclrtStream stream;

/* ---- helpers ---------------------------------------------------------------------------------- */



/* strides NULL = contiguous; storage is 1-D with the view's extent, as llama.cpp passes it */

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint16_t bf16(float f) { /* reference RNE */
    uint32_t u = bits(f);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static float from_bf16(uint16_t b) { return from_bits((uint32_t)b << 16); }

/* Runs a prepared executor through phase 2 and synchronizes; returns phase 2's status. */
typedef aclnnStatus (*phase2_fn)(void *, uint64_t, aclOpExecutor *, aclrtStream);
static aclnnStatus launch(aclnnStatus prepared, phase2_fn run, const uint64_t *ws,
                          aclOpExecutor *const *ex) {
    CHECK(prepared == ACLNN_SUCCESS);
    if (prepared != ACLNN_SUCCESS) {
        fprintf(stderr, "  phase 1: %s\n", aclGetRecentErrMsg());
        return prepared;
    }
    CHECK(*ws == 0);
    aclnnStatus st = run(NULL, 0, *ex, stream);
    CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    return st;
}

/* ---- tests -------------------------------------------------------------------------------------- */
static void test_add_broadcast_alpha(void) {
    float a[12], b[4], out[12];
    for (int i = 0; i < 12; i++) a[i] = (float)i * 0.37f - 1.5f;
    for (int i = 0; i < 4; i++) b[i] = (float)i * 1.25f + 0.1f;
    void *da = dev_from(a, sizeof a), *db = dev_from(b, sizeof b), *dout = dev_alloc(sizeof out);
    int64_t d34[] = {3, 4}, d4[] = {4};
    aclTensor *ta = acl_view(d34, 2, ACL_FLOAT, NULL, 0, da), *tb = acl_view(d4, 1, ACL_FLOAT, NULL, 0, db);
    aclTensor *to = acl_view(d34, 2, ACL_FLOAT, NULL, 0, dout);
    float two = 2.0f;
    aclScalar *alpha = aclCreateScalar(&two, ACL_FLOAT);
    uint64_t ws = 1;
    aclOpExecutor *ex = NULL;
    CHECK(launch(aclnnAddGetWorkspaceSize(ta, tb, alpha, to, &ws, &ex), aclnnAdd, &ws, &ex) == 0);
    to_host(out, dout, sizeof out);
    for (int i = 0; i < 12; i++) {
        float prod = 2.0f * b[i % 4];
        CHECK(out[i] == a[i] + prod);
    }
    /* Mul with the same broadcast, into out == self (in place through out) */
    ex = NULL;
    aclTensor *ta_out = acl_view(d34, 2, ACL_FLOAT, NULL, 0, da);
    CHECK(launch(aclnnMulGetWorkspaceSize(ta, tb, ta_out, &ws, &ex), aclnnMul, &ws, &ex) == 0);
    to_host(out, da, sizeof out);
    for (int i = 0; i < 12; i++)
        CHECK(out[i] == a[i] * b[i % 4]);
    aclDestroyTensor(ta); aclDestroyTensor(tb); aclDestroyTensor(to); aclDestroyTensor(ta_out);
    aclDestroyScalar(alpha);
    aclrtFree(da); aclrtFree(db); aclrtFree(dout);
}

/* self (dtype sa) + other (dtype sb) -> out (dtype so), values vs a double reference */
static void check_mixed(aclDataType sa, aclDataType sb, aclDataType so, double tol_rel) {
    enum { N = 1000 };
    unsigned char ha[N * 4], hb[N * 4], ho[N * 4];
    double ra[N], rb[N];
    for (int i = 0; i < N; i++) {
        float x = sinf((float)i) * 10.0f, y = cosf((float)i * 0.7f) * 3.0f;
        if (sa == ACL_FLOAT) { memcpy(ha + 4 * i, &x, 4); ra[i] = x; }
        if (sa == ACL_FLOAT16) { uint16_t h = f16(x); memcpy(ha + 2 * i, &h, 2); ra[i] = from_f16(h); }
        if (sa == ACL_BF16) { uint16_t h = bf16(x); memcpy(ha + 2 * i, &h, 2); ra[i] = from_bf16(h); }
        if (sb == ACL_FLOAT) { memcpy(hb + 4 * i, &y, 4); rb[i] = y; }
        if (sb == ACL_FLOAT16) { uint16_t h = f16(y); memcpy(hb + 2 * i, &h, 2); rb[i] = from_f16(h); }
        if (sb == ACL_BF16) { uint16_t h = bf16(y); memcpy(hb + 2 * i, &h, 2); rb[i] = from_bf16(h); }
    }
    size_t ea = aclDataTypeSize(sa), eb = aclDataTypeSize(sb), eo = aclDataTypeSize(so);
    void *da = dev_from(ha, N * ea), *db = dev_from(hb, N * eb), *dout = dev_alloc(N * eo);
    int64_t dims[] = {10, 100};
    aclTensor *ta = acl_view(dims, 2, sa, NULL, 0, da), *tb = acl_view(dims, 2, sb, NULL, 0, db);
    aclTensor *to = acl_view(dims, 2, so, NULL, 0, dout);
    double half = 0.5;
    aclScalar *alpha = aclCreateScalar(&half, ACL_DOUBLE);
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK(launch(aclnnAddGetWorkspaceSize(ta, tb, alpha, to, &ws, &ex), aclnnAdd, &ws, &ex) == 0);
    to_host(ho, dout, N * eo);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double want = ra[i] + 0.5 * rb[i], got;
        if (so == ACL_FLOAT) { float f; memcpy(&f, ho + 4 * i, 4); got = f; }
        else { uint16_t h; memcpy(&h, ho + 2 * i, 2); got = so == ACL_FLOAT16 ? from_f16(h) : from_bf16(h); }
        if (fabs(got - want) > tol_rel * fabs(want) + 1e-6)
            bad++;
    }
    if (bad)
        fprintf(stderr, "  mixed %d+%d->%d: %d mismatches\n", sa, sb, so, bad);
    CHECK(bad == 0);
    aclDestroyTensor(ta); aclDestroyTensor(tb); aclDestroyTensor(to); aclDestroyScalar(alpha);
    aclrtFree(da); aclrtFree(db); aclrtFree(dout);
}

static void test_mixed_dtypes(void) {
    check_mixed(ACL_FLOAT16, ACL_FLOAT, ACL_FLOAT, 1e-7);
    check_mixed(ACL_BF16, ACL_FLOAT16, ACL_FLOAT, 1e-7);
    check_mixed(ACL_FLOAT16, ACL_FLOAT16, ACL_FLOAT16, 1.0 / 2048);
    check_mixed(ACL_BF16, ACL_BF16, ACL_BF16, 1.0 / 256);
    check_mixed(ACL_FLOAT, ACL_FLOAT, ACL_FLOAT16, 1.0 / 2048);
    check_mixed(ACL_FLOAT16, ACL_FLOAT, ACL_BF16, 1.0 / 256);
    /* f16 + f16 -> f16 is computed in f32 and rounded once: exact against that rule */
    uint16_t a[3] = {f16(1.0f), f16(2048.0f), f16(0.1f)}, b[3] = {f16(0x1p-11f), f16(1.0f), f16(0.2f)}, o[3];
    void *da = dev_from(a, sizeof a), *db = dev_from(b, sizeof b), *dout = dev_alloc(sizeof o);
    int64_t d3[] = {3};
    aclTensor *ta = acl_view(d3, 1, ACL_FLOAT16, NULL, 0, da), *tb = acl_view(d3, 1, ACL_FLOAT16, NULL, 0, db);
    aclTensor *to = acl_view(d3, 1, ACL_FLOAT16, NULL, 0, dout);
    int64_t one = 1;
    aclScalar *alpha = aclCreateScalar(&one, ACL_INT64);
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK(launch(aclnnAddGetWorkspaceSize(ta, tb, alpha, to, &ws, &ex), aclnnAdd, &ws, &ex) == 0);
    to_host(o, dout, sizeof o);
    for (int i = 0; i < 3; i++)
        CHECK(o[i] == f16(from_f16(a[i]) + from_f16(b[i])));
    CHECK(o[0] == f16(1.0f)); /* 1 + 2^-11 ties to even */
    CHECK(o[1] == f16(2048.0f));
    aclDestroyTensor(ta); aclDestroyTensor(tb); aclDestroyTensor(to); aclDestroyScalar(alpha);
    aclrtFree(da); aclrtFree(db); aclrtFree(dout);
}

static void test_strided_views(void) {
    /* self: [3,4] view, transpose of a row-major [4,3]; other: [3,4] stride-0 rows of a [4] */
    float store[12], row[4], out[12];
    for (int i = 0; i < 12; i++) store[i] = (float)(i * i) - 7.0f;
    for (int i = 0; i < 4; i++) row[i] = 100.0f * (float)(i + 1);
    void *ds = dev_from(store, sizeof store), *dr = dev_from(row, sizeof row), *dout = dev_alloc(sizeof out);
    int64_t d34[] = {3, 4}, st_t[] = {1, 3}, st_b[] = {0, 1};
    aclTensor *ta = acl_view(d34, 2, ACL_FLOAT, st_t, 0, ds), *tb = acl_view(d34, 2, ACL_FLOAT, st_b, 0, dr);
    aclTensor *to = acl_view(d34, 2, ACL_FLOAT, NULL, 0, dout);
    float one = 1.0f;
    aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT);
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK(launch(aclnnAddGetWorkspaceSize(ta, tb, alpha, to, &ws, &ex), aclnnAdd, &ws, &ex) == 0);
    to_host(out, dout, sizeof out);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            CHECK(out[i * 4 + j] == store[j * 3 + i] + row[j]);
    /* output transposed, with an element offset: out[j*3+i+1] (view [3,4] strides (1,3)) */
    float big[13] = {0};
    void *dbig = dev_from(big, sizeof big);
    aclTensor *tot = acl_view(d34, 2, ACL_FLOAT, st_t, 1, dbig);
    CHECK(launch(aclnnMulGetWorkspaceSize(tb, ta, tot, &ws, &ex), aclnnMul, &ws, &ex) == 0);
    to_host(big, dbig, sizeof big);
    CHECK(big[0] == 0.0f);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            CHECK(big[1 + j * 3 + i] == store[j * 3 + i] * row[j]);
    aclDestroyTensor(ta); aclDestroyTensor(tb); aclDestroyTensor(to); aclDestroyTensor(tot);
    aclDestroyScalar(alpha);
    aclrtFree(ds); aclrtFree(dr); aclrtFree(dout); aclrtFree(dbig);
}

/* One element of a float dtype as F32, and an F32 rounded to it (nearest even). */
static float load_as_f32(aclDataType t, const void *p) {
    uint16_t h;
    float f;
    if (t == ACL_FLOAT) {
        memcpy(&f, p, 4);
        return f;
    }
    memcpy(&h, p, 2);
    return t == ACL_FLOAT16 ? from_f16(h) : from_bf16(h);
}

static void store_from_f32(aclDataType t, void *p, float v) {
    uint16_t h = t == ACL_FLOAT16 ? f16(v) : bf16(v);
    if (t == ACL_FLOAT)
        memcpy(p, &v, 4);
    else
        memcpy(p, &h, 2);
}

/* ROPE's shape of product: a pair member of x (every other element: a strided view), times a
 * cos table broadcast over heads, into a contiguous or strided out, in F32 / F16 / BF16 mixes:
 * each result is the F32 product rounded once to out's dtype (the strided float path). */
static void test_strided_float_mixes(void) {
    const aclDataType types[3] = {ACL_FLOAT, ACL_FLOAT16, ACL_BF16};
    enum { HALF = 37, HEADS = 3, N = HALF * HEADS };
    for (int ta_i = 0; ta_i < 3; ta_i++)
        for (int tb_i = 0; tb_i < 3; tb_i++)
            for (int to_i = 0; to_i < 3; to_i++)
                for (int mul = 0; mul < 2; mul++) {
                    aclDataType at = types[ta_i], bt = types[tb_i], ot = types[to_i];
                    if (at == bt && at != ACL_FLOAT && ot != at)
                        continue; /* computed in F16 / BF16, then converted: two roundings */
                    size_t ae = aclDataTypeSize(at), be = aclDataTypeSize(bt), oe = aclDataTypeSize(ot);
                    unsigned char ha[2 * N * 4], hb[HALF * 4], ho[2 * N * 4];
                    for (int i = 0; i < 2 * N; i++)
                        store_from_f32(at, ha + i * ae, (float)((i * 37) % 101) * 0.0731f - 3.3f);
                    for (int i = 0; i < HALF; i++)
                        store_from_f32(bt, hb + i * be, (float)i * 0.113f - 1.9f);
                    memset(ho, 0, sizeof ho);
                    void *da = dev_from(ha, 2 * N * ae), *db = dev_from(hb, HALF * be);
                    void *dout = dev_from(ho, 2 * N * oe);
                    int64_t dims[2] = {HEADS, HALF}, sa[2] = {2 * HALF, 2}, sb[2] = {0, 1};
                    int64_t so[2] = {2 * HALF, 2}; /* out strided too: every other element */
                    aclTensor *xa = acl_view(dims, 2, at, sa, 1, da), *xb = acl_view(dims, 2, bt, sb, 0, db);
                    aclTensor *xo = acl_view(dims, 2, ot, so, 0, dout);
                    float minus = -1.0f;
                    aclScalar *alpha = aclCreateScalar(&minus, ACL_FLOAT);
                    uint64_t ws;
                    aclOpExecutor *ex;
                    aclnnStatus st = mul ? launch(aclnnMulGetWorkspaceSize(xa, xb, xo, &ws, &ex), aclnnMul, &ws, &ex)
                                         : launch(aclnnAddGetWorkspaceSize(xa, xb, alpha, xo, &ws, &ex), aclnnAdd,
                                                  &ws, &ex);
                    CHECK(st == ACLNN_SUCCESS);
                    to_host(ho, dout, 2 * N * oe);
                    int bad = 0;
                    for (int h = 0; h < HEADS; h++)
                        for (int k = 0; k < HALF; k++) {
                            float x = load_as_f32(at, ha + (size_t)(h * 2 * HALF + 2 * k + 1) * ae);
                            float y = load_as_f32(bt, hb + (size_t)k * be);
                            float v = mul ? x * y : x + minus * y;
                            unsigned char want[4], *got = ho + (size_t)(h * 2 * HALF + 2 * k) * oe;
                            store_from_f32(ot, want, v);
                            bad += memcmp(want, got, oe) != 0;
                            bad += got[oe] != 0 || got[oe + oe - 1] != 0; /* the odd slots untouched */
                        }
                    if (bad)
                        fprintf(stderr, "  strided %s: %d x %d -> %d: %d bad\n", mul ? "Mul" : "Add", at, bt,
                                ot, bad);
                    CHECK(bad == 0);
                    aclDestroyTensor(xa); aclDestroyTensor(xb); aclDestroyTensor(xo); aclDestroyScalar(alpha);
                    aclrtFree(da); aclrtFree(db); aclrtFree(dout);
                }
}

static void test_inplace_add_and_muls(void) {
    /* selfRef F16 [2,40] += 3 * other F32 [40]: promoted F32, cast back to F16 */
    uint16_t s[80], o16[80];
    float b[40];
    for (int i = 0; i < 80; i++) s[i] = f16((float)i / 8.0f);
    for (int i = 0; i < 40; i++) b[i] = (float)i * 0.3f;
    void *dsf = dev_from(s, sizeof s), *db = dev_from(b, sizeof b);
    int64_t d2[] = {2, 40}, d1[] = {40};
    aclTensor *ts = acl_view(d2, 2, ACL_FLOAT16, NULL, 0, dsf), *tb = acl_view(d1, 1, ACL_FLOAT, NULL, 0, db);
    int32_t three = 3;
    aclScalar *alpha = aclCreateScalar(&three, ACL_INT32);
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK(launch(aclnnInplaceAddGetWorkspaceSize(ts, tb, alpha, &ws, &ex), aclnnInplaceAdd, &ws, &ex) == 0);
    to_host(o16, dsf, sizeof o16);
    for (int i = 0; i < 80; i++) {
        float prod = 3.0f * b[i % 40];
        CHECK(o16[i] == f16(from_f16(s[i]) + prod));
    }
    /* InplaceAdd whose broadcast shape is not selfRef's: [40] += [2,40] */
    aclTensor *ts1 = acl_view(d1, 1, ACL_FLOAT, NULL, 0, db), *tb2 = acl_view(d2, 2, ACL_FLOAT16, NULL, 0, dsf);
    CHECK(aclnnInplaceAddGetWorkspaceSize(ts1, tb2, alpha, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    /* Muls: F16 tensor * F32 scalar stays F16; F32 * DOUBLE scalar; INT32 * FLOAT scalar -> FLOAT */
    float k = 0.75f;
    aclScalar *sk = aclCreateScalar(&k, ACL_FLOAT);
    void *dm = dev_alloc(sizeof o16);
    aclTensor *tm = acl_view(d2, 2, ACL_FLOAT16, NULL, 0, dm);
    CHECK(launch(aclnnMulsGetWorkspaceSize(ts, sk, tm, &ws, &ex), aclnnMuls, &ws, &ex) == 0);
    uint16_t m16[80];
    to_host(m16, dm, sizeof m16);
    for (int i = 0; i < 80; i++)
        CHECK(m16[i] == f16(from_f16(o16[i]) * 0.75f));
    int32_t iv[6] = {-3, -2, -1, 0, 5, 7};
    float fo[6];
    void *di = dev_from(iv, sizeof iv), *dfo = dev_alloc(sizeof fo);
    int64_t d6[] = {6};
    aclTensor *ti = acl_view(d6, 1, ACL_INT32, NULL, 0, di), *tfo = acl_view(d6, 1, ACL_FLOAT, NULL, 0, dfo);
    CHECK(launch(aclnnMulsGetWorkspaceSize(ti, sk, tfo, &ws, &ex), aclnnMuls, &ws, &ex) == 0);
    to_host(fo, dfo, sizeof fo);
    for (int i = 0; i < 6; i++)
        CHECK(fo[i] == (float)iv[i] * 0.75f);
    /* Adds on INT32 with INT64 scalar and alpha 2: stays INT32 */
    int64_t ten = 10, two = 2;
    aclScalar *s10 = aclCreateScalar(&ten, ACL_INT64), *a2 = aclCreateScalar(&two, ACL_INT64);
    int32_t io[6];
    void *dio = dev_alloc(sizeof io);
    aclTensor *tio = acl_view(d6, 1, ACL_INT32, NULL, 0, dio);
    CHECK(launch(aclnnAddsGetWorkspaceSize(ti, s10, a2, tio, &ws, &ex), aclnnAdds, &ws, &ex) == 0);
    to_host(io, dio, sizeof io);
    for (int i = 0; i < 6; i++)
        CHECK(io[i] == iv[i] + 20);
    /* a float alpha on an integer result is rejected */
    CHECK(aclnnAddsGetWorkspaceSize(ti, s10, sk, tio, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    /* FLOAT -> BOOL out is not an allowed cast */
    void *dbool = dev_alloc(6);
    aclTensor *tbool = acl_view(d6, 1, ACL_BOOL, NULL, 0, dbool);
    CHECK(aclnnMulsGetWorkspaceSize(tfo, sk, tbool, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    /* INT8 + INT8 wraps, UINT8 + INT8 promotes to INT16 */
    int8_t i8[2] = {100, -100};
    uint8_t u8[2] = {200, 250};
    int16_t o16i[2];
    void *d8 = dev_from(i8, 2), *du8 = dev_from(u8, 2), *d8o = dev_alloc(2), *d16o = dev_alloc(4);
    int64_t d2n[] = {2};
    aclTensor *t8 = acl_view(d2n, 1, ACL_INT8, NULL, 0, d8), *tu8 = acl_view(d2n, 1, ACL_UINT8, NULL, 0, du8);
    aclTensor *t8o = acl_view(d2n, 1, ACL_INT8, NULL, 0, d8o), *t16o = acl_view(d2n, 1, ACL_INT16, NULL, 0, d16o);
    int64_t one = 1;
    aclScalar *a1 = aclCreateScalar(&one, ACL_INT64);
    CHECK(launch(aclnnAddGetWorkspaceSize(t8, t8, a1, t8o, &ws, &ex), aclnnAdd, &ws, &ex) == 0);
    int8_t w8[2];
    to_host(w8, d8o, 2);
    CHECK(w8[0] == (int8_t)-56 && w8[1] == (int8_t)56);
    CHECK(launch(aclnnAddGetWorkspaceSize(tu8, t8, a1, t16o, &ws, &ex), aclnnAdd, &ws, &ex) == 0);
    to_host(o16i, d16o, 4);
    CHECK(o16i[0] == 300 && o16i[1] == 150);
    aclDestroyTensor(ts); aclDestroyTensor(tb); aclDestroyTensor(ts1); aclDestroyTensor(tb2);
    aclDestroyTensor(tm); aclDestroyTensor(ti); aclDestroyTensor(tfo); aclDestroyTensor(tio);
    aclDestroyTensor(tbool); aclDestroyTensor(t8); aclDestroyTensor(tu8); aclDestroyTensor(t8o);
    aclDestroyTensor(t16o);
    aclDestroyScalar(alpha); aclDestroyScalar(sk); aclDestroyScalar(s10); aclDestroyScalar(a2);
    aclDestroyScalar(a1);
    aclrtFree(dsf); aclrtFree(db); aclrtFree(dm); aclrtFree(di); aclrtFree(dfo); aclrtFree(dio);
    aclrtFree(dbool); aclrtFree(d8); aclrtFree(du8); aclrtFree(d8o); aclrtFree(d16o);
}

/* Cast n elements of host src (dtype st) into host dst (dtype dt). */
static void cast(const void *src, aclDataType st, void *dst, aclDataType dt, int64_t n) {
    size_t es = aclDataTypeSize(st), ed = aclDataTypeSize(dt);
    void *ds = dev_from(src, (size_t)n * es), *dd = dev_alloc((size_t)n * ed);
    int64_t dims[] = {n};
    aclTensor *ts = acl_view(dims, 1, st, NULL, 0, ds), *td = acl_view(dims, 1, dt, NULL, 0, dd);
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK(launch(aclnnCastGetWorkspaceSize(ts, dt, td, &ws, &ex), aclnnCast, &ws, &ex) == 0);
    to_host(dst, dd, (size_t)n * ed);
    aclDestroyTensor(ts); aclDestroyTensor(td);
    aclrtFree(ds); aclrtFree(dd);
}

static void test_cast_rounding(void) {
    /* every f16 -> f32 -> f16 (the vector paths) against the scalar helpers */
    enum { N = 65536 };
    uint16_t *h = malloc(N * 2), *back = malloc(N * 2);
    float *f = malloc(N * 4);
    for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
    cast(h, ACL_FLOAT16, f, ACL_FLOAT, N);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += bits(f[i]) != bits(aclFloat16ToFloat(h[i]));
    CHECK(bad == 0);
    cast(f, ACL_FLOAT, back, ACL_FLOAT16, N);
    bad = 0;
    for (int i = 0; i < N; i++) {
        bool nan = (h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff);
        bad += back[i] != (nan ? (h[i] | 0x200) : h[i]);
    }
    CHECK(bad == 0);
    /* ties and edges, repeated so both the vector body and the scalar tail see them */
    const float in[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65519.0f, 65520.0f, 0x1p-25f,
                        3 * 0x1p-26f, -0.0f, 0x1p-24f, 1e-10f, -70000.0f, 0x1.ffep-15f, 0.1f};
    const uint16_t want[] = {0x3c00, 0x3c02, 0x7bff, 0x7c00, 0x0000, 0x0001, 0x8000, 0x0001,
                             0x0000, 0xfc00, 0x0400, 0x2e66};
    enum { K = sizeof in / sizeof in[0], R = 5 };
    float many[K * R];
    uint16_t got[K * R];
    for (int i = 0; i < K * R; i++) many[i] = in[i % K];
    cast(many, ACL_FLOAT, got, ACL_FLOAT16, K * R);
    for (int i = 0; i < K * R; i++) {
        if (got[i] != want[i % K])
            fprintf(stderr, "  f16(%a) = %04x, want %04x\n", many[i], got[i], want[i % K]);
        CHECK(got[i] == want[i % K]);
        CHECK(aclFloatToFloat16(many[i]) == want[i % K]);
    }
    /* random f32 -> f16 / bf16: vector path vs scalar helper / reference */
    uint32_t seed = 12345;
    for (int i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        f[i] = from_bits(seed);
    }
    cast(f, ACL_FLOAT, back, ACL_FLOAT16, N);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += back[i] != aclFloatToFloat16(f[i]);
    CHECK(bad == 0);
    cast(f, ACL_FLOAT, back, ACL_BF16, N);
    bad = 0;
    for (int i = 0; i < N; i++) {
        bool nan = (bits(f[i]) & 0x7fffffff) > 0x7f800000;
        bad += nan ? (back[i] & 0x7fc0) != 0x7fc0 : back[i] != bf16(f[i]);
    }
    CHECK(bad == 0);
    /* bf16 ties */
    const float bin[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -1.0f - 0x1p-8f, 3.0e38f};
    const uint16_t bwant[] = {0x3f80, 0x3f82, 0xbf80, 0x7f62};
    float bmany[40];
    uint16_t bgot[40];
    for (int i = 0; i < 40; i++) bmany[i] = bin[i % 4];
    cast(bmany, ACL_FLOAT, bgot, ACL_BF16, 40);
    for (int i = 0; i < 40; i++)
        CHECK(bgot[i] == bwant[i % 4]);
    /* float -> int: NaN -> 0, truncation, saturation */
    float fi[] = {NAN, -3.7f, 3.7f, 1e10f, -1e10f, 0.5f};
    int32_t io[6];
    cast(fi, ACL_FLOAT, io, ACL_INT32, 6);
    CHECK(io[0] == 0 && io[1] == -3 && io[2] == 3 && io[3] == INT32_MAX && io[4] == INT32_MIN && io[5] == 0);
    /* Cast with dtype != out's dtype is invalid */
    int64_t dims[] = {6};
    aclTensor *ta = acl_view(dims, 1, ACL_FLOAT, NULL, 0, NULL), *tb = acl_view(dims, 1, ACL_INT32, NULL, 0, NULL);
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK(aclnnCastGetWorkspaceSize(ta, ACL_FLOAT16, tb, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    aclDestroyTensor(ta); aclDestroyTensor(tb);
    free(h); free(back); free(f);
}

/* aclnnCast phase 1: a dtype outside the supported set (self or out), out's dtype unlike the
 * dtype argument, out's shape unlike self's (same element count too), a strided BOOL self. The
 * message names the op and the operand; each refusal has an accepted neighbour. */
static void expect_cast(const aclTensor *self, aclDataType dt, aclTensor *out, aclnnStatus want,
                        const char *words) {
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    aclnnStatus st = aclnnCastGetWorkspaceSize(self, dt, out, &ws, &ex);
    if (st == ACLNN_SUCCESS) {
        CHECK(aclnnCast(NULL, ws, ex, stream) == ACLNN_SUCCESS);
        CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    }
    const char *msg = st == ACLNN_SUCCESS ? "" : aclGetRecentErrMsg();
    if (st != want) fprintf(stderr, "  aclnnCast: want %d, got %d: %s\n", want, st, msg);
    CHECK(st == want);
    if (words) {
        printf("  refused: %d %s\n", st, msg);
        CHECK(msg && strstr(msg, "aclnnCast") && strstr(msg, words));
    }
}

static void test_cast_rules(void) {
    void *zeros = calloc(1, 256), *d = dev_from(zeros, 256), *o = dev_alloc(256);
    free(zeros);
    int64_t d6[] = {6}, d5[] = {5}, d23[] = {2, 3}, d32[] = {3, 2}, st2[] = {2};
    aclTensor *f32 = acl_view(d6, 1, ACL_FLOAT, NULL, 0, d), *f16 = acl_view(d6, 1, ACL_FLOAT16, NULL, 0, o);
    aclTensor *i32 = acl_view(d6, 1, ACL_INT32, NULL, 0, o), *str = acl_view(d6, 1, ACL_STRING, NULL, 0, d);
    aclTensor *str_out = acl_view(d6, 1, ACL_STRING, NULL, 0, o);
    aclTensor *f16_5 = acl_view(d5, 1, ACL_FLOAT16, NULL, 0, o), *f16_32 = acl_view(d32, 2, ACL_FLOAT16, NULL, 0, o);
    aclTensor *f32_23 = acl_view(d23, 2, ACL_FLOAT, NULL, 0, d), *f16_23 = acl_view(d23, 2, ACL_FLOAT16, NULL, 0, o);
    aclTensor *b = acl_view(d6, 1, ACL_BOOL, NULL, 0, d), *b_strided = acl_view(d6, 1, ACL_BOOL, st2, 0, d);
    aclTensor *f32_strided = acl_view(d6, 1, ACL_FLOAT, st2, 0, d);
    expect_cast(f32, ACL_FLOAT16, f16, ACLNN_SUCCESS, NULL);
    expect_cast(f32, ACL_INT32, i32, ACLNN_SUCCESS, NULL);
    expect_cast(str, ACL_FLOAT16, f16, ACLNN_ERR_PARAM_INVALID, "self");     /* self dtype */
    expect_cast(f32, ACL_STRING, str_out, ACLNN_ERR_PARAM_INVALID, "out");   /* out dtype */
    expect_cast(f32, ACL_FLOAT16, i32, ACLNN_ERR_PARAM_INVALID, "dtype");    /* dtype != out's */
    expect_cast(f32, ACL_INT32, f16, ACLNN_ERR_PARAM_INVALID, "dtype");
    expect_cast(f32_23, ACL_FLOAT16, f16_23, ACLNN_SUCCESS, NULL);
    expect_cast(f32, ACL_FLOAT16, f16_5, ACLNN_ERR_PARAM_INVALID, "out");    /* fewer elements */
    expect_cast(f32_23, ACL_FLOAT16, f16_32, ACLNN_ERR_PARAM_INVALID, "out"); /* same count, other shape */
    expect_cast(f32_23, ACL_FLOAT16, f16, ACLNN_ERR_PARAM_INVALID, "out");   /* other rank */
    expect_cast(b, ACL_FLOAT16, f16, ACLNN_SUCCESS, NULL);
    expect_cast(f32_strided, ACL_FLOAT16, f16, ACLNN_SUCCESS, NULL);
    expect_cast(b_strided, ACL_FLOAT16, f16, ACLNN_ERR_PARAM_INVALID, "BOOL self");
    expect_cast(NULL, ACL_FLOAT16, f16, ACLNN_ERR_PARAM_NULLPTR, "self");
    expect_cast(f32, ACL_FLOAT16, NULL, ACLNN_ERR_PARAM_NULLPTR, "out");
    aclTensor *all[] = {f32, f16, i32, str, str_out, f16_5, f16_32, f32_23, f16_23, b, b_strided, f32_strided};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) aclDestroyTensor(all[i]);
    aclrtFree(d), aclrtFree(o);
}

static void test_inplace_copy(void) {
    /* selfRef: F16 view [3,4] with strides (8,2) inside a 24-element buffer; src: F32 [4]
     * broadcast over the rows. The gaps between viewed elements must stay untouched. */
    uint16_t buf[24];
    for (int i = 0; i < 24; i++) buf[i] = 0xabcd;
    float src[4] = {1.5f, -2.25f, 1.0f + 0x1p-11f, 65504.0f};
    void *dbuf = dev_from(buf, sizeof buf), *dsrc = dev_from(src, sizeof src);
    int64_t d34[] = {3, 4}, st[] = {8, 2}, d4[] = {4};
    aclTensor *tdst = acl_view(d34, 2, ACL_FLOAT16, st, 1, dbuf), *tsrc = acl_view(d4, 1, ACL_FLOAT, NULL, 0, dsrc);
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK(launch(aclnnInplaceCopyGetWorkspaceSize(tdst, tsrc, &ws, &ex), aclnnInplaceCopy, &ws, &ex) == 0);
    to_host(buf, dbuf, sizeof buf);
    bool viewed[24] = {false};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            int at = 1 + i * 8 + j * 2;
            viewed[at] = true;
            CHECK(buf[at] == aclFloatToFloat16(src[j]));
        }
    for (int i = 0; i < 24; i++)
        if (!viewed[i])
            CHECK(buf[i] == 0xabcd);
    /* transposed F32 -> contiguous F32 (same dtype, strided) and back to a transposed F16 */
    float m[12], t[12];
    for (int i = 0; i < 12; i++) m[i] = (float)i;
    void *dm = dev_from(m, sizeof m), *dt = dev_alloc(sizeof t);
    int64_t d43[] = {4, 3}, st_t[] = {1, 4};
    aclTensor *tm_t = acl_view(d43, 2, ACL_FLOAT, st_t, 0, dm), *tt = acl_view(d43, 2, ACL_FLOAT, NULL, 0, dt);
    CHECK(launch(aclnnInplaceCopyGetWorkspaceSize(tt, tm_t, &ws, &ex), aclnnInplaceCopy, &ws, &ex) == 0);
    to_host(t, dt, sizeof t);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            CHECK(t[i * 3 + j] == m[j * 4 + i]);
    /* incompatible shapes */
    int64_t d5[] = {5};
    aclTensor *t5 = acl_view(d5, 1, ACL_FLOAT, NULL, 0, dsrc);
    CHECK(aclnnInplaceCopyGetWorkspaceSize(tt, t5, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    aclDestroyTensor(tdst); aclDestroyTensor(tsrc); aclDestroyTensor(tm_t); aclDestroyTensor(tt);
    aclDestroyTensor(t5);
    aclrtFree(dbuf); aclrtFree(dsrc); aclrtFree(dm); aclrtFree(dt);
}

static void test_errors(void) {
    void *d = dev_alloc(64 * 4);
    int64_t d23[] = {2, 3}, d4[] = {4}, d64[] = {64}, d65[] = {65};
    aclTensor *a = acl_view(d23, 2, ACL_FLOAT, NULL, 0, d), *b = acl_view(d4, 1, ACL_FLOAT, NULL, 0, d);
    float one = 1.0f;
    aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT);
    uint64_t ws;
    aclOpExecutor *ex = NULL;
    CHECK(aclnnAddGetWorkspaceSize(a, b, alpha, a, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    const char *msg = aclGetRecentErrMsg();
    CHECK(msg && strstr(msg, "aclnnAdd") && strstr(msg, "[2,3]") && strstr(msg, "[4]") &&
          strstr(msg, "broadcast"));
    CHECK(aclnnAddGetWorkspaceSize(NULL, b, alpha, a, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR);
    msg = aclGetRecentErrMsg();
    CHECK(msg && strstr(msg, "self"));
    CHECK(aclnnAddGetWorkspaceSize(a, a, NULL, a, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR);
    CHECK(aclnnMulGetWorkspaceSize(a, a, a, NULL, &ex) == ACLNN_ERR_PARAM_NULLPTR);
    CHECK(aclnnAdd(NULL, 0, NULL, stream) == ACLNN_ERR_INNER_NULLPTR);
    CHECK(aclCreateTensor(NULL, 2, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, NULL, 0, d) == NULL);
    CHECK(aclCreateScalar(NULL, ACL_FLOAT) == NULL);
    CHECK(aclDestroyTensor(NULL) == 0 && aclDestroyScalar(NULL) == 0 && aclDestroyTensorList(NULL) == 0);
    /* unsupported dtype and private format */
    aclTensor *u16 = acl_view(d4, 1, ACL_UINT16, NULL, 0, d);
    CHECK(aclnnMulGetWorkspaceSize(u16, u16, u16, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    int64_t ext = 4;
    aclTensor *nz = aclCreateTensor(d4, 1, ACL_FLOAT, NULL, 0, ACL_FORMAT_FRACTAL_NZ, &ext, 1, d);
    CHECK(aclnnMulGetWorkspaceSize(nz, nz, nz, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    /* a view reaching past the storage shape it was created with (l0op::Contiguous refuses it) */
    int64_t d2x2[2] = {2, 2}, st2x2[2] = {4, 1}, ext5 = 5, ext6 = 6, ext3 = 3;
    aclTensor *wide = aclCreateTensor(d2x2, 2, ACL_FLOAT, st2x2, 0, ACL_FORMAT_ND, &ext5, 1, d);
    aclTensor *fits = aclCreateTensor(d2x2, 2, ACL_FLOAT, st2x2, 0, ACL_FORMAT_ND, &ext6, 1, d);
    CHECK(aclnnInplaceCopyGetWorkspaceSize(fits, wide, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    msg = aclGetRecentErrMsg();
    CHECK(msg && strstr(msg, "aclnnInplaceCopy") && strstr(msg, "src") && strstr(msg, "storage"));
    aclTensor *shifted = aclCreateTensor(d4, 1, ACL_FLOAT, NULL, 2, ACL_FORMAT_ND, &ext3, 1, d);
    CHECK(aclnnMulGetWorkspaceSize(shifted, shifted, u16, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    msg = aclGetRecentErrMsg();
    CHECK(msg && strstr(msg, "self") && strstr(msg, "storage"));
    aclDestroyTensor(wide), aclDestroyTensor(fits), aclDestroyTensor(shifted);
    /* rank 9 */
    int64_t d9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 2};
    aclTensor *r9 = acl_view(d9, 9, ACL_FLOAT, NULL, 0, d);
    CHECK(r9 != NULL);
    CHECK(aclnnMulGetWorkspaceSize(r9, r9, r9, &ws, &ex) == ACLNN_ERR_PARAM_INVALID);
    /* launch on a view running past its allocation: an error, not a crash */
    aclTensor *in = acl_view(d64, 1, ACL_FLOAT, NULL, 0, d), *past = acl_view(d65, 1, ACL_FLOAT, NULL, 0, d);
    aclTensor *in65 = acl_view(d65, 1, ACL_FLOAT, NULL, 0, d);
    ex = NULL;
    CHECK(aclnnAddGetWorkspaceSize(in65, in65, alpha, past, &ws, &ex) == 0);
    aclnnStatus st = aclnnAdd(NULL, 0, ex, stream);
    CHECK(st != ACLNN_SUCCESS);
    msg = aclGetRecentErrMsg();
    CHECK(msg && strstr(msg, "aclnnAdd"));
    aclrtSynchronizeStream(stream);
    /* an executor launched by the wrong op, and a consumed executor */
    CHECK(aclnnAddGetWorkspaceSize(in, in, alpha, in, &ws, &ex) == 0);
    CHECK(aclnnMul(NULL, 0, ex, stream) == ACLNN_ERR_PARAM_INVALID); /* not consumed */
    CHECK(aclnnAdd(NULL, 0, ex, stream) == ACLNN_SUCCESS);
    CHECK(aclnnAdd(NULL, 0, ex, stream) == ACLNN_ERR_PARAM_INVALID); /* consumed above */
    CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    aclDestroyTensor(a); aclDestroyTensor(b); aclDestroyTensor(u16); aclDestroyTensor(nz);
    aclDestroyTensor(r9); aclDestroyTensor(in); aclDestroyTensor(past); aclDestroyTensor(in65);
    aclDestroyScalar(alpha);
    aclrtFree(d);
}

static void test_repeatable_and_descriptors(void) {
    float x[8], y[8], z[8], out[8];
    for (int i = 0; i < 8; i++) { x[i] = (float)i; y[i] = 10.0f * (float)i; z[i] = -1.0f; }
    void *dx = dev_from(x, sizeof x), *dy = dev_from(y, sizeof y), *dz = dev_from(z, sizeof z);
    void *dout = dev_alloc(sizeof out);
    int64_t d8[] = {8};
    aclTensor *tx = acl_view(d8, 1, ACL_FLOAT, NULL, 0, dx), *ty = acl_view(d8, 1, ACL_FLOAT, NULL, 0, dy);
    aclTensor *to = acl_view(d8, 1, ACL_FLOAT, NULL, 0, dout);
    float one = 1.0f;
    aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT);
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK(aclnnAddGetWorkspaceSize(tx, ty, alpha, to, &ws, &ex) == 0);
    CHECK(aclSetAclOpExecutorRepeatable(ex) == 0);
    /* descriptors may go right away: the executor holds copies */
    aclDestroyTensor(tx); aclDestroyTensor(ty); aclDestroyScalar(alpha);
    CHECK(aclnnAdd(NULL, 0, ex, stream) == 0);
    CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    to_host(out, dout, sizeof out);
    for (int i = 0; i < 8; i++) CHECK(out[i] == x[i] + y[i]);
    CHECK(aclSetInputTensorAddr(ex, 1, NULL, dz) == 0);
    CHECK(aclSetInputTensorAddr(ex, 2, NULL, dz) == ACLNN_ERR_PARAM_INVALID);
    CHECK(aclSetOutputTensorAddr(ex, 0, to, dy) == 0);
    CHECK(aclnnAdd(NULL, 0, ex, stream) == 0);
    CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    to_host(out, dy, sizeof out);
    for (int i = 0; i < 8; i++) CHECK(out[i] == x[i] - 1.0f);
    void *raw = NULL;
    CHECK(aclGetRawTensorAddr(to, &raw) == 0 && raw == dy);
    CHECK(aclDestroyAclOpExecutor(ex) == 0);
    CHECK(aclDestroyAclOpExecutor(NULL) == ACLNN_ERR_INNER_NULLPTR);
    /* getters */
    int64_t *dims = NULL, *strides = NULL, offset = -1;
    uint64_t n = 0, ns = 0;
    aclDataType dt;
    aclFormat fmt;
    CHECK(aclGetViewShape(to, &dims, &n) == 0 && n == 1 && dims[0] == 8);
    CHECK(aclGetViewStrides(to, &strides, &ns) == 0 && ns == 1 && strides[0] == 1);
    CHECK(aclGetViewOffset(to, &offset) == 0 && offset == 0);
    CHECK(aclGetDataType(to, &dt) == 0 && dt == ACL_FLOAT);
    CHECK(aclGetFormat(to, &fmt) == 0 && fmt == ACL_FORMAT_ND);
    free(dims); free(strides);
    int64_t iv[3] = {1, 2, 3};
    aclIntArray *ia = aclCreateIntArray(iv, 3);
    CHECK(aclGetIntArraySize(ia, &n) == 0 && n == 3);
    aclDestroyIntArray(ia);
    const aclTensor *list_items[2] = {to, acl_view(d8, 1, ACL_FLOAT, NULL, 0, dx)};
    aclTensorList *list = aclCreateTensorList(list_items, 2);
    CHECK(aclGetTensorListSize(list, &n) == 0 && n == 2);
    aclDestroyTensorList(list); /* destroys `to` and the second tensor */
    CHECK(aclDataTypeSize(ACL_BF16) == 2 && aclDataTypeSize(ACL_INT64) == 8);
    aclrtFree(dx); aclrtFree(dy); aclrtFree(dz); aclrtFree(dout);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench(void) {
    const int64_t n = 4096;
    size_t bytes = (size_t)(n * n) * 4;
    void *a = dev_alloc(bytes), *b = dev_alloc(bytes), *o = dev_alloc(bytes);
    float *h = malloc(bytes);
    for (int64_t i = 0; i < n * n; i++) h[i] = (float)(i % 1000) * 0.001f;
    aclrtMemcpy(a, bytes, h, bytes, ACL_MEMCPY_HOST_TO_DEVICE);
    aclrtMemcpy(b, bytes, h, bytes, ACL_MEMCPY_HOST_TO_DEVICE);
    int64_t dims[] = {n, n};
    aclTensor *ta = acl_view(dims, 2, ACL_FLOAT, NULL, 0, a), *tb = acl_view(dims, 2, ACL_FLOAT, NULL, 0, b);
    aclTensor *to = acl_view(dims, 2, ACL_FLOAT, NULL, 0, o), *th = acl_view(dims, 2, ACL_FLOAT16, NULL, 0, o);
    float one = 1.0f;
    aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT);
    uint64_t ws;
    aclOpExecutor *ex;
    for (int kind = 0; kind < 2; kind++) {
        double best = 1e9;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now();
            if (kind == 0) {
                aclnnAddGetWorkspaceSize(ta, tb, alpha, to, &ws, &ex);
                aclnnAdd(NULL, 0, ex, stream);
            } else {
                aclnnCastGetWorkspaceSize(ta, ACL_FLOAT16, th, &ws, &ex);
                aclnnCast(NULL, 0, ex, stream);
            }
            aclrtSynchronizeStream(stream);
            double t = now() - t0;
            best = t < best ? t : best;
        }
        double moved = kind == 0 ? 3.0 * (double)bytes : 1.5 * (double)bytes;
        printf("bench: 4096x4096 %s: %.2f ms, %.1f GB/s\n", kind == 0 ? "F32 add" : "F32->F16 cast",
               best * 1e3, moved / best / 1e9);
    }
    aclDestroyTensor(ta); aclDestroyTensor(tb); aclDestroyTensor(to); aclDestroyTensor(th);
    aclDestroyScalar(alpha);
    free(h);
    aclrtFree(a); aclrtFree(b); aclrtFree(o);
}

static bool message_mentions(const char *needle) {
    const char *msg = aclGetRecentErrMsg();
    bool ok = msg && strstr(msg, needle);
    if (!ok) fprintf(stderr, "  recent message '%s' lacks '%s'\n", msg ? msg : "(null)", needle);
    return ok;
}

/* aclrtHostRegister: a read-only host mapping becomes a kernel operand without a copy; its
 * device address is refused by copies and memsets; the rules of acl_rt.h are enforced. */
static void test_host_register(void) {
    size_t page = 4096;
    float *host = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(host != MAP_FAILED);
    for (int i = 0; i < 8; i++) host[i] = (float)(i + 1);
    CHECK(mprotect(host, 2 * page, PROT_READ) == 0);   /* as weights mapped from a file */
    void *dev = NULL, *again = NULL;
    CHECK(aclrtHostRegister((char *)host + 64, page, ACL_HOST_REGISTER_MAPPED, &dev) == ACL_ERROR_INVALID_PARAM);
    CHECK(dev == NULL);
    CHECK(aclrtHostRegister(host, 0, ACL_HOST_REGISTER_MAPPED, &dev) == ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtHostRegister(host, page, (aclrtHostRegisterType)1, &dev) == ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtHostRegister(host, page, ACL_HOST_REGISTER_MAPPED, NULL) == ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtHostRegister(host, 2 * page, ACL_HOST_REGISTER_MAPPED, &dev) == ACL_SUCCESS && dev != NULL);
    CHECK(aclrtHostRegister((char *)host + page, page, ACL_HOST_REGISTER_MAPPED, &again) == ACL_ERROR_INVALID_PARAM);

    /* a kernel reads it: out = x + 2 * x */
    float out[8];
    void *dout = dev_alloc(sizeof out);
    int64_t d8[] = {8};
    aclTensor *tx = acl_view(d8, 1, ACL_FLOAT, NULL, 0, dev), *to = acl_view(d8, 1, ACL_FLOAT, NULL, 0, dout);
    float two = 2.0f;
    aclScalar *alpha = aclCreateScalar(&two, ACL_FLOAT);
    uint64_t ws;
    aclOpExecutor *ex;
    CHECK(launch(aclnnAddGetWorkspaceSize(tx, tx, alpha, to, &ws, &ex), aclnnAdd, &ws, &ex) == 0);
    to_host(out, dout, sizeof out);
    for (int i = 0; i < 8; i++) CHECK(out[i] == 3.0f * (float)(i + 1));
    /* a view running past the registered range is refused like any device operand */
    aclTensor *past = acl_view(d8, 1, ACL_FLOAT, NULL, 0, (char *)dev + 2 * page - 16);
    CHECK(launch(aclnnAddGetWorkspaceSize(past, past, alpha, to, &ws, &ex), aclnnAdd, &ws, &ex) != 0);

    /* no copies or memsets through the mapped (device) address; the host address (the same
     * address here) stays an ordinary host buffer on a copy's host side */
    CHECK(aclrtMemcpy(out, sizeof out, dev, sizeof out, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_ERROR_INVALID_PARAM);
    CHECK(message_mentions("aclrtHostRegister"));
    CHECK(aclrtMemcpy(dout, sizeof out, dev, sizeof out, ACL_MEMCPY_DEVICE_TO_DEVICE) == ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtMemset(dev, 64, 0, 64) == ACL_ERROR_INVALID_PARAM);
    float back[8] = {0};
    CHECK(aclrtMemcpy(dout, sizeof out, host, sizeof out, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
    to_host(back, dout, sizeof back);
    CHECK(back[7] == 8.0f);
    CHECK(aclrtMemcpy(back, sizeof back, host, sizeof back, ACL_MEMCPY_DEFAULT) == ACL_SUCCESS);
    /* released by its own call only, once */
    CHECK(aclrtFree(dev) == ACL_ERROR_INVALID_PARAM);
    CHECK(message_mentions("aclrtHostUnregister"));
    CHECK(aclrtHostUnregister(dout) == ACL_ERROR_INVALID_PARAM);
    CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    CHECK(aclrtHostUnregister(host) == ACL_SUCCESS);
    CHECK(aclrtHostUnregister(host) == ACL_ERROR_INVALID_PARAM);
    CHECK(host[7] == 8.0f);                  /* the pages stay the caller's */
    CHECK(launch(aclnnAddGetWorkspaceSize(tx, tx, alpha, to, &ws, &ex), aclnnAdd, &ws, &ex) != 0); /* no longer device memory */
    aclDestroyTensor(tx); aclDestroyTensor(to); aclDestroyTensor(past); aclDestroyScalar(alpha);
    aclrtFree(dout);
    munmap(host, 2 * page);
}

int main(void) {
    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
    CHECK(aclrtCreateStream(&stream) == ACL_SUCCESS);
    test_add_broadcast_alpha();
    test_mixed_dtypes();
    test_strided_views();
    test_strided_float_mixes();
    test_inplace_add_and_muls();
    test_cast_rounding();
    test_cast_rules();
    test_inplace_copy();
    test_errors();
    test_repeatable_and_descriptors();
    test_host_register();
    if (getenv("CT_BENCH"))
        bench();
    CHECK(aclrtDestroyStream(stream) == ACL_SUCCESS);
    CHECK(aclrtResetDevice(0) == ACL_SUCCESS);
    CHECK(aclFinalize() == ACL_SUCCESS);
    return CT_RESULT();
}
