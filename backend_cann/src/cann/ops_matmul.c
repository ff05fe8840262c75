/* ops_matmul.c - MUL_MAT via aclnnMm / aclnnBatchMatMul (float weights) and aclnnWeightQuantBatchMatmulV2 (Q4_0, Q4_1, Q8_0 device layouts). */
#include "cann/cann_common.h"

bool cann_supports_mul_mat(const clm_tensor *op) { return false; }

clm_status cann_op_mul_mat(cann_backend_ctx *ctx, clm_tensor *dst) {
    return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN yet", clm_op_desc(dst));
}
