/* ops_unary.c - SCALE (aclnnMuls, then aclnnAdds when the bias is not 0), UNARY SILU (aclnnSilu),
 * GLU SWIGLU (fused: aclnnSwiGlu on a contiguous unswapped input; otherwise aclnnSilu on one half
 * and aclnnMul by the other, halves viewed through strides) and ARGMAX (aclnnArgMax into an INT64
 * temporary, then aclnnCast to I32). */
#include <string.h>

#include "cann/cann_common.h"

static bool is_float_type(int32_t type) {
    return type == CLM_TYPE_F32 || type == CLM_TYPE_F16 || type == CLM_TYPE_BF16;
}

/* ---- SCALE ------------------------------------------------------------------------------------ */
bool cann_supports_scale(const clm_tensor *op) {
    const clm_tensor *src = op->src[0];
    return is_float_type(src->type) && op->type == src->type && clm_are_same_shape(src, op);
}

clm_status cann_op_scale(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *src = dst->src[0];
    float s, b;
    memcpy(&s, &dst->op_params[0], sizeof(s));
    memcpy(&b, &dst->op_params[1], sizeof(b));
    aclTensor *acl_src = cann_acl_tensor(src), *acl_dst = cann_acl_tensor(dst);
    aclScalar *scale = aclCreateScalar(&s, ACL_FLOAT);
    clm_status st;
    if (acl_src == NULL || acl_dst == NULL || scale == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst));
    } else {
        st = CANN_ACLNN(ctx, Muls, acl_src, scale, acl_dst);
        if (st == CLM_OK && b != 0.0f) {
            float one = 1.0f;
            aclScalar *bias = aclCreateScalar(&b, ACL_FLOAT), *alpha = aclCreateScalar(&one, ACL_FLOAT);
            st = (bias == NULL || alpha == NULL)
                     ? clm_error(CLM_ERR_OUT_OF_MEMORY, "%s: cannot create the bias scalar", clm_op_desc(dst))
                     : CANN_ACLNN(ctx, Adds, acl_dst, bias, alpha, acl_dst);
            aclDestroyScalar(bias);
            aclDestroyScalar(alpha);
        }
    }
    aclDestroyScalar(scale);
    cann_destroy_tensors(2, acl_src, acl_dst);
    return st;
}

/* ---- UNARY SILU ------------------------------------------------------------------------------- */
bool cann_supports_unary(const clm_tensor *op) {
    const clm_tensor *src = op->src[0];
    return op->op_params[0] == CLM_UNARY_OP_SILU && is_float_type(src->type) && op->type == src->type &&
           clm_are_same_shape(src, op);
}

clm_status cann_op_unary(cann_backend_ctx *ctx, clm_tensor *dst) {
    if (dst->op_params[0] != CLM_UNARY_OP_SILU) {
        return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN", clm_op_desc(dst));
    }
    aclTensor *acl_src = cann_acl_tensor(dst->src[0]), *acl_dst = cann_acl_tensor(dst);
    clm_status st = (acl_src == NULL || acl_dst == NULL)
                        ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors",
                                    clm_op_desc(dst))
                        : CANN_ACLNN(ctx, Silu, acl_src, acl_dst);
    cann_destroy_tensors(2, acl_src, acl_dst);
    return st;
}

/* ---- GLU SWIGLU ------------------------------------------------------------------------------- */
bool cann_supports_glu(const clm_tensor *op) {
    const clm_tensor *a = op->src[0], *b = op->src[1];
    if (op->op_params[0] != CLM_GLU_OP_SWIGLU || !is_float_type(a->type) || op->type != a->type) return false;
    if (b != NULL) return b->type == a->type && clm_are_same_shape(a, b) && clm_are_same_shape(a, op);
    return a->ne[0] == 2 * op->ne[0] && a->ne[1] == op->ne[1] && a->ne[2] == op->ne[2] && a->ne[3] == op->ne[3];
}

clm_status cann_op_glu(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *src0 = dst->src[0], *src1 = dst->src[1];
    bool swapped = dst->op_params[1] != 0;
    clm_status st;
    if (src1 == NULL && !swapped && clm_is_contiguous(src0) && clm_is_contiguous(dst)) {
        /* fused: split each row of src0 in halves along ne0 (ACL's last dim) */
        aclTensor *acl_x = cann_acl_tensor(src0), *acl_dst = cann_acl_tensor(dst);
        st = (acl_x == NULL || acl_dst == NULL)
                 ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst))
                 : CANN_ACLNN(ctx, SwiGlu, acl_x, (int64_t)-1, acl_dst);
        cann_destroy_tensors(2, acl_x, acl_dst);
        return st;
    }
    /* the gate a (through silu) and the linear part b: two tensors, or the halves of src0's rows */
    const clm_tensor *ta = src0, *tb = src1 != NULL ? src1 : src0;
    size_t off_a = 0, off_b = src1 != NULL ? 0 : (size_t)dst->ne[0] * src0->nb[0];
    if (swapped) {
        const clm_tensor *t = ta;
        ta = tb, tb = t;
        size_t o = off_a;
        off_a = off_b, off_b = o;
    }
    aclTensor *acl_a = cann_acl_tensor_nd(ta->data, ta->type, dst->ne, ta->nb, 4, off_a);
    aclTensor *acl_b = cann_acl_tensor_nd(tb->data, tb->type, dst->ne, tb->nb, 4, off_b);
    aclTensor *acl_dst = cann_acl_tensor(dst);
    if (acl_a == NULL || acl_b == NULL || acl_dst == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst));
    } else {
        st = CANN_ACLNN(ctx, Silu, acl_a, acl_dst);
        if (st == CLM_OK) st = CANN_ACLNN(ctx, Mul, acl_dst, acl_b, acl_dst);
    }
    cann_destroy_tensors(3, acl_a, acl_b, acl_dst);
    return st;
}

/* ---- ARGMAX ----------------------------------------------------------------------------------- */
bool cann_supports_argmax(const clm_tensor *op) {
    const clm_tensor *src = op->src[0];
    return is_float_type(src->type) && op->type == CLM_TYPE_I32 && src->ne[2] == 1 && src->ne[3] == 1 &&
           op->ne[0] == src->ne[1];
}

clm_status cann_op_argmax(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *src = dst->src[0];
    cann_temp idx;
    clm_status st = cann_temp_alloc(ctx, (size_t)src->ne[1] * sizeof(int64_t), &idx);
    if (st != CLM_OK) return st;
    size_t idx_nb = sizeof(int64_t);
    aclTensor *acl_src = cann_acl_tensor_nd(src->data, src->type, src->ne, src->nb, 2, 0);
    aclTensor *acl_idx = cann_acl_tensor_nd(idx.ptr, CLM_TYPE_I64, &src->ne[1], &idx_nb, 1, 0);
    aclTensor *acl_dst = cann_acl_tensor_nd(dst->data, dst->type, dst->ne, dst->nb, 1, 0);
    if (acl_src == NULL || acl_idx == NULL || acl_dst == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst));
    } else {
        st = CANN_ACLNN(ctx, ArgMax, acl_src, (int64_t)-1, false, acl_idx);
        if (st == CLM_OK) st = CANN_ACLNN(ctx, Cast, acl_idx, ACL_INT32, acl_dst);
    }
    cann_destroy_tensors(3, acl_src, acl_idx, acl_dst);
    cann_temp_free(&idx);
    return st;
}
