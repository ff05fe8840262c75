/* ops_attention.c - FLASH_ATTN_EXT via aclnnFusedInferAttentionScoreV2 (BSND views, GQA, F16 mask as pse). */
#include "cann/cann_common.h"

bool cann_supports_flash_attn_ext(const clm_tensor *op) { return false; }

clm_status cann_op_flash_attn_ext(cann_backend_ctx *ctx, clm_tensor *dst) {
    return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN yet", clm_op_desc(dst));
}
