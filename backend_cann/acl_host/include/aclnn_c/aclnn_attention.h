/* aclnn_attention.h - aclnn declarations for FusedInferAttentionScoreV2.
 * Included by aclnn_api.h; same rules: exact CANN 8.1.RC1 prototypes, checked by
 * scripts/check_headers.sh, implemented by acl_host. */
#ifndef CANN_LLM_ACLNN_ATTENTION_H
#define CANN_LLM_ACLNN_ATTENTION_H

#ifdef __cplusplus
extern "C" {
#endif

/* Fused attention for inference (prompt and incremental). Layouts "BSH", "BSND", "BNSD",
 * "BNSD_BSND"; key / value are lists of one tensor; numKeyValueHeads 0 = numHeads (GQA when it
 * divides numHeads); pseShiftOptional is an additive bias in query's dtype; attenMaskOptional is
 * BOOL / INT8 / UINT8 with 1 = excluded. attentionOut has query's shape and dtype. */
aclnnStatus aclnnFusedInferAttentionScoreV2GetWorkspaceSize(
    const aclTensor *query, const aclTensorList *key, const aclTensorList *value,
    const aclTensor *pseShiftOptional, const aclTensor *attenMaskOptional,
    const aclIntArray *actualSeqLengthsOptional, const aclIntArray *actualSeqLengthsKvOptional,
    const aclTensor *deqScale1Optional, const aclTensor *quantScale1Optional,
    const aclTensor *deqScale2Optional, const aclTensor *quantScale2Optional,
    const aclTensor *quantOffset2Optional, const aclTensor *antiquantScaleOptional,
    const aclTensor *antiquantOffsetOptional, const aclTensor *blockTableOptional,
    const aclTensor *queryPaddingSizeOptional, const aclTensor *kvPaddingSizeOptional,
    const aclTensor *keyAntiquantScaleOptional, const aclTensor *keyAntiquantOffsetOptional,
    const aclTensor *valueAntiquantScaleOptional, const aclTensor *valueAntiquantOffsetOptional,
    const aclTensor *keySharedPrefixOptional, const aclTensor *valueSharedPrefixOptional,
    const aclIntArray *actualSharedPrefixLenOptional, int64_t numHeads, double scaleValue,
    int64_t preTokens, int64_t nextTokens, char *inputLayout, int64_t numKeyValueHeads,
    int64_t sparseMode, int64_t innerPrecise, int64_t blockSize, int64_t antiquantMode,
    bool softmaxLseFlag, int64_t keyAntiquantMode, int64_t valueAntiquantMode,
    const aclTensor *attentionOut, const aclTensor *softmaxLse, uint64_t *workspaceSize,
    aclOpExecutor **executor);
aclnnStatus aclnnFusedInferAttentionScoreV2(void *workspace, uint64_t workspaceSize,
                                            aclOpExecutor *executor, const aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* CANN_LLM_ACLNN_ATTENTION_H */
