/* ops_rope.c - ROPE (normal, neox, partial, YaRN, freq_factors) with a sin/cos cache built once per graph. */
#include "cann/cann_common.h"

bool cann_supports_rope(const clm_tensor *op) { return false; }

clm_status cann_op_rope(cann_backend_ctx *ctx, clm_tensor *dst) {
    return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN yet", clm_op_desc(dst));
}
