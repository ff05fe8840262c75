/* ops_norm.c - RMS_NORM over ne0 via aclnnRmsNorm with a cached F32 ones gamma [ne0] (kept on the
 * backend, cann_consts.c, created by prepare) and the required rstd output in a pool temporary [1, ne1, ne2, ne3]. */
#include <string.h>

#include "cann/cann_common.h"

static bool is_float_type(int32_t type) {
    return type == CLM_TYPE_F32 || type == CLM_TYPE_F16 || type == CLM_TYPE_BF16;
}

bool cann_supports_rms_norm(const clm_tensor *op) {
    const clm_tensor *src = op->src[0];
    return is_float_type(src->type) && op->type == src->type && clm_are_same_shape(src, op) &&
           src->nb[0] == clm_type_size(src->type) && op->nb[0] == clm_type_size(op->type);
}

clm_status cann_prepare_rms_norm(cann_backend_ctx *ctx, const clm_tensor *node, cann_prepare_plan *plan) {
    (void)plan;
    void *unused = NULL;
    return cann_consts_ones(ctx, node->src[0]->ne[0], &unused);
}

clm_status cann_op_rms_norm(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *src = dst->src[0];
    float eps;
    memcpy(&eps, &dst->op_params[0], sizeof(eps));
    void *gamma_data = NULL;
    clm_status st = cann_consts_ones(ctx, src->ne[0], &gamma_data);
    if (st != CLM_OK) return st;
    int64_t n_rows = src->ne[1] * src->ne[2] * src->ne[3];
    cann_temp rstd_mem;
    if ((st = cann_temp_alloc(ctx, (size_t)n_rows * sizeof(float), &rstd_mem)) != CLM_OK) return st;
    int64_t rstd_ne[4] = {1, src->ne[1], src->ne[2], src->ne[3]};
    size_t rstd_nb[4] = {sizeof(float), sizeof(float), sizeof(float) * (size_t)src->ne[1],
                         sizeof(float) * (size_t)(src->ne[1] * src->ne[2])};
    size_t gamma_nb = sizeof(float);
    aclTensor *acl_x = cann_acl_tensor(src), *acl_y = cann_acl_tensor(dst);
    aclTensor *acl_gamma = cann_acl_tensor_nd(gamma_data, CLM_TYPE_F32, src->ne, &gamma_nb, 1, 0);
    aclTensor *acl_rstd = cann_acl_tensor_nd(rstd_mem.ptr, CLM_TYPE_F32, rstd_ne, rstd_nb, 4, 0);
    if (acl_x == NULL || acl_y == NULL || acl_gamma == NULL || acl_rstd == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst));
    } else {
        st = CANN_ACLNN(ctx, RmsNorm, acl_x, acl_gamma, (double)eps, acl_y, acl_rstd);
    }
    cann_destroy_tensors(4, acl_x, acl_y, acl_gamma, acl_rstd);
    cann_temp_free(&rstd_mem);
    return st;
}
