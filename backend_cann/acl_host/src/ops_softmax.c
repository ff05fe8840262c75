/* ops_softmax.c - aclnnSoftmax: out = exp(x - max) / sum(exp(x - max)) along dim.
 *
 * Dtypes F32, F16, BF16 (computed in F32) and F64 (in double); out has self's shape and a float
 * dtype. The row sum uses the fixed 16-lane order of ah_rows.h and exp is acl_host's (ah_exp.h,
 * vectorised, 1 ulp; the C library's in double for F64), so a row's result is the same whatever the
 * batch, the thread count or the instruction set. A row of -inf gives NaN (as torch). Rows run in
 * parallel.
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdlib.h>

#include "ah_exp.h"
#include "ah_rows.h"


#define SOFTMAX_TYPES                                                                         \
    (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16) |            \
     AH_DTYPE_BIT(ACL_DOUBLE))

typedef struct softmax_params {
    int slot_self, slot_out, dim;
} softmax_params;

typedef struct softmax_ctx {
    ah_rows x, y;
    bool f64;
} softmax_ctx;

static void softmax_row_f32(float *v, int64_t n) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        max = v[i] > max ? v[i] : max;
    ah_exp_sub_row(v, n, max);
    float inv = 1.0f / ah_sum_f32(v, n);
    for (int64_t i = 0; i < n; i++)
        v[i] = v[i] * inv;
}

static void softmax_row_f64(double *v, int64_t n) {
    double max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        max = v[i] > max ? v[i] : max;
    for (int64_t i = 0; i < n; i++)
        v[i] = exp(v[i] - max);
    double inv = 1.0 / ah_sum_f64(v, n);
    for (int64_t i = 0; i < n; i++)
        v[i] = v[i] * inv;
}

static void softmax_rows(void *vctx, int64_t begin, int64_t end) {
    const softmax_ctx *c = vctx;
    int64_t n = c->x.len;
    void *buf = malloc((size_t)n * (c->f64 ? sizeof(double) : sizeof(float)));
    if (!buf)
        return;
    for (int64_t row = begin; row < end; row++) {
        if (c->f64) {
            ah_rows_load_f64(&c->x, row, buf);
            softmax_row_f64(buf, n);
            ah_rows_store_f64(&c->y, row, buf);
        } else {
            ah_rows_load(&c->x, row, buf);
            softmax_row_f32(buf, n);
            ah_rows_store(&c->y, row, buf);
        }
    }
    free(buf);
}

static aclError softmax_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const softmax_params *p = AH_EXEC_PARAMS(ex, const softmax_params);
    const aclTensor *x = &ex->tensors[p->slot_self], *y = &ex->tensors[p->slot_out];
    unsigned inner = x->ndim > 0 ? 1u << p->dim : 0u;
    softmax_ctx c = {.f64 = x->dtype == ACL_DOUBLE || y->dtype == ACL_DOUBLE};
    ah_rows_init(&c.x, x, inner);
    ah_rows_init(&c.y, y, inner);
    if (c.x.n_rows > 0 && c.x.len > 0)
        ah_parallel_for(c.x.n_rows, ah_rows_grain(c.x.len), softmax_rows, &c);
    return ACL_SUCCESS;
}

AH_API aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor *self, int64_t dim,
                                                aclTensor *out, uint64_t *workspaceSize,
                                                aclOpExecutor **executor) {
    const char *op = "aclnnSoftmax";
    AH_TRY(ah_check_tensor(op, "self", self, SOFTMAX_TYPES, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "out", out, SOFTMAX_TYPES, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    int rank = self->ndim > 0 ? self->ndim : 1;
    if (dim < -rank || dim >= rank)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: dim %lld is outside [%d, %d] for self of rank %d",
                        op, (long long)dim, -rank, rank - 1, self->ndim);
    if (dim < 0)
        dim += rank;
    AH_TRY(ah_check_shape(op, "out", out, self->dims, self->ndim, "self's shape"));
    aclOpExecutor *ex = ah_executor_new(op, softmax_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    softmax_params *p = AH_EXEC_PARAMS(ex, softmax_params);
    p->slot_self = ah_executor_add_tensor(ex, "self", self, AH_IN);
    p->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    p->dim = (int)dim;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnSoftmax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnSoftmax");
}
