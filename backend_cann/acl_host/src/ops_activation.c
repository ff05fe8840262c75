/* ops_activation.c - aclnnSilu and aclnnSwiGlu.
 *
 * Silu: out = x / (1 + exp(-x)), F32 / F16 / BF16, self and out of one dtype and shape, any
 * strides. SwiGlu: x split in halves A | B along dim (that dim even), out = silu(A) * B with dim
 * halved; F32 / F16 / BF16, x and out contiguous and of one dtype. F16 / BF16 compute in F32 and
 * round once. Elementwise over the N-d engine, spread over the thread pool.
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "ah_nd.h"


#define FLOAT_TYPES (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16))
#define BLOCK 512

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

typedef struct act_params {
    int slot_in, slot_out;
    int dim;   /* SwiGlu: the split dim */
} act_params;

typedef struct act_ctx {
    aclDataType out_t, a_t, b_t;
} act_ctx;

/* operands: out, a (, b): out = silu(a) (* b) */
static void act_segment(void *vctx, int64_t n, char *const *p, const int64_t *s, bool glu) {
    const act_ctx *c = vctx;
    float a[BLOCK], b[BLOCK];
    for (int64_t done = 0; done < n; done += BLOCK) {
        int64_t m = n - done < BLOCK ? n - done : BLOCK;
        ah_convert_run(m, (char *)a, ACL_FLOAT, 4, p[1] + done * s[1], c->a_t, s[1]);
        if (glu) {
            ah_convert_run(m, (char *)b, ACL_FLOAT, 4, p[2] + done * s[2], c->b_t, s[2]);
            for (int64_t i = 0; i < m; i++)
                a[i] = silu(a[i]) * b[i];
        } else {
            for (int64_t i = 0; i < m; i++)
                a[i] = silu(a[i]);
        }
        ah_convert_run(m, p[0] + done * s[0], c->out_t, s[0], (const char *)a, ACL_FLOAT, 4);
    }
}

static void silu_segment(void *ctx, int64_t n, char *const *p, const int64_t *s) {
    act_segment(ctx, n, p, s, false);
}

static void swiglu_segment(void *ctx, int64_t n, char *const *p, const int64_t *s) {
    act_segment(ctx, n, p, s, true);
}

static aclError silu_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const act_params *ap = AH_EXEC_PARAMS(ex, const act_params);
    ah_nd_operand ops[2] = {ah_nd_tensor(&ex->tensors[ap->slot_out]),
                            ah_nd_tensor(&ex->tensors[ap->slot_in])};
    ah_nd_plan plan;
    if (!ah_nd_plan_init(&plan, 2, ops))
        return ah_error(ACLNN_ERR_INNER, "%s: self does not match out", ex->op);
    act_ctx c = {ops[0].dtype, ops[1].dtype, ops[1].dtype};
    ah_nd_run(&plan, AH_ND_GRAIN / 4, silu_segment, &c);
    return ACL_SUCCESS;
}

static aclError swiglu_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const act_params *ap = AH_EXEC_PARAMS(ex, const act_params);
    const aclTensor *x = &ex->tensors[ap->slot_in];
    /* the halves: x's view with dims[dim] halved, the second one offset by half of it */
    aclTensor a = *x, b = *x;
    a.dims[ap->dim] /= 2;
    b.dims[ap->dim] /= 2;
    b.offset += a.dims[ap->dim] * x->strides[ap->dim];
    ah_nd_operand ops[3] = {ah_nd_tensor(&ex->tensors[ap->slot_out]), ah_nd_tensor(&a),
                            ah_nd_tensor(&b)};
    ah_nd_plan plan;
    if (!ah_nd_plan_init(&plan, 3, ops))
        return ah_error(ACLNN_ERR_INNER, "%s: the halves of x do not match out", ex->op);
    act_ctx c = {ops[0].dtype, ops[1].dtype, ops[2].dtype};
    ah_nd_run(&plan, AH_ND_GRAIN / 4, swiglu_segment, &c);
    return ACL_SUCCESS;
}

AH_API aclnnStatus aclnnSiluGetWorkspaceSize(const aclTensor *self, aclTensor *out,
                                             uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnSilu";
    AH_TRY(ah_check_tensor(op, "self", self, FLOAT_TYPES, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "out", out, FLOAT_TYPES, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (out->dtype != self->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out dtype %s differs from self dtype %s", op,
                        ah_dtype_name(out->dtype), ah_dtype_name(self->dtype));
    AH_TRY(ah_check_shape(op, "out", out, self->dims, self->ndim, "self's shape"));
    aclOpExecutor *ex = ah_executor_new(op, silu_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    act_params *ap = AH_EXEC_PARAMS(ex, act_params);
    ap->slot_in = ah_executor_add_tensor(ex, "self", self, AH_IN);
    ap->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnSilu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                             aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnSilu");
}

AH_API aclnnStatus aclnnSwiGluGetWorkspaceSize(const aclTensor *x, int64_t dim,
                                               const aclTensor *out, uint64_t *workspaceSize,
                                               aclOpExecutor **executor) {
    const char *op = "aclnnSwiGlu";
    AH_TRY(ah_check_tensor(op, "x", x, FLOAT_TYPES, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "out", out, FLOAT_TYPES, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (out->dtype != x->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out dtype %s differs from x dtype %s", op,
                        ah_dtype_name(out->dtype), ah_dtype_name(x->dtype));
    if (dim < -x->ndim || dim >= x->ndim)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: dim %lld is outside [%d, %d] for x of rank %d",
                        op, (long long)dim, -x->ndim, x->ndim - 1, x->ndim);
    if (dim < 0)
        dim += x->ndim;
    if (ah_tensor_numel(x) == 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: x is an empty tensor, which SwiGlu does not "
                        "support", op);
    if (x->dims[dim] % 2 != 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: x has odd size %lld along dim %lld", op,
                        (long long)x->dims[dim], (long long)dim);
    if (!ah_tensor_is_contiguous(x) || !ah_tensor_is_contiguous(out))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: x and out must be contiguous", op);
    int64_t dims[AH_OP_MAX_RANK];
    for (int i = 0; i < x->ndim; i++)
        dims[i] = i == dim ? x->dims[i] / 2 : x->dims[i];
    AH_TRY(ah_check_shape(op, "out", out, dims, x->ndim, "x's shape with dim halved"));
    aclOpExecutor *ex = ah_executor_new(op, swiglu_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    act_params *ap = AH_EXEC_PARAMS(ex, act_params);
    ap->slot_in = ah_executor_add_tensor(ex, "x", x, AH_IN);
    ap->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    ap->dim = (int)dim;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnSwiGlu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                               aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnSwiGlu");
}
