/* ops_attention.c - FLASH_ATTN_EXT via aclnnFusedInferAttentionScoreV2, composed as ggml's CANN
 * backend does: Q, K and V as BSND views (ggml ne1 and ne2 swapped, no copy), Q cast to F16 into
 * a pool temporary when it is not F16, native GQA through numKeyValueHeads, the F16 -inf/0 mask
 * as the additive pse with stride-0 head (and sequence) dims, F16 output in BSND order - which is
 * ggml's permuted result [Dv, n_head, n_q, n_seq] - cast to the F32 destination.
 *
 * ALiBi (max_bias > 0): the pse becomes slope[h] * mask in a per-head F16 temporary, with ggml's
 * slopes (cached on the device by the pre-pass in ops_rope.c's cann_nn_cache_prepare).
 *
 * Declined (CPU fallback): logit softcap != 0 (FusedInferAttentionScore has none), K/V not F16 (quantized caches), K and V head dims that differ or are not a multiple of
 * 16 in [16, 512], attention sinks, masks that are not F16.
 */
#include <string.h>

#include "cann/cann_common.h"

#define FA_MAX_HEADS 256
#define FA_MAX_GROUP 64
#define FA_MAX_HEAD_DIM 512
#define FA_MAX_BATCH 65536
#define FA_WINDOW 65535 /* preTokens / nextTokens, as upstream: no band sparsity */

static bool strides_fit(const clm_tensor *t) {
    size_t es = clm_type_size(t->type);
    if (es == 0 || t->nb[0] != es) return false; /* the head dim must be contiguous */
    for (int i = 1; i < CLM_MAX_DIMS; i++)
        if (t->nb[i] % es != 0) return false;
    return true;
}

bool cann_supports_flash_attn_ext(const clm_tensor *op) {
    const clm_tensor *q = op->src[0], *k = op->src[1], *v = op->src[2], *mask = op->src[3];
    if (q == NULL || k == NULL || v == NULL) return false;
    for (int i = 4; i < CLM_MAX_SRC; i++)
        if (op->src[i] != NULL) return false; /* sinks */
    float max_bias = clm_get_op_param_f32(op, 1), softcap = clm_get_op_param_f32(op, 2);
    if (max_bias < 0.0f || softcap != 0.0f) return false;
    if (q->type != CLM_TYPE_F32 && q->type != CLM_TYPE_F16 && q->type != CLM_TYPE_BF16) return false;
    if (k->type != CLM_TYPE_F16 || v->type != CLM_TYPE_F16) return false;
    if (op->type != CLM_TYPE_F32 && op->type != CLM_TYPE_F16) return false;
    const int64_t D = q->ne[0], n_q = q->ne[1], n_head = q->ne[2], n_seq = q->ne[3];
    const int64_t n_kv = k->ne[1], n_head_kv = k->ne[2];
    if (k->ne[0] != D || v->ne[0] != D || v->ne[1] != n_kv || v->ne[2] != n_head_kv) return false;
    if (k->ne[3] != n_seq || v->ne[3] != n_seq) return false;
    if (D % 16 != 0 || D > FA_MAX_HEAD_DIM || n_q < 1 || n_kv < 1) return false;
    if (n_head > FA_MAX_HEADS || n_head_kv < 1 || n_head % n_head_kv != 0 || n_head / n_head_kv > FA_MAX_GROUP)
        return false;
    if (n_seq > FA_MAX_BATCH) return false;
    if (!strides_fit(q) || !strides_fit(k) || !strides_fit(v)) return false;
    if (op->ne[0] != D || op->ne[1] != n_head || op->ne[2] != n_q || op->ne[3] != n_seq) return false;
    if (!clm_is_contiguous(op)) return false;
    if (mask != NULL) {
        if (mask->type != CLM_TYPE_F16 || !strides_fit(mask)) return false;
        if (mask->ne[0] != n_kv || mask->ne[1] < n_q) return false;
        if (mask->ne[2] != 1 && mask->ne[2] != n_head) return false;
        if (mask->ne[3] != 1 && mask->ne[3] != n_seq) return false;
    }
    return true;
}

/* A ggml [D, n_s, n_h, n_b] tensor (data, strides nb) as a BSND aclTensor (n_b, n_s, n_h, D). */
static aclTensor *bsnd_view(void *data, int32_t type, const int64_t *ne, const size_t *nb) {
    int64_t ne_s[4] = {ne[0], ne[2], ne[1], ne[3]};
    size_t nb_s[4] = {nb[0], nb[2], nb[1], nb[3]};
    return cann_acl_tensor_nd(data, type, ne_s, nb_s, 4, 0);
}

static void contiguous_nb(int32_t type, const int64_t *ne, size_t *nb) {
    nb[0] = clm_type_size(type);
    for (int i = 1; i < CLM_MAX_DIMS; i++) nb[i] = nb[i - 1] * (size_t)ne[i - 1];
}

clm_status cann_op_flash_attn_ext(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const int64_t D = q->ne[0], n_q = q->ne[1], n_head = q->ne[2], n_seq = q->ne[3];
    const int64_t n_kv = k->ne[1], n_head_kv = k->ne[2];
    const double scale = clm_get_op_param_f32(dst, 0);
    clm_status st = CLM_OK;
    const float max_bias = clm_get_op_param_f32(dst, 1);
    cann_temp q_tmp = {0}, pse_tmp = {0}, out_tmp = {0};
    aclTensor *acl_q = NULL, *acl_pse = NULL, *acl_out = NULL;
    aclTensorList *acl_k = NULL, *acl_v = NULL;

    /* Q as F16: cast into a contiguous [D, n_q, n_head, n_seq] temporary unless it already is */
    void *q_data = q->data;
    size_t q_nb[CLM_MAX_DIMS];
    memcpy(q_nb, q->nb, sizeof q_nb);
    if (q->type != CLM_TYPE_F16) {
        contiguous_nb(CLM_TYPE_F16, q->ne, q_nb);
        st = cann_temp_alloc(ctx, q_nb[3] * (size_t)n_seq, &q_tmp);
        if (st != CLM_OK) return st;
        aclTensor *src = cann_acl_tensor(q);
        aclTensor *tmp = cann_acl_tensor_nd(q_tmp.ptr, CLM_TYPE_F16, q->ne, q_nb, 4, 0);
        st = (src == NULL || tmp == NULL)
                 ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe q as an aclTensor", clm_op_desc(dst))
                 : CANN_ACLNN(ctx, Cast, src, ACL_FLOAT16, tmp);
        cann_destroy_tensors(2, src, tmp);
        if (st != CLM_OK) goto done;
        q_data = q_tmp.ptr;
    }
    acl_q = bsnd_view(q_data, CLM_TYPE_F16, q->ne, q_nb);

    /* K and V: strided BSND views into the cache, one tensor per list */
    aclTensor *k_view = bsnd_view(k->data, k->type, k->ne, k->nb);
    aclTensor *v_view = bsnd_view(v->data, v->type, v->ne, v->nb);
    if (k_view != NULL) acl_k = aclCreateTensorList((const aclTensor *const *)&k_view, 1);
    if (v_view != NULL) acl_v = aclCreateTensorList((const aclTensor *const *)&v_view, 1);
    if (acl_k == NULL) aclDestroyTensor(k_view);
    if (acl_v == NULL) aclDestroyTensor(v_view);

    /* mask -> pse (B|1, n_head, n_q, n_kv): the first n_q rows, stride 0 where it broadcasts */
    if (mask != NULL) {
        int64_t ne_p[4] = {n_kv, n_q, n_head, mask->ne[3]};
        size_t nb_p[4] = {mask->nb[0], mask->nb[1], mask->ne[2] == 1 ? 0 : mask->nb[2],
                          mask->ne[3] == 1 ? 0 : mask->nb[3]};
        acl_pse = cann_acl_tensor_nd(mask->data, mask->type, ne_p, nb_p, 4, 0);
        if (acl_pse != NULL && max_bias > 0.0f) {
            /* ALiBi: pse = slope[h] * mask, materialised per head as F16 */
            void *slopes = NULL;
            size_t nb_t[4];
            contiguous_nb(CLM_TYPE_F16, ne_p, nb_t);
            if ((st = cann_nn_alibi_slopes(ctx, max_bias, n_head, &slopes)) != CLM_OK) goto done;
            if ((st = cann_temp_alloc(ctx, nb_t[3] * (size_t)ne_p[3], &pse_tmp)) != CLM_OK) goto done;
            int64_t ne_s[4] = {1, 1, n_head, 1};
            size_t nb_s[4] = {sizeof(float), sizeof(float), sizeof(float), sizeof(float) * (size_t)n_head};
            aclTensor *acl_slopes = cann_acl_tensor_nd(slopes, CLM_TYPE_F32, ne_s, nb_s, 4, 0);
            aclTensor *acl_biased = cann_acl_tensor_nd(pse_tmp.ptr, CLM_TYPE_F16, ne_p, nb_t, 4, 0);
            st = (acl_slopes == NULL || acl_biased == NULL)
                     ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the ALiBi bias", clm_op_desc(dst))
                     : CANN_ACLNN(ctx, Mul, acl_pse, acl_slopes, acl_biased);
            cann_destroy_tensors(2, acl_pse, acl_slopes);
            acl_pse = acl_biased;
            if (st != CLM_OK) goto done;
        }
    }

    /* F16 output in BSND order = ggml's [D, n_head, n_q, n_seq] contiguous */
    void *out_data = dst->data;
    if (dst->type != CLM_TYPE_F16) {
        st = cann_temp_alloc(ctx, (size_t)clm_nelements(dst) * sizeof(uint16_t), &out_tmp);
        if (st != CLM_OK) goto done;
        out_data = out_tmp.ptr;
    }
    int64_t ne_o[4] = {D, n_head, n_q, n_seq};
    size_t nb_o[4];
    contiguous_nb(CLM_TYPE_F16, ne_o, nb_o);
    acl_out = cann_acl_tensor_nd(out_data, CLM_TYPE_F16, ne_o, nb_o, 4, 0);

    if (acl_q == NULL || acl_k == NULL || acl_v == NULL || acl_out == NULL || (mask != NULL && acl_pse == NULL)) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst));
        goto done;
    }
    char layout[] = "BSND";
    /* innerPrecise as upstream: 0 (high precision) for one query row, 2 (row-invalid correction)
     * otherwise */
    int64_t inner_precise = n_q == 1 ? 0 : 2;
    st = CANN_ACLNN(ctx, FusedInferAttentionScoreV2, acl_q, acl_k, acl_v, acl_pse, NULL, NULL, NULL, NULL, NULL,
                    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                    n_head, scale, FA_WINDOW, FA_WINDOW, layout, n_head_kv, 0, inner_precise, 0, 0, false, 0, 0,
                    acl_out, NULL);
    if (st == CLM_OK && dst->type != CLM_TYPE_F16) {
        aclTensor *src = cann_acl_tensor_nd(out_data, CLM_TYPE_F16, ne_o, nb_o, 4, 0);
        aclTensor *res = cann_acl_tensor(dst);
        st = (src == NULL || res == NULL)
                 ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the result as an aclTensor",
                             clm_op_desc(dst))
                 : CANN_ACLNN(ctx, Cast, src, cann_acl_type(dst->type), res);
        cann_destroy_tensors(2, src, res);
    }

done:
    cann_destroy_tensors(3, acl_q, acl_pse, acl_out);
    if (acl_k != NULL) aclDestroyTensorList(acl_k);
    if (acl_v != NULL) aclDestroyTensorList(acl_v);
    cann_temp_free(&out_tmp); /* LIFO */
    cann_temp_free(&pse_tmp);
    cann_temp_free(&q_tmp);
    return st;
}
