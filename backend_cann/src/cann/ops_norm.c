/* ops_norm.c - RMS_NORM via aclnnRmsNorm with a cached ones gamma. */
#include "cann/cann_common.h"

bool cann_supports_rms_norm(const clm_tensor *op) { return false; }

clm_status cann_op_rms_norm(cann_backend_ctx *ctx, clm_tensor *dst) {
    return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN yet", clm_op_desc(dst));
}
