/* aclnn_nn.h - aclnn declarations for normalisation, softmax, activations (silu, swiglu, gelu, tanh),
 * index copy, argmax and the small math ops ROPE and the rest are composed with (the one-launch
 * aclnnRotaryPositionEmbedding is newer than 8.1.RC1: aclnn_post81.h).
 * Included by aclnn_api.h; same rules: exact CANN 8.1.RC1 prototypes, checked by
 * scripts/check_headers.sh, implemented by acl_host. */
#ifndef CANN_LLM_ACLNN_NN_H
#define CANN_LLM_ACLNN_NN_H

#ifdef __cplusplus
extern "C" {
#endif

/* aclnn_rms_norm.h: rstd = 1/sqrt(mean(x^2) + eps) over the trailing dims gamma covers;
 * yOut = x * rstd * gamma; rstdOut (F32, x's rank with the normalized dims 1) is required. */
aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, double epsilon,
                                         const aclTensor *yOut, const aclTensor *rstdOut,
                                         uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnRmsNorm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                         aclrtStream stream);

/* aclnn_add_rms_norm.h: xOut = x1 + x2, then RmsNorm of xOut: yOut = x * rstd * gamma; x1, x2,
 * gamma, yOut, xOut one dtype (FLOAT / FLOAT16 / BFLOAT16), rstdOut FLOAT as RmsNorm's. */
aclnnStatus aclnnAddRmsNormGetWorkspaceSize(const aclTensor *x1, const aclTensor *x2,
                                            const aclTensor *gamma, double epsilon,
                                            const aclTensor *yOut, const aclTensor *rstdOut,
                                            const aclTensor *xOut, uint64_t *workspaceSize,
                                            aclOpExecutor **executor);
aclnnStatus aclnnAddRmsNorm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                            aclrtStream stream);

/* aclnn_softmax.h: exp(x - max) / sum along dim. */
aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor *self, int64_t dim, aclTensor *out,
                                         uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnSoftmax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                         aclrtStream stream);

/* aclnn_silu.h: x / (1 + exp(-x)). */
aclnnStatus aclnnSiluGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
                                      aclOpExecutor **executor);
aclnnStatus aclnnSilu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                      aclrtStream stream);

/* aclnn_swi_glu.h: x split in halves A | B along dim; out = silu(A) * B (contiguous x and out). */
aclnnStatus aclnnSwiGluGetWorkspaceSize(const aclTensor *x, int64_t dim, const aclTensor *out,
                                        uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnSwiGlu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                        aclrtStream stream);

/* aclnn_gelu_v2.h: y = x * Phi(x); approximate 0 = "none" (the erf form), 1 = "tanh". */
aclnnStatus aclnnGeluV2GetWorkspaceSize(const aclTensor *x, int64_t approximate, aclTensor *y,
                                        uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnGeluV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                        const aclrtStream stream);

/* aclnn_tanh.h: elementwise tanh; integer and bool self computed as float, float out. */
aclnnStatus aclnnTanhGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
                                      aclOpExecutor **executor);
aclnnStatus aclnnTanh(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                      const aclrtStream stream);

/* aclnn_sin.h / aclnn_cos.h: elementwise sin / cos, float out. */
aclnnStatus aclnnSinGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
                                     aclOpExecutor **executor);
aclnnStatus aclnnSin(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);
aclnnStatus aclnnCosGetWorkspaceSize(const aclTensor *input, aclTensor *out, uint64_t *workspaceSize,
                                     aclOpExecutor **executor);
aclnnStatus aclnnCos(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                     const aclrtStream stream);

/* aclnn_clamp.h: out = min(max(self, clipValueMin), clipValueMax) (self's shape and dtype). */
aclnnStatus aclnnClampGetWorkspaceSize(const aclTensor *self, const aclScalar *clipValueMin,
                                       const aclScalar *clipValueMax, aclTensor *out, uint64_t *workspaceSize,
                                       aclOpExecutor **executor);
aclnnStatus aclnnClamp(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                       const aclrtStream stream);

/* aclnn_isneginf.h: out (BOOL) = self == -inf. */
aclnnStatus aclnnIsNegInfGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
                                          aclOpExecutor **executor);
aclnnStatus aclnnIsNegInf(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                          const aclrtStream stream);

/* aclnn_div.h: out = self / other (broadcast, true division). */
aclnnStatus aclnnDivGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
                                     uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnDiv(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);

/* aclnn_argmax.h: index of the first maximum along dim (INT64 or INT32 out). */
aclnnStatus aclnnArgMaxGetWorkspaceSize(const aclTensor *self, int64_t dim, bool keepdim, aclTensor *out,
                                        uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnArgMax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);

/* aclnn_index_copy.h: selfRef[..., index[i], ...] = source[..., i, ...] along dim. */
aclnnStatus aclnnInplaceIndexCopyGetWorkspaceSize(aclTensor *selfRef, int64_t dim, const aclTensor *index,
                                                  const aclTensor *source, uint64_t *workspaceSize,
                                                  aclOpExecutor **executor);
aclnnStatus aclnnInplaceIndexCopy(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                  aclrtStream stream);

/* aclnn_reduce_sum.h: out = the sum of self over dims (kept as 1 when keepDims), of dtype `dtype`. */
aclnnStatus aclnnReduceSumGetWorkspaceSize(const aclTensor *self, const aclIntArray *dims, bool keepDims,
                                           aclDataType dtype, aclTensor *out, uint64_t *workspaceSize,
                                           aclOpExecutor **executor);
aclnnStatus aclnnReduceSum(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                           aclrtStream stream);

/* aclnn_argsort.h: out (INT64, self's shape) = the indices sorting self along dim (ties: no order
 * documented). */
aclnnStatus aclnnArgsortGetWorkspaceSize(const aclTensor *self, int64_t dim, bool descending, aclTensor *out,
                                         uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnArgsort(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                         aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* CANN_LLM_ACLNN_NN_H */
