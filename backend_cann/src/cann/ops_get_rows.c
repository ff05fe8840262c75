/* ops_get_rows.c - GET_ROWS: gather rows (aclnnIndexSelect / GatherV2), dequantizing only the gathered rows. */
#include "cann/cann_common.h"

bool cann_supports_get_rows(const clm_tensor *op) { return false; }

clm_status cann_op_get_rows(cann_backend_ctx *ctx, clm_tensor *dst) {
    return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN yet", clm_op_desc(dst));
}
