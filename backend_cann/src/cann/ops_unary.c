/* ops_unary.c - SCALE (aclnnMuls, then aclnnAdds when the bias is not 0), UNARY SILU (aclnnSilu),
 * GELU / GELU_ERF (aclnnGeluV2, approximate "tanh" / "none") and TANH (aclnnTanh), GLU SWIGLU
 * (fused: aclnnSwiGlu on a contiguous unswapped input) and SWIGLU / GEGLU / GEGLU_ERF (the
 * activation of the gate into dst, then aclnnMul by the linear part; the halves of a fused input
 * viewed through strides) and ARGMAX (aclnnArgMax into an INT64 temporary, then aclnnCast to I32).
 *
 * aclnnGeGlu / aclnnGeGluV3 are not used for GEGLU: in CANN 8.1.RC1 the header (aclnn_geglu.h) says
 * approximate 0 = tanh, 1 = none, while the operator documents and the ops-nn golden say 0 = none,
 * 1 = tanh, and the documents of successive versions disagree on which half activateLeft activates.
 * GeluV2 + Mul is one more pass over dst, with no such doubt. */
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

/* ---- UNARY SILU / GELU / GELU_ERF / TANH ------------------------------------------------------------ */
/* GeluV2's approximate: 0 = "none" (erf), 1 = "tanh" (aclnn_gelu_v2.h, Doc(GeluV2)) */
#define GELU_V2_NONE 0
#define GELU_V2_TANH 1

static bool unary_known(int32_t op) {
    return op == CLM_UNARY_OP_SILU || op == CLM_UNARY_OP_GELU || op == CLM_UNARY_OP_GELU_ERF ||
           op == CLM_UNARY_OP_TANH;
}

bool cann_supports_unary(const clm_tensor *op) {
    const clm_tensor *src = op->src[0];
    return unary_known(op->op_params[0]) && is_float_type(src->type) && op->type == src->type &&
           clm_are_same_shape(src, op);
}

/* dst = act(src) for a UNARY sub-op or the activation of a GLU sub-op */
static clm_status activation(cann_backend_ctx *ctx, int32_t unary_op, aclTensor *src, aclTensor *dst) {
    switch (unary_op) {
    case CLM_UNARY_OP_SILU: return CANN_ACLNN(ctx, Silu, src, dst);
    case CLM_UNARY_OP_GELU: return CANN_ACLNN(ctx, GeluV2, src, (int64_t)GELU_V2_TANH, dst);
    case CLM_UNARY_OP_GELU_ERF: return CANN_ACLNN(ctx, GeluV2, src, (int64_t)GELU_V2_NONE, dst);
    case CLM_UNARY_OP_TANH: return CANN_ACLNN(ctx, Tanh, src, dst);
    default: return clm_error(CLM_ERR_UNSUPPORTED, "unary op %d is not implemented on CANN", (int)unary_op);
    }
}

clm_status cann_op_unary(cann_backend_ctx *ctx, clm_tensor *dst) {
    if (!unary_known(dst->op_params[0])) {
        return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN", clm_op_desc(dst));
    }
    aclTensor *acl_src = cann_acl_tensor(dst->src[0]), *acl_dst = cann_acl_tensor(dst);
    clm_status st = (acl_src == NULL || acl_dst == NULL)
                        ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors",
                                    clm_op_desc(dst))
                        : activation(ctx, dst->op_params[0], acl_src, acl_dst);
    cann_destroy_tensors(2, acl_src, acl_dst);
    return st;
}

/* ---- GLU SWIGLU / GEGLU / GEGLU_ERF ------------------------------------------------------------------ */
/* the activation of a GLU sub-op, as a UNARY sub-op; -1 if unknown */
static int32_t glu_activation(int32_t glu_op) {
    switch (glu_op) {
    case CLM_GLU_OP_SWIGLU: return CLM_UNARY_OP_SILU;
    case CLM_GLU_OP_GEGLU: return CLM_UNARY_OP_GELU;
    case CLM_GLU_OP_GEGLU_ERF: return CLM_UNARY_OP_GELU_ERF;
    default: return -1;
    }
}

bool cann_supports_glu(const clm_tensor *op) {
    const clm_tensor *a = op->src[0], *b = op->src[1];
    if (glu_activation(op->op_params[0]) < 0 || !is_float_type(a->type) || op->type != a->type) return false;
    if (b != NULL) return b->type == a->type && clm_are_same_shape(a, b) && clm_are_same_shape(a, op);
    return a->ne[0] == 2 * op->ne[0] && a->ne[1] == op->ne[1] && a->ne[2] == op->ne[2] && a->ne[3] == op->ne[3];
}

clm_status cann_op_glu(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *src0 = dst->src[0], *src1 = dst->src[1];
    bool swapped = dst->op_params[1] != 0;
    int32_t act = glu_activation(dst->op_params[0]);
    if (act < 0) return clm_error(CLM_ERR_UNSUPPORTED, "%s is not implemented on CANN", clm_op_desc(dst));
    clm_status st;
    if (act == CLM_UNARY_OP_SILU && src1 == NULL && !swapped && clm_is_contiguous(src0) &&
        clm_is_contiguous(dst)) {
        /* fused: split each row of src0 in halves along ne0 (ACL's last dim) */
        aclTensor *acl_x = cann_acl_tensor(src0), *acl_dst = cann_acl_tensor(dst);
        st = (acl_x == NULL || acl_dst == NULL)
                 ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst))
                 : CANN_ACLNN(ctx, SwiGlu, acl_x, (int64_t)-1, acl_dst);
        cann_destroy_tensors(2, acl_x, acl_dst);
        return st;
    }
    /* the gate a (through the activation) and the linear part b: two tensors, or the halves of
     * src0's rows */
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
        st = activation(ctx, act, acl_a, acl_dst);
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
