/* ops_copy.c - aclnnCast and aclnnInplaceCopy: the strided / broadcast / converting copy.
 *
 * Both run ah_convert_run over an ah_nd plan: same-dtype copies move bits (memmove when both
 * sides are contiguous), F32 <-> F16 / BF16 are vectorised with nearest-even rounding, float ->
 * integer truncates toward zero with NaN -> 0 and saturates at the type's range. A destination
 * that partially overlaps its source is undefined, as in CANN; an exact alias is a no-op copy.
 */
#include "ah_nd.h"

typedef struct copy_params {
    int slot_dst, slot_src;
} copy_params;

typedef struct copy_ctx {
    aclDataType dst_t, src_t;
} copy_ctx;

static void copy_segment(void *ctx, int64_t n, char *const *p, const int64_t *s) {
    const copy_ctx *c = ctx;
    ah_convert_run(n, p[0], c->dst_t, s[0], p[1], c->src_t, s[1]);
}

/* dst and src contiguous, of one shape: the plan would be one run of every element */
static bool one_run(const aclTensor *dst, const aclTensor *src) {
    if (dst->ndim != src->ndim || !ah_tensor_is_contiguous(dst) || !ah_tensor_is_contiguous(src))
        return false;
    for (int i = 0; i < dst->ndim; i++)
        if (dst->dims[i] != src->dims[i])
            return false;
    return true;
}

static aclError copy_run(const aclOpExecutor *ex, void *workspace) {
    const copy_params *cp = AH_EXEC_PARAMS(ex, const copy_params);
    const aclTensor *dst = &ex->tensors[cp->slot_dst], *src = &ex->tensors[cp->slot_src];
    int64_t numel = ah_tensor_numel(dst);
    if (numel <= AH_ND_GRAIN && one_run(dst, src)) {
        /* what ah_nd_run does with that plan below the grain, without building it: the casts
         * around every quantized product of a decode step are a few thousand elements each */
        ah_nd_operand d = ah_nd_tensor(dst), s = ah_nd_tensor(src);
        ah_convert_run(numel, d.data, d.dtype, (int64_t)ah_dtype_size(d.dtype), s.data, s.dtype,
                       (int64_t)ah_dtype_size(s.dtype));
        return ACL_SUCCESS;
    }
    ah_nd_operand ops[2] = {ah_nd_tensor(dst), ah_nd_tensor(src)};
    ah_nd_plan plan;
    if (!ah_nd_plan_init(&plan, 2, ops))
        return ah_error(ACLNN_ERR_INNER, "%s: source does not broadcast to the destination",
                        ex->op);
    copy_ctx c = {ops[0].dtype, ops[1].dtype};
    ah_nd_run(&plan, AH_ND_GRAIN, copy_segment, &c);
    return ACL_SUCCESS;
}


AH_API aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor *self, const aclDataType dtype,
                                             aclTensor *out, uint64_t *workspaceSize,
                                             aclOpExecutor **executor) {
    const char *op = "aclnnCast";
    AH_TRY(ah_check_tensor(op, "self", self, AH_DTYPES_REAL, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "out", out, AH_DTYPES_REAL, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (out->dtype != dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: dtype %s (%d) but out has dtype %s", op,
                        ah_dtype_name(dtype), (int)dtype, ah_dtype_name(out->dtype));
    if (self->dtype == ACL_BOOL && !ah_tensor_is_contiguous(self))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: a BOOL self must be contiguous", op);
    AH_TRY(ah_check_shape(op, "out", out, self->dims, self->ndim, "self's shape"));
    aclOpExecutor *ex = ah_executor_new(op, copy_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    copy_params *cp = AH_EXEC_PARAMS(ex, copy_params);
    cp->slot_src = ah_executor_add_tensor(ex, "self", self, AH_IN);
    cp->slot_dst = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnCast(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                             aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnCast");
}

AH_API aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src,
                                                    uint64_t *workspaceSize,
                                                    aclOpExecutor **executor) {
    const char *op = "aclnnInplaceCopy";
    AH_TRY(ah_check_tensor(op, "selfRef", selfRef, AH_DTYPES_REAL, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "src", src, AH_DTYPES_REAL, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    int64_t dims[AH_OP_MAX_RANK];
    int ndim;
    AH_TRY(ah_check_broadcast(op, "selfRef", selfRef, "src", src, dims, &ndim));
    AH_TRY(ah_check_shape(op, "selfRef", selfRef, dims, ndim, "its broadcast with src"));
    aclOpExecutor *ex = ah_executor_new(op, copy_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    copy_params *cp = AH_EXEC_PARAMS(ex, copy_params);
    cp->slot_dst = ah_executor_add_tensor(ex, "selfRef", selfRef, AH_INOUT);
    cp->slot_src = ah_executor_add_tensor(ex, "src", src, AH_IN);
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnInplaceCopy(void *workspace, uint64_t workspaceSize,
                                    aclOpExecutor *executor, aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnInplaceCopy");
}
