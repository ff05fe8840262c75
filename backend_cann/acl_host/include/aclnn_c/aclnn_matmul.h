/* aclnn_matmul.h - aclnn declarations for matrix multiplies: Mm, BatchMatMul, Matmul, WeightQuantBatchMatmulV2; gathers for GET_ROWS.
 * Included by aclnn_api.h; same rules: exact CANN 8.1.RC1 prototypes, checked by
 * scripts/check_headers.sh, implemented by acl_host. */
#ifndef CANN_LLM_ACLNN_MATMUL_H
#define CANN_LLM_ACLNN_MATMUL_H

#ifdef __cplusplus
extern "C" {
#endif

/* aclnn_mm.h: out (m,n) = self (m,k) @ mat2 (k,n); strided (transposed) inputs; out is the
 * promoted dtype. cubeMathType: 0 KEEP_DTYPE, 1 ALLOW_FP32_DOWN_PRECISION, 2 USE_FP16, 3 USE_HF32. */
aclnnStatus aclnnMmGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                    int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);

/* aclnn_batch_matmul.h: (b,m,k) @ (b,k,n) -> (b,m,n); a batch of 1 broadcasts. */
aclnnStatus aclnnBatchMatMulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                             int8_t cubeMathType, uint64_t *workspaceSize,
                                             aclOpExecutor **executor);
aclnnStatus aclnnBatchMatMul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                             aclrtStream stream);

/* aclnn_matmul.h: torch.matmul semantics, ranks 1..6, batch dims broadcast. */
aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                        int8_t cubeMathType, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMatmul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);

/* aclnn_weight_quant_batch_matmul_v2.h: y (m,n) = x (m,k) @ ((weight (k,n) + antiquantOffset) *
 * antiquantScale) + bias. x F16/BF16; weight INT8 / INT4 (a transposed view of row-major (n,k)
 * allowed); scale per-tensor, per-channel (n) or per-group (ceil(k/G), n) with G =
 * antiquantGroupSize (0, or a multiple of 32). */
aclnnStatus aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(
    const aclTensor *x, const aclTensor *weight, const aclTensor *antiquantScale,
    const aclTensor *antiquantOffsetOptional, const aclTensor *quantScaleOptional,
    const aclTensor *quantOffsetOptional, const aclTensor *biasOptional, int antiquantGroupSize,
    const aclTensor *y, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnWeightQuantBatchMatmulV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                          aclrtStream stream);

/* aclnn_index_select.h: out = self with dim replaced by index (0-D / 1-D, INT32 / INT64). */
aclnnStatus aclnnIndexSelectGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index,
                                             aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnIndexSelect(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                             const aclrtStream stream);

/* aclnn_gather_v2.h: like IndexSelect, index of any rank (out rank = self + index - 1). */
aclnnStatus aclnnGatherV2GetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index,
                                          aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnGatherV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);

/* aclnn_remainder.h: out = self - other * floor(self / other) (Python modulo). */
aclnnStatus aclnnRemainderTensorScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other,
                                                       aclTensor *out, uint64_t *workspaceSize,
                                                       aclOpExecutor **executor);
aclnnStatus aclnnRemainderTensorScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                       aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* CANN_LLM_ACLNN_MATMUL_H */
