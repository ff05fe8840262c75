/* aclnn_attention.h - aclnn declarations for FusedInferAttentionScoreV2.
 * Included by aclnn_api.h; same rules: exact CANN 8.1.RC1 prototypes, checked by
 * scripts/check_headers.sh, implemented by acl_host. */
#ifndef CANN_LLM_ACLNN_ATTENTION_H
#define CANN_LLM_ACLNN_ATTENTION_H

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif /* CANN_LLM_ACLNN_ATTENTION_H */
