/* ops_grouped_matmul.c - aclnnGroupedMatmulV4, the grouped product of a mixture of experts.
 *
 * The scenario acl_host implements is the one MoE layers use (groupType 0, splitItem 2 / 3, one
 * tensor per list): x (M, K) is cut into consecutive row groups by groupListOptional (INT64 running
 * sums when groupListType is 0, sizes when 1) and group e is multiplied by weight[e] of the (E, K,
 * N) weight (contiguous, or the transposed view of (E, N, K) rows):
 *     y[r] = x[r] @ weight[e] (+ bias[e])                            float: F16 / BF16 / F32
 *     y[r] = x[r] @ ((weight[e] + offset[e]) * scale[e]) (+ bias[e])   antiquant: INT8 / INT4
 * with the antiquant parameters per channel (E, N) or, for INT4, per group of K / G rows (E, G, N).
 * The arithmetic is the one of acl_host's other matmuls (ops_matmul.c, ah_gemm.h): x and the
 * (dequantized) weights as F32 values, one fixed chain of F32 fused multiply-adds per output, one
 * rounding to y's dtype. A row's result depends only on its own x row and its group's weights -
 * not on the group sizes, the other groups or the thread count - and an antiquant group gives
 * the very bits WeightQuantBatchMatmulV2 gives for the same rows and weight.
 * Work is split over (group, column tile); each group's rows are computed together, so an expert's
 * weights are read once for all its rows.
 * The group list is data: a list that is not non-decreasing / non-negative or does not end at
 * (sum to) M is an error of the launch.
 */
#include <stdlib.h>
#include <string.h>

#include "ah_convert.h"
#include "ah_gemm.h"
#include "ah_load.h"
#include "ah_nd.h"

#define GMM_MAX_GROUPS 1024  /* groupListOptional's first dimension (Doc(GroupedMatmulV4), groupType 0) */
#define GMM_MAX_LAST_DIM 65535
#define GMM_MAX_DIRECT_M 16  /* rows per group read against quantized / F16 columns in place */
#define GMM_MIN_CHUNK 65536  /* weight x row products per parallel chunk, at least */
#define GMM_MIN_PARALLEL (1 << 16)
#define FLOAT_DTYPES (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16))

typedef struct gmm_params {
    int slot_x, slot_w, slot_bias, slot_scale, slot_offset, slot_list, slot_y; /* -1: absent */
    int64_t m, k, n, e;
    int64_t group;      /* K rows per antiquant group (k when per channel) */
    int64_t list_type;  /* 0 running sums, 1 sizes */
    bool quant, int4, w_transposed;
} gmm_params;

typedef struct gmm_item {
    int64_t e, j0, nn;
} gmm_item;

typedef struct gmm_ctx {
    const gmm_params *p;
    const aclTensor *x, *w, *bias, *scale, *offset, *y;
    const int64_t *start, *rows; /* per group */
    const gmm_item *items;
    const float *apack;          /* [m][kp] */
    int64_t kp, ngroups, gsize, max_rows, max_nt;
    volatile int failed;
} gmm_ctx;

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static const char *tensor_base(const aclTensor *t) {
    return (const char *)t->data + t->offset * (int64_t)ah_dtype_size(t->dtype);
}

/* Columns per tile so that a tile of F32 columns stays around 192 KiB (as ops_matmul.c). */
static int64_t tile_cols(int64_t kp) {
    int64_t nt = (int64_t)(49152 / kp) / 6 * 6;
    return nt < 6 ? 6 : nt > 96 ? 96 : nt;
}

static int64_t group_tile(const gmm_ctx *c, int64_t rows) { return rows > GMM_MAX_DIRECT_M ? tile_cols(c->kp) : 16; }

/* x rows as F32 [m][kp], zero padded; for INT4 weights each 32-block is reordered even elements
 * first, then odd ones (the order the INT4 kernels read nibbles in, ah_gemm.h). */
static void gmm_pack_x(void *vctx, int64_t begin, int64_t end) {
    const gmm_ctx *c = vctx;
    float row[AH_GEMM_KALIGN];
    size_t es = ah_dtype_size(c->x->dtype);
    for (int64_t i = begin; i < end; i++) {
        float *dst = (float *)c->apack + i * c->kp;
        ah_load_f32(c->x->dtype, tensor_base(c->x) + i * c->x->strides[0] * (int64_t)es, c->x->strides[1], c->p->k, dst);
        memset(dst + c->p->k, 0, (size_t)(c->kp - c->p->k) * sizeof(float));
        if (c->p->int4)
            for (int64_t k0 = 0; k0 < c->kp; k0 += AH_GEMM_KALIGN) {
                memcpy(row, dst + k0, sizeof row);
                for (int e = 0; e < 16; e++) {
                    dst[k0 + e] = row[2 * e];
                    dst[k0 + 16 + e] = row[2 * e + 1];
                }
            }
    }
}

/* Antiquant scales or offsets of group e, columns [j0, j0 + nn), as F32 [nn][ngroups]: each
 * group's run along N (the parameters' contiguous dim) converted at once, then spread. */
static void gather_params(const gmm_ctx *c, const aclTensor *t, int64_t e, int64_t j0, int64_t nn, float *row,
                          float *dst) {
    const char *base = tensor_base(t);
    int64_t sn = t->strides[t->ndim - 1], sg = t->ndim == 3 ? t->strides[1] : 0;
    size_t es = ah_dtype_size(t->dtype);
    for (int64_t g = 0; g < c->ngroups; g++) {
        ah_load_f32(t->dtype, base + (e * t->strides[0] + g * sg + j0 * sn) * (int64_t)es, sn, nn, row);
        for (int64_t j = 0; j < nn; j++)
            dst[j * c->ngroups + g] = row[j];
    }
}

/* int4 element at element index idx (two per byte, low nibble first). */
static inline int8_t int4_at(const char *base, int64_t idx) {
    uint8_t b = (uint8_t)base[idx >> 1];
    return (int8_t)((idx & 1) ? (int8_t)b >> 4 : (int8_t)(uint8_t)(b << 4) >> 4);
}

static void gmm_items(void *vctx, int64_t begin, int64_t end) {
    gmm_ctx *c = vctx;
    const gmm_params *p = c->p;
    int64_t kp = c->kp, nt = c->max_nt;
    size_t qbytes = (size_t)(p->int4 ? kp / 2 : kp);
    size_t need = (size_t)(2 * nt * c->ngroups + nt * kp + c->max_rows * nt + nt) * sizeof(float) + nt * qbytes;
    char *mem = malloc(need);
    if (!mem) {
        c->failed = 1;
        return;
    }
    float *sc = (float *)(void *)mem, *of = sc + nt * c->ngroups, *ft = of + nt * c->ngroups;
    float *ct = ft + nt * kp, *prow = ct + c->max_rows * nt;
    int8_t *qt = (int8_t *)(void *)(prow + nt);
    const char *wbase = (const char *)c->w->data;
    int64_t ws0 = c->w->strides[0], ws1 = c->w->strides[1], ws2 = c->w->strides[2]; /* group, k, n */
    size_t wes = ah_dtype_size(c->w->dtype);
    for (int64_t it = begin; it < end; it++) {
        int64_t e = c->items[it].e, j0 = c->items[it].j0, nn = c->items[it].nn;
        int64_t m = c->rows[e];
        const float *a = c->apack + c->start[e] * kp;
        bool direct = m <= GMM_MAX_DIRECT_M;
        if (p->quant) {
            gather_params(c, c->scale, e, j0, nn, prow, sc);
            if (c->offset)
                gather_params(c, c->offset, e, j0, nn, prow, of);
            const int8_t *wq;
            int64_t ldw;
            int64_t e0 = c->w->offset + e * ws0 + j0 * ws2; /* element index of (e, 0, j0) */
            if (p->w_transposed && p->k % AH_GEMM_KALIGN == 0) { /* columns k-contiguous: read in place */
                wq = (const int8_t *)(const void *)(wbase + (p->int4 ? e0 / 2 : e0));
                ldw = p->int4 ? ws2 / 2 : ws2;
            } else { /* gather column j into natural order, zero padded */
                memset(qt, 0, (size_t)nn * qbytes);
                for (int64_t j = 0; j < nn; j++) {
                    int8_t *dst = qt + j * (int64_t)qbytes;
                    for (int64_t kk = 0; kk < p->k; kk++) {
                        int64_t el = e0 + kk * ws1 + j * ws2;
                        if (p->int4) {
                            uint8_t v = (uint8_t)int4_at(wbase, el) & 0xf;
                            dst[kk / 2] = (int8_t)((uint8_t)dst[kk / 2] | (kk & 1 ? v << 4 : v));
                        } else {
                            dst[kk] = ((const int8_t *)(const void *)wbase)[el];
                        }
                    }
                }
                wq = qt;
                ldw = (int64_t)qbytes;
            }
            ah_gemm_quant q = {.m = m, .n = nn, .kp = kp, .group = c->gsize, .a = a, .lda = kp, .w = wq, .ldw = ldw,
                               .int4 = p->int4, .scales = sc, .offsets = c->offset ? of : NULL, .lds = c->ngroups,
                               .c = ct, .ldc = nt};
            if (direct) {
                ah_gemm_run_quant(&q);
            } else {
                ah_gemm_unpack_quant(&q, ft, kp);
                ah_gemm_tile t = {.m = m, .n = nn, .kp = kp, .a = a, .lda = kp, .b = ft, .ldb = kp, .c = ct, .ldc = nt};
                ah_gemm_run_tile(&t);
            }
        } else {
            const char *cols = wbase + (c->w->offset + e * ws0 + j0 * ws2) * (int64_t)wes;
            ah_gemm_tile t = {.m = m, .n = nn, .kp = kp, .a = a, .lda = kp, .b16 = (const uint16_t *)(const void *)cols,
                              .ldb = ws2, .c = ct, .ldc = nt};
            bool in_place = c->w->dtype == ACL_FLOAT16 && ws1 == 1 && p->k == kp && direct;
            if (!in_place || !ah_gemm_run_f16(&t)) {
                for (int64_t j = 0; j < nn; j++) {
                    float *col = ft + j * kp;
                    ah_load_f32(c->w->dtype, cols + j * ws2 * (int64_t)wes, ws1, p->k, col);
                    memset(col + p->k, 0, (size_t)(kp - p->k) * sizeof(float));
                }
                t.b = ft, t.ldb = kp;
                ah_gemm_run_tile(&t);
            }
        }
        if (c->bias) {
            const char *bb = tensor_base(c->bias);
            for (int64_t j = 0; j < nn; j++) {
                float bias = ah_load_one(c->bias->dtype, bb, e * c->bias->strides[0] + (j0 + j) * c->bias->strides[1]);
                for (int64_t i = 0; i < m; i++)
                    ct[i * nt + j] += bias;
            }
        }
        char *y = (char *)c->y->data + c->y->offset * (int64_t)ah_dtype_size(c->y->dtype);
        size_t yes = ah_dtype_size(c->y->dtype);
        for (int64_t i = 0; i < m; i++) {
            char *yrow = y + ((c->start[e] + i) * p->n + j0) * (int64_t)yes;
            if (c->y->dtype == ACL_FLOAT16)
                ah_f32_to_f16_row(ct + i * nt, (uint16_t *)(void *)yrow, nn);
            else if (c->y->dtype == ACL_BF16)
                ah_f32_to_bf16_row(ct + i * nt, (uint16_t *)(void *)yrow, nn);
            else
                memcpy(yrow, ct + i * nt, (size_t)nn * sizeof(float));
        }
    }
    free(mem);
}

/* The group list as (start, rows) per group; an error names the first bad entry. */
static aclError read_group_list(const aclOpExecutor *ex, const gmm_params *p, int64_t *start, int64_t *rows) {
    const aclTensor *gl = &ex->tensors[p->slot_list];
    const int64_t *v = (const int64_t *)gl->data + gl->offset;
    int64_t at = 0;
    for (int64_t e = 0; e < p->e; e++) {
        int64_t x = v[e * gl->strides[0]];
        int64_t size = p->list_type == 0 ? x - at : x;
        if (size < 0)
            return ah_error(ACLNN_ERR_INNER, "%s: groupListOptional[%lld] = %lld: %s", ex->op, (long long)e,
                            (long long)x, p->list_type == 0 ? "the running sums must not decrease (groupListType 0)"
                                                            : "a group size must not be negative (groupListType 1)");
        start[e] = at;
        rows[e] = size;
        at += size;
        if (at > p->m)
            break;
    }
    if (at != p->m)
        return ah_error(ACLNN_ERR_INNER, "%s: groupListOptional %s %lld, not x's %lld rows", ex->op,
                        p->list_type == 0 ? "ends at" : "sums to", (long long)at, (long long)p->m);
    return ACL_SUCCESS;
}

static aclError gmm_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const gmm_params *p = AH_EXEC_PARAMS(ex, const gmm_params);
    gmm_ctx c = {.p = p, .x = &ex->tensors[p->slot_x], .w = &ex->tensors[p->slot_w],
                 .bias = p->slot_bias >= 0 ? &ex->tensors[p->slot_bias] : NULL,
                 .scale = p->slot_scale >= 0 ? &ex->tensors[p->slot_scale] : NULL,
                 .offset = p->slot_offset >= 0 ? &ex->tensors[p->slot_offset] : NULL, .y = &ex->tensors[p->slot_y]};
    int64_t *start = malloc((size_t)(2 * p->e) * sizeof(int64_t));
    if (!start)
        return ah_error(ACLNN_ERR_INNER, "%s: out of host memory", ex->op);
    int64_t *rows = start + p->e;
    aclError err = read_group_list(ex, p, start, rows);
    if (err != ACL_SUCCESS || p->m == 0 || p->n == 0) {
        free(start);
        return err;
    }
    c.start = start, c.rows = rows;
    c.kp = round_up(p->k, AH_GEMM_KALIGN);
    c.gsize = p->quant && p->group < p->k ? p->group : c.kp;
    c.ngroups = p->quant && p->group < p->k ? p->k / p->group : 1;
    /* the (group, column tile) items, and the largest group and tile they need */
    int64_t n_items = 0;
    for (int64_t e = 0; e < p->e; e++)
        if (rows[e] > 0) {
            int64_t nt = group_tile(&c, rows[e]);
            n_items += (p->n + nt - 1) / nt;
            c.max_rows = rows[e] > c.max_rows ? rows[e] : c.max_rows;
            c.max_nt = nt > c.max_nt ? nt : c.max_nt;
        }
    gmm_item *items = malloc((size_t)n_items * sizeof(gmm_item));
    float *apack = malloc((size_t)(p->m * c.kp) * sizeof(float));
    if (!items || !apack) {
        free(items), free(apack), free(start);
        return ah_error(ACLNN_ERR_INNER, "%s: out of host memory", ex->op);
    }
    int64_t it = 0, work = 0;
    for (int64_t e = 0; e < p->e; e++) {
        if (rows[e] == 0)
            continue;
        int64_t nt = group_tile(&c, rows[e]);
        for (int64_t j0 = 0; j0 < p->n; j0 += nt)
            items[it++] = (gmm_item){e, j0, p->n - j0 < nt ? p->n - j0 : nt};
        work += rows[e] * p->n * c.kp;
    }
    c.items = items, c.apack = apack;
    ah_parallel_for(p->m, 64, gmm_pack_x, &c);
    /* a chunk does at least GMM_MIN_CHUNK weight x row products (rows counted up to 4 per item);
     * a small product runs on the calling thread, as WeightQuantBatchMatmulV2 does */
    int64_t per_item = c.kp * c.max_nt * (c.max_rows < 4 ? c.max_rows : 4);
    int64_t grain = (GMM_MIN_CHUNK + per_item - 1) / per_item;
    if (work < GMM_MIN_PARALLEL)
        grain = n_items;
    ah_parallel_for(n_items, grain, gmm_items, &c);
    free(apack), free(items), free(start);
    if (c.failed)
        return ah_error(ACLNN_ERR_INNER, "%s: out of host memory", ex->op);
    return ACL_SUCCESS;
}

/* ---- phase 1 --------------------------------------------------------------------------------------- */
/* acl_host implements the single-tensor scenario: one tensor per list, groupType 0. */
static aclnnStatus one_tensor(const char *op, const char *name, const aclTensorList *list, const aclTensor **out) {
    return ah_check_single_tensor(op, name, list, "more than one tensor per list (groupType 0 only)", out);
}

static bool is_transposed_last2(const aclTensor *t) {
    int r = t->ndim;
    int64_t rows = t->dims[r - 2], cols = t->dims[r - 1];
    if (t->strides[r - 2] != 1 || t->strides[r - 1] != rows)
        return false;
    return r < 3 || t->dims[0] == 1 || t->strides[0] == rows * cols;
}

/* Every dim, padded to 32 bytes, below INT32_MAX (Doc(GroupedMatmulV4)). */
static aclnnStatus check_dim_limit(const char *op, const char *name, const aclTensor *t) {
    int64_t per_32b = t->dtype == ACL_INT4 ? 64 : 32 / (int64_t)ah_dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; i++)
        if (round_up(t->dims[i], per_32b) >= INT32_MAX)
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s dim %d = %lld reaches INT32_MAX once 32-byte aligned",
                            op, name, i, (long long)t->dims[i]);
    return ACLNN_SUCCESS;
}

/* The antiquant scale or offset: x's dtype, (E, N) per channel or (E, G, N) per group (INT4). */
static aclnnStatus check_antiquant(const char *op, const char *name, const aclTensor *t, const aclTensor *x,
                                   const aclTensor *w, bool w_t, int64_t *group) {
    AH_TRY(ah_check_tensor(op, name, t, AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16), 2, 3));
    if (t->dtype != x->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s has dtype %s, expected x's %s", op, name,
                        ah_dtype_name(t->dtype), ah_dtype_name(x->dtype));
    int64_t e = w->dims[0], k = w->dims[1], n = w->dims[2];
    char s[256];
    if (t->ndim == 2) {
        if (t->dims[0] != e || t->dims[1] != n)
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s, expected (E, N) = (%lld, %lld) per channel",
                            op, name, ah_shape_str(s, sizeof s, t->dims, t->ndim), (long long)e, (long long)n);
        *group = k;
    } else {
        if (w->dtype != ACL_INT4)
            return ah_error(ACLNN_ERR_PARAM_INVALID,
                            "%s: %s is per group (3-D); an INT8 weight takes per-channel (E, N) parameters only", op,
                            name);
        int64_t g = t->dims[1];
        if (t->dims[0] != e || t->dims[2] != n || g <= 0 || k % g != 0)
            return ah_error(ACLNN_ERR_PARAM_INVALID,
                            "%s: %s has shape %s, expected (E, G, N) = (%lld, G, %lld) with G dividing K = %lld", op,
                            name, ah_shape_str(s, sizeof s, t->dims, t->ndim), (long long)e, (long long)n,
                            (long long)k);
        *group = k / g;
        if (w_t && *group % 2 != 0)
            return ah_error(ACLNN_ERR_PARAM_INVALID,
                            "%s: with a transposed INT4 weight the group length K / G = %lld must be even", op,
                            (long long)*group);
        if (*group % AH_GEMM_KALIGN != 0 && *group != k)
            return ah_error(ACLNN_ERR_PARAM_INVALID,
                            "%s: a group length K / G = %lld that is not a multiple of 32 is not implemented by acl_host",
                            op, (long long)*group);
    }
    if (!ah_tensor_is_contiguous(t))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s must be contiguous (acl_host)", op, name);
    return ACLNN_SUCCESS;
}

#define NULL_ONLY(list, name)                                                                                      \
    do {                                                                                                           \
        if ((list) != NULL)                                                                                        \
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s must be NULL", op, name);                              \
    } while (0)

AH_API aclnnStatus aclnnGroupedMatmulV4GetWorkspaceSize(
    const aclTensorList *x, const aclTensorList *weight, const aclTensorList *biasOptional,
    const aclTensorList *scaleOptional, const aclTensorList *offsetOptional,
    const aclTensorList *antiquantScaleOptional, const aclTensorList *antiquantOffsetOptional,
    const aclTensorList *perTokenScaleOptional, const aclTensor *groupListOptional,
    const aclTensorList *activationInputOptional, const aclTensorList *activationQuantScaleOptional,
    const aclTensorList *activationQuantOffsetOptional, int64_t splitItem, int64_t groupType,
    int64_t groupListType, int64_t actType, aclTensorList *out, aclTensorList *activationFeatureOutOptional,
    aclTensorList *dynQuantScaleOutOptional, uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnGroupedMatmulV4";
    const aclTensor *tx = NULL, *tw = NULL, *ty = NULL;
    AH_TRY(one_tensor(op, "x", x, &tx));
    AH_TRY(one_tensor(op, "weight", weight, &tw));
    AH_TRY(one_tensor(op, "out", out, &ty));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    NULL_ONLY(activationInputOptional, "activationInputOptional");
    NULL_ONLY(activationQuantScaleOptional, "activationQuantScaleOptional");
    NULL_ONLY(activationQuantOffsetOptional, "activationQuantOffsetOptional");
    NULL_ONLY(activationFeatureOutOptional, "activationFeatureOutOptional");
    NULL_ONLY(dynQuantScaleOutOptional, "dynQuantScaleOutOptional");
    if (groupType == 1)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: groupType 1 (split N) is not supported on Atlas A2", op);
    if (groupType == -1 || groupType == 2)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: groupType %lld is not implemented by acl_host (only 0, split M)",
                        op, (long long)groupType);
    if (groupType != 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: groupType %lld is not one of -1, 0, 1, 2", op, (long long)groupType);
    if (splitItem != 2 && splitItem != 3)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: splitItem %lld; a single-tensor y (groupType 0) takes 2 or 3", op,
                        (long long)splitItem);
    if (groupListType != 0 && groupListType != 1)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: groupListType %lld is not 0 or 1", op, (long long)groupListType);
    if (actType < 0 || actType > 5 || actType == 3)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: actType %lld is not one of 0, 1, 2, 4, 5", op, (long long)actType);
    if (actType != 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: actType %lld: an activation is only computed in the per-token quant and dequant scenarios",
                        op, (long long)actType);
    if (scaleOptional || offsetOptional || perTokenScaleOptional)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: scale / offset / perTokenScale (the INT8-x quant scenarios) are not implemented by acl_host",
                        op);
    AH_TRY(ah_check_tensor(op, "x", tx, FLOAT_DTYPES | AH_DTYPE_BIT(ACL_INT8), 2, 2));
    AH_TRY(ah_check_tensor(op, "weight", tw, FLOAT_DTYPES | AH_DTYPE_BIT(ACL_INT8) | AH_DTYPE_BIT(ACL_INT4), 3, 3));
    AH_TRY(ah_check_tensor(op, "out", ty, FLOAT_DTYPES | AH_DTYPE_BIT(ACL_INT8), 2, 2));
    if (tx->dtype == ACL_INT8)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: INT8 x (the quant scenarios) is not implemented by acl_host", op);
    AH_TRY(check_dim_limit(op, "x", tx));
    AH_TRY(check_dim_limit(op, "weight", tw));
    bool quant = tw->dtype == ACL_INT8 || tw->dtype == ACL_INT4;
    char s1[256], s2[256];
    if (quant && tx->dtype == ACL_FLOAT)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: an INT8 / INT4 weight takes FLOAT16 or BFLOAT16 x, not FLOAT", op);
    if (!quant && tw->dtype != tx->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: weight has dtype %s, expected x's %s", op,
                        ah_dtype_name(tw->dtype), ah_dtype_name(tx->dtype));
    if (ty->dtype != tx->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out has dtype %s, expected x's %s", op, ah_dtype_name(ty->dtype),
                        ah_dtype_name(tx->dtype));
    int64_t m = tx->dims[0], k = tx->dims[1], e = tw->dims[0], n = tw->dims[2];
    if (tw->dims[1] != k)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: x %s and weight %s: K differs", op,
                        ah_shape_str(s1, sizeof s1, tx->dims, 2), ah_shape_str(s2, sizeof s2, tw->dims, 3));
    if (!ah_tensor_is_contiguous(tx) && tx->dims[0] > 1 && tx->dims[1] > 1 && tx->strides[0] == 1)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: x must not be transposed (groupType 0)", op);
    /* transposed as CANN tells it (strides (.., 1, K)), so an (E, K, 1) view of (E, 1, K) rows is one */
    bool w_t = is_transposed_last2(tw) && !(k == 1 && n == 1);
    if (!w_t && !ah_tensor_is_contiguous(tw))
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: weight must be contiguous or the transposed view of contiguous (E, N, K) matrices (acl_host)",
                        op);
    if (k > GMM_MAX_LAST_DIM || (w_t ? k : n) > GMM_MAX_LAST_DIM)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: the last dims of x (K = %lld) and weight (%s = %lld) must be below 65536",
                        op, (long long)k, w_t ? "K" : "N", (long long)(w_t ? k : n));
    if (tw->dtype == ACL_INT4 && ((w_t ? k : n) % 2 != 0 || tw->offset % 2 != 0))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: an INT4 weight needs an even last dim (%s) and offset", op,
                        w_t ? "K" : "N");
    int64_t ydims[2] = {m, n};
    AH_TRY(ah_check_shape(op, "out", ty, ydims, 2, "(M, N)"));
    if (!ah_tensor_is_contiguous(ty))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out must be contiguous", op);
    if (!groupListOptional)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: groupListOptional is required with groupType 0", op);
    AH_TRY(ah_check_tensor(op, "groupListOptional", groupListOptional, AH_DTYPE_BIT(ACL_INT64), 1, 1));
    int64_t n_groups = groupListOptional->dims[0];
    if (n_groups != e)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: groupListOptional has %lld entries for a weight of %lld matrices",
                        op, (long long)n_groups, (long long)e);
    if (n_groups < 1 || n_groups > GMM_MAX_GROUPS)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: groupListOptional has %lld entries, expected 1..%d", op,
                        (long long)n_groups, GMM_MAX_GROUPS);
    if (groupListType == 1 && n_groups == 1)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: with groupListType 1 the group list must not have length 1", op);
    int64_t group = k;
    const aclTensor *tscale = NULL, *toffset = NULL, *tbias = NULL;
    if (quant) {
        if (!antiquantScaleOptional)
            return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: an INT8 / INT4 weight needs antiquantScaleOptional", op);
        AH_TRY(one_tensor(op, "antiquantScaleOptional", antiquantScaleOptional, &tscale));
        AH_TRY(check_antiquant(op, "antiquantScaleOptional", tscale, tx, tw, w_t, &group));
        if (antiquantOffsetOptional) {
            int64_t g2;
            AH_TRY(one_tensor(op, "antiquantOffsetOptional", antiquantOffsetOptional, &toffset));
            AH_TRY(check_antiquant(op, "antiquantOffsetOptional", toffset, tx, tw, w_t, &g2));
            AH_TRY(ah_check_shape(op, "antiquantOffsetOptional", toffset, tscale->dims, tscale->ndim,
                               "antiquantScaleOptional's shape"));
        }
    } else if (antiquantScaleOptional || antiquantOffsetOptional) {
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: antiquant parameters need an INT8 / INT4 weight", op);
    }
    if (biasOptional) {
        AH_TRY(one_tensor(op, "biasOptional", biasOptional, &tbias));
        aclDataType bt = tx->dtype == ACL_FLOAT16 ? ACL_FLOAT16 : ACL_FLOAT;
        AH_TRY(ah_check_tensor(op, "biasOptional", tbias, AH_DTYPE_BIT(bt), 2, 2));
        int64_t bdims[2] = {e, n};
        AH_TRY(ah_check_shape(op, "biasOptional", tbias, bdims, 2, "(E, N)"));
    }
    aclOpExecutor *ex = ah_executor_new(op, gmm_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    gmm_params *p = AH_EXEC_PARAMS(ex, gmm_params);
    p->m = m, p->k = k, p->n = n, p->e = e, p->group = group, p->list_type = groupListType;
    p->quant = quant, p->int4 = tw->dtype == ACL_INT4, p->w_transposed = w_t;
    p->slot_x = ah_executor_add_tensor(ex, "x", tx, AH_IN);
    p->slot_w = ah_executor_add_tensor(ex, "weight", tw, AH_IN);
    p->slot_bias = tbias ? ah_executor_add_tensor(ex, "biasOptional", tbias, AH_IN) : -1;
    p->slot_scale = tscale ? ah_executor_add_tensor(ex, "antiquantScaleOptional", tscale, AH_IN) : -1;
    p->slot_offset = toffset ? ah_executor_add_tensor(ex, "antiquantOffsetOptional", toffset, AH_IN) : -1;
    p->slot_list = ah_executor_add_tensor(ex, "groupListOptional", groupListOptional, AH_IN);
    p->slot_y = ah_executor_add_tensor(ex, "out", ty, AH_OUT);
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnGroupedMatmulV4(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                        aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnGroupedMatmulV4");
}
