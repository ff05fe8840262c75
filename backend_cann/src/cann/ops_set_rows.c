/* ops_set_rows.c - SET_ROWS: dst[:, rows[i, i2 % ne11, i3 % ne12], i2, i3] = src[:, i, i2, i3]
 * (ggml's semantics; the node is a view of dst, src[2]). src is cast to dst's type into a pool
 * temporary when they differ, then written with aclnnInplaceIndexCopy along ggml's dim 1: one call
 * when the row ids do not vary over dims 2 / 3, else one per (i2, i3) slice. */
#include "cann/cann_common.h"

bool cann_supports_set_rows(const clm_tensor *op) {
    const clm_tensor *src = op->src[0], *rows = op->src[1];
    bool dst_ok = op->type == CLM_TYPE_F32 || op->type == CLM_TYPE_F16 || op->type == CLM_TYPE_BF16;
    bool src_ok = src->type == CLM_TYPE_F32 || src->type == op->type;
    bool rows_ok = (rows->type == CLM_TYPE_I32 || rows->type == CLM_TYPE_I64) && rows->ne[0] == src->ne[1] &&
                   rows->ne[3] == 1 && src->ne[2] % rows->ne[1] == 0 && src->ne[3] % rows->ne[2] == 0;
    return dst_ok && src_ok && rows_ok && src->ne[0] == op->ne[0] && src->ne[2] == op->ne[2] &&
           src->ne[3] == op->ne[3];
}

clm_status cann_op_set_rows(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *src = dst->src[0], *rows = dst->src[1];
    clm_status st = CLM_OK;
    cann_temp conv = {0};
    const void *src_data = src->data;
    size_t src_nb[4] = {src->nb[0], src->nb[1], src->nb[2], src->nb[3]};
    if (src->type != dst->type) {
        size_t es = clm_type_size(dst->type);
        src_nb[0] = es;
        for (int i = 1; i < 4; i++) src_nb[i] = src_nb[i - 1] * (size_t)src->ne[i - 1];
        if ((st = cann_temp_alloc(ctx, src_nb[3] * (size_t)src->ne[3], &conv)) != CLM_OK) return st;
        aclTensor *acl_src = cann_acl_tensor(src);
        aclTensor *acl_conv = cann_acl_tensor_nd(conv.ptr, dst->type, src->ne, src_nb, 4, 0);
        st = (acl_src == NULL || acl_conv == NULL)
                 ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe src as an aclTensor", clm_op_desc(dst))
                 : CANN_ACLNN(ctx, Cast, acl_src, cann_acl_type(dst->type), acl_conv);
        cann_destroy_tensors(2, acl_src, acl_conv);
        if (st != CLM_OK) goto done;
        src_data = conv.ptr;
    }
    if (rows->ne[1] == 1 && rows->ne[2] == 1) {
        /* ACL dims [ne3, ne2, ne1, ne0]: copy along dim 2 */
        aclTensor *acl_dst = cann_acl_tensor(dst);
        aclTensor *acl_src = cann_acl_tensor_nd((void *)src_data, dst->type, src->ne, src_nb, 4, 0);
        aclTensor *acl_idx = cann_acl_tensor_nd(rows->data, rows->type, rows->ne, rows->nb, 1, 0);
        st = (acl_dst == NULL || acl_src == NULL || acl_idx == NULL)
                 ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst))
                 : CANN_ACLNN(ctx, InplaceIndexCopy, acl_dst, (int64_t)2, acl_idx, acl_src);
        cann_destroy_tensors(3, acl_dst, acl_src, acl_idx);
        goto done;
    }
    for (int64_t i3 = 0; i3 < src->ne[3] && st == CLM_OK; i3++) {
        for (int64_t i2 = 0; i2 < src->ne[2] && st == CLM_OK; i2++) {
            size_t idx_off = (size_t)(i2 % rows->ne[1]) * rows->nb[1] + (size_t)(i3 % rows->ne[2]) * rows->nb[2];
            aclTensor *acl_dst = cann_acl_tensor_nd(dst->data, dst->type, dst->ne, dst->nb, 2,
                                                    (size_t)i2 * dst->nb[2] + (size_t)i3 * dst->nb[3]);
            aclTensor *acl_src = cann_acl_tensor_nd((void *)src_data, dst->type, src->ne, src_nb, 2,
                                                    (size_t)i2 * src_nb[2] + (size_t)i3 * src_nb[3]);
            aclTensor *acl_idx = cann_acl_tensor_nd(rows->data, rows->type, rows->ne, rows->nb, 1, idx_off);
            st = (acl_dst == NULL || acl_src == NULL || acl_idx == NULL)
                     ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors",
                                 clm_op_desc(dst))
                     : CANN_ACLNN(ctx, InplaceIndexCopy, acl_dst, (int64_t)0, acl_idx, acl_src);
            cann_destroy_tensors(3, acl_dst, acl_src, acl_idx);
        }
    }
done:
    cann_temp_free(&conv);
    return st;
}
