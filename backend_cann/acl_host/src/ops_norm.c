/* ops_norm.c - aclnnRmsNorm and aclnnAddRmsNorm.
 *
 * rstd = 1 / sqrt(mean(x^2) + eps) over the trailing dims gamma covers, y = x * rstd * gamma;
 * rstdOut is a required F32 output with x's rank and the normalized dims set to 1. Dtypes
 * (x / gamma / y): F32/F32/F32, F16/F16/F16, BF16/BF16/BF16, F16/F32/F16, BF16/F32/BF16. Every
 * row computes in F32: its sum of squares in the fixed 16-lane order of ah_rows.h, so a row's
 * result does not depend on the other rows or the thread count. Rows run in parallel;
 * contiguous F32 rows are read and written in place, others go through an F32 row buffer.
 *
 * aclnnAddRmsNorm: xOut = x1 + x2 (in F32, rounded to x1's dtype as aclnnAdd rounds), then the
 * same row kernel on that rounded x: yOut = x * rstd * gamma, rstdOut as RmsNorm's. One pass per
 * row, so for F32 operands the results equal, bit for bit, aclnnAdd then aclnnRmsNorm with ones
 * then aclnnMul by gamma (x * rstd * 1 is x * rstd, and x * rstd * gamma is evaluated in that
 * order in both). Dtypes: x1, x2, gamma, yOut, xOut all one of FLOAT / FLOAT16 / BFLOAT16,
 * rstdOut FLOAT; x2, yOut and xOut have x1's shape; no empty tensors (the document's rules).
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ah_convert.h"
#include "ah_rows.h"

#if defined(__x86_64__) || defined(__i386__)
#define AH_X86 1
#include <immintrin.h>
#endif


#define FLOAT_TYPES (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16))

typedef struct rms_params {
    int slot_x, slot_gamma, slot_y, slot_rstd;
    int slot_x2, slot_xout; /* AddRmsNorm; -1 for RmsNorm */
    int n_norm; /* trailing dims normalized */
    float eps;
} rms_params;

typedef struct rms_ctx {
    ah_rows x, y, rstd;
    ah_rows x2, xout;     /* AddRmsNorm only: x is x1 */
    bool add;
    const float *gamma; /* F32 copy of gamma, len values */
    int64_t len;
    float eps;
    aclDataType xout_dtype;
} rms_ctx;

/* buf (x1's row) += x2's row, stored to xOut; re-read from xOut when it is not F32 so the norm
 * sees the rounded sum, as it would after a separate aclnnAdd. */
static void add_row(const rms_ctx *c, int64_t row, float *buf) {
    float *b2 = buf + c->len;
    ah_rows_load(&c->x2, row, b2);
    for (int64_t i = 0; i < c->len; i++)
        buf[i] = buf[i] + b2[i];
    ah_rows_store(&c->xout, row, buf);
    if (c->xout_dtype != ACL_FLOAT)
        ah_rows_load(&c->xout, row, buf);
}

/* Row `row` of r as F32 values in place (one contiguous F32 run), else NULL. */
static float *direct_row(const ah_rows *r, int64_t row) {
    if (r->dtype != ACL_FLOAT || r->n_inner != 1 || r->inner_strides[0] != (int64_t)sizeof(float))
        return NULL;
    return (float *)(void *)ah_rows_ptr(r, row);
}

/* a and b are the same n floats or do not overlap (elementwise in place is fine, a shifted
 * overlap is left to the copying path) */
static bool same_or_apart(const float *a, const float *b, int64_t n) {
    return a == b || a + n <= b || b + n <= a;
}

/* out[i] = a[i] + b[i]; y[i] = x[i] * rstd * g[i]: elementwise, so 16 at a time gives the bits
 * of one at a time */
#ifdef AH_X86
__attribute__((target("avx512f"))) static int64_t add_avx512(const float *a, const float *b, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    return i;
}

__attribute__((target("avx512f"))) static int64_t scale_avx512(const float *x, float rstd, const float *g, float *y,
                                                               int64_t n) {
    const __m512 r = _mm512_set1_ps(rstd);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), r), _mm512_loadu_ps(g + i)));
    return i;
}
#endif

static void add_f32(const float *a, const float *b, float *out, int64_t n) {
    int64_t i = 0;
#ifdef AH_X86
    if (ah_isa() == AH_ISA_AVX512)
        i = add_avx512(a, b, out, n);
#endif
    for (; i < n; i++)
        out[i] = a[i] + b[i];
}

static void scale_f32(const float *x, float rstd, const float *g, float *y, int64_t n) {
    int64_t i = 0;
#ifdef AH_X86
    if (ah_isa() == AH_ISA_AVX512)
        i = scale_avx512(x, rstd, g, y, n);
#endif
    for (; i < n; i++)
        y[i] = x[i] * rstd * g[i];
}

static void rms_rows(void *vctx, int64_t begin, int64_t end) {
    const rms_ctx *c = vctx;
    const int64_t len = c->len;
    float *buf = malloc((size_t)(len > 0 ? len : 1) * (c->add ? 2 : 1) * sizeof(float));
    if (!buf)
        return;
    for (int64_t row = begin; row < end; row++) {
        /* src: the row to normalize, F32; in place when the operands are contiguous F32 rows */
        float *src = NULL;
        if (!c->add) {
            src = direct_row(&c->x, row);
        } else {
            float *x1 = direct_row(&c->x, row), *x2 = direct_row(&c->x2, row), *xo = direct_row(&c->xout, row);
            if (x1 && x2 && xo && same_or_apart(xo, x1, len) && same_or_apart(xo, x2, len)) {
                add_f32(x1, x2, xo, len);
                src = xo;
            }
        }
        if (!src) {
            ah_rows_load(&c->x, row, buf);
            if (c->add)
                add_row(c, row, buf);
            src = buf;
        }
        float mean = ah_sum_sq_f32(src, len) / (float)len;
        float rstd = 1.0f / sqrtf(mean + c->eps);
        float *y = direct_row(&c->y, row);
        if (y && same_or_apart(y, src, len)) {
            scale_f32(src, rstd, c->gamma, y, len);
        } else {
            scale_f32(src, rstd, c->gamma, buf, len);
            ah_rows_store(&c->y, row, buf);
        }
        ah_rows_store(&c->rstd, row, &rstd);
    }
    free(buf);
}

static aclError rms_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const rms_params *p = AH_EXEC_PARAMS(ex, const rms_params);
    const aclTensor *x = &ex->tensors[p->slot_x];
    unsigned inner = 0;
    for (int i = x->ndim - p->n_norm; i < x->ndim; i++)
        inner |= 1u << i;
    rms_ctx c = {.eps = p->eps};
    ah_rows_init(&c.x, x, inner);
    ah_rows_init(&c.y, &ex->tensors[p->slot_y], inner);
    ah_rows_init(&c.rstd, &ex->tensors[p->slot_rstd], inner);
    if (p->slot_x2 >= 0) {
        c.add = true;
        ah_rows_init(&c.x2, &ex->tensors[p->slot_x2], inner);
        ah_rows_init(&c.xout, &ex->tensors[p->slot_xout], inner);
        c.xout_dtype = ex->tensors[p->slot_xout].dtype;
    }
    c.len = c.x.len;
    if (c.x.n_rows == 0 || c.len == 0)
        return ACL_SUCCESS;
    ah_rows g;
    ah_rows_init(&g, &ex->tensors[p->slot_gamma], ~0u);
    float *gamma = NULL; /* an F32 copy unless gamma is one contiguous F32 run */
    c.gamma = direct_row(&g, 0);
    if (!c.gamma) {
        if (!(gamma = malloc((size_t)c.len * sizeof(float))))
            return ah_error(ACL_ERROR_BAD_ALLOC, "%s: out of host memory", ex->op);
        ah_rows_load(&g, 0, gamma);
        c.gamma = gamma;
    }
    ah_parallel_for(c.x.n_rows, ah_rows_grain(c.len), rms_rows, &c);
    free(gamma);
    return ACL_SUCCESS;
}

/* The shapes RmsNorm and AddRmsNorm share: gamma is x's trailing dims (its rank is the number of
 * normalized dims, returned in *n_norm), yOut has x's shape, rstdOut x's shape with the
 * normalized dims set to 1. xname names x in the messages ("x", "x1"). */
static aclnnStatus check_norm_shapes(const char *op, const char *xname, const aclTensor *x,
                                     const aclTensor *gamma, const aclTensor *yOut,
                                     const aclTensor *rstdOut, int *n_norm) {
    char what[64];
    int n = gamma->ndim;
    if (n > x->ndim)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: gamma has rank %d, more than %s's %d", op, n,
                        xname, x->ndim);
    snprintf(what, sizeof what, "the trailing dims of %s", xname);
    AH_TRY(ah_check_shape(op, "gamma", gamma, x->dims + (x->ndim - n), n, what));
    snprintf(what, sizeof what, "%s's shape", xname);
    AH_TRY(ah_check_shape(op, "yOut", yOut, x->dims, x->ndim, what));
    int64_t rdims[AH_OP_MAX_RANK];
    for (int i = 0; i < x->ndim; i++)
        rdims[i] = i < x->ndim - n ? x->dims[i] : 1;
    snprintf(what, sizeof what, "%s's shape with the normalized dims set to 1", xname);
    AH_TRY(ah_check_shape(op, "rstdOut", rstdOut, rdims, x->ndim, what));
    *n_norm = n;
    return ACLNN_SUCCESS;
}

AH_API aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma,
                                                double epsilon, const aclTensor *yOut,
                                                const aclTensor *rstdOut, uint64_t *workspaceSize,
                                                aclOpExecutor **executor) {
    const char *op = "aclnnRmsNorm";
    AH_TRY(ah_check_tensor(op, "x", x, FLOAT_TYPES, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "gamma", gamma, FLOAT_TYPES, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "yOut", yOut, FLOAT_TYPES, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "rstdOut", rstdOut, AH_DTYPE_BIT(ACL_FLOAT), 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (yOut->dtype != x->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: yOut dtype %s differs from x dtype %s", op,
                        ah_dtype_name(yOut->dtype), ah_dtype_name(x->dtype));
    if (gamma->dtype != x->dtype && gamma->dtype != ACL_FLOAT)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: gamma dtype %s must be x's dtype %s or FLOAT", op,
                        ah_dtype_name(gamma->dtype), ah_dtype_name(x->dtype));
    if (!(epsilon >= 0.0))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: epsilon %g is negative", op, epsilon);
    int n_norm = 0;
    AH_TRY(check_norm_shapes(op, "x", x, gamma, yOut, rstdOut, &n_norm));
    aclOpExecutor *ex = ah_executor_new(op, rms_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    rms_params *p = AH_EXEC_PARAMS(ex, rms_params);
    p->slot_x = ah_executor_add_tensor(ex, "x", x, AH_IN);
    p->slot_gamma = ah_executor_add_tensor(ex, "gamma", gamma, AH_IN);
    p->slot_y = ah_executor_add_tensor(ex, "yOut", yOut, AH_OUT);
    p->slot_rstd = ah_executor_add_tensor(ex, "rstdOut", rstdOut, AH_OUT);
    p->slot_x2 = p->slot_xout = -1;
    p->n_norm = n_norm;
    p->eps = (float)epsilon;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnRmsNorm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnRmsNorm");
}

AH_API aclnnStatus aclnnAddRmsNormGetWorkspaceSize(const aclTensor *x1, const aclTensor *x2,
                                                   const aclTensor *gamma, double epsilon,
                                                   const aclTensor *yOut, const aclTensor *rstdOut,
                                                   const aclTensor *xOut, uint64_t *workspaceSize,
                                                   aclOpExecutor **executor) {
    const char *op = "aclnnAddRmsNorm";
    AH_TRY(ah_check_tensor(op, "x1", x1, FLOAT_TYPES, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "x2", x2, FLOAT_TYPES, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "gamma", gamma, FLOAT_TYPES, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "yOut", yOut, FLOAT_TYPES, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "rstdOut", rstdOut, AH_DTYPE_BIT(ACL_FLOAT), 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "xOut", xOut, FLOAT_TYPES, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    const struct { const char *name; const aclTensor *t; } same[] = {
        {"x2", x2}, {"gamma", gamma}, {"yOut", yOut}, {"xOut", xOut}};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
        if (same[i].t->dtype != x1->dtype)
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s dtype %s differs from x1 dtype %s", op,
                            same[i].name, ah_dtype_name(same[i].t->dtype), ah_dtype_name(x1->dtype));
    if (!(epsilon >= 0.0))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: epsilon %g is negative", op, epsilon);
    AH_TRY(ah_check_shape(op, "x2", x2, x1->dims, x1->ndim, "x1's shape"));
    int n_norm = 0;
    AH_TRY(check_norm_shapes(op, "x1", x1, gamma, yOut, rstdOut, &n_norm));
    AH_TRY(ah_check_shape(op, "xOut", xOut, x1->dims, x1->ndim, "x1's shape"));
    const struct { const char *name; const aclTensor *t; } all[] = {
        {"x1", x1}, {"x2", x2}, {"gamma", gamma}, {"yOut", yOut}, {"rstdOut", rstdOut}, {"xOut", xOut}};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        int64_t n = 1;
        for (int d = 0; d < all[i].t->ndim; d++)
            n *= all[i].t->dims[d];
        if (n == 0)
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s is an empty tensor", op, all[i].name);
    }
    aclOpExecutor *ex = ah_executor_new(op, rms_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    rms_params *p = AH_EXEC_PARAMS(ex, rms_params);
    p->slot_x = ah_executor_add_tensor(ex, "x1", x1, AH_IN);
    p->slot_x2 = ah_executor_add_tensor(ex, "x2", x2, AH_IN);
    p->slot_gamma = ah_executor_add_tensor(ex, "gamma", gamma, AH_IN);
    p->slot_y = ah_executor_add_tensor(ex, "yOut", yOut, AH_OUT);
    p->slot_rstd = ah_executor_add_tensor(ex, "rstdOut", rstdOut, AH_OUT);
    p->slot_xout = ah_executor_add_tensor(ex, "xOut", xOut, AH_OUT);
    p->n_norm = n_norm;
    p->eps = (float)epsilon;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnAddRmsNorm(void *workspace, uint64_t workspaceSize,
                                   aclOpExecutor *executor, aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnAddRmsNorm");
}
