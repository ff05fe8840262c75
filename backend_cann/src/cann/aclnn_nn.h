/* aclnn_nn.h - aclnn declarations for normalisation, softmax, rotary embedding, activations, index copy, argmax and the small math ops they are composed with.
 * Included by aclnn_api.h; same rules: exact CANN 8.1.RC1 prototypes, checked by
 * scripts/check_headers.sh, implemented by acl_host. */
#ifndef CANN_LLM_ACLNN_NN_H
#define CANN_LLM_ACLNN_NN_H

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif

#endif /* CANN_LLM_ACLNN_NN_H */
