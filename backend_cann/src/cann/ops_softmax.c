/* ops_softmax.c - SOFT_MAX: scale, mask, ALiBi slopes and aclnnSoftmax. */
#include "cann/cann_common.h"

bool cann_supports_soft_max(const clm_tensor *op) { return false; }

clm_status cann_op_soft_max(cann_backend_ctx *ctx, clm_tensor *dst) {
    return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN yet", clm_op_desc(dst));
}
