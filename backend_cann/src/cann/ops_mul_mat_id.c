/* ops_mul_mat_id.c - MUL_MAT_ID, the experts' matmul of a mixture of experts:
 * dst [N, n_ids, n_tokens] F32 = as [K, N, n_as] (one weight matrix per expert) x b [K, n_b1,
 * n_tokens] for the experts ids [n_ids, n_tokens] (I32) select. b rows: n_b1 == 1 (one row for
 * every expert) or n_b1 == n_ids (a row per slot); other broadcasts are declined. The ids stay on
 * the device in both compositions (no host sync, so the graph captures):
 *
 * Routed (a grouped product): aclnnMoeInitRoutingV2 sorts the (token, slot) pairs by expert and
 * writes the expanded rows of b (F16 / BF16 / F32), the sorted position of every pair and the
 * running token counts per expert; the counts cast to INT64 are the group list of one
 * aclnnGroupedMatmulV4 over all experts, the weights viewed as (n_as, K, N) transposed (Q4_0 /
 * Q4_1: the INT4 quants, with the F16 scales and Q4_1's offsets copied from the device layout's
 * (n_as, N, K/32) order into the (n_as, K/32, N) the operator reads, per group of 32); every used
 * expert is read once whatever the token count. aclnnIndexSelect by the sorted positions puts the
 * rows back in (token, slot) order, cast to the F32 dst.
 *
 * Gather (ggml's CANN backend): a host loop over the node's n_tokens gathers each token's selected
 * expert slices with aclnnIndexSelect (its row of ids as a 1-D INT32 index) into a temporary, then
 *  - float weights (F32 / F16 / BF16): one aclnnBatchMatMul (n_ids, 1, K) x (n_ids, K, N), the
 *    gathered slices read as transposed views, b's row broadcast as a batch of 1 when n_b1 == 1;
 *  - Q8_0 / Q4_0 / Q4_1 (device layout: quants, then F16 scales, then Q4_1's offsets, each region
 *    in block order, so expert e's part of every region is one contiguous run of N*K/32 blocks):
 *    the quants (as int8 bytes), the scales and the offsets gathered by three IndexSelects, then
 *    one aclnnWeightQuantBatchMatmulV2 with M = 1 per selected expert (and per chunk of at most
 *    65535 columns), F16 activations, F16 results cast to dst at the end.
 *
 * The choice (use_routed; docs/performance.md, MoE, has the measurements): float experts
 * are routed; Q4_0 / Q4_1 experts are routed once n_ids * n_tokens >= n_as (Q4_1: 2 * n_as),
 * where the per-call copy of all experts' scales (and offsets) costs less than gathering; Q8_0
 * experts are gathered (GroupedMatmulV4's INT8 antiquant is per channel only in 8.1.RC1, Q8_0's
 * scales are per 32).
 * CANN_LLM_MUL_MAT_ID=gather / routed forces one (routed falls back to gather where it cannot run).
 * For quantized experts both give the same bits on acl_host (the same dequantized F32 weights and
 * the same chain of fused multiply-adds), so the choice never changes a token.
 */
#include <stdarg.h>
#include <stdint.h>

#include "cann/cann_common.h"
#include "cann/quant_layout.h"

#define GMM_MAX_GROUPS 1024 /* GroupedMatmulV4's group list (groupType 0) */

bool cann_supports_mul_mat_id(const clm_tensor *op) {
    const clm_tensor *w = op->src[0], *x = op->src[1], *ids = op->src[2];
    if (op->type != CLM_TYPE_F32 || !clm_is_contiguous(op)) return false;
    if (ids->type != CLM_TYPE_I32 || !cann_is_float_type(x->type)) return false;
    if (x->ne[1] != 1 && x->ne[1] != ids->ne[0]) return false;
    for (int i = 0; i < CLM_MAX_DIMS; i++)
        if (x->nb[i] % clm_type_size(x->type) != 0 || ids->nb[i] % sizeof(int32_t) != 0) return false;
    if (cann_is_float_type(w->type)) {
        for (int i = 0; i < CLM_MAX_DIMS; i++)
            if (w->nb[i] % clm_type_size(w->type) != 0) return false;
        return true;
    }
    /* the gather path's WQBMM reads an INT4 chunk of one column as contiguous (K, 1): refused */
    bool int4_ok = w->type == CLM_TYPE_Q8_0 || w->ne[1] % CANN_WQ_MAX_N != 1;
    return cann_is_wq_type(w->type) && w->view_src == NULL && clm_is_contiguous(w) && w->ne[0] % CANN_QL_BLOCK == 0 &&
           int4_ok;
}

/* ==== gather ========================================================================================== */
/* Token t's row of ids as a 1-D INT32 index (n_ids). */
static aclTensor *ids_row(const clm_tensor *ids, int64_t t) {
    int64_t d[1] = {ids->ne[0]}, s[1] = {(int64_t)(ids->nb[0] / sizeof(int32_t))};
    return cann_acl_view(ids->data, ACL_INT32, 1, d, s, t * (int64_t)(ids->nb[1] / sizeof(int32_t)));
}

/* IndexSelect of rows of a 2-D (n_as, row) region at src into the contiguous (n_idx, row) dst. */
static clm_status gather_rows(cann_backend_ctx *ctx, void *src, aclDataType dt, int64_t n_as, int64_t row,
                              const aclTensor *index, void *dst, int64_t n_idx) {
    int64_t sd[2] = {n_as, row}, ss[2] = {row, 1}, dd[2] = {n_idx, row};
    aclTensor *as = cann_acl_view(src, dt, 2, sd, ss, 0);
    aclTensor *ad = cann_acl_view(dst, dt, 2, dd, ss, 0);
    clm_status st = as && ad ? CANN_ACLNN(ctx, IndexSelect, as, 0, index, ad)
                             : clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: cannot describe the expert gather");
    cann_destroy_tensors(2, as, ad);
    return st;
}

static clm_status gather_float(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *w = dst->src[0], *x = dst->src[1], *ids = dst->src[2];
    int32_t ct = w->type == CLM_TYPE_F16 ? CLM_TYPE_F32 : w->type; /* as MUL_MAT: activation and out dtype */
    int64_t K = w->ne[0], N = w->ne[1], n_as = w->ne[2], n_ids = ids->ne[0], n_b1 = x->ne[1], T = x->ne[2];
    size_t wes = clm_type_size(w->type), xes = clm_type_size(x->type);
    cann_temp xt = {0}, yt = {0}, gt = {0};
    void *xdata = x->data;
    int64_t xs[3];
    clm_status st = CLM_OK;
    if (x->type != ct) {
        st = cann_matmul_activations(ctx, x, ct, &xt, &xdata);
        if (st != CLM_OK) return st;
        xs[0] = 1, xs[1] = K, xs[2] = K * n_b1;
    } else {
        for (int i = 0; i < 3; i++) xs[i] = (int64_t)(x->nb[i] / xes);
    }
    void *ydata = dst->data;
    if (ct != CLM_TYPE_F32) {
        st = cann_temp_alloc(ctx, (size_t)clm_nelements(dst) * clm_type_size(ct), &yt);
        ydata = yt.ptr;
    }
    if (st == CLM_OK) st = cann_temp_alloc(ctx, (size_t)(n_ids * N * K) * wes, &gt);
    aclDataType adt = cann_acl_type(ct), wdt = cann_acl_type(w->type);
    int64_t wd[3] = {n_as, N, K};
    int64_t ws[3] = {(int64_t)(w->nb[2] / wes), (int64_t)(w->nb[1] / wes), (int64_t)(w->nb[0] / wes)};
    aclTensor *aw = st == CLM_OK ? cann_acl_view(w->data, wdt, 3, wd, ws, 0) : NULL;
    if (st == CLM_OK && aw == NULL) st = clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: cannot describe '%s'", w->name);
    for (int64_t t = 0; t < T && st == CLM_OK; t++) {
        aclTensor *idx = ids_row(ids, t);
        int64_t gd[3] = {n_ids, N, K}, gs[3] = {N * K, K, 1};
        aclTensor *ag = cann_acl_view(gt.ptr, wdt, 3, gd, gs, 0);
        st = idx && ag ? CANN_ACLNN(ctx, IndexSelect, aw, 0, idx, ag)
                       : clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: cannot describe the expert gather");
        cann_destroy_tensors(2, idx, ag);
        if (st != CLM_OK) break;
        int64_t nb = n_b1 == 1 ? 1 : n_ids;
        int64_t ad[3] = {nb, 1, K}, as[3] = {xs[1], K, xs[0]};
        int64_t bd[3] = {n_ids, K, N}, bs[3] = {N * K, 1, K};
        int64_t yd[3] = {n_ids, 1, N}, ys[3] = {N, N, 1};
        aclTensor *a = cann_acl_view(xdata, adt, 3, ad, as, t * xs[2]);
        aclTensor *b = cann_acl_view(gt.ptr, wdt, 3, bd, bs, 0);
        aclTensor *y = cann_acl_view(ydata, adt, 3, yd, ys, t * n_ids * N);
        st = a && b && y ? CANN_ACLNN(ctx, BatchMatMul, a, b, y, 1)
                         : clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: bad views");
        cann_destroy_tensors(3, a, b, y);
    }
    cann_destroy_tensors(1, aw);
    if (st == CLM_OK && ct != CLM_TYPE_F32) st = cann_matmul_cast_result(ctx, ydata, ct, dst);
    cann_temp_free(&gt);
    cann_temp_free(&yt);
    cann_temp_free(&xt);
    return st;
}

static clm_status gather_quant(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *w = dst->src[0], *x = dst->src[1], *ids = dst->src[2];
    const cann_qlayout *layout = cann_qlayout_get(w->type);
    if (layout == NULL) return clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: '%s' has no device layout", w->name);
    int64_t K = w->ne[0], N = w->ne[1], n_as = w->ne[2], n_ids = ids->ne[0], n_b1 = x->ne[1], T = x->ne[2];
    size_t n_blocks = (size_t)(clm_nelements(w) / CANN_QL_BLOCK);
    char *base = w->data;
    char *scales = base + cann_qlayout_region_offset(layout, n_blocks, 1);
    char *offsets = w->type == CLM_TYPE_Q4_1 ? base + cann_qlayout_region_offset(layout, n_blocks, 2) : NULL;
    aclDataType wdt = w->type == CLM_TYPE_Q8_0 ? ACL_INT8 : ACL_INT4;
    int64_t qrow = w->type == CLM_TYPE_Q8_0 ? N * K : N * K / 2; /* one expert's quant bytes */
    int64_t kg = K / CANN_QL_BLOCK, srow = N * kg;                /* groups per column, per expert */
    int group = K > CANN_QL_BLOCK ? CANN_QL_BLOCK : 0;
    cann_temp xt = {0}, yt = {0}, qt = {0}, sct = {0}, ot = {0};
    void *xdata;
    clm_status st = cann_matmul_activations(ctx, x, CLM_TYPE_F16, &xt, &xdata);
    if (st != CLM_OK) return st;
    st = cann_temp_alloc(ctx, (size_t)clm_nelements(dst) * 2, &yt);
    if (st == CLM_OK) st = cann_temp_alloc(ctx, (size_t)(n_ids * qrow), &qt);
    if (st == CLM_OK) st = cann_temp_alloc(ctx, (size_t)(n_ids * srow) * 2, &sct);
    if (st == CLM_OK && offsets) st = cann_temp_alloc(ctx, (size_t)(n_ids * srow) * 2, &ot);
    for (int64_t t = 0; t < T && st == CLM_OK; t++) {
        aclTensor *idx = ids_row(ids, t);
        if (idx == NULL) {
            st = clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: cannot describe the expert ids");
            break;
        }
        st = gather_rows(ctx, base, ACL_INT8, n_as, qrow, idx, qt.ptr, n_ids);
        if (st == CLM_OK) st = gather_rows(ctx, scales, ACL_FLOAT16, n_as, srow, idx, sct.ptr, n_ids);
        if (st == CLM_OK && offsets) st = gather_rows(ctx, offsets, ACL_FLOAT16, n_as, srow, idx, ot.ptr, n_ids);
        cann_destroy_tensors(1, idx);
        for (int64_t e = 0; e < n_ids && st == CLM_OK; e++) {
            for (int64_t n0 = 0; n0 < N && st == CLM_OK; n0 += CANN_WQ_MAX_N) {
                int64_t nc = N - n0 < CANN_WQ_MAX_N ? N - n0 : CANN_WQ_MAX_N;
                int64_t xd[2] = {1, K}, xs[2] = {K, 1};
                int64_t wd[2] = {K, nc}, ws[2] = {1, K};
                int64_t yd[2] = {1, nc}, ys[2] = {nc, 1};
                int64_t p_off = e * srow + n0 * kg;
                aclTensor *ax = cann_acl_view(xdata, ACL_FLOAT16, 2, xd, xs, (t * n_b1 + e % n_b1) * K);
                aclTensor *aw = cann_acl_view(qt.ptr, wdt, 2, wd, ws, e * N * K + n0 * K);
                aclTensor *ay = cann_acl_view(yt.ptr, ACL_FLOAT16, 2, yd, ys, (t * n_ids + e) * N + n0);
                aclTensor *as, *ao = NULL;
                if (group) {
                    int64_t sd[2] = {kg, nc}, ss[2] = {1, kg};
                    as = cann_acl_view(sct.ptr, ACL_FLOAT16, 2, sd, ss, p_off);
                    if (offsets) ao = cann_acl_view(ot.ptr, ACL_FLOAT16, 2, sd, ss, p_off);
                } else {
                    int64_t sd[1] = {nc}, ss[1] = {kg};
                    as = cann_acl_view(sct.ptr, ACL_FLOAT16, 1, sd, ss, p_off);
                    if (offsets) ao = cann_acl_view(ot.ptr, ACL_FLOAT16, 1, sd, ss, p_off);
                }
                if (!ax || !aw || !ay || !as || (offsets && !ao)) {
                    st = clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: cannot describe the views of '%s'", w->name);
                } else {
                    st = CANN_ACLNN(ctx, WeightQuantBatchMatmulV2, ax, aw, as, ao, NULL, NULL, NULL, group, ay);
                }
                cann_destroy_tensors(5, ax, aw, ay, as, ao);
            }
        }
    }
    if (st == CLM_OK) st = cann_matmul_cast_result(ctx, yt.ptr, CLM_TYPE_F16, dst);
    cann_temp_free(&ot);
    cann_temp_free(&sct);
    cann_temp_free(&qt);
    cann_temp_free(&yt);
    cann_temp_free(&xt);
    return st;
}

/* ==== routed ========================================================================================== */
/* Whether the routed composition can run this node: the operators' limits and a weight it can view. */
static bool routed_possible(const clm_tensor *dst) {
    const clm_tensor *w = dst->src[0], *ids = dst->src[2];
    int64_t K = w->ne[0], n_as = w->ne[2], M = ids->ne[0] * dst->src[1]->ne[2];
    if (n_as > GMM_MAX_GROUPS || K > CANN_WQ_MAX_N || M > INT32_MAX) return false;
    if (cann_is_float_type(w->type)) return clm_is_contiguous(w);
    return w->type == CLM_TYPE_Q4_0 || w->type == CLM_TYPE_Q4_1; /* INT8 antiquant: per channel only */
}

static bool use_routed(const cann_backend_ctx *ctx, const clm_tensor *dst) {
    if (!routed_possible(dst) || ctx->mul_mat_id_path == CANN_MMID_GATHER) return false;
    const clm_tensor *w = dst->src[0];
    if (ctx->mul_mat_id_path == CANN_MMID_ROUTED || cann_is_float_type(w->type)) return true;
    /* INT4: the per-call copy of every expert's parameters (one region for Q4_0, two for Q4_1)
     * pays off once the (token, slot) pairs cover the experts that often */
    int64_t pairs = dst->src[2]->ne[0] * dst->src[1]->ne[2], regions = w->type == CLM_TYPE_Q4_1 ? 2 : 1;
    return pairs >= regions * w->ne[2];
}

/* A one-tensor list that owns t (aclDestroyTensorList destroys it); NULL (t destroyed) if t is NULL
 * or the list cannot be made. */
static aclTensorList *tensor_list(aclTensor *t) {
    if (t == NULL) return NULL;
    aclTensorList *list = aclCreateTensorList((const aclTensor *const *)&t, 1);
    if (list == NULL) aclDestroyTensor(t);
    return list;
}

static void destroy_lists(int n, ...) {
    va_list args;
    va_start(args, n);
    for (int i = 0; i < n; i++) {
        aclTensorList *list = va_arg(args, aclTensorList *);
        if (list != NULL) aclDestroyTensorList(list);
    }
    va_end(args);
}

/* A contiguous (n_as, K/32, N) copy of a (n_as, N, K/32) parameter region of the device layout. */
static clm_status params_by_group(cann_backend_ctx *ctx, void *region, int64_t n_as, int64_t n, int64_t kg,
                                  cann_temp *out) {
    clm_status st = cann_temp_alloc(ctx, (size_t)(n_as * kg * n) * 2, out);
    if (st != CLM_OK) return st;
    int64_t d[3] = {n_as, kg, n}, src_s[3] = {n * kg, 1, kg}, dst_s[3] = {kg * n, n, 1};
    aclTensor *src = cann_acl_view(region, ACL_FLOAT16, 3, d, src_s, 0);
    aclTensor *to = cann_acl_view(out->ptr, ACL_FLOAT16, 3, d, dst_s, 0);
    st = src && to ? CANN_ACLNN(ctx, InplaceCopy, to, src)
                   : clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: cannot describe the antiquant parameters");
    cann_destroy_tensors(2, src, to);
    return st;
}

static clm_status routed(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *w = dst->src[0], *x = dst->src[1], *ids = dst->src[2];
    int64_t K = w->ne[0], N = w->ne[1], n_as = w->ne[2], n_ids = ids->ne[0], n_b1 = x->ne[1], T = x->ne[2];
    bool quant = !cann_is_float_type(w->type);
    int32_t ct = quant ? CLM_TYPE_F16 : w->type; /* the operators' x / y dtype */
    aclDataType adt = cann_acl_type(ct);
    size_t es = clm_type_size(ct);
    /* one row of b for every slot (routed rows T, k = n_ids) or a row per slot (rows T*n_ids, k = 1) */
    bool per_slot = n_b1 > 1;
    int64_t rows = per_slot ? T * n_ids : T, k = per_slot ? 1 : n_ids, M = T * n_ids;
    int64_t ids_s0 = (int64_t)(ids->nb[1] / 4), ids_s1 = (int64_t)(ids->nb[0] / 4);
    cann_temp xt = {0}, it = {0}, et = {0}, rt = {0}, nt = {0}, lt = {0}, st_ = {0}, ot = {0}, yt = {0}, zt = {0};
    void *xdata = NULL, *idata = ids->data;
    clm_status st = cann_matmul_activations(ctx, x, ct, &xt, &xdata);
    if (st == CLM_OK && per_slot && !(ids_s1 == 1 && ids_s0 == n_ids)) {
        /* a row per slot flattens the ids to (T*n_ids, 1): copy a strided view (argsort's top-k) */
        st = cann_temp_alloc(ctx, (size_t)M * 4, &it);
        int64_t d[2] = {T, n_ids}, s[2] = {ids_s0, ids_s1}, c[2] = {n_ids, 1};
        aclTensor *src = st == CLM_OK ? cann_acl_view(ids->data, ACL_INT32, 2, d, s, 0) : NULL;
        aclTensor *to = st == CLM_OK ? cann_acl_view(it.ptr, ACL_INT32, 2, d, c, 0) : NULL;
        if (st == CLM_OK)
            st = src && to ? CANN_ACLNN(ctx, InplaceCopy, to, src)
                           : clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: cannot describe the expert ids");
        cann_destroy_tensors(2, src, to);
        idata = it.ptr, ids_s0 = 1, ids_s1 = 1;
    }
    if (st == CLM_OK) st = cann_temp_alloc(ctx, (size_t)(M * K) * es, &et);  /* expanded rows */
    if (st == CLM_OK) st = cann_temp_alloc(ctx, (size_t)M * 4, &rt);         /* sorted position per pair */
    if (st == CLM_OK) st = cann_temp_alloc(ctx, (size_t)n_as * 4, &nt);      /* running counts, INT32 */
    if (st == CLM_OK) st = cann_temp_alloc(ctx, (size_t)n_as * 8, &lt);      /* ... as the INT64 group list */
    if (st == CLM_OK) st = cann_temp_alloc(ctx, (size_t)(M * N) * es, &yt);  /* the grouped product */
    if (st == CLM_OK) {
        int64_t xd[2] = {rows, K}, xs[2] = {K, 1}, id[2] = {rows, k}, is[2] = {per_slot ? 1 : ids_s0, ids_s1};
        int64_t ed[2] = {M, K}, es2[2] = {K, 1}, one = 1;
        aclTensor *ax = cann_acl_view(xdata, adt, 2, xd, xs, 0), *ai = cann_acl_view(idata, ACL_INT32, 2, id, is, 0);
        aclTensor *ae = cann_acl_view(et.ptr, adt, 2, ed, es2, 0), *ar = cann_acl_view(rt.ptr, ACL_INT32, 1, &M, &one, 0);
        aclTensor *an = cann_acl_view(nt.ptr, ACL_INT32, 1, &n_as, &one, 0);
        aclTensor *al = cann_acl_view(lt.ptr, ACL_INT64, 1, &n_as, &one, 0);
        if (!ax || !ai || !ae || !ar || !an || !al)
            st = clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: cannot describe the routing");
        if (st == CLM_OK) /* dropless, expertNum n_as, running counts (flag 1) */
            st = CANN_ACLNN(ctx, MoeInitRoutingV2, ax, ai, 0, 0, n_as, 0, 1, false, ae, ar, an, NULL);
        if (st == CLM_OK) st = CANN_ACLNN(ctx, Cast, an, ACL_INT64, al);
        cann_destroy_tensors(6, ax, ai, ae, ar, an, al);
    }
    /* the grouped product y (M, N) = expanded rows x weight[group] */
    aclTensor *aw = NULL, *as = NULL, *ao = NULL;
    if (st == CLM_OK && !quant) {
        size_t wes = clm_type_size(w->type);
        int64_t wd[3] = {n_as, K, N}, ws[3] = {(int64_t)(w->nb[2] / wes), 1, (int64_t)(w->nb[1] / wes)};
        aw = cann_acl_view(w->data, adt, 3, wd, ws, 0);
    } else if (st == CLM_OK) {
        const cann_qlayout *layout = cann_qlayout_get(w->type);
        size_t n_blocks = (size_t)(clm_nelements(w) / CANN_QL_BLOCK);
        char *base = w->data;
        char *scales = base + cann_qlayout_region_offset(layout, n_blocks, 1);
        char *offsets = w->type == CLM_TYPE_Q4_1 ? base + cann_qlayout_region_offset(layout, n_blocks, 2) : NULL;
        int64_t kg = K / CANN_QL_BLOCK;
        int64_t wd[3] = {n_as, K, N}, ws[3] = {N * K, 1, K};
        aw = cann_acl_view(base, ACL_INT4, 3, wd, ws, 0);
        if (kg == 1) { /* one group of 32: per channel, the regions already (n_as, N) */
            int64_t pd[2] = {n_as, N}, ps[2] = {N, 1};
            as = cann_acl_view(scales, ACL_FLOAT16, 2, pd, ps, 0);
            if (offsets) ao = cann_acl_view(offsets, ACL_FLOAT16, 2, pd, ps, 0);
        } else {
            int64_t pd[3] = {n_as, kg, N}, ps[3] = {kg * N, N, 1};
            st = params_by_group(ctx, scales, n_as, N, kg, &st_);
            if (st == CLM_OK && offsets) st = params_by_group(ctx, offsets, n_as, N, kg, &ot);
            if (st == CLM_OK) as = cann_acl_view(st_.ptr, ACL_FLOAT16, 3, pd, ps, 0);
            if (st == CLM_OK && offsets) ao = cann_acl_view(ot.ptr, ACL_FLOAT16, 3, pd, ps, 0);
        }
        if (st == CLM_OK && (!as || (offsets && !ao)))
            st = clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: cannot describe the scales of '%s'", w->name);
    }
    if (st == CLM_OK) {
        int64_t ed[2] = {M, K}, es2[2] = {K, 1}, yd[2] = {M, N}, ys[2] = {N, 1}, one = 1;
        aclTensor *al = cann_acl_view(lt.ptr, ACL_INT64, 1, &n_as, &one, 0);
        aclTensorList *lx = tensor_list(cann_acl_view(et.ptr, adt, 2, ed, es2, 0));
        aclTensorList *ly = tensor_list(cann_acl_view(yt.ptr, adt, 2, yd, ys, 0));
        aclTensorList *lw = tensor_list(aw), *ls = tensor_list(as), *lo = tensor_list(ao);
        if (!lx || !lw || !ly || !al || (quant && !ls) || (ao && !lo)) {
            st = clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: cannot describe the grouped product of '%s'", w->name);
        } else { /* splitItem 2 (one y), groupType 0 (groups of rows), groupListType 0 (running sums) */
            st = CANN_ACLNN(ctx, GroupedMatmulV4, lx, lw, NULL, NULL, NULL, ls, lo, NULL, al, NULL, NULL, NULL, 2, 0,
                            0, 0, ly, NULL, NULL);
        }
        aw = as = ao = NULL; /* owned by their lists now */
        destroy_lists(5, lx, lw, ly, ls, lo);
        cann_destroy_tensors(1, al);
    }
    cann_destroy_tensors(3, aw, as, ao);
    /* back to (token, slot) order: dst row t*n_ids + j is y's row at that pair's sorted position */
    if (st == CLM_OK) {
        bool direct = ct == CLM_TYPE_F32;
        if (!direct) st = cann_temp_alloc(ctx, (size_t)(M * N) * es, &zt);
        int64_t yd[2] = {M, N}, ys[2] = {N, 1}, one = 1;
        aclTensor *ay = cann_acl_view(yt.ptr, adt, 2, yd, ys, 0), *ar = cann_acl_view(rt.ptr, ACL_INT32, 1, &M, &one, 0);
        aclTensor *az = cann_acl_view(direct ? dst->data : zt.ptr, adt, 2, yd, ys, 0);
        if (st == CLM_OK)
            st = ay && ar && az ? CANN_ACLNN(ctx, IndexSelect, ay, 0, ar, az)
                                : clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: cannot describe the result");
        cann_destroy_tensors(3, ay, ar, az);
        if (st == CLM_OK && !direct) st = cann_matmul_cast_result(ctx, zt.ptr, ct, dst);
    }
    cann_temp_free(&zt), cann_temp_free(&ot), cann_temp_free(&st_), cann_temp_free(&yt), cann_temp_free(&lt);
    cann_temp_free(&nt), cann_temp_free(&rt), cann_temp_free(&et), cann_temp_free(&it), cann_temp_free(&xt);
    return st;
}

clm_status cann_op_mul_mat_id(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *w = dst->src[0];
    if (!cann_supports_mul_mat_id(dst))
        return clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT_ID: experts '%s' (%s) x '%s' (%s) are not supported on CANN",
                         w->name, clm_type_name(w->type), dst->src[1]->name, clm_type_name(dst->src[1]->type));
    if (clm_nelements(dst) == 0) return CLM_OK;
    if (use_routed(ctx, dst)) {
        ctx->mul_mat_id_routed++;
        return routed(ctx, dst);
    }
    ctx->mul_mat_id_gathered++;
    return cann_is_float_type(w->type) ? gather_float(ctx, dst) : gather_quant(ctx, dst);
}
