/* ops_reduce.c - aclnnReduceSum and aclnnArgsort.
 *
 * ReduceSum: the sum of self over the dims in `dims` (each in [-rank, rank-1], no repeats; an
 * empty list is not implemented by acl_host), kept as 1 when keepDims; out has the reduced
 * shape and the dtype `dtype`. FLOAT / FLOAT16 / BF16 rows are read as F32 and summed in the
 * fixed 16-lane order of ah_rows.h (the same bits for any thread count, batch or instruction
 * set; a dense F32 row is summed where it lies, other rows through a copy), DOUBLE and integer /
 * BOOL rows in double (exact to 2^53); the sum is converted once to out's dtype. Complex dtypes
 * are not implemented by acl_host.
 * Argsort: out (INT64, self's shape) holds, along dim, the indices that sort self ascending or
 * descending. acl_host's order is total and deterministic: NaN above every number (last
 * ascending, first descending, as torch), and equal keys in ascending index order (a stable
 * sort) in both directions. The NPU documents no order for ties: callers must not rely on it.
 * Rows run in parallel, each sorted on its own, so results do not depend on the thread count.
 */
#include <stdlib.h>

#include "ah_rows.h"

/* ---- ReduceSum -------------------------------------------------------------------------------- */
typedef struct rsum_params {
    int slot_self, slot_out;
    unsigned mask; /* the reduced dims of self */
} rsum_params;

typedef struct rsum_ctx {
    ah_rows x, y;
    bool f32; /* FLOAT / FLOAT16 / BF16 self: F32 lanes; else double */
} rsum_ctx;

static void rsum_rows(void *vctx, int64_t begin, int64_t end) {
    const rsum_ctx *c = vctx;
    int64_t n = c->x.len;
    bool in_place = c->x.dtype == ACL_FLOAT && ah_rows_dense(&c->x); /* no copy: the same sum */
    void *buf = in_place ? NULL : malloc((size_t)(n > 0 ? n : 1) * (c->f32 ? sizeof(float) : sizeof(double)));
    if (!in_place && !buf)
        return;
    for (int64_t row = begin; row < end; row++) {
        double s;
        if (in_place) {
            s = n > 0 ? (double)ah_sum_f32((const float *)ah_rows_ptr(&c->x, row), n) : 0.0;
        } else if (c->f32) {
            ah_rows_load(&c->x, row, buf);
            s = n > 0 ? (double)ah_sum_f32(buf, n) : 0.0;
        } else {
            ah_rows_load_f64(&c->x, row, buf);
            s = n > 0 ? ah_sum_f64(buf, n) : 0.0;
        }
        ah_store_f64(c->y.dtype, ah_rows_ptr(&c->y, row), 0, 1, &s);
    }
    free(buf);
}

static aclError rsum_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const rsum_params *p = AH_EXEC_PARAMS(ex, const rsum_params);
    const aclTensor *x = &ex->tensors[p->slot_self];
    rsum_ctx c;
    ah_rows_init(&c.x, x, p->mask);
    ah_rows_init(&c.y, &ex->tensors[p->slot_out], 0u);
    c.f32 = x->dtype == ACL_FLOAT || x->dtype == ACL_FLOAT16 || x->dtype == ACL_BF16;
    if (c.y.n_rows > 0)
        ah_parallel_for(c.y.n_rows, ah_rows_grain(c.x.len), rsum_rows, &c);
    return ACL_SUCCESS;
}

AH_API aclnnStatus aclnnReduceSumGetWorkspaceSize(const aclTensor *self, const aclIntArray *dims, bool keepDims,
                                                  aclDataType dtype, aclTensor *out, uint64_t *workspaceSize,
                                                  aclOpExecutor **executor) {
    const char *op = "aclnnReduceSum";
    AH_TRY(ah_check_tensor(op, "self", self, AH_DTYPES_ARITH, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "out", out, AH_DTYPES_ARITH, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (!dims)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: dims is NULL", op);
    if (!(AH_DTYPES_ARITH & AH_DTYPE_BIT(dtype)))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: dtype %s is not supported", op, ah_dtype_name(dtype));
    if (out->dtype != dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out has dtype %s, dtype says %s", op,
                        ah_dtype_name(out->dtype), ah_dtype_name(dtype));
    if (dims->size == 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: an empty dims (reduce everything) is not implemented by acl_host",
                        op);
    int rank = self->ndim > 0 ? self->ndim : 1;
    unsigned mask = 0;
    for (uint64_t i = 0; i < dims->size; i++) {
        int64_t d = dims->values[i];
        if (d < -rank || d >= rank)
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: dims[%llu] = %lld is outside [%d, %d]", op,
                            (unsigned long long)i, (long long)d, -rank, rank - 1);
        if (d < 0)
            d += rank;
        if (mask & (1u << d))
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: dim %lld appears twice in dims", op, (long long)d);
        mask |= 1u << d;
    }
    int64_t odims[AH_OP_MAX_RANK];
    int nd = 0;
    for (int i = 0; i < self->ndim; i++) {
        if (!(mask & (1u << i)))
            odims[nd++] = self->dims[i];
        else if (keepDims)
            odims[nd++] = 1;
    }
    AH_TRY(ah_check_shape(op, "out", out, odims, nd, keepDims ? "self's shape with the dims 1" : "self's shape without the dims"));
    aclOpExecutor *ex = ah_executor_new(op, rsum_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    rsum_params *p = AH_EXEC_PARAMS(ex, rsum_params);
    p->slot_self = ah_executor_add_tensor(ex, "self", self, AH_IN);
    p->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    p->mask = self->ndim > 0 ? mask : 0u;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnReduceSum(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                  aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnReduceSum");
}

/* ---- Argsort ---------------------------------------------------------------------------------- */
#define ARGSORT_DTYPES                                                                        \
    (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16) |            \
     AH_DTYPE_BIT(ACL_INT8) | AH_DTYPE_BIT(ACL_INT16) | AH_DTYPE_BIT(ACL_INT32) |             \
     AH_DTYPE_BIT(ACL_INT64) | AH_DTYPE_BIT(ACL_UINT8))

typedef struct argsort_params {
    int slot_self, slot_out, dim;
    bool descending;
} argsort_params;

typedef struct argsort_ctx {
    const aclTensor *self, *out;
    ah_rows x, y;
    int dim;
    bool descending, integer;
} argsort_ctx;

typedef struct key_f {
    double v;
    int64_t i;
} key_f;
typedef struct key_i {
    int64_t v;
    int64_t i;
} key_i;

static int by_index(int64_t a, int64_t b) { return (a > b) - (a < b); }

static int cmp_f_asc(const void *pa, const void *pb) {
    const key_f *a = pa, *b = pb;
    bool an = a->v != a->v, bn = b->v != b->v;
    if (an || bn)
        return an && bn ? by_index(a->i, b->i) : an ? 1 : -1;
    if (a->v != b->v)
        return a->v < b->v ? -1 : 1;
    return by_index(a->i, b->i);
}

static int cmp_f_desc(const void *pa, const void *pb) {
    const key_f *a = pa, *b = pb;
    bool an = a->v != a->v, bn = b->v != b->v;
    if (an || bn)
        return an && bn ? by_index(a->i, b->i) : an ? -1 : 1;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return by_index(a->i, b->i);
}

static int cmp_i_asc(const void *pa, const void *pb) {
    const key_i *a = pa, *b = pb;
    if (a->v != b->v)
        return a->v < b->v ? -1 : 1;
    return by_index(a->i, b->i);
}

static int cmp_i_desc(const void *pa, const void *pb) {
    const key_i *a = pa, *b = pb;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return by_index(a->i, b->i);
}

static void argsort_rows(void *vctx, int64_t begin, int64_t end) {
    const argsort_ctx *c = vctx;
    int64_t n = c->x.len;
    int64_t in_stride = c->self->strides[c->dim] * (int64_t)ah_dtype_size(c->self->dtype);
    int64_t out_stride = c->out->strides[c->dim] * (int64_t)sizeof(int64_t);
    size_t ksize = c->integer ? sizeof(key_i) : sizeof(key_f);
    char *keys = malloc((size_t)n * ksize);
    double *vals = malloc((size_t)n * sizeof(double));
    int64_t *idx = malloc((size_t)n * sizeof(int64_t));
    if (!keys || !vals || !idx) {
        free(keys), free(vals), free(idx);
        return;
    }
    for (int64_t row = begin; row < end; row++) {
        if (c->integer) {
            key_i *k = (key_i *)(void *)keys;
            ah_load_i64(c->self->dtype, ah_rows_ptr(&c->x, row), in_stride, n, idx);
            for (int64_t i = 0; i < n; i++)
                k[i].v = idx[i], k[i].i = i;
            qsort(k, (size_t)n, ksize, c->descending ? cmp_i_desc : cmp_i_asc);
            for (int64_t i = 0; i < n; i++)
                idx[i] = k[i].i;
        } else {
            key_f *k = (key_f *)(void *)keys;
            ah_rows_load_f64(&c->x, row, vals);
            for (int64_t i = 0; i < n; i++)
                k[i].v = vals[i], k[i].i = i;
            qsort(k, (size_t)n, ksize, c->descending ? cmp_f_desc : cmp_f_asc);
            for (int64_t i = 0; i < n; i++)
                idx[i] = k[i].i;
        }
        ah_store_i64(ACL_INT64, ah_rows_ptr(&c->y, row), out_stride, n, idx);
    }
    free(keys), free(vals), free(idx);
}

static aclError argsort_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const argsort_params *p = AH_EXEC_PARAMS(ex, const argsort_params);
    argsort_ctx c = {.self = &ex->tensors[p->slot_self], .out = &ex->tensors[p->slot_out], .dim = p->dim,
                     .descending = p->descending};
    if (c.self->ndim == 0) { /* a 0-d self: the index 0 */
        int64_t zero = 0;
        char *o = (char *)c.out->data + c.out->offset * (int64_t)sizeof(int64_t);
        ah_store_i64(ACL_INT64, o, 0, 1, &zero);
        return ACL_SUCCESS;
    }
    c.integer = ah_dtype_is_integer(c.self->dtype);
    ah_rows_init(&c.x, c.self, 1u << p->dim);
    ah_rows_init(&c.y, c.out, 1u << p->dim);
    if (c.x.n_rows > 0 && c.x.len > 0)
        ah_parallel_for(c.x.n_rows, ah_rows_grain(c.x.len * 8), argsort_rows, &c);
    return ACL_SUCCESS;
}

AH_API aclnnStatus aclnnArgsortGetWorkspaceSize(const aclTensor *self, int64_t dim, bool descending, aclTensor *out,
                                                uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnArgsort";
    AH_TRY(ah_check_tensor(op, "self", self, ARGSORT_DTYPES, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "out", out, AH_DTYPE_BIT(ACL_INT64), 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    int rank = self->ndim > 0 ? self->ndim : 1;
    if (dim < -rank || dim >= rank)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: dim %lld is outside [%d, %d] for self of rank %d", op,
                        (long long)dim, -rank, rank - 1, self->ndim);
    if (dim < 0)
        dim += rank;
    if (self->ndim > 0 && self->dims[dim] > INT32_MAX)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: self's dim %lld has %lld elements, more than INT32_MAX", op,
                        (long long)dim, (long long)self->dims[dim]);
    AH_TRY(ah_check_shape(op, "out", out, self->dims, self->ndim, "self's shape"));
    aclOpExecutor *ex = ah_executor_new(op, argsort_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    argsort_params *p = AH_EXEC_PARAMS(ex, argsort_params);
    p->slot_self = ah_executor_add_tensor(ex, "self", self, AH_IN);
    p->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    p->dim = (int)dim;
    p->descending = descending;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnArgsort(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnArgsort");
}
