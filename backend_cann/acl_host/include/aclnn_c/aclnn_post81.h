/* aclnn_post81.h - aclnn ops that came after CANN 8.1.RC1, declared weak.
 *
 * The backend targets 8.1.RC1 (DESIGN.md §2), whose libraries lack these symbols. Each prototype
 * is the one the operator document gives; the weak declaration lets a backend linked against a
 * toolkit without them load, and the address of a missing function is then NULL: the backend tests
 * the address and keeps its composition of 8.1.RC1 ops. acl_host implements every function here
 * (its definitions include this file with CLM_ACLNN_POST81_DEFINE set, so they are strong).
 * scripts/check_headers.sh allows these to be missing from a toolkit and compiles them against the
 * real prototypes when the toolkit has them. Not included by aclnn_api.h: include it directly.
 */
#ifndef CANN_LLM_ACLNN_POST81_H
#define CANN_LLM_ACLNN_POST81_H

#include "aclnn_api.h"

#if defined(CLM_ACLNN_POST81_DEFINE)
#define CLM_ACLNN_POST81
#else
#define CLM_ACLNN_POST81 __attribute__((weak))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* aclnn_rotary_position_embedding.h: y = x * cos + rotate(x) * sin over the last dim D; mode 0 =
 * half (rotate = cat(-x[D/2:], x[:D/2])), 1 = interleave (pairs (x0, x1) -> (-x1, x0)); 2 and 3
 * exist on other SoCs only. x, cos, sin, out 4-D of one dtype (FLOAT / FLOAT16 / BF16), out of x's
 * shape, cos and sin of one shape broadcast over x's leading dims (docs/acl_host.md). */
CLM_ACLNN_POST81 aclnnStatus aclnnRotaryPositionEmbeddingGetWorkspaceSize(
    const aclTensor *x, const aclTensor *cos, const aclTensor *sin, int64_t mode, aclTensor *out,
    uint64_t *workspaceSize, aclOpExecutor **executor);
CLM_ACLNN_POST81 aclnnStatus aclnnRotaryPositionEmbedding(void *workspace, uint64_t workspaceSize,
                                                          aclOpExecutor *executor, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif /* CANN_LLM_ACLNN_POST81_H */
