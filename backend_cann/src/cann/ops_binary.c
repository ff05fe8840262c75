/* ops_binary.c - ADD, MUL and DIV with ggml broadcasting, via aclnnAdd / aclnnMul / aclnnDiv (true
 * division; the result in dst's type, a's). */
#include "cann/cann_common.h"

static bool is_float_type(int32_t type) {
    return type == CLM_TYPE_F32 || type == CLM_TYPE_F16 || type == CLM_TYPE_BF16;
}

bool cann_supports_binary(const clm_tensor *op) {
    const clm_tensor *a = op->src[0], *b = op->src[1];
    return is_float_type(a->type) && is_float_type(b->type) && is_float_type(op->type) && clm_can_repeat(b, a) &&
           clm_are_same_shape(a, op);
}

clm_status cann_op_binary(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *src0 = dst->src[0], *src1 = dst->src[1];
    int64_t ne0[CANN_MAX_ACL_DIMS], ne1[CANN_MAX_ACL_DIMS];
    size_t nb0[CANN_MAX_ACL_DIMS], nb1[CANN_MAX_ACL_DIMS], nbd[CANN_MAX_ACL_DIMS];
    int n_dims = cann_bcast_shape(src0, src1, dst, ne0, nb0, ne1, nb1, nbd);
    aclTensor *acl_src0 = cann_acl_tensor_nd(src0->data, src0->type, ne0, nb0, n_dims, 0);
    aclTensor *acl_src1 = cann_acl_tensor_nd(src1->data, src1->type, ne1, nb1, n_dims, 0);
    aclTensor *acl_dst = cann_acl_tensor_nd(dst->data, dst->type, ne0, nbd, n_dims, 0);
    clm_status st;
    if (acl_src0 == NULL || acl_src1 == NULL || acl_dst == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "cannot describe the operands as aclTensors");
    } else if (dst->op == CLM_OP_ADD) {
        float one = 1.0f;
        aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT);
        st = CANN_ACLNN(ctx, Add, acl_src0, acl_src1, alpha, acl_dst);
        aclDestroyScalar(alpha);
    } else if (dst->op == CLM_OP_DIV) {
        st = CANN_ACLNN(ctx, Div, acl_src0, acl_src1, acl_dst);
    } else {
        st = CANN_ACLNN(ctx, Mul, acl_src0, acl_src1, acl_dst);
    }
    cann_destroy_tensors(3, acl_src0, acl_src1, acl_dst);
    return st;
}
