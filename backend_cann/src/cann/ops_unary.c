/* ops_unary.c - SCALE, UNARY (SILU), GLU (SWIGLU fused and split) and ARGMAX. */
#include "cann/cann_common.h"

bool cann_supports_scale(const clm_tensor *op) { return false; }

clm_status cann_op_scale(cann_backend_ctx *ctx, clm_tensor *dst) {
    return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN yet", clm_op_desc(dst));
}

bool cann_supports_unary(const clm_tensor *op) { return false; }

clm_status cann_op_unary(cann_backend_ctx *ctx, clm_tensor *dst) {
    return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN yet", clm_op_desc(dst));
}

bool cann_supports_glu(const clm_tensor *op) { return false; }

clm_status cann_op_glu(cann_backend_ctx *ctx, clm_tensor *dst) {
    return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN yet", clm_op_desc(dst));
}

bool cann_supports_argmax(const clm_tensor *op) { return false; }

clm_status cann_op_argmax(cann_backend_ctx *ctx, clm_tensor *dst) {
    return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN yet", clm_op_desc(dst));
}
