/* ops_reduce.c - the small ops of a mixture-of-experts router: SUM_ROWS, ARGSORT and CLAMP.
 *
 * SUM_ROWS: aclnnReduceSum over the last ACL dim (ggml's ne0) with keepDims, out dst's type, from
 * any strided float source.
 * ARGSORT: aclnnArgsort along ne0 (descending from op_params[0]) into a contiguous INT64
 * temporary, then aclnnCast to the I32 dst. Equal keys: the NPU documents no order for them (and
 * acl_host puts them in ascending index order), while the CPU reference follows ggml's CPU kernel
 * (libstdc++'s unstable std::sort); only rows without ties are ordered identically.
 * CLAMP: aclnnClamp with F32 scalar bounds; ggml's MAX(MIN(x, max), min) equals min(max(x, min),
 * max) whenever min <= max and x is a number, so min > max (and a NaN bound) is declined; a NaN
 * element stays NaN on the device, where ggml's CPU kernel gives max.
 */
#include <string.h>

#include "cann/cann_common.h"

static bool is_float_type(int32_t type) {
    return type == CLM_TYPE_F32 || type == CLM_TYPE_F16 || type == CLM_TYPE_BF16;
}

static bool whole_elements(const clm_tensor *t) {
    for (int i = 0; i < CLM_MAX_DIMS; i++)
        if (t->nb[i] % clm_type_size(t->type) != 0) return false;
    return true;
}

/* ---- SUM_ROWS --------------------------------------------------------------------------------- */
bool cann_supports_sum_rows(const clm_tensor *op) {
    const clm_tensor *a = op->src[0];
    return is_float_type(a->type) && op->type == a->type && whole_elements(a) && clm_is_contiguous(op);
}

clm_status cann_op_sum_rows(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *a = dst->src[0];
    aclTensor *x = cann_acl_tensor(a), *y = cann_acl_tensor(dst);
    int64_t last = CLM_MAX_DIMS - 1; /* ggml's ne0 */
    aclIntArray *dims = aclCreateIntArray(&last, 1);
    clm_status st = x && y && dims ? CANN_ACLNN(ctx, ReduceSum, x, dims, true, cann_acl_type(dst->type), y)
                                   : clm_error(CLM_ERR_UNSUPPORTED, "SUM_ROWS: cannot describe the operands");
    if (dims) aclDestroyIntArray(dims);
    cann_destroy_tensors(2, x, y);
    return st;
}

/* ---- ARGSORT ---------------------------------------------------------------------------------- */
bool cann_supports_argsort(const clm_tensor *op) {
    const clm_tensor *a = op->src[0];
    int32_t order = op->op_params[0];
    return is_float_type(a->type) && op->type == CLM_TYPE_I32 && whole_elements(a) && clm_is_contiguous(op) &&
           a->ne[0] <= INT32_MAX && (order == CLM_SORT_ORDER_ASC || order == CLM_SORT_ORDER_DESC);
}

clm_status cann_op_argsort(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *a = dst->src[0];
    bool descending = dst->op_params[0] == CLM_SORT_ORDER_DESC;
    cann_temp it = {0};
    clm_status st = cann_temp_alloc(ctx, (size_t)clm_nelements(dst) * sizeof(int64_t), &it);
    if (st != CLM_OK) return st;
    size_t nb[CLM_MAX_DIMS];
    nb[0] = sizeof(int64_t);
    for (int i = 1; i < CLM_MAX_DIMS; i++) nb[i] = nb[i - 1] * (size_t)dst->ne[i - 1];
    aclTensor *x = cann_acl_tensor(a);
    aclTensor *idx = cann_acl_tensor_nd(it.ptr, CLM_TYPE_I64, dst->ne, nb, CLM_MAX_DIMS, 0);
    aclTensor *y = cann_acl_tensor(dst);
    if (x == NULL || idx == NULL || y == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "ARGSORT: cannot describe the operands");
    } else {
        st = CANN_ACLNN(ctx, Argsort, x, CLM_MAX_DIMS - 1, descending, idx);
        if (st == CLM_OK) st = CANN_ACLNN(ctx, Cast, idx, ACL_INT32, y);
    }
    cann_destroy_tensors(3, x, idx, y);
    cann_temp_free(&it);
    return st;
}

/* ---- CLAMP ------------------------------------------------------------------------------------ */
static void clamp_bounds(const clm_tensor *op, float *lo, float *hi) {
    memcpy(lo, &op->op_params[0], sizeof(float));
    memcpy(hi, &op->op_params[1], sizeof(float));
}

bool cann_supports_clamp(const clm_tensor *op) {
    const clm_tensor *a = op->src[0];
    float lo, hi;
    clamp_bounds(op, &lo, &hi);
    return is_float_type(a->type) && op->type == a->type && whole_elements(a) && clm_is_contiguous(op) &&
           lo <= hi;
}

clm_status cann_op_clamp(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *a = dst->src[0];
    float lo, hi;
    clamp_bounds(dst, &lo, &hi);
    aclTensor *x = cann_acl_tensor(a), *y = cann_acl_tensor(dst);
    aclScalar *smin = aclCreateScalar(&lo, ACL_FLOAT), *smax = aclCreateScalar(&hi, ACL_FLOAT);
    clm_status st = x && y && smin && smax ? CANN_ACLNN(ctx, Clamp, x, smin, smax, y)
                                           : clm_error(CLM_ERR_UNSUPPORTED, "CLAMP: cannot describe the operands");
    if (smin) aclDestroyScalar(smin);
    if (smax) aclDestroyScalar(smax);
    cann_destroy_tensors(2, x, y);
    return st;
}
