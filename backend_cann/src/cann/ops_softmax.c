/* ops_softmax.c - SOFT_MAX (ggml's soft_max_ext): y = softmax over ne0 of x * scale + slope * mask.
 *
 * x * scale goes into an F32 pool temporary (aclnnMuls); the mask (F16/F32, its first ne1 rows,
 * tiled over heads and sequences as ggml does: mask dim i indexed by i % mask->ne[i]) is added with
 * aclnnAdd, or, with ALiBi (max_bias > 0), first multiplied by the per-head slopes (a small F32
 * table in the constant cache, cann_consts.c, created by prepare) with aclnnMul; then aclnnSoftmax over ne0 into dst.
 * -inf in the mask gives 0 probabilities (a row of -inf gives NaN, as ggml). */
#include <string.h>

#include "cann/cann_common.h"

bool cann_supports_soft_max(const clm_tensor *op) {
    const clm_tensor *x = op->src[0], *mask = op->src[1];
    if (x->type != CLM_TYPE_F32 || op->type != CLM_TYPE_F32 || !clm_are_same_shape(x, op)) return false;
    if (op->src[2] != NULL) return false; /* attention sinks */
    if (mask != NULL) {
        if (mask->type != CLM_TYPE_F16 && mask->type != CLM_TYPE_F32) return false;
        if (mask->ne[0] != x->ne[0] || mask->ne[1] < x->ne[1]) return false;
        if (x->ne[2] % mask->ne[2] != 0 || x->ne[3] % mask->ne[3] != 0) return false;
    }
    return true;
}

/* ALiBi: the slopes, before the graph runs. */
clm_status cann_prepare_soft_max(cann_backend_ctx *ctx, const clm_tensor *node, cann_prepare_plan *plan) {
    (void)plan;
    return cann_consts_prepare_alibi(ctx, node, node->src[1]);
}

clm_status cann_op_soft_max(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *x = dst->src[0], *mask = dst->src[1];
    float scale, max_bias;
    memcpy(&scale, &dst->op_params[0], sizeof(scale));
    memcpy(&max_bias, &dst->op_params[1], sizeof(max_bias));
    clm_status st = CLM_OK;
    aclTensor *acl_dst = cann_acl_tensor(dst);
    if (acl_dst == NULL) return clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe dst", clm_op_desc(dst));
    if (mask == NULL && scale == 1.0f) {
        aclTensor *acl_x = cann_acl_tensor(x);
        st = acl_x == NULL ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe x", clm_op_desc(dst))
                           : CANN_ACLNN(ctx, Softmax, acl_x, (int64_t)-1, acl_dst);
        cann_destroy_tensors(2, acl_x, acl_dst);
        return st;
    }
    /* the logits in a contiguous F32 temporary with x's shape */
    size_t nb[4] = {sizeof(float)};
    for (int i = 1; i < 4; i++) nb[i] = nb[i - 1] * (size_t)x->ne[i - 1];
    size_t bytes = nb[3] * (size_t)x->ne[3];
    cann_temp logits, bias_mem = {0};
    if ((st = cann_temp_alloc(ctx, bytes, &logits)) != CLM_OK) {
        aclDestroyTensor(acl_dst);
        return st;
    }
    aclTensor *acl_x = cann_acl_tensor(x);
    aclTensor *acl_t = cann_acl_tensor_nd(logits.ptr, CLM_TYPE_F32, x->ne, nb, 4, 0);
    aclTensor *acl_tb = NULL, *acl_mask = NULL, *acl_bias = NULL, *acl_slopes = NULL;
    aclScalar *s = aclCreateScalar(&scale, ACL_FLOAT);
    float one = 1.0f;
    aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT);
    if (acl_x == NULL || acl_t == NULL || s == NULL || alpha == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst));
        goto done;
    }
    if ((st = CANN_ACLNN(ctx, Muls, acl_x, s, acl_t)) != CLM_OK) goto done;
    if (mask != NULL) {
        /* ggml's tiling of the mask over x, as split dims: dim i with x->ne[i] = k * mask->ne[i]
         * (k > 1, mask->ne[i] > 1) becomes (mask->ne[i], k) with the mask broadcast along k. */
        int64_t ne_t[8], ne_m[8], ne_s[8];
        size_t nb_t[8], nb_m[8], nb_s[8];
        int n = 0;
        for (int i = 0; i < 4; i++) {
            int64_t nm = i == 1 ? x->ne[1] : mask->ne[i], rep = x->ne[i] / nm;
            size_t sb = i == 2 ? sizeof(float) : 0; /* slopes run over heads (dim 2) */
            if (nm != 1 && rep != 1) {
                ne_t[n] = nm, nb_t[n] = nb[i], ne_m[n] = nm, nb_m[n] = mask->nb[i];
                ne_s[n] = i == 2 ? nm : 1, nb_s[n] = sb;
                n++;
                ne_t[n] = rep, nb_t[n] = nb[i] * (size_t)nm, ne_m[n] = 1, nb_m[n] = mask->nb[i] * (size_t)nm;
                ne_s[n] = i == 2 ? rep : 1, nb_s[n] = sb * (size_t)nm;
                n++;
            } else {
                ne_t[n] = x->ne[i], nb_t[n] = nb[i], ne_m[n] = nm, nb_m[n] = mask->nb[i];
                ne_s[n] = i == 2 ? x->ne[2] : 1, nb_s[n] = sb;
                n++;
            }
        }
        for (int i = 0; i < n; i++) {
            if (nb_s[i] == 0) nb_s[i] = sizeof(float); /* size-1 dims: any stride */
        }
        acl_tb = cann_acl_tensor_nd(logits.ptr, CLM_TYPE_F32, ne_t, nb_t, n, 0);
        acl_mask = cann_acl_tensor_nd(mask->data, mask->type, ne_m, nb_m, n, 0);
        if (acl_tb == NULL || acl_mask == NULL) {
            st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the mask as an aclTensor", clm_op_desc(dst));
            goto done;
        }
        if (max_bias > 0.0f) {
            void *slopes = NULL;
            if ((st = cann_consts_alibi_slopes(ctx, max_bias, x->ne[2], &slopes)) != CLM_OK) goto done;
            /* bias = mask * slopes in their broadcast shape (contiguous), added to the logits */
            int64_t ne_b[8];
            size_t nb_b[8], bias_bytes = sizeof(float);
            for (int i = 0; i < n; i++) {
                ne_b[i] = ne_m[i] > ne_s[i] ? ne_m[i] : ne_s[i];
                nb_b[i] = bias_bytes;
                bias_bytes *= (size_t)ne_b[i];
            }
            if ((st = cann_temp_alloc(ctx, bias_bytes, &bias_mem)) != CLM_OK) goto done;
            acl_slopes = cann_acl_tensor_nd(slopes, CLM_TYPE_F32, ne_s, nb_s, n, 0);
            acl_bias = cann_acl_tensor_nd(bias_mem.ptr, CLM_TYPE_F32, ne_b, nb_b, n, 0);
            if (acl_slopes == NULL || acl_bias == NULL) {
                st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the ALiBi bias", clm_op_desc(dst));
                goto done;
            }
            if ((st = CANN_ACLNN(ctx, Mul, acl_mask, acl_slopes, acl_bias)) != CLM_OK) goto done;
            if ((st = CANN_ACLNN(ctx, InplaceAdd, acl_tb, acl_bias, alpha)) != CLM_OK) goto done;
        } else {
            if ((st = CANN_ACLNN(ctx, InplaceAdd, acl_tb, acl_mask, alpha)) != CLM_OK) goto done;
        }
    }
    st = CANN_ACLNN(ctx, Softmax, acl_t, (int64_t)-1, acl_dst);
done:
    aclDestroyScalar(s);
    aclDestroyScalar(alpha);
    cann_destroy_tensors(7, acl_x, acl_t, acl_tb, acl_mask, acl_bias, acl_slopes, acl_dst);
    cann_temp_free(&bias_mem);
    cann_temp_free(&logits);
    return st;
}
