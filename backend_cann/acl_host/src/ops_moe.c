/* ops_moe.c - aclnnMoeInitRoutingV2: the routing sort of a mixture of experts.
 *
 * expertIdx (numRows, k) INT32 names the k experts of each token. The numRows*k (token, slot)
 * pairs, in row-major order i = t*k + j, are sorted by expert id, equal ids keeping the order of
 * i (the kernel's Sort / MrgSort keep equal keys in index order; impl/ascendc/moe_init_routing_v2
 * in 8.1.RC1). With p the sorted position of pair i:
 *   expandedRowIdxOut[i] = p,  expandedXOut[p] = x[i / k]  (for p below the active rows),
 *   expertTokensCountOrCumsumOut[e] = the pairs of expert e (flag 2) or of experts 0..e (flag 1).
 * Dropless (dropPadMode 0): expandedXOut has numRows*k rows, or min(activeNum, numRows*k) when
 * activeNum > 0 (the rows past it are not written). The drop / pad mode (dropPadMode 1) is refused
 * as not implemented. Ids must lie in [0, expertNum) when the counts are written, else be >= 0;
 * a violation is an error of the launch (phase 1 cannot read device memory).
 */
#include <stdlib.h>
#include <string.h>

#include "ah_rows.h"

#define ROUTE_FLOATS (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16))

typedef struct route_params {
    int slot_x, slot_idx, slot_ex, slot_row, slot_count; /* slot_count -1: not written */
    int64_t n_rows, k, h, active_rows, expert_num, count_flag;
} route_params;

typedef struct route_ctx {
    const aclTensor *x, *ex;
    const int32_t *sorted; /* sorted position p -> pair i */
    int64_t k;
} route_ctx;

/* expandedXOut rows [begin, end): a copy of the token row of the pair sorted there. */
static void route_rows(void *vctx, int64_t begin, int64_t end) {
    const route_ctx *c = vctx;
    int64_t es = (int64_t)ah_dtype_size(c->x->dtype);
    const char *xb = (const char *)c->x->data + c->x->offset * es;
    char *eb = (char *)c->ex->data + c->ex->offset * es;
    int64_t h = c->x->dims[1], xs0 = c->x->strides[0] * es, xs1 = c->x->strides[1] * es;
    for (int64_t p = begin; p < end; p++) {
        const char *src = xb + (c->sorted[p] / c->k) * xs0;
        ah_convert_run(h, eb + p * h * es, c->x->dtype, es, src, c->x->dtype, xs1);
    }
}

static int cmp_key(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static aclError route_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const route_params *p = AH_EXEC_PARAMS(ex, const route_params);
    const aclTensor *idx = &ex->tensors[p->slot_idx], *row = &ex->tensors[p->slot_row];
    int64_t n = p->n_rows * p->k;
    if (n == 0)
        return ACL_SUCCESS;
    /* the sort key of pair i is (expert << 32) | i: one sort of int64 gives the stable order */
    int64_t *keys = malloc((size_t)n * sizeof(int64_t));
    int32_t *sorted = malloc((size_t)n * sizeof(int32_t));
    if (!keys || !sorted) {
        free(keys);
        free(sorted);
        return ah_error(ACLNN_ERR_INNER, "%s: out of host memory", ex->op);
    }
    const int32_t *ib = (const int32_t *)idx->data + idx->offset;
    for (int64_t i = 0; i < n; i++) {
        int64_t t = i / p->k, j = i % p->k;
        int64_t e = ib[t * idx->strides[0] + j * idx->strides[1]];
        if (e < 0 || (p->count_flag > 0 && e >= p->expert_num)) {
            free(keys);
            free(sorted);
            return ah_error(ACLNN_ERR_INNER, "%s: expertIdx[%lld][%lld] = %lld is outside [0, %s)", ex->op,
                            (long long)t, (long long)j, (long long)e,
                            p->count_flag > 0 ? "expertNum" : "2^31");
        }
        keys[i] = (e << 32) | i;
    }
    qsort(keys, (size_t)n, sizeof(int64_t), cmp_key);
    int32_t *rows = (int32_t *)row->data + row->offset;
    for (int64_t q = 0; q < n; q++) {
        sorted[q] = (int32_t)(keys[q] & 0xffffffff);
        rows[sorted[q]] = (int32_t)q;
    }
    if (p->slot_count >= 0) {
        const aclTensor *ct = &ex->tensors[p->slot_count];
        int32_t *counts = (int32_t *)ct->data + ct->offset;
        memset(counts, 0, (size_t)p->expert_num * sizeof(int32_t));
        for (int64_t q = 0; q < n; q++)
            counts[keys[q] >> 32]++;
        if (p->count_flag == 1)
            for (int64_t e = 1; e < p->expert_num; e++)
                counts[e] += counts[e - 1];
    }
    free(keys);
    route_ctx c = {.x = &ex->tensors[p->slot_x], .ex = &ex->tensors[p->slot_ex], .sorted = sorted, .k = p->k};
    if (p->active_rows > 0 && p->h > 0)
        ah_parallel_for(p->active_rows, ah_rows_grain(p->h), route_rows, &c);
    free(sorted);
    return ACL_SUCCESS;
}

AH_API aclnnStatus aclnnMoeInitRoutingV2GetWorkspaceSize(
    const aclTensor *x, const aclTensor *expertIdx, int64_t activeNumOptional, int64_t expertCapacityOptional,
    int64_t expertNumOptional, int64_t dropPadModeOptional, int64_t expertTokensCountOrCumsumFlagOptional,
    bool expertTokensBeforeCapacityFlagOptional, const aclTensor *expandedXOut, const aclTensor *expandedRowIdxOut,
    const aclTensor *expertTokensCountOrCumsumOutOptional, const aclTensor *expertTokensBeforeCapacityOutOptional,
    uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnMoeInitRoutingV2";
    AH_TRY(ah_check_tensor(op, "x", x, ROUTE_FLOATS, 2, 2));
    AH_TRY(ah_check_tensor(op, "expertIdx", expertIdx, AH_DTYPE_BIT(ACL_INT32), 2, 2));
    AH_TRY(ah_check_tensor(op, "expandedXOut", expandedXOut, ROUTE_FLOATS, 2, 3));
    AH_TRY(ah_check_tensor(op, "expandedRowIdxOut", expandedRowIdxOut, AH_DTYPE_BIT(ACL_INT32), 1, 1));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    int64_t n_rows = x->dims[0], h = x->dims[1], k = expertIdx->dims[1];
    if (expertIdx->dims[0] != n_rows)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: x has %lld rows but expertIdx has %lld", op,
                        (long long)n_rows, (long long)expertIdx->dims[0]);
    if (activeNumOptional < 0 || expertCapacityOptional < 0 || expertNumOptional < 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: activeNum %lld, expertCapacity %lld and expertNum %lld must be >= 0",
                        op, (long long)activeNumOptional, (long long)expertCapacityOptional,
                        (long long)expertNumOptional);
    if (dropPadModeOptional != 0 && dropPadModeOptional != 1)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: dropPadMode %lld is not 0 or 1", op, (long long)dropPadModeOptional);
    if (expertTokensCountOrCumsumFlagOptional < 0 || expertTokensCountOrCumsumFlagOptional > 2)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: expertTokensCountOrCumsumFlag %lld is not 0, 1 or 2", op,
                        (long long)expertTokensCountOrCumsumFlagOptional);
    if (dropPadModeOptional == 1)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: dropPadMode 1 (drop / pad to expertCapacity) is not implemented by acl_host", op);
    /* dropless: the counts are written when the flag asks for them; the before-capacity counts
     * belong to the drop / pad mode only */
    int64_t flag = expertTokensCountOrCumsumFlagOptional;
    if (flag > 0 && expertNumOptional == 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: expertTokensCountOrCumsumFlag %lld needs expertNum > 0", op,
                        (long long)flag);
    int64_t n = n_rows * k;
    if (n > INT32_MAX)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: numRows * k = %lld does not fit the INT32 row index", op,
                        (long long)n);
    int64_t active = activeNumOptional == 0 ? n : (activeNumOptional < n ? activeNumOptional : n);
    int64_t xdims[2] = {active, h}, rdims[1] = {n};
    if (expandedXOut->dtype != x->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: expandedXOut has dtype %s, expected x's %s", op,
                        ah_dtype_name(expandedXOut->dtype), ah_dtype_name(x->dtype));
    AH_TRY(ah_check_shape(op, "expandedXOut", expandedXOut, xdims, 2,
                       activeNumOptional > 0 ? "(min(activeNum, numRows * k), h)" : "(numRows * k, h)"));
    AH_TRY(ah_check_shape(op, "expandedRowIdxOut", expandedRowIdxOut, rdims, 1, "(numRows * k)"));
    if (!ah_tensor_is_contiguous(expandedXOut) || !ah_tensor_is_contiguous(expandedRowIdxOut))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: expandedXOut and expandedRowIdxOut must be contiguous", op);
    if (flag > 0) {
        const aclTensor *c = expertTokensCountOrCumsumOutOptional;
        if (!c)
            return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: expertTokensCountOrCumsumFlag %lld needs "
                            "expertTokensCountOrCumsumOutOptional", op, (long long)flag);
        AH_TRY(ah_check_tensor(op, "expertTokensCountOrCumsumOutOptional", c, AH_DTYPE_BIT(ACL_INT32), 1, 1));
        int64_t cdims[1] = {expertNumOptional};
        AH_TRY(ah_check_shape(op, "expertTokensCountOrCumsumOutOptional", c, cdims, 1, "(expertNum)"));
        if (!ah_tensor_is_contiguous(c))
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: expertTokensCountOrCumsumOutOptional must be contiguous", op);
    }
    (void)expertTokensBeforeCapacityFlagOptional; /* ignored in the dropless mode, as the tiling does */
    (void)expertTokensBeforeCapacityOutOptional;
    aclOpExecutor *ex = ah_executor_new(op, route_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    route_params *p = AH_EXEC_PARAMS(ex, route_params);
    p->n_rows = n_rows, p->k = k, p->h = h, p->active_rows = active;
    p->expert_num = expertNumOptional, p->count_flag = flag;
    p->slot_x = ah_executor_add_tensor(ex, "x", x, AH_IN);
    p->slot_idx = ah_executor_add_tensor(ex, "expertIdx", expertIdx, AH_IN);
    p->slot_ex = ah_executor_add_tensor(ex, "expandedXOut", expandedXOut, AH_OUT);
    p->slot_row = ah_executor_add_tensor(ex, "expandedRowIdxOut", expandedRowIdxOut, AH_OUT);
    p->slot_count = flag > 0 ? ah_executor_add_tensor(ex, "expertTokensCountOrCumsumOutOptional",
                                                      expertTokensCountOrCumsumOutOptional, AH_OUT)
                             : -1;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnMoeInitRoutingV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                         aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnMoeInitRoutingV2");
}
