/* ops_attention.c - FLASH_ATTN_EXT via aclnnFusedInferAttentionScoreV2 in BSND layout: Q cast
 * (or copied) to F16 into a contiguous BSND temporary unless it already is one, K and V as strided
 * BSND views of the cache (ggml ne1 and ne2 swapped, no copy; ggml's CANN backend passes such views
 * on hardware), native GQA through numKeyValueHeads, F16 output in BSND order - which is ggml's
 * permuted result [Dv, n_head, n_q, n_seq] - cast to the F32 destination.
 *
 * The ggml mask (F16, 0 / -inf, plus finite ALiBi distances) never reaches the pse as -inf: a -inf
 * in pseShift gives NaN rows on the NPU (llama.cpp-omni PR #89), and FIA does not take strided
 * pse / mask operands. So:
 *   bias:              pse = [slope[h] *] clamp(mask, +-65504), contiguous (B|1, n_head, n_q, n_kv):
 *                      ggml adds the mask to the scores, and a mask may hold any finite bias, not
 *                      only 0 / -inf (upstream test-backend-ops fills it with values in [-1, 1]).
 *                      Skipped in prefill without ALiBi when the node promises a 0 / -inf mask
 *                      (op_params[CLM_FA_MASK_BINARY], set by the runner): 3-9% of pp512 here.
 *   prefill (n_q > 1): attenMask = IsNegInf(mask), a contiguous BOOL (B|1, n_q, n_kv), sparseMode 0.
 *   decode (n_q == 1): pse only. A broadcast (B,1,1,S) attenMask is ignored past key 512 on
 *                      hardware (vllm-ascend #15503) while a full-head pse is exact there;
 *                      -65504 + score underflows exp() to 0 like -inf.
 * ALiBi slopes are ggml's, in the constant cache (cann_consts.c), created by prepare.
 *
 * Declined (CPU fallback): logit softcap != 0 (FusedInferAttentionScore has none), K/V not F16 (quantized caches), K and V head dims that differ or are not a multiple of
 * 16 in [16, 512], attention sinks, masks that are not F16.
 */

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
        if (mask->ne[2] != 1) return false; /* attenMask has no head dim */
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

/* Is q's BSND view (ggml [D, n_head, n_q, n_seq] order in memory) contiguous? */
static bool bsnd_contiguous(const clm_tensor *q) {
    const int64_t ne_s[4] = {q->ne[0], q->ne[2], q->ne[1], q->ne[3]};
    const size_t nb_s[4] = {q->nb[0], q->nb[2], q->nb[1], q->nb[3]};
    size_t step = clm_type_size(q->type);
    for (int i = 0; i < 4; i++) {
        if (ne_s[i] != 1 && nb_s[i] != step) return false;
        step *= (size_t)ne_s[i];
    }
    return true;
}

static aclTensor *bool_tensor(void *data, int64_t d0, int64_t d1, int64_t d2) {
    int64_t dims[3] = {d0, d1, d2}, strides[3] = {d1 * d2, d2, 1}, extent = d0 * d1 * d2;
    return aclCreateTensor(dims, 3, ACL_BOOL, strides, 0, ACL_FORMAT_ND, &extent, 1, data);
}

/* ALiBi: the slopes, before the graph runs. */
clm_status cann_prepare_flash_attn_ext(cann_backend_ctx *ctx, const clm_tensor *node, cann_prepare_plan *plan) {
    (void)plan;
    return cann_consts_prepare_alibi(ctx, node, node->src[3]);
}

clm_status cann_op_flash_attn_ext(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const int64_t D = q->ne[0], n_q = q->ne[1], n_head = q->ne[2], n_seq = q->ne[3];
    const int64_t n_head_kv = k->ne[2];
    const double scale = clm_get_op_param_f32(dst, 0);
    clm_status st = CLM_OK;
    const float max_bias = clm_get_op_param_f32(dst, 1);
    cann_temp q_tmp = {0}, am_tmp = {0}, clamp_tmp = {0}, pse_tmp = {0}, out_tmp = {0};
    aclTensor *acl_q = NULL, *acl_pse = NULL, *acl_am = NULL, *acl_out = NULL;
    aclTensorList *acl_k = NULL, *acl_v = NULL;

    /* Q as a contiguous F16 BSND (n_seq, n_q, n_head, D): cast / copy unless it already is one */
    if (q->type == CLM_TYPE_F16 && bsnd_contiguous(q)) {
        acl_q = bsnd_view(q->data, CLM_TYPE_F16, q->ne, q->nb);
    } else {
        int64_t ne_b[4] = {D, n_head, n_q, n_seq}; /* ggml order of BSND */
        size_t nb_b[4];
        contiguous_nb(CLM_TYPE_F16, ne_b, nb_b);
        st = cann_temp_alloc(ctx, nb_b[3] * (size_t)n_seq, &q_tmp);
        if (st != CLM_OK) return st;
        aclTensor *src = bsnd_view(q->data, q->type, q->ne, q->nb);
        acl_q = cann_acl_tensor_nd(q_tmp.ptr, CLM_TYPE_F16, ne_b, nb_b, 4, 0);
        if (src == NULL || acl_q == NULL)
            st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe q as an aclTensor", clm_op_desc(dst));
        else if (q->type == CLM_TYPE_F16)
            st = CANN_ACLNN(ctx, InplaceCopy, acl_q, src);
        else
            st = CANN_ACLNN(ctx, Cast, src, ACL_FLOAT16, acl_q);
        cann_destroy_tensors(1, src);
        if (st != CLM_OK) goto done;
    }

    /* K and V: strided BSND views into the cache, one tensor per list */
    aclTensor *k_view = bsnd_view(k->data, k->type, k->ne, k->nb);
    aclTensor *v_view = bsnd_view(v->data, v->type, v->ne, v->nb);
    if (k_view != NULL) acl_k = aclCreateTensorList((const aclTensor *const *)&k_view, 1);
    if (v_view != NULL) acl_v = aclCreateTensorList((const aclTensor *const *)&v_view, 1);
    if (acl_k == NULL) aclDestroyTensor(k_view);
    if (acl_v == NULL) aclDestroyTensor(v_view);

    if (mask != NULL) {
        const int64_t n_kv = k->ne[1], mb = mask->ne[3]; /* mb: 1 or n_seq */
        /* the first n_q rows of the mask: ggml [n_kv, n_q, 1, mb] */
        int64_t ne_m[4] = {n_kv, n_q, 1, mb};
        size_t nb_m[4] = {mask->nb[0], mask->nb[1], mask->nb[2], mask->nb[3]};
        if (n_q > 1) { /* prefill: attenMask = (mask == -inf), BOOL (mb, n_q, n_kv) */
            if ((st = cann_temp_alloc(ctx, (size_t)(mb * n_q * n_kv), &am_tmp)) != CLM_OK) goto done;
            int64_t ne_3[3] = {n_kv, n_q, mb};
            size_t nb_3[3] = {mask->nb[0], mask->nb[1], mask->nb[3]};
            aclTensor *m = cann_acl_tensor_nd(mask->data, mask->type, ne_3, nb_3, 3, 0);
            acl_am = bool_tensor(am_tmp.ptr, mb, n_q, n_kv);
            st = (m == NULL || acl_am == NULL)
                     ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the mask", clm_op_desc(dst))
                     : CANN_ACLNN(ctx, IsNegInf, m, acl_am);
            cann_destroy_tensors(1, m);
            if (st != CLM_OK) goto done;
        }
        bool bias = n_q == 1 || max_bias > 0.0f || dst->op_params[CLM_FA_MASK_BINARY] == 0;
        if (bias) { /* finite pse, contiguous (mb, n_head, n_q, n_kv) */
            int64_t ne_p[4] = {n_kv, n_q, n_head, mb};
            size_t nb_p[4];
            contiguous_nb(CLM_TYPE_F16, ne_p, nb_p);
            if ((st = cann_temp_alloc(ctx, nb_p[3] * (size_t)mb, &pse_tmp)) != CLM_OK) goto done;
            acl_pse = cann_acl_tensor_nd(pse_tmp.ptr, CLM_TYPE_F16, ne_p, nb_p, 4, 0);
            /* without ALiBi one Clamp writes every head (a stride-0 head dim on the elementwise
             * input, which aclnn's non-contiguous support takes); with ALiBi clamp, then scale */
            bool alibi = max_bias > 0.0f;
            size_t nb_c[4];
            contiguous_nb(CLM_TYPE_F16, ne_m, nb_c);
            if (alibi && (st = cann_temp_alloc(ctx, nb_c[3] * (size_t)mb, &clamp_tmp)) != CLM_OK) goto done;
            const float lim = 65504.0f, neg_lim = -65504.0f;
            aclScalar *lo = aclCreateScalar((void *)&neg_lim, ACL_FLOAT), *hi = aclCreateScalar((void *)&lim, ACL_FLOAT);
            size_t nb_b[4] = {mask->nb[0], mask->nb[1], 0, mask->nb[3]};
            aclTensor *m = alibi ? cann_acl_tensor_nd(mask->data, mask->type, ne_m, nb_m, 4, 0)
                                 : cann_acl_tensor_nd(mask->data, mask->type, ne_p, nb_b, 4, 0);
            aclTensor *c = alibi ? cann_acl_tensor_nd(clamp_tmp.ptr, CLM_TYPE_F16, ne_m, nb_c, 4, 0) : acl_pse;
            st = (lo == NULL || hi == NULL || m == NULL || c == NULL || acl_pse == NULL)
                     ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the bias", clm_op_desc(dst))
                     : CANN_ACLNN(ctx, Clamp, m, lo, hi, c);
            if (lo != NULL) aclDestroyScalar(lo);
            if (hi != NULL) aclDestroyScalar(hi);
            if (st == CLM_OK && alibi) { /* pse = slope[h] * clamped mask */
                void *slopes = NULL;
                st = cann_consts_alibi_slopes(ctx, max_bias, n_head, &slopes);
                int64_t ne_s[4] = {1, 1, n_head, 1};
                size_t nb_s[4] = {sizeof(float), sizeof(float), sizeof(float), sizeof(float) * (size_t)n_head};
                aclTensor *acl_slopes =
                    st == CLM_OK ? cann_acl_tensor_nd(slopes, CLM_TYPE_F32, ne_s, nb_s, 4, 0) : NULL;
                if (st == CLM_OK)
                    st = acl_slopes == NULL ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the ALiBi slopes",
                                                        clm_op_desc(dst))
                                            : CANN_ACLNN(ctx, Mul, c, acl_slopes, acl_pse);
                cann_destroy_tensors(1, acl_slopes);
            }
            cann_destroy_tensors(1, m);
            if (alibi) cann_destroy_tensors(1, c);
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

    if (acl_q == NULL || acl_k == NULL || acl_v == NULL || acl_out == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst));
        goto done;
    }
    char layout[] = "BSND";
    /* innerPrecise as upstream: 0 (high precision) for one query row, 2 (row-invalid correction)
     * otherwise; sparseMode 0: the attenMask is the full (n_q, n_kv) matrix */
    int64_t inner_precise = n_q == 1 ? 0 : 2;
    st = CANN_ACLNN(ctx, FusedInferAttentionScoreV2, acl_q, acl_k, acl_v, acl_pse, acl_am, NULL, NULL, NULL, NULL,
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
    cann_destroy_tensors(4, acl_q, acl_pse, acl_am, acl_out);
    if (acl_k != NULL) aclDestroyTensorList(acl_k);
    if (acl_v != NULL) aclDestroyTensorList(acl_v);
    cann_temp_free(&out_tmp); /* LIFO: the reverse of the allocation order */
    cann_temp_free(&clamp_tmp);
    cann_temp_free(&pse_tmp);
    cann_temp_free(&am_tmp);
    cann_temp_free(&q_tmp);
    return st;
}
