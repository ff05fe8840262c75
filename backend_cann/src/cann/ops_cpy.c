/* ops_cpy.c - CPY, DUP and CONT: element copies in ggml's row-major order with type conversion.
 * Quantizing copies of F32 / F16 into Q8_0 / Q4_0 (written in the device layout, as ggml's
 * reference quantizer writes the blocks) run the AscendC kernel clm_quantize; contiguous copies
 * (same type, or F32 <-> F16) of up to CANN_ASC_CONVERT_KERNEL_MAX values run clm_dup
 * (ops_ascendc.c). Larger ones go as before: aclrtMemcpyAsync (same type, both contiguous, both
 * addresses 64-byte aligned), aclnnCast (types differ, both contiguous) and aclnnInplaceCopy
 * (strided views, and views at unaligned offsets). */
#include "cann/cann_common.h"

static bool is_copy_type(int32_t type) {
    return type == CLM_TYPE_F32 || type == CLM_TYPE_F16 || type == CLM_TYPE_BF16;
}

/* The copy's source; for CPY the destination is the node itself (a view of src[1]). */
bool cann_supports_cpy(const clm_tensor *op) {
    const clm_tensor *src = op->src[0];
    if (op->op == CLM_OP_CPY && cann_asc_quantize_supported(src, op)) return true;
    if (!is_copy_type(src->type) || !is_copy_type(op->type)) return false;
    if (op->op != CLM_OP_CPY && src->type != op->type) return false;
    return clm_are_same_shape(src, op) || clm_is_contiguous(src) || clm_is_contiguous(op);
}

/* `t`'s data described with `shape`'s extents and contiguous strides (t must be contiguous). */
static aclTensor *contiguous_as(const clm_tensor *t, const clm_tensor *shape) {
    size_t nb[CLM_MAX_DIMS];
    nb[0] = clm_type_size(t->type);
    for (int i = 1; i < CLM_MAX_DIMS; i++) nb[i] = nb[i - 1] * (size_t)shape->ne[i - 1];
    return cann_acl_tensor_nd(t->data, t->type, shape->ne, nb, CLM_MAX_DIMS, 0);
}

clm_status cann_op_cpy(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *src = dst->src[0];
    if (clm_type_is_quantized(dst->type)) {
        if (dst->op != CLM_OP_CPY || !cann_asc_quantize_supported(src, dst))
            return clm_error(CLM_ERR_UNSUPPORTED, "%s into '%s' (%s) is not supported on CANN", clm_op_desc(dst),
                             dst->name, clm_type_name(dst->type));
        return cann_asc_quantize(ctx, src, dst);
    }
    if (cann_asc_dup_supported(src, dst) && clm_nelements(dst) <= CANN_ASC_CONVERT_KERNEL_MAX)
        return cann_asc_dup(ctx, src, dst);
    bool src_cont = clm_is_contiguous(src), dst_cont = clm_is_contiguous(dst);
    bool same_bytes = src_cont && dst_cont && src->type == dst->type;
    if (same_bytes && cann_d2d_async_aligned(dst->data, src->data)) {
        size_t size = clm_nbytes(dst);
        CANN_ACL(aclrtMemcpyAsync(dst->data, size, src->data, size, ACL_MEMCPY_DEVICE_TO_DEVICE, ctx->stream));
        return CLM_OK;
    }
    aclTensor *acl_src, *acl_dst;
    if (src_cont && dst_cont) {
        acl_src = cann_acl_tensor_flat(src);
        acl_dst = cann_acl_tensor_flat(dst);
    } else if (clm_are_same_shape(src, dst)) {
        acl_src = cann_acl_tensor(src);
        acl_dst = cann_acl_tensor(dst);
    } else if (dst_cont) {
        acl_src = cann_acl_tensor(src);
        acl_dst = contiguous_as(dst, src);
    } else {
        acl_src = contiguous_as(src, dst);
        acl_dst = cann_acl_tensor(dst);
    }
    clm_status st;
    if (acl_src == NULL || acl_dst == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "cannot describe the operands as aclTensors");
    } else if (src_cont && dst_cont && !same_bytes) {
        st = CANN_ACLNN(ctx, Cast, acl_src, cann_acl_type(dst->type), acl_dst);
    } else {
        st = CANN_ACLNN(ctx, InplaceCopy, acl_dst, acl_src);
    }
    cann_destroy_tensors(2, acl_src, acl_dst);
    return st;
}
