/* ops_matmul.c - MUL_MAT: dst [N, M, ne12, ne13] F32 = src0 (weights [K, N, ne02, ne03]) x src1
 * (activations [K, M, ne12, ne13]), ggml broadcasting (ne12 % ne02 == 0, ne13 % ne03 == 0).
 *
 * Float weights (F32 / F16 / BF16): activations cast to F32 (F32 / F16 weights) or BF16, then
 * aclnnMm (2-D) or aclnnMatmul over the batch dims [ne03, r3, ne02, r2] (the weight broadcast
 * along the r dims), the weight passed as a transposed view (K, N), cubeMathType 1 (F32 runs
 * as HF32 on A2); F32 / F16 weights write the F32 dst directly, BF16 results are cast to it.
 * Quantized weights (Q8_0, Q4_0, Q4_1 in the device layout of quant_layout.h): activations cast
 * to a contiguous F16 temporary, one aclnnWeightQuantBatchMatmulV2 per (batch slice, chunk of at
 * most 65535 columns) with the quants as a transposed INT8 / INT4 view (K, N) strides (1, K), the
 * scales as a (K/32, N) view strides (1, K/32), group 32 when K > 32 else per-channel, Q4_1's
 * offsets as antiquantOffset; F16 output cast to the F32 dst (per chunk when M > 1 and N is split,
 * since the operator's y must be contiguous).
 * Also the helpers MUL_MAT_ID shares (ops_mul_mat_id.c): activations in a dtype, the result cast.
 */
#include "cann/cann_common.h"
#include "cann/quant_layout.h"

bool cann_supports_mul_mat(const clm_tensor *op) {
    const clm_tensor *w = op->src[0], *x = op->src[1];
    if (op->type != CLM_TYPE_F32 || !clm_is_contiguous(op)) return false;
    if (!cann_is_float_type(x->type)) return false;
    if (x->ne[2] % w->ne[2] != 0 || x->ne[3] % w->ne[3] != 0) return false;
    if (cann_is_float_type(w->type)) {
        /* element strides must be whole elements */
        for (int i = 0; i < CLM_MAX_DIMS; i++)
            if (w->nb[i] % clm_type_size(w->type) != 0 || x->nb[i] % clm_type_size(x->type) != 0) return false;
        return true;
    }
    /* quantized: the whole (non-view) tensor in the device layout, 32-element blocks. An INT4
     * weight (Q4_0 / Q4_1) chunk of one column is a (K, 1) view that is contiguous as well as
     * transposed, read as contiguous, whose innermost dimension 1 is odd: WQBMM refuses it. */
    bool int4_ok = w->type == CLM_TYPE_Q8_0 || w->ne[1] % CANN_WQ_MAX_N != 1;
    return cann_is_wq_type(w->type) && w->view_src == NULL && clm_is_contiguous(w) && w->ne[0] % CANN_QL_BLOCK == 0 &&
           int4_ok;
}

/* The dtype a product computes its activations in: F16 for quantized weights (WQBMM's x), F32
 * for F16 / F32 weights (the pair promotes, so the F32 dst is written directly), BF16 for BF16
 * weights. */
static int32_t compute_type(const clm_tensor *w) {
    return !cann_is_float_type(w->type) ? CLM_TYPE_F16 : w->type == CLM_TYPE_F16 ? CLM_TYPE_F32 : w->type;
}

/* MUL_MAT only: MUL_MAT_ID's activation dtype depends on its composition (ops_mul_mat_id.c), so
 * it never asks for a kept copy, though it uses one that holds its x in its dtype. */
bool cann_mul_mat_casts_src1(const clm_tensor *node, int32_t *type) {
    if (node->op != CLM_OP_MUL_MAT) return false;
    const clm_tensor *w = node->src[0], *x = node->src[1];
    if (w == NULL || x == NULL || !cann_supports_mul_mat(node)) return false;
    *type = compute_type(w);
    bool float_in_place = cann_is_float_type(w->type) && x->type == *type; /* read through its strides */
    return !float_in_place && !(x->type == *type && clm_is_contiguous(x));
}

/* The graph's shared copy (ctx->act, kept by run_nodes for later products of the same source) is
 * used when it holds x in `type`; when run_nodes asked for this node's copy to be kept, the new
 * temporary becomes the shared one and the caller gets nothing to free. */
clm_status cann_matmul_activations(cann_backend_ctx *ctx, const clm_tensor *x, int32_t type, cann_temp *tmp,
                                   void **data) {
    tmp->ptr = NULL, tmp->size = 0, tmp->pool = NULL;
    if (x->type == type && clm_is_contiguous(x)) {
        *data = x->data;
        return CLM_OK;
    }
    cann_activation_copy *act = &ctx->act;
    if (act->copy.ptr != NULL && act->src == x && act->type == type) {
        *data = act->copy.ptr;
        ctx->casts_shared++;
        return CLM_OK;
    }
    size_t es = clm_type_size(type);
    int64_t n = clm_nelements(x);
    clm_status st = cann_temp_alloc(ctx, (size_t)n * es, tmp);
    if (st != CLM_OK) return st;
    size_t nb[CLM_MAX_DIMS];
    nb[0] = es;
    for (int i = 1; i < CLM_MAX_DIMS; i++) nb[i] = nb[i - 1] * (size_t)x->ne[i - 1];
    aclTensor *src = cann_acl_tensor(x);
    aclTensor *dst = cann_acl_tensor_nd(tmp->ptr, type, x->ne, nb, CLM_MAX_DIMS, 0);
    if (src == NULL || dst == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe '%s' as an aclTensor", "MUL_MAT", x->name);
    } else if (x->type == type) {
        st = CANN_ACLNN(ctx, InplaceCopy, dst, src);
    } else {
        st = CANN_ACLNN(ctx, Cast, src, cann_acl_type(type), dst);
    }
    cann_destroy_tensors(2, src, dst);
    *data = tmp->ptr;
    if (st != CLM_OK) {
        cann_temp_free(tmp);
    } else if (act->keep && act->copy.ptr == NULL && act->src == x && act->type == type) {
        act->copy = *tmp; /* kept for the later products: run_nodes frees it */
        *tmp = (cann_temp){0};
    }
    return st;
}

clm_status cann_matmul_cast_result(cann_backend_ctx *ctx, void *data, int32_t type, clm_tensor *dst) {
    int64_t n = clm_nelements(dst);
    size_t nb = clm_type_size(type);
    aclTensor *src = cann_acl_tensor_nd(data, type, &n, &nb, 1, 0);
    aclTensor *out = cann_acl_tensor_flat(dst);
    clm_status st = src && out ? CANN_ACLNN(ctx, Cast, src, ACL_FLOAT, out)
                               : clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT: cannot describe the result");
    cann_destroy_tensors(2, src, out);
    return st;
}

/* ---- float weights ------------------------------------------------------------------------------ */
static clm_status mul_mat_float(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *w = dst->src[0], *x = dst->src[1];
    /* F16 weights take F32 activations: the pair promotes to F32, so out is the F32 dst itself
     * and results beyond F16's 65504 stay finite (F16 x F16 would need an F16 out). BF16 does not
     * promote with F32 on A2: BF16 activations and a BF16 result (BF16's range is F32's). */
    int32_t ct = compute_type(w); /* activation and out dtype */
    int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
    int64_t r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3];
    size_t wes = clm_type_size(w->type), xes = clm_type_size(x->type);
    cann_temp xt = {0}, yt = {0};
    void *xdata = x->data;
    int64_t xs[4]; /* element strides of x in the compute dtype: K, M, ne12, ne13 */
    clm_status st = CLM_OK;
    if (x->type != ct) {
        st = cann_matmul_activations(ctx, x, ct, &xt, &xdata);
        if (st != CLM_OK) return st;
        xs[0] = 1, xs[1] = K, xs[2] = K * M, xs[3] = K * M * x->ne[2];
    } else {
        for (int i = 0; i < 4; i++) xs[i] = (int64_t)(x->nb[i] / xes);
    }
    void *ydata = dst->data;
    if (ct != CLM_TYPE_F32) {
        st = cann_temp_alloc(ctx, (size_t)clm_nelements(dst) * clm_type_size(ct), &yt);
        if (st != CLM_OK) {
            cann_temp_free(&xt);
            return st;
        }
        ydata = yt.ptr;
    }
    aclDataType adt = cann_acl_type(ct), wdt = cann_acl_type(w->type);
    aclTensor *a, *b, *y;
    bool two_d = x->ne[2] == 1 && x->ne[3] == 1;
    if (two_d) {
        int64_t ad[2] = {M, K}, as[2] = {xs[1], xs[0]};
        int64_t bd[2] = {K, N}, bs[2] = {(int64_t)(w->nb[0] / wes), (int64_t)(w->nb[1] / wes)};
        int64_t yd[2] = {M, N}, ys[2] = {N, 1};
        a = cann_acl_view(xdata, adt, 2, ad, as, 0);
        b = cann_acl_view(w->data, wdt, 2, bd, bs, 0);
        y = cann_acl_view(ydata, adt, 2, yd, ys, 0);
        st = a && b && y ? CANN_ACLNN(ctx, Mm, a, b, y, 1) : clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT: bad views");
    } else {
        /* batch dims [ne03, r3, ne02, r2]: x index i13 = i03 * r3 + j3, i12 = i02 * r2 + j2 */
        int64_t ad[6] = {w->ne[3], r3, w->ne[2], r2, M, K};
        int64_t as[6] = {xs[3] * r3, xs[3], xs[2] * r2, xs[2], xs[1], xs[0]};
        int64_t bd[6] = {w->ne[3], 1, w->ne[2], 1, K, N};
        int64_t bs[6] = {(int64_t)(w->nb[3] / wes), 0, (int64_t)(w->nb[2] / wes), 0, (int64_t)(w->nb[0] / wes),
                         (int64_t)(w->nb[1] / wes)};
        int64_t yd[6] = {w->ne[3], r3, w->ne[2], r2, M, N};
        int64_t ys[6] = {N * M * x->ne[2] * r3, N * M * x->ne[2], N * M * r2, N * M, N, 1};
        a = cann_acl_view(xdata, adt, 6, ad, as, 0);
        b = cann_acl_view(w->data, wdt, 6, bd, bs, 0);
        y = cann_acl_view(ydata, adt, 6, yd, ys, 0);
        st = a && b && y ? CANN_ACLNN(ctx, Matmul, a, b, y, 1) : clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT: bad views");
    }
    cann_destroy_tensors(3, a, b, y);
    if (st == CLM_OK && ct != CLM_TYPE_F32) st = cann_matmul_cast_result(ctx, ydata, ct, dst);
    cann_temp_free(&yt);
    cann_temp_free(&xt);
    return st;
}

/* ---- quantized weights ---------------------------------------------------------------------------- */
static clm_status mul_mat_quant(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *w = dst->src[0], *x = dst->src[1];
    const cann_qlayout *layout = cann_qlayout_get(w->type);
    if (layout == NULL) return clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT: '%s' has no device layout", w->name);
    int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
    int64_t r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3];
    size_t n_blocks = (size_t)(clm_nelements(w) / CANN_QL_BLOCK);
    char *base = w->data;
    char *scales = base + cann_qlayout_region_offset(layout, n_blocks, 1);
    char *offsets = w->type == CLM_TYPE_Q4_1 ? base + cann_qlayout_region_offset(layout, n_blocks, 2) : NULL;
    aclDataType wdt = w->type == CLM_TYPE_Q8_0 ? ACL_INT8 : ACL_INT4;
    int64_t kg = K / CANN_QL_BLOCK; /* groups per column */
    int group = K > CANN_QL_BLOCK ? CANN_QL_BLOCK : 0;

    /* y must be contiguous: a column chunk of a multi-row output is not, so with M > 1 and
     * N > CANN_WQ_MAX_N each chunk goes to a contiguous (M, nc) temporary cast into its place in dst;
     * otherwise (decode M = 1, or one chunk) the F16 result is one temporary cast at the end */
    bool per_chunk = M > 1 && N > CANN_WQ_MAX_N;
    cann_temp xt = {0}, yt = {0};
    void *xdata;
    clm_status st = cann_matmul_activations(ctx, x, CLM_TYPE_F16, &xt, &xdata);
    if (st != CLM_OK) return st;
    st = cann_temp_alloc(ctx, (size_t)(per_chunk ? M * CANN_WQ_MAX_N : clm_nelements(dst)) * 2, &yt);
    if (st != CLM_OK) {
        cann_temp_free(&xt);
        return st;
    }
    for (int64_t i13 = 0; i13 < x->ne[3] && st == CLM_OK; i13++) {
        for (int64_t i12 = 0; i12 < x->ne[2] && st == CLM_OK; i12++) {
            int64_t slice = (i13 / r3) * w->ne[2] + i12 / r2;
            int64_t batch = i13 * x->ne[2] + i12;
            for (int64_t n0 = 0; n0 < N && st == CLM_OK; n0 += CANN_WQ_MAX_N) {
                int64_t nc = N - n0 < CANN_WQ_MAX_N ? N - n0 : CANN_WQ_MAX_N;
                int64_t xd[2] = {M, K}, xs[2] = {K, 1};
                int64_t wd[2] = {K, nc}, ws[2] = {1, K};
                int64_t yd[2] = {M, nc}, ys[2] = {per_chunk ? nc : N, 1};
                int64_t y_off = per_chunk ? 0 : batch * M * N + n0;
                int64_t p_off = slice * N * kg + n0 * kg;
                aclTensor *ax = cann_acl_view(xdata, ACL_FLOAT16, 2, xd, xs, batch * M * K);
                aclTensor *aw = cann_acl_view(base, wdt, 2, wd, ws, slice * N * K + n0 * K);
                aclTensor *ay = cann_acl_view(yt.ptr, ACL_FLOAT16, 2, yd, ys, y_off);
                aclTensor *as, *ao = NULL;
                if (group) {
                    int64_t sd[2] = {kg, nc}, ss[2] = {1, kg};
                    as = cann_acl_view(scales, ACL_FLOAT16, 2, sd, ss, p_off);
                    if (offsets) ao = cann_acl_view(offsets, ACL_FLOAT16, 2, sd, ss, p_off);
                } else {
                    int64_t sd[1] = {nc}, ss[1] = {kg};
                    as = cann_acl_view(scales, ACL_FLOAT16, 1, sd, ss, p_off);
                    if (offsets) ao = cann_acl_view(offsets, ACL_FLOAT16, 1, sd, ss, p_off);
                }
                if (!ax || !aw || !ay || !as || (offsets && !ao)) {
                    st = clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT: cannot describe the views of '%s'", w->name);
                } else {
                    st = CANN_ACLNN(ctx, WeightQuantBatchMatmulV2, ax, aw, as, ao, NULL, NULL, NULL, group, ay);
                }
                if (st == CLM_OK && per_chunk) { /* the chunk into dst's columns [n0, n0 + nc) */
                    int64_t ds[2] = {N, 1};
                    aclTensor *ad = cann_acl_view(dst->data, ACL_FLOAT, 2, yd, ds, batch * M * N + n0);
                    st = ad ? CANN_ACLNN(ctx, Cast, ay, ACL_FLOAT, ad)
                            : clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT: cannot describe the result");
                    cann_destroy_tensors(1, ad);
                }
                cann_destroy_tensors(5, ax, aw, ay, as, ao);
            }
        }
    }
    if (st == CLM_OK && !per_chunk) st = cann_matmul_cast_result(ctx, yt.ptr, CLM_TYPE_F16, dst);
    cann_temp_free(&yt);
    cann_temp_free(&xt);
    return st;
}

clm_status cann_op_mul_mat(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *w = dst->src[0];
    if (!cann_supports_mul_mat(dst))
        return clm_error(CLM_ERR_UNSUPPORTED, "MUL_MAT: weights '%s' (%s) x '%s' (%s) are not supported on CANN",
                         w->name, clm_type_name(w->type), dst->src[1]->name, clm_type_name(dst->src[1]->type));
    if (clm_nelements(dst) == 0) return CLM_OK;
    return cann_is_float_type(w->type) ? mul_mat_float(ctx, dst) : mul_mat_quant(ctx, dst);
}
