/* aclnn_moe.h - aclnn declarations for mixtures of experts: the routing sort (MoeInitRoutingV2) and
 * the grouped product (GroupedMatmulV4) of MUL_MAT_ID's routed composition.
 * Included by aclnn_api.h; same rules: exact CANN 8.1.RC1 prototypes, checked by
 * scripts/check_headers.sh, implemented by acl_host. */
#ifndef CANN_LLM_ACLNN_MOE_H
#define CANN_LLM_ACLNN_MOE_H

#ifdef __cplusplus
extern "C" {
#endif

/* aclnn_moe_init_routing_v2.h: the (token, slot) pairs of expertIdx (numRows, k) INT32 sorted by
 * expert (stably): expandedXOut row p = x's row of the p-th pair, expandedRowIdxOut[t*k + j] = the
 * sorted position of pair (t, j), expertTokensCountOrCumsumOut (expertNum) INT32 = tokens per
 * expert (flag 2) or their running sum (flag 1). dropPadMode 1 pads each expert to
 * expertCapacity rows. */
aclnnStatus aclnnMoeInitRoutingV2GetWorkspaceSize(
    const aclTensor *x, const aclTensor *expertIdx, int64_t activeNumOptional, int64_t expertCapacityOptional,
    int64_t expertNumOptional, int64_t dropPadModeOptional, int64_t expertTokensCountOrCumsumFlagOptional,
    bool expertTokensBeforeCapacityFlagOptional, const aclTensor *expandedXOut, const aclTensor *expandedRowIdxOut,
    const aclTensor *expertTokensCountOrCumsumOutOptional, const aclTensor *expertTokensBeforeCapacityOutOptional,
    uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMoeInitRoutingV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                  aclrtStream stream);

/* aclnn_grouped_matmul_v4.h: y_i = x_i @ weight_i (+ bias_i) per group; with groupType 0 and one
 * tensor per list, x (M, K) is split into row groups by groupListOptional (INT64: running sums
 * when groupListType is 0, sizes when 1) and weight (E, K, N) holds one matrix per group.
 * Antiquant (F16 / BF16 x, INT8 / INT4 weight): y = x @ ((weight + antiquantOffset) *
 * antiquantScale), scales per channel (E, N) or per group of K (E, G, N; INT4 only). */
aclnnStatus aclnnGroupedMatmulV4GetWorkspaceSize(
    const aclTensorList *x, const aclTensorList *weight, const aclTensorList *biasOptional,
    const aclTensorList *scaleOptional, const aclTensorList *offsetOptional,
    const aclTensorList *antiquantScaleOptional, const aclTensorList *antiquantOffsetOptional,
    const aclTensorList *perTokenScaleOptional, const aclTensor *groupListOptional,
    const aclTensorList *activationInputOptional, const aclTensorList *activationQuantScaleOptional,
    const aclTensorList *activationQuantOffsetOptional, int64_t splitItem, int64_t groupType,
    int64_t groupListType, int64_t actType, aclTensorList *out, aclTensorList *activationFeatureOutOptional,
    aclTensorList *dynQuantScaleOutOptional, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnGroupedMatmulV4(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                 aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* CANN_LLM_ACLNN_MOE_H */
