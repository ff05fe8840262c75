/* ops_set_rows.c - SET_ROWS: scatter rows into a cache (aclnnInplaceIndexCopy) with type conversion. */
#include "cann/cann_common.h"

bool cann_supports_set_rows(const clm_tensor *op) { return false; }

clm_status cann_op_set_rows(cann_backend_ctx *ctx, clm_tensor *dst) {
    return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN yet", clm_op_desc(dst));
}
